"""mrcd as a service: readiness and stopping told to systemd, the metrics endpoint, and
SIGHUP reloading what can change while QPs run.

A reload reads the configuration file again. These keys take effect at once
(:data:`RELOADABLE`): ``log_level`` and ``log_format``; ``[limits]`` (for the next
request: what clients already hold stays); ``socket_mode`` and ``socket_group`` (the
socket file's permissions are set again); ``metrics_listen`` (the endpoint moves, starts
or stops). Every other key (host, ports, fabric, peers, control channel, profiles,
kernel_drop, ``[core]``, ``socket``) shapes the ports, the core or live QPs: a change is
logged as needing a restart and the running value is kept. A file that does not load
changes nothing (the error is logged).
"""

from __future__ import annotations

import asyncio
import dataclasses
import grp
import os
from typing import Any, Final, cast

import structlog

from mrcnet.daemon import notify
from mrcnet.daemon.apiserver import Session
from mrcnet.daemon.config import ConfigError, DaemonConfig, load_config
from mrcnet.daemon.engine import Daemon
from mrcnet.daemon.logs import setup_logging
from mrcnet.daemon.metrics import Snapshot, require, snapshot
from mrcnet.errors import MrcError

__all__ = ["RELOADABLE", "Service"]

#: Configuration keys (DaemonConfig fields) a SIGHUP applies to a running mrcd.
RELOADABLE: Final = ("log_level", "log_format", "limits", "socket_mode", "socket_group",
                     "metrics_listen")


class Service:
    """The service side of one :class:`Daemon`: ``ready``/``stop``/``reload`` hooks."""

    def __init__(self, daemon: Daemon, config_path: str | None) -> None:
        self.d = daemon
        self.path = config_path
        self.metrics: Any = None  #: the MetricsServer while metrics are served
        self._tasks: set[asyncio.Task[None]] = set()

    def collect(self) -> Snapshot:
        """The metrics snapshot, by the operator requests mrcctl sends (in the loop)."""
        verbs = self.d.verbs
        nobody = cast(Session, None)  # the admin requests read no session

        def admin(op: str, params: dict[str, Any]) -> dict[str, Any]:
            answer = verbs.dispatch(nobody, {"op": f"admin_{op}", **params}, [])
            assert isinstance(answer, dict)
            return answer
        return snapshot(admin)

    async def start_metrics(self, listen: str | None) -> None:
        if listen is None:
            return
        require()
        from mrcnet.daemon.metrics_http import MetricsServer

        server = MetricsServer(listen, self.collect, self.d.log)
        await server.start()
        self.metrics = server

    async def stop_metrics(self) -> None:
        if self.metrics is not None:
            await self.metrics.close()
            self.metrics = None

    async def on_ready(self) -> None:
        """mrcd serves: the metrics endpoint, then READY=1."""
        await self.start_metrics(self.d.cfg.metrics_listen)
        notify.ready(f"serving {self.d.cfg.socket}")

    def stop(self) -> None:
        """SIGINT/SIGTERM: STOPPING=1, then the daemon stops."""
        notify.stopping()
        self.d.stop()

    def on_sighup(self) -> None:
        task = asyncio.get_running_loop().create_task(self.reload())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def reload(self) -> None:
        """Read the configuration again and apply what can change (see the module)."""
        d = self.d
        notify.reloading()
        try:
            await self._reload(d)
        except Exception:
            d.log.exception("reload failed")
        finally:
            notify.ready(f"serving {d.cfg.socket}")

    async def _reload(self, d: Daemon) -> None:
        if self.path is None:
            d.log.warning("SIGHUP: no configuration file to reload")
            return
        old = d.cfg
        try:
            new = load_config(self.path)
        except ConfigError as e:
            d.log.error("reload failed: configuration kept", error=str(e))
            return
        changed = [f.name for f in dataclasses.fields(DaemonConfig)
                   if f.name != "source" and getattr(old, f.name) != getattr(new, f.name)]
        restart = [k for k in changed if k not in RELOADABLE]
        apply = {k: getattr(new, k) for k in changed if k in RELOADABLE}
        try:
            if "socket_group" in apply:
                gid = grp.getgrnam(new.socket_group).gr_gid if new.socket_group \
                    else os.getegid()
                os.chown(old.socket, -1, gid)
            if "socket_mode" in apply:
                os.chmod(old.socket, new.socket_mode)
        except (KeyError, OSError) as e:
            d.log.error("reload: socket permissions not changed", socket=old.socket,
                        error=str(e) if isinstance(e, OSError)
                        else f"no group {new.socket_group!r}")
            apply.pop("socket_mode", None)
            apply.pop("socket_group", None)
        if "metrics_listen" in apply:
            await self.stop_metrics()
            try:
                await self.start_metrics(new.metrics_listen)
            except (OSError, MrcError) as e:
                d.log.error("reload: metrics not served", listen=new.metrics_listen,
                            error=str(e))
        d.cfg = dataclasses.replace(old, **apply)
        if "limits" in apply and d.api is not None:
            d.api.limits = new.limits
        if "log_level" in apply or "log_format" in apply:
            setup_logging(d.cfg.log_format, d.cfg.log_level)
            d.log = structlog.get_logger("mrcd").bind(host=d.cfg.host)
        if restart:
            d.log.warning("configuration change needs a restart (running values kept)",
                          keys=restart)
        d.log.info("configuration reloaded", applied=sorted(apply), path=self.path)
