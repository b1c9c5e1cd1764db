"""``mrcd``: the MRC daemon. ``mrcd --config /etc/mrcd.toml`` (see docs/MRCD.md).

SIGHUP reloads the configuration keys that can change while it runs (docs/MRCD.md);
under systemd (``Type=notify``) it reports readiness, reloads and stopping on
``$NOTIFY_SOCKET``.

Exit status: 0 after SIGINT/SIGTERM, 2 for a bad configuration, 1 for anything that
stops it from starting (missing capability, unknown interface, address in use...). Each
failure is one line on stderr saying what to do, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import signal
import sys
import time

import uvloop

from mrcnet.daemon.config import ConfigError, DaemonConfig, load_config
from mrcnet.daemon.engine import Daemon
from mrcnet.daemon.heap import keep_heap
from mrcnet.daemon.logs import setup_logging
from mrcnet.daemon.metrics import require
from mrcnet.daemon.service import Service
from mrcnet.errors import MrcError

__all__ = ["main", "serve"]


async def serve(cfg: DaemonConfig, config_path: str | None = None) -> None:
    """Open everything, serve until SIGINT/SIGTERM (SIGHUP reloads ``config_path``:
    mrcnet/daemon/service.py), clean up."""
    if cfg.metrics_listen is not None:
        require()  # before any side effect: say what to install
    d = Daemon(cfg)
    try:
        d.open()
    except BaseException:
        d.close()
        raise
    svc = Service(d, config_path)
    d.on_ready.append(svc.on_ready)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, svc.stop)
    loop.add_signal_handler(signal.SIGHUP, svc.on_sighup)
    try:
        await d.run()
    finally:
        await svc.stop_metrics()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mrcd`` command."""
    ap = argparse.ArgumentParser(prog="mrcd", description="MRC daemon: runs MRC queue "
                                 "pairs for local applications over raw packet sockets")
    ap.add_argument("--version", action="version", version=sys.modules["mrcnet"].version_text())
    ap.add_argument("-c", "--config", required=True, help="TOML configuration file")
    ap.add_argument("--check", action="store_true",
                    help="only check the configuration and exit")
    ap.add_argument("--profile", metavar="FILE",
                    help="write cProfile statistics (CPU time) of the whole run to FILE (pstats)")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"mrcd: {e}", file=sys.stderr)
        return 2
    if args.check:
        print(f"mrcd: {args.config} is valid")
        return 0
    setup_logging(cfg.log_format, cfg.log_level)
    # A fatal signal (a bug in C, or a client mapping that faults despite the seal
    # checks: docs/SECURITY.md) leaves a traceback in the log, not silence.
    faulthandler.enable()
    keep_heap()  # no page faults per packet (see mrcnet/daemon/heap.py)
    prof = None
    if args.profile:
        import cProfile

        # CPU time, not wall: a wall-clock profile charges a send with the time the
        # peer it woke ran on the same CPUs, and the idle loop with its sleep.
        prof = cProfile.Profile(time.thread_time)
        prof.enable()
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve(cfg, args.config))
    except MrcError as e:
        print(f"mrcd: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"mrcd: {e.strerror or e}" + (f": {e.filename}" if e.filename else ""),
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    finally:
        if prof is not None:
            prof.disable()
            prof.dump_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
