#!/usr/bin/env python3
"""Benchmark: collectives through failures on an emulated fabric, MRC against its
baselines, side by side in one run (issue 16's fabric figures).

Runs ``mrc-coll --json`` on every host of a fabric for each scenario in turn:

- MRC (spray) without failure, with a spine link going down mid-run, with it flapping;
- kernel TCP (``--transport tcp``: plane-0 addresses, one static path per pair) and MRC
  with one path per QP (``--ev ecmp``), without failure and with the same link down.

The link is leaf 0's link to plane 0's control spine by default: the only path the
fabric's plain IPv6 routes take between leaves, so the failure cuts the TCP baseline's
path (its routes are static, as one pinned ECMP path would be).

Per scenario it prints busbw and its fraction of the hosts' link-rate ideal (planes x
host rate, from the fabric description), P50/P99/P100 step times, P100 over the same
transport's no-failure P100, and what happened to a baseline the failure cut (stalled
for how long, or failed). The default fabric is brought up under a run-owned name and
removed at the end; ``--fabric NAME`` uses one that is up (with ``--mrcd``).

    sudo .venv/bin/python tools/bench_coll.py                      # the issue's figures
    sudo .venv/bin/python tools/bench_coll.py --fabric co8x --size 1M --iters 10 --json
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
#: 8 hosts, 2 planes, 4 leaves; links shaped so the network, not the CPU, is the limit.
SPEC = "leafspine:planes=2,spines=4,leaves=4,hosts=2,rate=10mbit"
#: Plane 0's link from leaf 0 to the control spine S0.0: the only path of plain IPv6
#: (so of the TCP baseline) between leaf 0's hosts and the other leaves, and one of the
#: four MRC sprays over for the ring's h1->h2 and h7->h0 (mrcnet/fabric/plan.py).
LINK = "L0.0-S0.0"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MRCD_SOCKET"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def scenarios(down_at: float, flap: float, link: str = LINK
              ) -> list[tuple[str, list[str], str | None]]:
    """(label, mrc-coll options, failure) in the order they run."""
    down = f"link:{link}@{down_at:g}s:down"
    flapping = f"link:{link}@{down_at:g}s:flap={flap:g}s/{flap:g}s"
    return [
        ("mrc", [], None), ("mrc", [], down), ("mrc", [], flapping),
        ("tcp", ["--transport", "tcp"], None), ("tcp", ["--transport", "tcp"], down),
        ("ecmp", ["--ev", "ecmp"], None), ("ecmp", ["--ev", "ecmp"], down),
    ]


def run_one(fabric: str, base: list[str], extra: list[str], fail: str | None,
            timeout: float) -> dict[str, Any]:
    argv = [str(BIN / "mrc-coll"), "--fabric", fabric, "--json", *base, *extra]
    if fail:
        argv += ["--fail", fail]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=_env())
    except subprocess.TimeoutExpired:
        return {"verified": False, "errors": {"-": f"no result in {timeout:.0f} s"}}
    try:
        out: dict[str, Any] = json.loads(r.stdout)
    except ValueError:
        out = {"verified": False, "errors": {"-": r.stderr.strip()[-300:]}}
    out["rc"] = r.returncode
    return out


def fabric_ideal_gbps(fabric: str) -> float:
    """Planes x host link rate, from the fabric description."""
    from mrcnet.fabric.fabric import Fabric

    d = Fabric.load(fabric).description
    opt = d.options
    return len(d.planes) * float(opt.get("host_rate_bps") or opt["rate_bps"]) / 1e9


def _what(res: dict[str, Any], base_p100: float | None) -> str:
    if res.get("errors"):
        why = next(iter(res["errors"].values()))
        return f"FAILED after {res.get('failed_after_s', '?')} s: {why}"
    notes = res.get("notes") or []
    if notes:
        return "; ".join(notes)
    return "ok"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fabric", help="use this fabric (up, with --mrcd)")
    ap.add_argument("--spec", default=SPEC, help=f"fabric to bring up (default {SPEC})")
    ap.add_argument("--op", default="allreduce")
    ap.add_argument("--size", default="4M")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--down-at", type=float, default=20.0,
                    help="seconds after the first timed step the link fails (default 20)")
    ap.add_argument("--flap", type=float, default=2.0, help="flap period (s, default 2)")
    ap.add_argument("--link", default=LINK, help=f"the link that fails (default {LINK})")
    ap.add_argument("--step-timeout", type=float, default=30.0)
    ap.add_argument("--only", help="comma list of scenario numbers to run (1-based)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the scenarios this many rounds, interleaved (each round's "
                    "failures compared with that round's no-failure run)")
    ap.add_argument("--prefix", default=os.environ.get("MRC_E2E_PREFIX", "co"))
    ap.add_argument("--json", action="store_true", help="one JSON line per scenario")
    a = ap.parse_args(argv)
    name = a.fabric or a.prefix + secrets.token_hex(3)
    if not a.fabric:
        r = subprocess.run([str(BIN / "mrc-fabric"), "up", a.spec, "--name", name, "--mrcd",
                            "-q"], capture_output=True, text=True, env=_env(), check=False)
        if r.returncode != 0:
            print(f"mrc-fabric up failed: {r.stderr}", file=sys.stderr)
            return 2
    try:
        ideal = fabric_ideal_gbps(name)
        base = ["--op", a.op, "--size", a.size, "--iters", str(a.iters), "--warmup",
                str(a.warmup), "--step-timeout", f"{a.step_timeout:g}", "-q"]
        todo = list(enumerate(scenarios(a.down_at, a.flap, a.link), 1))
        if a.only:
            keep = {int(x) for x in a.only.split(",")}
            todo = [t for t in todo if t[0] in keep]
        todo = todo * max(1, a.repeat)
        p100_base: dict[str, float] = {}
        if not a.json:
            print(f"# {a.op} {a.size} x {a.iters} on {name} ({ideal * 1e3:.0f} Mb/s ideal "
                  f"per host)")
            print(f"{'#':>2} {'transport':>9} {'failure':<36} {'busbw':>8} {'/ideal':>6} "
                  f"{'p50 s':>7} {'p99 s':>7} {'p100 s':>7} {'p100/base':>9}  what")
        for i, (label, extra, fail) in todo:
            res = run_one(name, base, extra, fail, timeout=a.iters * 60 + 300)
            p100 = res.get("p100_s")
            if fail is None and p100:
                p100_base[label] = p100
            ratio = (p100 / p100_base[label] if p100 and label in p100_base else None)
            bus = res.get("busbw_gbps") or 0.0
            row = {"n": i, "transport": label, "failure": fail, "busbw_gbps": bus,
                   "busbw_of_ideal": bus / ideal if ideal else None,
                   "p50_s": res.get("p50_s"), "p99_s": res.get("p99_s"), "p100_s": p100,
                   "p100_over_base": ratio, "verified": res.get("verified"),
                   "what": _what(res, p100_base.get(label)),
                   "failure_events": res.get("failure_events", [])}
            if a.json:
                print(json.dumps(row), flush=True)
                continue
            print(f"{i:>2} {label:>9} {fail or '-':<36} {bus * 1e3:>6.2f}Mb {bus / ideal:>6.2f} "
                  f"{row['p50_s'] or 0:>7.3f} {row['p99_s'] or 0:>7.3f} {p100 or 0:>7.3f} "
                  f"{ratio if ratio is not None else float('nan'):>9.3f}  {row['what']}",
                  flush=True)
    finally:
        if not a.fabric:
            subprocess.run([str(BIN / "mrc-fabric"), "down", name], capture_output=True,
                           env=_env(), check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
