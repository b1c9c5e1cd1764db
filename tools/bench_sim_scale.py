#!/usr/bin/env python3
"""mrc-sim at scale, before and after: the same permutation run by two source trees, side
by side, interleaved (A B A B ...), each run in a process of its own.

    .venv/bin/python tools/bench_sim_scale.py --base /work/wt-simscale-base
    .venv/bin/python tools/bench_sim_scale.py --base ../main --hosts 1024 --rounds 1

For each run: events, CPU seconds in the event loop, events per CPU second, the whole
process's CPU seconds (set-up included) and its peak RSS; then the ratios (this tree over
the base) and whether both trees gave the same results (every flow's finish time, every
port's counters, every host's core counters: a digest). The base needs its own compiled
module (copy ``mrcnet/_native*.so`` into it when its C sources are the same).

With ``--set`` this tree runs with protocol-core overrides and the base without: give
``--base .`` to weigh a set of knobs on the same code (what they cost in events and CPU
at scale, and whether they move the results):

    .venv/bin/python tools/bench_sim_scale.py --base . --set rack_prompt=true

Timing figures compare only inside one run of this tool: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from mrcnet.sim.errors import SimError
from mrcnet.sim.overrides import parse_set

HERE = Path(__file__).resolve().parent.parent

# Run in the child, with the tree under test first on sys.path.
_CHILD = r"""
import hashlib, json, resource, sys, time
from mrcnet.sim.matrix import permutation
from mrcnet.sim.runner import SimRun
from mrcnet.sim.topology import parse_topology
spec = parse_topology(sys.argv[1])
flows = permutation(spec.leaves * spec.hosts, int(sys.argv[2]), seed=int(sys.argv[3]))
t0 = time.process_time()
run = SimRun(spec, flows, seed=int(sys.argv[3]), host_config=json.loads(sys.argv[4]))
res = run.run()
cpu_total = time.process_time()
d = res.as_dict()
digest = hashlib.sha256(json.dumps([d["flows"], d["ports"], d["hosts"]],
                                   sort_keys=True).encode()).hexdigest()[:16]
s = res.summary()
print(json.dumps({"events": res.events, "cpu": res.cpu, "eps": res.events_per_second,
                  "cpu_total": cpu_total, "setup_cpu": cpu_total - t0 - res.cpu,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "completed": s["completed"], "flows": s["flows"],
                  "p50": s["p50_slowdown"], "p100": s["p100_slowdown"], "digest": digest}))
"""


def run_one(tree: Path, topology: str, size: int, seed: int,
            host_config: dict[str, object] | None = None) -> dict[str, object]:
    """One run of ``tree``'s simulator in a fresh interpreter (``host_config``: HostConfig
    overrides)."""
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", _CHILD, topology, str(size), str(seed),
                          json.dumps(host_config or {})],
                         capture_output=True, text=True, env=env, cwd="/", check=False)
    if out.returncode != 0:
        raise SystemExit(f"run in {tree} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, type=Path, help="the tree to compare against")
    p.add_argument("--hosts", type=int, default=256, help="hosts (16 per leaf); default 256")
    p.add_argument("--planes", type=int, default=8)
    p.add_argument("--spines", type=int, default=8)
    p.add_argument("--size", default=1 << 20, type=int, help="bytes per flow (1 MiB)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3, help="A/B pairs (default 3)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a HostConfig override for this tree's runs only, as mrc-sim run's "
                   "(repeatable; with --base . it weighs the knobs on the same code)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    try:
        overrides = parse_set(a.set)
    except SimError as e:
        p.error(str(e))
    topo = (f"leafspine:planes={a.planes},spines={a.spines},leaves={a.hosts // 16},"
            "hosts=16")
    runs: dict[str, list[dict[str, object]]] = {"base": [], "this": []}
    load_start = os.getloadavg()
    for i in range(a.rounds):
        for name, tree, hc in (("base", a.base.resolve(), None), ("this", HERE, overrides)):
            r = run_one(tree, topo, a.size, a.seed, hc)
            runs[name].append(r)
            print(f"round {i + 1} {name:4}: {r['events']} events, {r['cpu']:.2f} CPU-s in "
                  f"the loop ({r['eps']:,.0f} events/CPU-s), {r['cpu_total']:.2f} CPU-s in "
                  f"all, peak RSS {r['rss_mb']:.0f} MB, digest {r['digest']}",
                  file=sys.stderr)

    def med(name: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in runs[name])  # type: ignore[arg-type]

    load = (load_start, os.getloadavg())
    same = {r["digest"] for r in runs["base"]} == {r["digest"] for r in runs["this"]}
    same_events = {r["events"] for r in runs["base"]} == {r["events"] for r in runs["this"]}
    # Each round's pair ran back to back: the spread of its ratios says how much the
    # machine's load moved the figures.
    paired = sorted(float(t["eps"]) / float(b["eps"])  # type: ignore[arg-type]
                    for b, t in zip(runs["base"], runs["this"], strict=True))
    table = {
        k: {"base": med("base", k), "this": med("this", k),
            "ratio": med("this", k) / med("base", k) if med("base", k) else None}
        for k in ("eps", "cpu", "cpu_total", "setup_cpu", "rss_mb")
    }
    if a.json:
        print(json.dumps({"topology": topo, "size": a.size, "rounds": a.rounds,
                          "set": overrides,
                          "identical": same, "same_events": same_events, "median": table,
                          "paired_eps_ratios": paired, "loadavg": load, "runs": runs},
                         indent=1))
        return 0 if same or overrides else 1
    print(f"{topo}, permutation of {a.size} B flows, seed {a.seed}, {a.rounds} A/B rounds "
          "(medians)" + (f"; this tree with {' '.join(a.set)}" if a.set else ""))
    names = {"eps": "events per CPU-s (loop)", "cpu": "CPU-s in the event loop",
             "cpu_total": "CPU-s, whole process", "setup_cpu": "CPU-s setting up",
             "rss_mb": "peak RSS, MB"}
    print(f"{'':28}{'base':>12}{'this':>12}{'this/base':>11}")
    for k, row in table.items():
        ratio = row["ratio"]
        print(f"{names[k]:28}{row['base']:12,.2f}{row['this']:12,.2f}"
              f"{ratio if ratio is not None else float('nan'):11.2f}")
    print(f"events per CPU-s, this/base per round: {', '.join(f'{x:.2f}' for x in paired)}")
    print(f"load average (1, 5, 15 min) at the start {load[0][0]:.1f} {load[0][1]:.1f} "
          f"{load[0][2]:.1f}, at the end {load[1][0]:.1f} {load[1][1]:.1f} {load[1][2]:.1f}")
    print(f"same event count: {'yes' if same_events else 'no'}")
    print(f"results identical (flows, ports, host counters): {'yes' if same else 'NO'}"
          + (" (--set: the knobs acted)" if overrides and not same else ""))
    p100 = (med("base", "p100"), med("this", "p100"))
    print(f"P100 slowdown of the permutation: base {p100[0]:.4f}, this {p100[1]:.4f}")
    return 0 if same or overrides else 1


if __name__ == "__main__":
    sys.exit(main())
