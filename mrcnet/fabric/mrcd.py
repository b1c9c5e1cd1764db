"""``mrc-fabric up --mrcd``: one mrcd per host of a fabric, started, watched and stopped.

Each host ``hN`` gets ``<state dir>/<fabric>/mrcd/hN.toml`` (its name, the fabric's
description file, socket ``.../mrcd/hN.sock``), runs ``mrcd`` inside its netns in a
session of its own (it outlives the ``mrc-fabric`` command), logs to ``.../mrcd/hN.log``,
and is recorded in the fabric's state as a background process (PID + start time, what =
``mrcd hN``). :func:`stop_mrcds` (called by ``mrc-fabric down`` before the namespaces go)
stops exactly those processes by PID: SIGTERM, SIGKILL after a timeout, only while PID and
start time still match; then it removes the ``mrcd`` directory (configs, logs, sockets).
The fabric's own teardown also kills recorded processes, so a fabric removed by the Python
API loses its mrcds too. Their kernel drop tables live in the hosts' namespaces and
disappear with them (nftables state is per network namespace).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mrcnet.fabric.errors import FabricError
from mrcnet.fabric.state import (
    ProcRecord,
    StateRecord,
    fabric_dir,
    fabric_lock,
    proc_start_time,
)

__all__ = ["exec_env", "mrcd_dir", "mrcd_status", "start_mrcds", "stop_mrcds"]

WHAT = "mrcd "  #: ProcRecord.what prefix: "mrcd h0"
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0


def mrcd_dir(name: str) -> Path:
    """Where a fabric's mrcd configs, logs and sockets live."""
    return fabric_dir(name) / "mrcd"


def _config(name: str, host: str, description: Path, extra: str) -> Path:
    d = mrcd_dir(name)
    path = d / f"{host}.toml"
    path.write_text(f'host = "{host}"\nsocket = "{d / (host + ".sock")}"\n'
                    f'fabric = "{description}"\n{extra}')
    return path


def start_mrcds(fab: Any, extra_config: str = "") -> dict[str, int]:
    """Start an mrcd on every host of ``fab`` (a :class:`~mrcnet.fabric.fabric.Fabric`)
    and record them; returns host -> PID. Waits until each is ready; if one fails, stops
    those started and raises :class:`FabricError` with its log."""
    name = fab.name
    d = mrcd_dir(name)
    d.mkdir(mode=0o755, exist_ok=True)
    started: dict[str, int] = {}
    procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    try:
        for h in fab.description.hosts:
            cfg = _config(name, h.name, fab.description_path, extra_config)
            log = d / f"{h.name}.log"
            with open(log, "wb") as lf:
                p = subprocess.Popen(
                    ["ip", "netns", "exec", fab.netns(h.name), sys.executable, "-m",
                     "mrcnet.daemon.main", "--config", str(cfg)],
                    stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT,
                    start_new_session=True)  # not killed with the terminal of `up`
            # `ip netns exec` execs mrcd: the PID is mrcd's. Record it at once.
            start = proc_start_time(p.pid)
            if start is not None:
                _record(name, ProcRecord(p.pid, start, WHAT + h.name))
            procs.append((h.name, p, log))
        deadline = time.monotonic() + READY_TIMEOUT
        for host, p, log in procs:
            sock = d / f"{host}.sock"
            while not (sock.exists() and "mrcd ready" in log.read_text(errors="replace")):
                if p.poll() is not None or time.monotonic() > deadline:
                    raise FabricError(f"mrcd on {host} did not start: "
                                      f"{log.read_text(errors='replace').strip()[-2000:]}")
                time.sleep(0.05)
            started[host] = p.pid
    except BaseException:
        stop_mrcds(name, remove_dir=False)
        raise
    return started


def _record(name: str, rec: ProcRecord) -> None:
    with fabric_lock(name):
        r = StateRecord.load(name)
        r.processes.append(rec)
        r.save()


def _mrcd_records(name: str) -> list[ProcRecord]:
    try:
        r = StateRecord.load(name)
    except FabricError:
        return []
    return [p for p in r.processes if p.what.startswith(WHAT)]


def mrcd_status(name: str) -> dict[str, dict[str, Any]]:
    """Per host with a recorded mrcd: its PID, whether it runs, its socket and log."""
    d = mrcd_dir(name)
    out: dict[str, dict[str, Any]] = {}
    for p in _mrcd_records(name):
        host = p.what[len(WHAT):]
        out[host] = {"pid": p.pid, "running": _alive(p), "socket": str(d / f"{host}.sock"),
                     "log": str(d / f"{host}.log")}
    return out


def exec_env(fab: Any, node: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a command run inside ``node`` of ``fab`` (``mrc-fabric exec``).

    ``MRC_FABRIC`` (the fabric's name), ``MRC_NODE`` (the node's canonical name); for a
    host also ``MRC_HOST``, and ``MRCD_SOCKET`` when the fabric runs an mrcd on it
    (``up --mrcd``), so mrcctl and mrc-perf find that host's mrcd without ``--socket``.
    """
    desc = fab.description
    name = desc.node_name(node)
    desc.node_netns(name)  # a clear error for a node that does not exist
    env = dict(os.environ if base is None else base)
    env["MRC_FABRIC"] = fab.name
    env["MRC_NODE"] = name
    if name in {h.name for h in desc.hosts}:
        env["MRC_HOST"] = name
        mrcd = mrcd_status(fab.name).get(name)
        if mrcd is not None:
            env["MRCD_SOCKET"] = mrcd["socket"]
    return env


KILL_WAIT = 5.0  # seconds to wait for a SIGKILLed mrcd to disappear


def _alive(p: ProcRecord) -> bool:
    """The recorded process still runs (same start time, and not a zombie: a container's
    init may never reap an orphaned mrcd)."""
    if not p.alive():
        return False
    try:
        stat = Path(f"/proc/{p.pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _stop(p: ProcRecord, timeout: float) -> None:
    if not _alive(p):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(p) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(p.pid, os.WNOHANG)  # our own child (same `up` process)
        time.sleep(0.02)
    if _alive(p):
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(p.pid, 0)
        # Not our child (started by another `up`): SIGKILL is delivered asynchronously, so
        # wait until the process is really gone before the caller removes its netns.
        deadline = time.monotonic() + KILL_WAIT
        while _alive(p) and time.monotonic() < deadline:
            time.sleep(0.01)


def stop_mrcds(name: str, timeout: float = STOP_TIMEOUT, remove_dir: bool = True) -> list[int]:
    """Stop the recorded mrcds of fabric ``name`` (SIGTERM, then SIGKILL after
    ``timeout``; by PID, only while the start time matches), forget them, and remove
    their directory. Returns the PIDs that were still running."""
    recs = _mrcd_records(name)
    running = [p.pid for p in recs if _alive(p)]
    for p in recs:
        _stop(p, timeout)
    if recs:
        with fabric_lock(name):
            r = StateRecord.load(name)
            r.processes = [p for p in r.processes if not p.what.startswith(WHAT)]
            r.save()
    if remove_dir:
        shutil.rmtree(mrcd_dir(name), ignore_errors=True)
    return running
