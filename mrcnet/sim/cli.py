"""``mrc-sim``: run traffic matrices over simulated multi-plane leaf-spine fabrics.

    mrc-sim run --topology leafspine:planes=2,spines=8,leaves=4,hosts=2 --matrix incast.cm
    mrc-sim run ... --fail link:L0.1-S0.3@0.5ms:down --transport ecmp --trim off --json
    mrc-sim matrix permutation --hosts 16 --size 4m > perm.cm
    mrc-sim specs            # every spec grammar in one page
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from mrcnet.sim.errors import SimError, SpecError
from mrcnet.sim.failures import FAIL_HELP, parse_failure
from mrcnet.sim.matrix import __doc__ as MATRIX_DOC
from mrcnet.sim.matrix import (
    all_to_all,
    format_matrix,
    incast,
    load_matrix,
    parse_host_list,
    permutation,
)
from mrcnet.sim.net import HostJitter
from mrcnet.sim.overrides import parse_set
from mrcnet.sim.sweep import add_parser as sweep_parser
from mrcnet.sim.topology import SPEC_HELP, parse_topology, with_options
from mrcnet.topology.units import format_time, parse_bool, parse_bytes, parse_time

_EPILOG = """\
examples:
  mrc-sim run --topology leafspine:planes=2,spines=8,leaves=4,hosts=2 --matrix m.cm
  mrc-sim run --topology leafspine:planes=2,spines=8,leaves=4,hosts=2,queue=16pkt \\
      --matrix m.cm --fail link:L0.1-S0.3@0.5ms..2ms:down --json
  mrc-sim matrix incast --senders 1-8 --receiver 0 --size 4m > incast.cm
  mrc-sim specs     (topology, failure and matrix grammars)
"""


#: ``--host-jitter mrcd``: mrcd's event loop as measured on the netns fabrics.
MRCD_JITTER = "wake=50us..2ms,spike=1%:5ms,cpu=0.5us,timer=1ms"


def parse_host_jitter(text: str) -> HostJitter:
    """``wake=50us..2ms,spike=1%:5ms,cpu=0.5us,timer=1ms`` (every key optional) or
    ``mrcd`` -> :class:`HostJitter`."""
    if text.strip() == "mrcd":
        text = MRCD_JITTER
    kw: dict[str, float] = {}
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, eq, val = part.partition("=")
            if not eq:
                raise ValueError(part)
            if key == "wake":
                lo, _, hi = val.partition("..")
                kw["wake_min"] = parse_time(lo)
                kw["wake_max"] = parse_time(hi or lo)
            elif key == "spike":
                prob, _, size = val.partition(":")
                kw["spike_prob"] = float(prob.rstrip("%")) / (100 if prob.endswith("%") else 1)
                kw["spike"] = parse_time(size)
            elif key == "cpu":
                kw["per_frame"] = parse_time(val)
            elif key == "timer":
                kw["timer_resolution"] = parse_time(val)
            else:
                raise ValueError(part)
        return HostJitter(**kw)
    except (ValueError, SimError) as e:
        raise SpecError(f"bad --host-jitter {text!r} ({e}): expected mrcd or "
                        f"{MRCD_JITTER} (every key optional)") from None


def _fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{int(n)}B"


def _fmt_x(v: float | None) -> str:
    if v is None or math.isinf(v):
        return "-"
    return f"{v:.3f}"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _human(res: dict[str, Any], all_ports: bool) -> str:
    s = res["summary"]
    out = [f"topology  {res['topology']}"]
    out += [f"note      {n}" for n in res.get("not_emulated", [])]
    out.append(f"transport {res['transport']}")
    out += [f"failure   {f}" for f in res["failures"]]
    flows = [
        [str(f["id"]), f["src"], f["dst"], _fmt_bytes(f["size"]), format_time(f["start"]),
         format_time(f["fct"]) if f["fct"] is not None else "-",
         format_time(f["ideal"]), _fmt_x(f["slowdown"]),
         "ok" if f["error"] is None and f["fct"] is not None
         else ("ERROR: " + f["error"] if f["error"] else "unfinished")]
        for f in res["flows"]
    ]
    out += ["", "flows", _table(flows, ["id", "src", "dst", "size", "start", "fct", "ideal",
                                        "fct/ideal", "status"])]
    busy_time = max(s["sim_time"], 1e-12)
    ports = []
    for name, c in res["ports"].items():
        drops = c["drop_queue"] + c["drop_down"] + c["drop_blackhole"] + c["drop_loss"]
        if not all_ports and not c["tx_frames"] and not drops:
            continue
        util = c["tx_bytes"] * 8 / (c["rate_bps"] * busy_time)
        ports.append([name, str(c["tx_frames"]), _fmt_bytes(c["tx_bytes"]), f"{util:.1%}",
                      str(c["trimmed"]), str(c["ecn_marked"]), str(c["drop_queue"]),
                      str(c["drop_down"]), str(c["drop_blackhole"]), str(c["drop_loss"]),
                      _fmt_bytes(c["max_queue_bytes"])])
    out += ["", "links (egress ports, A>B; utilisation over the whole run)",
            _table(ports, ["port", "tx", "bytes", "util", "trim", "ecn", "drop_q", "drop_down",
                           "drop_bh", "drop_loss", "max_q"])]
    sw = [[n, *(str(c[k]) for k in ("drop_no_route", "drop_hop_limit", "drop_bad_sid",
                                    "drop_blackhole"))]
          for n, c in res["switches"].items()
          if c["drop_no_route"] or c["drop_hop_limit"] or c["drop_bad_sid"] or c["drop_blackhole"]]
    if sw:
        out += ["", "switch drops", _table(sw, ["switch", "no_route", "hop_limit", "bad_sid",
                                                  "blackhole"])]
    if res["goodput"]:
        rows = [[format_time(g["t"]), f"{g['bps'] / 1e9:.2f}G"] for g in res["goodput"]]
        out += ["", "aggregate goodput (new data delivered, per sample interval)",
                _table(rows, ["until", "goodput"])]
    out += [
        "",
        f"flows {s['completed']}/{s['flows']} completed, {s['errors']} QP errors; "
        f"fct/ideal p50 {_fmt_x(s['p50_slowdown'])}  p99 {_fmt_x(s['p99_slowdown'])}  "
        f"p100 {_fmt_x(s['p100_slowdown'])}",
        f"makespan {format_time(s['makespan']) if s['makespan'] is not None else '-'}, "
        f"{_fmt_x(s['makespan_ratio'])}x the ideal {format_time(s['makespan_ideal'])} "
        "(busiest host's bytes / its bandwidth)",
        f"simulated {format_time(s['sim_time'])} in {s['wall_seconds']:.2f}s wall, "
        f"{s['cpu_seconds']:.2f}s CPU: {s['events']} events, "
        f"{s['events_per_second']:,.0f} events/CPU-s",
    ]
    return "\n".join(out)


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    return x


def cmd_run(args: argparse.Namespace) -> int:
    """``mrc-sim run``."""
    # Import here so `mrc-sim specs` and `--help` work even if the core cannot import.
    from mrcnet.sim.runner import SimRun

    if args.plot:
        from mrcnet.plots import PlotUnavailable, require_matplotlib

        try:
            require_matplotlib()  # before the run, not after it
        except PlotUnavailable as e:
            raise SimError(str(e)) from e
    spec = parse_topology(args.topology)
    if args.trim is not None:
        spec = with_options(spec, trim=parse_bool(args.trim))
    flows = load_matrix(args.matrix, n_hosts=spec.n_hosts)
    failures = [parse_failure(f) for f in args.fail]
    sample = parse_time(args.sample) if args.sample else None
    run = SimRun(spec, flows, transport=args.transport, failures=failures, seed=args.seed,
                 host_config=parse_set(args.set), sample_interval=sample,
                 host_jitter=parse_host_jitter(args.host_jitter) if args.host_jitter else None)
    until = parse_time(args.until) if args.until else None

    def progress(r: SimRun) -> None:
        if args.progress:
            print(f"  {r.progress_line()}", file=sys.stderr)

    res = run.run(until=until, progress=progress if args.progress else None).as_dict()
    # The topology line is every effective value; the notes say what the spec asked for
    # that the simulator only records.
    res["not_emulated"] = spec.notes()
    if args.json:
        json.dump(_json_safe(res), sys.stdout, indent=1)
        print()
    else:
        print(_human(res, args.all_ports))
    if args.plot:
        from mrcnet.plots import sim_plot

        print(f"mrc-sim: plot written to {sim_plot(res, args.plot)}", file=sys.stderr)
    unfinished = any(f["fct"] is None for f in res["flows"])
    # The run's objects live until the process ends: leave them out of the collection
    # the interpreter makes on its way out (a full walk of them all, seconds at scale).
    gc.freeze()
    return 1 if unfinished else 0


def cmd_matrix(args: argparse.Namespace) -> int:
    """``mrc-sim matrix``: write a traffic matrix to stdout."""
    size = parse_bytes(args.size)
    start = parse_time(args.start, default_unit="us")
    if args.kind in ("permutation", "all-to-all"):
        if args.hosts is None:
            raise SimError(f"matrix {args.kind} needs --hosts N")
        if args.kind == "permutation":
            flows = permutation(args.hosts, size, seed=args.seed, start=start)
        else:
            steps = parse_host_list(args.steps) if args.steps else None
            flows = all_to_all(args.hosts, size, steps=steps, start=start)
        n = args.hosts
    else:
        if args.senders is None or args.receiver is None:
            raise SimError("matrix incast needs --senders A-B (or a,b,c) and --receiver N")
        senders = parse_host_list(args.senders)
        if args.receiver in senders:
            raise SimError(f"receiver h{args.receiver} is also a sender")
        flows = incast(senders, args.receiver, size, start=start)
        n = max(*senders, args.receiver) + 1
    sys.stdout.write(f"# mrc-sim matrix {args.kind}\n" + format_matrix(flows, n_hosts=n))
    return 0


def _plain(rst: str) -> str:
    """Docstring text for a terminal: no reST literal markers."""
    return rst.replace("``", "").replace("\n::\n", "").replace("::\n", ":\n")


def cmd_specs(_: argparse.Namespace) -> int:
    """``mrc-sim specs``: the grammars."""
    print("TOPOLOGY (--topology)\n" + SPEC_HELP)
    print("FAILURES (--fail, repeatable)" + _plain(FAIL_HELP))
    print("TRAFFIC MATRIX (--matrix FILE)\n" + _plain(MATRIX_DOC or ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    p = argparse.ArgumentParser(
        prog="mrc-sim",
        description="Discrete-event simulator of multi-plane SRv6 leaf-spine fabrics running "
        "the MRC protocol core unchanged: per-flow completion times and per-link counters.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=sys.modules["mrcnet"].version_text())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = sub.add_parser(
        "run", help="run a traffic matrix over a fabric",
        description="Run a traffic matrix over a simulated fabric and print per-flow "
        "completion times and per-link counters.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("--topology", "-t", required=True, metavar="SPEC",
                   help="leafspine:planes=2,spines=8,leaves=4,hosts=2,rate=100gbit,delay=1us,"
                   "queue=8pkt,... (see `mrc-sim specs`)")
    r.add_argument("--matrix", "-m", required=True, metavar="FILE",
                   help="htsim-style traffic matrix: one 'src->dst start T size B' per line")
    r.add_argument("--fail", "-f", action="append", default=[], metavar="SPEC",
                   help="a timed failure, repeatable: link:L0.1-S0.3@0.5ms:down, "
                   "link:L0.1>S0.3@1ms:blackhole, switch:S1.2@1ms:blackhole, loss:*=1%%, "
                   "link:L0.0-S0.2@1ms..3ms:flap=50us/200us, random:links=1%%@1ms")
    r.add_argument("--transport", choices=("mrc", "ecmp"), default="mrc",
                   help="mrc: spray over every path (default); ecmp: one hashed path per QP, "
                   "the RoCE-like baseline, same protocol code")
    r.add_argument("--trim", choices=("on", "off"), default=None,
                   help="override the topology's trim setting (off = drop-tail)")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.add_argument("--all-ports", action="store_true",
                   help="list every port, not only those that carried or dropped frames")
    r.add_argument("--seed", type=int, default=1, help="random seed (random loss); default 1")
    r.add_argument("--until", metavar="TIME", help="stop at this virtual time (e.g. 50ms)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a protocol-core HostConfig field, e.g. probe_interval=250e-6, "
                   "evs_per_qp=64, cc_profile=fixed (repeatable)")
    r.add_argument("--sample", metavar="TIME",
                   help="record aggregate goodput (new bytes delivered) every TIME, e.g. 100us")
    r.add_argument("--host-jitter", metavar="SPEC",
                   help="endpoint processing model: 'mrcd' or "
                        "wake=50us..2ms,spike=1%%:5ms,cpu=0.5us,timer=1ms (docs/SIM.md)")
    r.add_argument("--progress", action="store_true", help="progress lines on stderr")
    r.add_argument("--plot", metavar="FILE.png",
                   help="write a PNG: goodput over time (needs --sample) and the FCT CDF "
                   "(matplotlib: pip install 'mrcnet[plot]')")
    r.set_defaults(fn=cmd_run)

    m = sub.add_parser("matrix", help="generate a traffic matrix (stdout)",
                       description="Write a standard traffic matrix in the --matrix format.")
    m.add_argument("kind", choices=("permutation", "incast", "all-to-all"))
    m.add_argument("--hosts", type=int, help="permutation, all-to-all: number of hosts")
    m.add_argument("--steps", help="all-to-all: pairwise-exchange steps, e.g. 1 or 1-4 "
                   "(step k: host i sends to i+k; default every step)")
    m.add_argument("--senders", help="incast: sender hosts, e.g. 1-8 or 1,3,5")
    m.add_argument("--receiver", type=int, help="incast: receiving host")
    m.add_argument("--size", default="1m", help="bytes per flow (k/m suffixes); default 1m")
    m.add_argument("--start", default="0", help="start time (bare = microseconds)")
    m.add_argument("--seed", type=int, default=1, help="permutation seed")
    m.set_defaults(fn=cmd_matrix)

    sweep_parser(sub)

    s = sub.add_parser("specs", help="print the topology, failure and matrix grammars")
    s.set_defaults(fn=cmd_specs)

    from mrcnet.sim.collective import add_collective_parser

    add_collective_parser(sub)  # mrc-sim collective (mrcnet/sim/collective.py)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mrc-sim`` console script."""
    args = build_parser().parse_args(argv)
    try:
        rc: int = args.fn(args)
        return rc
    except (SimError, SpecError) as e:
        print(f"mrc-sim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mrc-sim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
