#!/usr/bin/env python3
"""Benchmark: permutation traffic on a 64-host, 2-plane simulated fabric, MRC spraying vs
the single-path ECMP-hash baseline (same protocol core, ``ecmp`` EV profile), side by side.

Reports, per transport: P50/P99/P100 flow completion time over ideal (flow size / the
host's NIC bandwidth over all planes), makespan over ideal, and the simulator's events per
CPU second; plus the bare network's events/s (raw frames, no protocol core) to show what
the switches and links cost on their own.

    .venv/bin/python tools/bench_sim.py                 # default: a minute or two
    .venv/bin/python tools/bench_sim.py --size 1m --json
    .venv/bin/python tools/bench_sim.py --incast      # + 8->1 incast, trim vs drop-tail
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from mrcnet.constants import Opcode
from mrcnet.sim.engine import Simulator
from mrcnet.sim.errors import SimError, SpecError
from mrcnet.sim.matrix import Flow, incast, permutation
from mrcnet.sim.runner import SimRun
from mrcnet.sim.topology import Fabric, LeafSpineSpec, parse_topology, with_options
from mrcnet.topology.units import parse_bytes
from mrcnet.wire import build_data

DEFAULT_TOPOLOGY = "leafspine:planes=2,spines=8,leaves=8,hosts=8,rate=100gbit,delay=1us"


class _RawSource:
    """Network-only load: every host sends ``count`` ready-made frames to its permutation
    peer at its NICs' line rate, sprayed over every plane and spine; no protocol, no
    acknowledgements (receivers drop what they get)."""

    def __init__(self, fabric: Fabric, src: int, dst: int, count: int, payload: int) -> None:
        spec = fabric.spec
        self.protos = [
            [build_data(fabric.route(src, dst, p, s), ev=1 + s, opcode=Opcode.WRITE_ONLY,
                        dest_qp=1, psn=0, va=0, rkey=1, payload=bytes(payload))
             for s in range(spec.spines)]
            for p in range(spec.planes)
        ]
        self.left = count
        self.n = 0
        self.gap = len(self.protos[0][0]) * 8 / spec.edge_rate_bps
        self.due = 0.0

    def receive(self, frame: bytearray, port: int, now: float) -> None:
        """Raw sinks drop what they get."""

    def frames_to_send(self, now: float) -> list[tuple[int, bytes]]:
        """One frame per plane each serialisation time."""
        out: list[tuple[int, bytes]] = []
        while self.left > 0 and self.due <= now:
            for plane, frames in enumerate(self.protos):
                out.append((plane, frames[self.n % len(frames)]))
            self.n += 1
            self.left -= len(self.protos)
            self.due += self.gap
        return out

    def next_timer(self) -> float | None:
        """The next line-rate slot."""
        return self.due if self.left > 0 else None

    def handle_timer(self, now: float) -> None:
        """Sending happens in frames_to_send."""


def bench_network(spec: LeafSpineSpec, frames_per_host: int, payload: int) -> dict[str, Any]:
    """Events/s of the bare simulated network (switch forwarding, queues, links)."""
    sim = Simulator(seed=1)
    fab = Fabric(sim, spec)
    for f in permutation(spec.n_hosts, 1, seed=1):
        fab.hosts[f.src].attach(_RawSource(fab, f.src, f.dst, frames_per_host, payload))
    sim.run()
    hops = sum(p.counters.tx_frames for p in fab.egress_ports())
    return {
        "frames": frames_per_host * spec.n_hosts,
        "frame_hops": hops,
        "events": sim.events,
        "cpu_seconds": sim.cpu_seconds,
        "events_per_second": sim.events_per_second,
        "frame_hops_per_second": hops / sim.cpu_seconds if sim.cpu_seconds else 0.0,
    }


def bench_transport(spec: LeafSpineSpec, transport: str, size: int, seed: int,
                    verbose: bool) -> dict[str, Any]:
    """One permutation run with ``transport``; the headline figures."""
    flows = permutation(spec.n_hosts, size, seed=seed)
    return bench_run(transport, spec, flows, transport, seed, verbose)


def bench_incast(spec: LeafSpineSpec, size: int, verbose: bool) -> list[dict[str, Any]]:
    """8->1 incast onto h0 from hosts on other leaves, with trimming and with drop-tail."""
    senders = [h for h in range(spec.n_hosts) if h // spec.hosts != 0][:8]
    if len(senders) < 8:
        raise SimError("the incast needs 8 hosts off the receiver's leaf")
    flows = incast(senders, 0, size)
    return [bench_run(label, with_options(spec, trim=trim), flows, "mrc", 1, verbose)
            for label, trim in (("mrc trim", True), ("mrc drop-tail", False))]


def bench_run(label: str, spec: LeafSpineSpec, flows: list[Flow], transport: str, seed: int,
              verbose: bool) -> dict[str, Any]:
    """Run ``flows``; the headline figures."""
    run = SimRun(spec, flows, transport=transport, seed=seed)
    t0 = time.perf_counter()

    def progress(r: SimRun) -> None:
        if verbose:
            done = sum(1 for x in r.results.values() if x.finish is not None)
            print(f"  [{label}] t={r.sim.now * 1e3:.3f}ms events={r.sim.events} "
                  f"done={done}/{len(flows)} wall={time.perf_counter() - t0:.0f}s",
                  file=sys.stderr)

    res = run.run(until=1.0, progress=progress)
    s = res.summary()
    return {
        "transport": label,
        "flows": s["flows"],
        "completed": s["completed"],
        "qp_errors": s["errors"],
        "p50_fct_over_ideal": s["p50_slowdown"],
        "p99_fct_over_ideal": s["p99_slowdown"],
        "p100_fct_over_ideal": s["p100_slowdown"],
        "makespan_over_ideal": s["makespan_ratio"],
        "trimmed": sum(c["trimmed"] for c in res.ports.values()),
        "ecn_marked": sum(c["ecn_marked"] for c in res.ports.values()),
        "dropped": sum(c["drop_queue"] for c in res.ports.values()),
        "timeout_retransmits": sum(h.get("lost_timeout", 0) for h in res.hosts.values()),
        "sim_time": s["sim_time"],
        "events": s["events"],
        "cpu_seconds": s["cpu_seconds"],
        "wall_seconds": s["wall_seconds"],
        "events_per_second": s["events_per_second"],
    }


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if v < 1000 else f"{v:,.0f}"
    return str(v)


def _print_table(cols: list[tuple[str, str]], rows: list[dict[str, Any]]) -> None:
    table = [[h for h, _ in cols]] + [[_fmt(r[k]) for _, k in cols] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for row in table:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print a table (or JSON)."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", default=DEFAULT_TOPOLOGY,
                    help=f"fabric (default {DEFAULT_TOPOLOGY}: 64 hosts, 2 planes)")
    ap.add_argument("--size", default="8m", help="bytes per flow (default 8m)")
    ap.add_argument("--seed", type=int, default=1, help="permutation seed")
    ap.add_argument("--transports", default="mrc,ecmp", help="comma list (default mrc,ecmp)")
    ap.add_argument("--raw-frames", type=int, default=200,
                    help="frames per host for the network-only measurement (0 = skip)")
    ap.add_argument("--incast", action="store_true",
                    help="also run an 8->1 incast (4 MiB per sender), trimming vs drop-tail")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = ap.parse_args(argv)
    try:
        spec = parse_topology(args.topology)
        size = parse_bytes(args.size)
        rows = [bench_transport(spec, t.strip(), size, args.seed, not args.quiet)
                for t in args.transports.split(",") if t.strip()]
        inc = bench_incast(spec, 4 << 20, not args.quiet) if args.incast else []
        net = bench_network(spec, args.raw_frames, 8192) if args.raw_frames > 0 else None
    except (SimError, SpecError) as e:
        print(f"bench_sim: error: {e}", file=sys.stderr)
        return 2
    out = {"topology": spec.to_line(), "hosts": spec.n_hosts, "flow_size": size,
           "seed": args.seed, "transports": rows, "incast": inc, "network_only": net}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"permutation, {spec.n_hosts} hosts, {size} bytes per flow, seed {args.seed}")
    print(f"topology {spec.to_line()}")
    cols = [("transport", "transport"), ("P50 fct/ideal", "p50_fct_over_ideal"),
            ("P99", "p99_fct_over_ideal"), ("P100 fct/ideal", "p100_fct_over_ideal"),
            ("makespan/ideal", "makespan_over_ideal"), ("done", "completed"),
            ("QP err", "qp_errors"), ("trims", "trimmed"), ("drops", "dropped"),
            ("events", "events"), ("CPU s", "cpu_seconds"), ("events/s", "events_per_second")]
    _print_table(cols, rows)
    if inc:
        print("\n8->1 incast onto h0, 4 MiB per sender (makespan over total bytes / h0's "
              "bandwidth)")
        _print_table([("run", "transport"), ("makespan/ideal", "makespan_over_ideal"),
                      ("P100 fct/ideal", "p100_fct_over_ideal"), ("trims", "trimmed"),
                      ("drops", "dropped"), ("timeout rtx", "timeout_retransmits"),
                      ("QP err", "qp_errors"), ("events/s", "events_per_second")], inc)
    if net is not None:
        print(f"network only (raw frames, no core): {net['events']} events in "
              f"{net['cpu_seconds']:.2f} CPU s = {net['events_per_second']:,.0f} events/s, "
              f"{net['frame_hops_per_second']:,.0f} frame-hops/s")
    print("events/s are per CPU second of this process (wall time on a shared machine "
          "measures the neighbours too)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
