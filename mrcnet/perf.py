"""``mrc-perf``: RDMA WRITE bandwidth between two mrcd hosts, like perftest's ib_write_bw.

::

    mrc-perf server                    # on host B (its mrcd at $MRCD_SOCKET)
    mrc-perf client hB --all           # on host A: a table of sizes and rates
    mrc-perf client hB --lat           # round trips instead (like ib_write_lat)

The server exposes one memory region and listens on a service; the client connects its
QP through mrcd (which exchanges QP attributes with the server's mrcd), then for each
size posts ``--iters`` RDMA WRITEs with at most ``--tx-depth`` outstanding. The last
write of each size carries an immediate, so the server knows a size is done (and can
check the bytes with ``--verify``). The client prints one row per size; ``--json``
prints the same as JSON lines for tools. ``--tcp`` adds a kernel TCP stream between the
same two hosts in the same run (the server's sink address travels as private data), so
the table ends with the ratio MRC / TCP.

The server judges a run by mrcd's view of its QPs (:mod:`mrcnet.perf_server`), not by
completions plain writes never give it; a run that fails still prints what it measured
with mrcd's reason. The client is :mod:`mrcnet.perf_client`, the output
:mod:`mrcnet.perf_report`.

``raw-sink`` / ``raw-send`` measure the ceiling under all of it: MRC-shaped frames through
the packet sockets and the network on every path, no protocol and no mrcd (run each
inside its host, as root: they open the ports themselves).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from types import FrameType
from typing import Any

from mrcnet import version_text
from mrcnet.api import ApiError, Context
from mrcnet.api.errors import DaemonNotRunning
from mrcnet.cliutil import add_version, both_sides, not_running, survive_pipe
from mrcnet.perf_client import run_client, run_latency
from mrcnet.perf_proto import (
    ALL_SIZES,
    DEFAULT_ITERS,
    DEFAULT_REGION,
    DEFAULT_SERVICE,
    DEFAULT_SIZE,
    MAX_WRITE,
    PING_FLAG,
    Latency,
    Result,
    RunFailed,
)
from mrcnet.perf_raw import raw_main
from mrcnet.perf_report import (
    PlotUnavailable,
    bw_header,
    bw_row,
    check_plot,
    lat_table,
    plot_run,
    progress_printer,
    tcp_line,
)
from mrcnet.perf_server import serve_main

__all__ = ["PING_FLAG", "Latency", "Result", "build_parser", "main", "run_client",
           "run_latency"]

#: -D with --run_infinitely and no -D (perftest's default duration).
FOREVER_PERIOD = 5.0
#: --rate: the message size and window of a message-rate run (ib_write_bw -s 64's
#: habit: many small writes in flight).
RATE_SIZE = 64
RATE_DEPTH = 128


def _size(text: str) -> int:
    """``65536``, ``64K``, ``1M``, ``1G`` (binary multiples) as bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 65536, 64K, 1M, "
                                         "2G)") from None


def _positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
        return v
    return parse


def build_parser() -> argparse.ArgumentParser:
    """The ``mrc-perf`` command line."""
    ap = argparse.ArgumentParser(
        prog="mrc-perf", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="RDMA WRITE bandwidth and latency over MRC between two mrcd hosts "
        "(like perftest's ib_write_bw / ib_write_lat), and the raw-socket ceiling.",
        epilog="examples:\n"
        "  mrc-perf server                          # on h1 (its mrcd: $MRCD_SOCKET)\n"
        "  mrc-perf client h1                       # 200 writes of 64 KiB, verified\n"
        "  mrc-perf client h1 -s 1M --seconds 10 --qps 4\n"
        "  mrc-perf client h1 --bytes 1G --tcp      # and kernel TCP beside it\n"
        "  mrc-perf client h1 --lat -s 64           # round trips\n"
        "  mrc-perf client h1 -a --json             # every size, JSON lines\n"
        "  mrc-perf client h1 -D 5 --run_infinitely # a row every 5 s until Ctrl-C\n"
        "  mrc-perf client h1 -s 1M -D 30 --plot run.png\n"
        "The server must run with the same --qps as the client (it says so otherwise).\n"
        "--socket, --service and --timeout go before or after MODE.")
    add_version(ap)
    sub = ap.add_subparsers(dest="mode", required=True, metavar="MODE")
    sv = sub.add_parser("server", help="wait for one client run and check its bytes")
    sv.add_argument("-s", "--size", type=_size, default=DEFAULT_REGION,
                    help="bytes of memory to expose per QP: at least the client's "
                    "largest size; writes cycle over it (default 16M)")
    sv.add_argument("-q", "--qps", type=_positive(int), default=1,
                    help="QPs to accept (the client's --qps)")
    sv.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                    help="check every size's bytes against the client's pattern and "
                    "answer with the verdict (default: on)")
    cl = sub.add_parser("client", help="measure against PEER's server")
    cl.add_argument("peer", help="the server's host: a name from mrcd's fabric "
                    "description or configuration, or one of its IPv6 addresses")
    cl.add_argument("-s", "--size", type=_size, default=None,
                    help="bytes per RDMA WRITE (default 64K; with --rate 64)")
    cl.add_argument("--rate", action="store_true", help="message rate (like ib_write_bw "
                    f"-s 64): also print Mmsg/s per size; default size {RATE_SIZE}, "
                    f"tx-depth {RATE_DEPTH}")
    cl.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                    help="have the server check every size's bytes against this "
                    "client's pattern (default: on; --no-verify: perftest's behaviour)")
    cl.add_argument("-a", "--all", action="store_true",
                    help=f"sizes {ALL_SIZES[0]} .. {ALL_SIZES[-1]}, x4 steps")
    much = cl.add_mutually_exclusive_group()
    much.add_argument("-n", "--iters", type=_positive(int),
                      help=f"writes per size (default {DEFAULT_ITERS})")
    much.add_argument("--bytes", type=_size, dest="nbytes", help="bytes per size "
                      "(e.g. 1G)")
    much.add_argument("-D", "--seconds", type=_positive(float),
                      help="seconds per size (like ib_write_bw -D)")
    cl.add_argument("-q", "--qps", type=_positive(int), default=1,
                    help="QPs, writes spread round robin (default 1)")
    cl.add_argument("-t", "--tx-depth", type=_positive(int), default=None,
                    help="outstanding writes per QP (default 16)")
    cl.add_argument("-w", "--warmup", type=int, help="untimed writes before each size "
                    "(default: half of --iters, or 2 x tx-depth x QPs)")
    cl.add_argument("--cc", help="congestion control profile of the QP (default: mrcd's)")
    cl.add_argument("--tcp", action="store_true", help="also measure one kernel TCP stream "
                    "to the server's host (side by side, same run)")
    cl.add_argument("--lat", action="store_true", help="latency (ping-pong, like "
                    "ib_write_lat) instead of bandwidth; one-way = half the round trip")
    cl.add_argument("-i", "--interval", type=_positive(float), default=1.0,
                    help="seconds between progress lines (default 1)")
    cl.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    cl.add_argument("--paths", action="store_true", help="with --json: per-path packets "
                    "and EV states in every interval record")
    cl.add_argument("--events", action="store_true", help="with --json: one JSON line "
                    "per EV state change (type path_event, clock = time.monotonic())")
    cl.add_argument("--json", action="store_true", help="JSON lines instead of a table, "
                    "each with a 'type': start (the parameters), interval (one per "
                    "--interval), path_event (with --events), result (one per size, with "
                    "'verified'; 'error' on a run that failed), tcp_baseline, latency")
    cl.add_argument("-b", "--bidirectional", action="store_true", help="the server "
                    "writes back to this host at the same time (like ib_write_bw -b): "
                    "the table adds BW back")
    cl.add_argument("--run_infinitely", "--run-infinitely", action="store_true",
                    help="repeat the sizes, a row each, until Ctrl-C (default -D 5)")
    cl.add_argument("--report_gbits", "--report-gbits", action="store_true",
                    help="accepted for perftest habits: rates are always in Gb/s")
    cl.add_argument("--plot", metavar="FILE.png", help="draw the run: goodput and each "
                    "path's share over time, EV failures marked (needs matplotlib: "
                    "pip install 'mrcnet[plot]')")
    for name, text in (("raw-sink", "count raw MRC frames arriving (the ceiling, receive "
                        "side; needs CAP_NET_RAW, run in the host)"),
                       ("raw-send", "send raw MRC frames as fast as possible over every "
                        "path (the ceiling, send side)")):
        rp = sub.add_parser(name, help=text)
        rp.add_argument("--fabric", help="fabric description file (ports and paths)")
        rp.add_argument("--host", help="this host's name in the fabric")
        rp.add_argument("--ifname", action="append", default=[],
                        help="a port to use (repeat; without --fabric)")
        rp.add_argument("--json", action="store_true", help="one JSON line")
        if name == "raw-send":
            rp.add_argument("peer", nargs="?", help="destination host (with --fabric)")
            rp.add_argument("--dst-mac", help="next hop MAC (without --fabric)")
            rp.add_argument("--src-ip", help="source address (without --fabric)")
            rp.add_argument("--dst-ip", help="destination address (without --fabric)")
            rp.add_argument("-s", "--size", type=int, default=8192, help="payload bytes")
            rp.add_argument("--seconds", type=float, default=3.0)
    both_sides(_common, ap, sv, cl)
    return ap


def _common(p: argparse.ArgumentParser, default: Any) -> None:
    """Options of every mode, accepted before or after it (see both_sides)."""
    keep = default is not None
    p.add_argument("--socket", default=default, help="mrcd's socket (default "
                   "$MRCD_SOCKET or /run/mrcd/<hostname>.sock)")
    p.add_argument("--service", type=int, default=default if keep else DEFAULT_SERVICE,
                   help="service number the server listens on (QP i: service + i)")
    p.add_argument("--timeout", type=_positive(float), default=default if keep else 30.0,
                   help="seconds without progress before giving up (the server: "
                   "without anything received while its QPs are up)")


def _emit(rec: dict[str, Any]) -> None:
    print(json.dumps(rec), flush=True)


class _Stop:
    """Ctrl-C (or SIGTERM) once: finish the size under way, check it, end the run
    cleanly; twice: interrupt."""

    def __init__(self) -> None:
        self.asked = False
        self.old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.asked:
            raise KeyboardInterrupt
        self.asked = True
        print("\nmrc-perf: stopping after this size (Ctrl-C again to abort)",
              file=sys.stderr, flush=True)

    def __call__(self) -> bool:
        return self.asked

    def restore(self) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)


def _start_record(args: argparse.Namespace, sizes: list[int]) -> dict[str, Any]:
    return {"type": "start", "version": version_text("mrc-perf"), "clock": time.monotonic(),
            "mode": "latency" if args.lat else "bandwidth", "peer": args.peer,
            "sizes": sizes, "qps": args.qps, "tx_depth": args.tx_depth,
            "iters": args.iters, "bytes": args.nbytes, "seconds": args.seconds,
            "warmup": args.warmup, "interval": args.interval, "cc": args.cc,
            "bidirectional": args.bidirectional, "run_infinitely": args.run_infinitely,
            "tcp": args.tcp, "service": args.service, "timeout": args.timeout,
            "verify": args.verify, "rate": args.rate}


def _client(ctx: Context, args: argparse.Namespace) -> int:
    sizes = ALL_SIZES if args.all else [args.size]
    if args.run_infinitely and args.seconds is None and args.iters is None \
            and args.nbytes is None:
        args.seconds = FOREVER_PERIOD
    if args.json:
        _emit(_start_record(args, sizes))
    if args.lat:
        rows = run_latency(ctx, args.peer, sizes, args.iters or 1000, args.service,
                           args.timeout, args.cc)
        if args.json:
            for row in rows:
                _emit({"type": "latency", **asdict(row)})
        else:
            print("\n".join(lat_table(rows)))
        return 0
    intervals: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    plot = args.plot is not None
    progress = (None if args.quiet and not args.json and not plot else
                progress_printer(None if args.quiet else sys.stderr, args.json,
                                 intervals if plot else None))

    def on_event(e: dict[str, Any]) -> None:
        if plot:
            events.append(e)
        if args.json and args.events:
            _emit({**e, "type": "path_event"})

    tty = progress is not None and not args.quiet and sys.stderr.isatty()
    shown: list[Result] = []

    def on_result(r: Result) -> None:
        if tty:
            print(file=sys.stderr)
        if args.json:
            _emit({"type": "result", **asdict(r)})
        else:
            if not shown:
                print(bw_header(args.bidirectional), flush=True)
            print(bw_row(r), flush=True)
        shown.append(r)

    stop = _Stop()
    failure: RunFailed | None = None
    try:
        results = run_client(
            ctx, args.peer, sizes, args.iters, args.tx_depth, args.service, args.timeout,
            args.cc, args.tcp, args.warmup, qps=args.qps, nbytes=args.nbytes,
            seconds=args.seconds, progress=progress, interval=args.interval,
            paths=args.paths or plot, events=on_event if plot or args.events else None,
            bidir=args.bidirectional, forever=args.run_infinitely, stop=stop,
            on_result=on_result, verify=args.verify)
    except RunFailed as e:
        failure, results = e, e.results
    finally:
        stop.restore()
    for r in results:
        if r in shown:
            continue
        if r.size < 0:
            if args.json:
                _emit({"type": "tcp_baseline", **asdict(r)})
            else:
                print(tcp_line(r, results))
        else:
            on_result(r)
    if args.rate and not args.json:
        for r in results:
            if r.size > 0:
                print(f"message rate, {r.size}-byte writes: {r.mpps:.4f} Mmsg/s "
                      f"({r.mpps * 1e6:,.0f} per second)")
    if args.bidirectional and not args.json:
        both = [r.gbps + (r.gbps_back or 0.0) for r in results if r.size > 0]
        if both:
            print(f"bidirectional: both directions together up to {max(both):.3f} Gb/s "
                  "(ib_write_bw -b's BW)")
    if plot:
        plot_run(args.plot, intervals, events, f"mrc-perf {ctx.host} -> {args.peer}")
        print(f"mrc-perf: plot written to {args.plot}", file=sys.stderr)
    if failure is not None:
        if args.json:
            _emit({"type": "error", "error": failure.reason})
        print(f"mrc-perf: the run failed: {failure.reason}", file=sys.stderr)
        return 1
    failed = any(r.errors or r.verified is False for r in results)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mrc-perf`` command."""
    return survive_pipe(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.mode in ("raw-sink", "raw-send"):
        return raw_main(args)
    if args.mode == "client":
        if args.size is None:
            args.size = RATE_SIZE if args.rate else DEFAULT_SIZE
        if args.tx_depth is None:
            args.tx_depth = RATE_DEPTH if args.rate else 16
    if args.size <= 0:
        ap.error(f"--size {args.size}: give a positive number of bytes")
    if args.mode == "client":
        if args.size > MAX_WRITE:
            ap.error(f"--size {args.size}: one write is at most {MAX_WRITE} bytes (1G); "
                     "the server's region (its --size) may be larger")
        if args.lat and (args.bidirectional or args.run_infinitely):
            ap.error("--lat takes neither -b nor --run_infinitely")
        if args.plot:
            try:
                check_plot()
            except PlotUnavailable as e:
                ap.error(str(e))
    try:
        with Context(args.socket, path_events=args.mode == "client") as ctx:
            if args.mode == "server":
                return serve_main(ctx, args.size, args.service, args.verify, args.timeout,
                                  args.qps)
            return _client(ctx, args)
    except DaemonNotRunning:
        print(f"mrc-perf: {not_running(args.socket)}", file=sys.stderr)
        return 1
    except RunFailed as e:
        print(f"mrc-perf: the run failed: {e.reason}", file=sys.stderr)
        return 1
    except (ApiError, OSError, MemoryError) as e:  # (TimeoutError is an OSError)
        why = ("out of memory (a smaller --size?)" if isinstance(e, MemoryError)
               else e.strerror if isinstance(e, OSError) and e.strerror else str(e))
        print(f"mrc-perf: {why}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mrc-perf: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
