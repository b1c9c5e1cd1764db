#!/usr/bin/env python3
"""Benchmark: collectives in the simulator on the shape MRC deploys (8 planes), spray
against ECMP side by side, with and without a spine link going down mid-run.

For each collective (all-reduce, all-to-all) and transport (``mrc`` = spray, ``ecmp`` =
one path per QP, the same protocol core) it runs ``mrc-sim collective`` twice: without
failure, then with ``link:L0.0-S0.1`` going down in the middle of the timed steps (at
warm-up + half the steps, by the first run's P50). It prints P50/P99/P100 step times,
P100/P50, busbw against the hosts' ideal, P100 over the no-failure P100 of the same
transport, the responder's SACKs per data packet sent (retransmissions included: what the
SACK-coalescing knobs, e.g. ``ack_late``, cost) and the CPU seconds each run took.

Steps are counted as nccl-tests counts them by default (``-n 20 -w 5``: 20 timed after 5
warm-up): after one warm-up the all-to-all's first timed step still carries the cold
start's one-packet windows, and a P100 made of it is the yardstick of nothing
(docs/COLLECTIVES.md, "session 10"). Fewer steps (``--iters 6 --warmup 1``, the figures
of sessions 8 and 9) run 3-4x faster.

    .venv/bin/python tools/bench_sim_coll.py                  # 64 hosts x 8 planes
    .venv/bin/python tools/bench_sim_coll.py --hosts 16 --size 1M --json
    .venv/bin/python tools/bench_sim_coll.py --hosts 16 --size 1M --ops alltoall \
        --transports mrc --set share_verdicts=false     # one of issue 16's changes off
    .venv/bin/python tools/bench_sim_coll.py --json --ops allreduce,alltoall \
        --transports mrc --set ack_late=true --set rack_hold=0 --set rack_floor=5e-6
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

from mrcnet.coll.options import CollOptions
from mrcnet.core.config import TUNINGS
from mrcnet.sim.collective import SIGNALS, default_topology, run_collective
from mrcnet.sim.overrides import parse_set
from mrcnet.topology.errors import SpecError
from mrcnet.topology.units import parse_bytes

LINK = "L0.0-S0.1"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--topology", help="instead of the 8-plane shape for --hosts")
    ap.add_argument("--ops", default="allreduce,alltoall")
    ap.add_argument("--transports", default="mrc,ecmp")
    ap.add_argument("--size", default="4M")
    ap.add_argument("--iters", type=int, default=20,
                    help="timed steps (default 20, as nccl-tests' -n)")
    ap.add_argument("--warmup", type=int, default=5,
                    help="untimed steps first (default 5, as nccl-tests' -w)")
    ap.add_argument("--json", action="store_true", help="one JSON line per run")
    ap.add_argument("--tuning", choices=sorted(TUNINGS), default="collective",
                    help="the protocol core's named settings, as mrc-sim collective's "
                    "(default collective; default: the host defaults)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a protocol-core HostConfig field on top of the tuning, "
                    "as mrc-sim run's (e.g. share_verdicts=false, tail_probe=false; "
                    "repeatable)")
    ap.add_argument("--fail-at", metavar="TIME",
                    help="when the link goes down (default: mid-run, from the first P50)")
    ap.add_argument("--signal", choices=SIGNALS, default="arrival",
                    help="what releases a ring's next write: the data's arrival at the "
                    "receiver (default, as mrc-coll) or the sender's completion (the "
                    "model before)")
    ap.add_argument("--seeds", default="1", metavar="S[,S...]",
                    help="the failure runs' seeds (default 1): each is the simulation's "
                    "random seed and the draw of the failure's instant, the mid-run "
                    "instant plus a fraction of a step drawn from the seed (none for 1). "
                    "These runs have no random loss or jitter, so the instant (which "
                    "packets the link takes down with it) is what a seed draws; the run "
                    "without failure is made once (seed 1), the yardstick of every seed")
    ap.add_argument("--chain", action="store_true",
                    help="per timed step, its critical chain: hops, median hop and the "
                    "slow ones (ring step, sender -> receiver, hop, the sender's window)")
    a = ap.parse_args(argv)
    host_config = parse_set(a.set)
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
        if any(s < 1 for s in seeds):
            raise ValueError
    except ValueError:
        print(f"bench_sim_coll: --seeds {a.seeds!r}: give positive integers, e.g. 1,2,3",
              file=sys.stderr)
        return 2
    topo = a.topology or default_topology(a.hosts)
    size = parse_bytes(a.size)
    if not a.json:
        print(f"# {topo}, {a.hosts} ranks, {size} B, {a.iters} timed steps "
              f"(+{a.warmup} warm-up); failure: {LINK} down mid-run; "
              f"next write on {a.signal}")
        print(f"{'op':>9} {'transport':>9} {'failure':<28} {'p50 us':>9} {'p99 us':>9} "
              f"{'p100 us':>9} {'p100/p50':>8} {'busbw':>9} {'/ideal':>6} {'p100/base':>9} "
              f"{'worst':>5} {'sack/pkt':>8} {'cpu s':>6}  status")
    for op in a.ops.split(","):
        for transport in a.transports.split(","):
            base: dict[str, Any] | None = None
            for seed in [0, *seeds]:
                with_fail = seed > 0
                fail: tuple[str, ...] = ()
                if with_fail:
                    if base is None or not base["p50_s"]:
                        continue
                    shift = 0.0 if seed == 1 else random.Random(seed).random()
                    at = (a.warmup + a.iters / 2 + shift) * base["p50_s"]
                    when = a.fail_at or f"{at * 1e6:.3f}us"
                    fail = (f"link:{LINK}@{when}:down",)
                opts = CollOptions(op, (size,), a.iters, a.warmup, fail)
                t0 = time.monotonic()
                try:
                    res = run_collective(topo, opts, transport,
                                         ranks=a.hosts if a.topology else None,
                                         seed=max(1, seed),
                                         host_config=host_config, tuning=a.tuning,
                                         signal=a.signal,
                                         trace=a.chain)
                except SpecError as e:  # a user's mistake (an unknown transport...)
                    print(f"bench_sim_coll: {e}", file=sys.stderr)
                    return 2
                res["wall_s"] = time.monotonic() - t0
                if not with_fail:
                    base = res
                ratio = (res["p100_s"] / base["p100_s"]
                         if with_fail and base and res["p100_s"] and base["p100_s"] else None)
                counters = res["rows"][-1]["counters"]
                sacks = counters.get("tx_sack", 0) / max(1, counters.get("tx_data", 0))
                row = {"op": op, "transport": transport, "signal": a.signal, "seed": max(1, seed),
                       "tuning": a.tuning,
                       "failure": fail[0] if fail else None,
                       "p50_s": res["p50_s"], "p99_s": res["p99_s"], "p100_s": res["p100_s"],
                       "p100_over_p50": res["p100_over_p50"], "busbw_gbps": res["busbw_gbps"],
                       "busbw_of_ideal": res["busbw_of_ideal"], "p100_over_base": ratio,
                       "worst": res["worst"], "steps_s": res["steps_s"],
                       "counters": counters, "sacks_per_data": sacks,
                       "completed": res["completed"], "error": res["error"],
                       "steps": len(res["steps_s"] or []), "cpu_s": res["cpu_seconds"],
                       "wall_s": res["wall_s"], "chains": res["rows"][-1].get("chains")}
                if a.json:
                    print(json.dumps(row), flush=True)
                    continue
                status = "ok" if res["completed"] else (
                    f"FAILED after {row['steps']} steps: {res['error']}")
                print(f"{op:>9} {transport:>9} {fail[0] if fail else '-':<28} "
                      f"{(res['p50_s'] or 0) * 1e6:>9.1f} {(res['p99_s'] or 0) * 1e6:>9.1f} "
                      f"{(res['p100_s'] or 0) * 1e6:>9.1f} {res['p100_over_p50'] or 0:>8.3f} "
                      f"{res['busbw_gbps'] or 0:>9.2f} {res['busbw_of_ideal'] or 0:>6.3f} "
                      f"{ratio if ratio is not None else float('nan'):>9.3f} "
                      f"{res['worst'] if res['worst'] is not None else -1:>5} "
                      f"{sacks:>8.3f} {res['cpu_seconds']:>6.1f}  {status}", flush=True)
                for k, ch in enumerate(row["chains"] or []):
                    slow = ", ".join(f"s{s} {src}->{dst} {hop * 1e6:.1f}us "
                                     f"(window {cwnd / 1024:.0f} KiB)"
                                     for s, src, dst, hop, cwnd in ch["slow"])
                    print(f"{'':>9} step {k}: {row['steps_s'][k] * 1e6:.1f} us, chain of "
                          f"{ch['hops']} writes, {ch['sum_s'] * 1e6:.1f} us, median hop "
                          f"{ch['median_s'] * 1e6:.2f} us; slow: {slow or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
