"""``mrc-coll``: collectives (all-reduce, all-gather, all-to-all) over MRC, with
nccl-tests-style rows, step-time percentiles, failures during the run and baselines.

    mrc-coll --fabric lab --op allreduce --size 4M --iters 30
    mrc-coll --fabric lab -b 1M -e 64M -f 2 --json
    mrc-coll --fabric lab --fail link:L0.0-S0.1@2s:down --plot run.png
    mrc-coll --fabric lab --transport tcp        # kernel TCP, plane-0 addresses
    mrc-coll --fabric lab --ev ecmp              # MRC with one path per QP
    mrc-coll rank --rank 0 --peers h0,h1,h2,h3 --token 7 --size 4M   # by hand, per host
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from mrcnet.coll.errors import CollError
from mrcnet.coll.options import CollOptions, add_collective_options, collective_options
from mrcnet.coll.report import format_rows, stall_note
from mrcnet.errors import MrcError
from mrcnet.sim.cli import _json_safe

__all__ = ["main"]

EXIT_FAILED = 3


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return v


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--transport", choices=("mrc", "tcp"), default="mrc",
                   help="mrc: MRC verbs through mrcd (default); tcp: kernel TCP between "
                   "the plane-0 addresses, one connection per peer (the baseline)")
    p.add_argument("--ev", choices=("spray", "ecmp"), default=None,
                   help="MRC's EV profile per QP: spray (mrcd's default) or ecmp (one "
                   "path per QP: the single-path baseline)")
    p.add_argument("--step-timeout", type=_positive, default=30.0, metavar="SECONDS",
                   help="a rank with no progress for this long stops the run (default 30)")


def build_parser() -> argparse.ArgumentParser:
    """The launcher's parser (``mrc-coll --fabric ...``)."""
    p = argparse.ArgumentParser(
        prog="mrc-coll", description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="mrc-coll rank --help: one rank started by hand (real hosts).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version",
                   version=sys.modules["mrcnet"].version_text())
    p.add_argument("--fabric", required=True, metavar="NAME",
                   help="an mrc-fabric fabric brought up with --mrcd")
    p.add_argument("--hosts", metavar="H0,H1,...",
                   help="the hosts to run on, in rank order (default: every host)")
    add_collective_options(p)
    _common(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw step time over the run with failure events (matplotlib)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


def build_rank_parser() -> argparse.ArgumentParser:
    """``mrc-coll rank``'s parser."""
    p = argparse.ArgumentParser(
        prog="mrc-coll rank",
        description="One rank of a collective, on this host (its mrcd: $MRCD_SOCKET or "
        "--socket). Start one per host with the same --peers, --token and options; it "
        "prints JSON lines (docs/COLLECTIVES.md).")
    p.add_argument("--rank", type=int, required=True, help="this rank (0..N-1)")
    p.add_argument("--peers", required=True, metavar="H0,H1,...",
                   help="every rank's host in rank order (mrcd host names); with "
                   "--transport tcp each as NAME=ADDRESS")
    p.add_argument("--world", type=int, help="number of ranks (checked against --peers)")
    p.add_argument("--token", type=int, default=0,
                   help="run token, the same on every rank (keeps runs apart)")
    p.add_argument("--service", type=int, default=24000,
                   help="first MRC service (TCP port with --transport tcp); default 24000")
    p.add_argument("--socket", help="mrcd's socket (default $MRCD_SOCKET)")
    p.add_argument("--sizes", help=argparse.SUPPRESS)  # the launcher's exact sizes
    add_collective_options(p)
    _common(p)
    return p


def _rank_main(argv: Sequence[str]) -> int:
    from mrcnet.coll.algorithms import OPS
    from mrcnet.coll.rank import buffer_sizes, print_json, run_rank
    from mrcnet.coll.transport import Transport

    a = build_rank_parser().parse_args(argv)
    try:
        opts = collective_options(a)
        if a.sizes:
            try:
                sizes = tuple(int(x) for x in a.sizes.split(","))
            except ValueError:
                raise CollError(f"bad --sizes {a.sizes!r}") from None
            opts = CollOptions(a.op, sizes, opts.iters, opts.warmup, opts.fail)
        assert a.op in OPS
        peers = [x.strip() for x in a.peers.split(",") if x.strip()]
        names = [x.partition("=")[0] for x in peers]
        if a.world is not None and a.world != len(names):
            raise CollError(f"--world {a.world} but --peers names {len(names)} hosts")
        if not 0 <= a.rank < len(names):
            raise CollError(f"--rank {a.rank} is not in 0..{len(names) - 1}")
        data, inbox = buffer_sizes(opts, len(names))
        t: Transport
        if a.transport == "tcp":
            from mrcnet.coll.transport_tcp import TcpTransport

            addrs = [x.partition("=")[2] for x in peers]
            if not all(addrs):
                raise CollError("--transport tcp needs --peers NAME=ADDRESS,...")
            t = TcpTransport(a.rank, names, addrs, data, inbox, token=a.token,
                             port=a.service, step_timeout=a.step_timeout)
        else:
            from mrcnet.coll.transport_mrc import MrcTransport

            t = MrcTransport(a.rank, names, data, inbox, token=a.token, service=a.service,
                             socket=a.socket, ev_profile=a.ev, step_timeout=a.step_timeout)
        try:
            run_rank(t, opts)
        finally:
            t.close()
    except MrcError as e:
        print_json({"type": "error", "rank": a.rank, "error": str(e)})
        print(f"mrc-coll rank {a.rank}: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"mrc-coll rank {a.rank}: interrupted", file=sys.stderr)
        return 130
    return 0


def _summary(res: Any, opts: CollOptions, a: argparse.Namespace) -> dict[str, Any]:
    rows = [r.as_dict() for r in res.rows]
    out: dict[str, Any] = {
        "op": opts.op, "transport": a.transport,
        "ev": (a.ev or "spray") if a.transport == "mrc" else None,
        "ranks": len(res.hosts), "hosts": res.hosts, "fabric": a.fabric,
        "failures": list(opts.fail), "failure_events": res.failures,
        "errors": {str(k): v for k, v in res.errors.items()},
        "rows": rows, "verified": bool(res.rows) and not res.errors
        and len(res.rows) == len(opts.sizes) and all(r.verified for r in res.rows),
    }
    last = res.rows[-1].as_dict() if res.rows else {}
    for k in ("steps_s", "p50_s", "p99_s", "p100_s", "algbw_gbps", "busbw_gbps", "time_s",
              "worst", "size"):
        out[k] = last.get(k)
    if res.first_error_s is not None:
        out["failed_after_s"] = round(res.first_error_s, 3)
        out["all_stopped_within_s"] = (round(res.last_exit_s, 3)
                                       if res.last_exit_s is not None else None)
    notes = [n for r in res.rows if (n := stall_note(r))]
    if notes:
        out["notes"] = notes
    safe: dict[str, Any] = _json_safe(out)  # no NaN in JSON
    return safe


def _launch_main(argv: Sequence[str]) -> int:
    from mrcnet.coll.launcher import launch

    a = build_parser().parse_args(argv)
    opts = collective_options(a)
    if a.plot:
        from mrcnet.plots import PlotUnavailable, require_matplotlib

        try:
            require_matplotlib()
        except PlotUnavailable as e:
            raise CollError(str(e)) from None
    hosts = [h.strip() for h in a.hosts.split(",")] if a.hosts else None

    def say(line: str) -> None:
        if not a.quiet and not a.json:
            print(f"mrc-coll: {line}", file=sys.stderr, flush=True)

    res = launch(a.fabric, opts, hosts=hosts, transport=a.transport, ev=a.ev,
                 step_timeout=a.step_timeout, say=say)
    out = _summary(res, opts, a)
    if a.plot:
        from mrcnet.coll.plot import step_plot

        path = step_plot(res.rows, res.failures, res.t0, a.plot,
                         title=f"{opts.op} {a.transport}/{out['ev']} on {len(res.hosts)} hosts")
        say(f"plot written to {path}")
    if a.json:
        print(json.dumps(out))
    else:
        print(f"# mrc-coll {opts.op} on {len(res.hosts)} ranks ({', '.join(res.hosts)}), "
              f"transport {a.transport}" + (f", ev {out['ev']}" if out["ev"] else ""))
        for f in opts.fail:
            print(f"# failure {f}")
        for ev in res.failures:
            print(f"#   t={ev['t']:.3f}s {ev['what']}")
        if res.rows:
            print(format_rows(res.rows))
        for n in out.get("notes", []):
            print(f"# {n}")
        for r, why in sorted(res.errors.items()):
            print(f"# rank {r} ({res.hosts[r] if r >= 0 else '-'}): {why}")
        if res.first_error_s is not None:
            print(f"# failed {res.first_error_s:.1f} s into the run; every rank stopped "
                  f"{res.last_exit_s or 0:.1f} s later")
    for line in res.failure_errors + res.undo_left:
        print(f"mrc-coll: failure control: {line}", file=sys.stderr)
    return 0 if out["verified"] else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``mrc-coll``."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] == ["rank"]:
            return _rank_main(args[1:])
        return _launch_main(args)
    except CollError as e:
        print(f"mrc-coll: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mrc-coll: interrupted (every rank started was stopped, failures undone)",
              file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
