#!/usr/bin/env python3
"""Fingerprint the simulator's decisions: a refactor of the protocol core must not change them.

Runs a fixed set of ``mrc-sim run`` scenarios (incast with trimming and drop-tail, link
failures with loss, a switch blackhole with a flap, SRH mode, endpoint jitter, the ECMP
baseline), each with the C module (the network in C too, mrcnet/sim/simnet.py, except for
random loss) and with ``MRCNET_NO_FASTPATH=1``, and prints one digest per scenario over
everything the run decided: every flow's finish time and every port's counters.
Wall-clock figures are left out, so two trees that make the same decisions print the same
digests.

    .venv/bin/python tools/sim_digest.py                  # print the digests
    .venv/bin/python tools/sim_digest.py --save base.json # keep them
    .venv/bin/python tools/sim_digest.py --compare base.json   # exit 1 on any difference

It drives the ``mrc-sim`` command line rather than mrcnet's modules, so it runs unchanged
on both sides of a change that moves code between modules.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# (name, topology spec, matrix generator args, extra `mrc-sim run` args)
SCENARIOS: list[tuple[str, str, list[str], list[str]]] = [
    ("incast-trim", "leafspine:planes=2,spines=4,leaves=2,hosts=4",
     ["incast", "--senders", "1-7", "--receiver", "0", "--size", "2m"], []),
    ("incast-droptail", "leafspine:planes=2,spines=4,leaves=2,hosts=4",
     ["incast", "--senders", "1-7", "--receiver", "0", "--size", "2m"], ["--trim", "off"]),
    ("perm-linkdown-loss", "leafspine:planes=2,spines=4,leaves=4,hosts=4",
     ["permutation", "--hosts", "16", "--size", "2m", "--seed", "3"],
     ["--fail", "link:L0.1-S0.2@50us:down", "--fail", "loss:*=1%", "--seed", "7"]),
    ("blackhole-flap", "leafspine:planes=2,spines=4,leaves=2,hosts=2",
     ["permutation", "--hosts", "4", "--size", "4m", "--seed", "1"],
     ["--fail", "switch:S1.2@40us:blackhole",
      "--fail", "link:L0.0-S0.1@20us..400us:flap=50us/100us"]),
    ("srh", "leafspine:planes=2,spines=4,leaves=2,hosts=2,srv6=srh",
     ["permutation", "--hosts", "4", "--size", "2m", "--seed", "2"], []),
    ("jitter", "leafspine:planes=2,spines=4,leaves=2,hosts=2",
     ["incast", "--senders", "1-3", "--receiver", "0", "--size", "1m"],
     ["--host-jitter", "mrcd", "--seed", "5"]),
    ("ecmp", "leafspine:planes=2,spines=4,leaves=2,hosts=4",
     ["permutation", "--hosts", "8", "--size", "2m", "--seed", "4"], ["--transport", "ecmp"]),
]

# Keys of the JSON summary that measure the machine, not the protocol.
_WALL = {"wall_seconds", "cpu_seconds", "events_per_second"}


def _mrc_sim() -> list[str]:
    return [sys.executable, "-c", "from mrcnet.sim.cli import main; raise SystemExit(main())"]


def _decisions(out: dict[str, Any]) -> dict[str, Any]:
    summary = {k: v for k, v in out["summary"].items() if k not in _WALL}
    return {"summary": summary, "flows": out["flows"], "ports": out["ports"],
            "switches": out.get("switches"), "hosts": out.get("hosts")}


def run_scenario(name: str, topo: str, matrix: list[str], extra: list[str],
                 no_c: bool, workdir: Path) -> tuple[str, dict[str, Any]]:
    """Run one scenario; return its digest and its summary (without wall-clock keys)."""
    env = dict(os.environ)
    env.pop("MRCNET_NO_FASTPATH", None)
    if no_c:
        env["MRCNET_NO_FASTPATH"] = "1"
    cm = workdir / f"{name}.cm"
    cm.write_text(subprocess.run([*_mrc_sim(), "matrix", *matrix], check=True, env=env,
                                 capture_output=True, text=True).stdout)
    proc = subprocess.run([*_mrc_sim(), "run", "-t", topo, "-m", str(cm), "--json",
                           "--all-ports", *extra], env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{name}: mrc-sim failed ({proc.returncode}): {proc.stderr.strip()}")
    dec = _decisions(json.loads(proc.stdout))
    blob = json.dumps(dec, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16], dec["summary"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--save", metavar="FILE", help="write the digests to FILE (JSON)")
    ap.add_argument("--compare", metavar="FILE", help="compare with digests saved earlier")
    ap.add_argument("--only", metavar="NAME", action="append",
                    help="run only this scenario (repeatable)")
    ap.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                    help="a protocol-core HostConfig field for every scenario, as mrc-sim "
                    "run's (repeatable): a policy that is not the default, C against pure "
                    "Python")
    args = ap.parse_args(argv)
    sets = [x for kv in args.set for x in ("--set", kv)]
    digests: dict[str, str] = {}
    mismatch: list[str] = []  # scenarios whose C and pure-Python runs decided apart
    with tempfile.TemporaryDirectory() as tmp:
        for name, topo, matrix, extra in SCENARIOS:
            if args.only and name not in args.only:
                continue
            for no_c in (False, True):
                key = f"{name}{'/py' if no_c else '/c'}"
                digest, summary = run_scenario(name, topo, matrix, [*extra, *sets], no_c,
                                               Path(tmp))
                digests[key] = digest
                if no_c and digests[f"{name}/c"] != digest:
                    mismatch.append(name)
                print(f"{key:26} {digest}  completed {summary['completed']}/{summary['flows']}"
                      f"  p100 {summary['p100_slowdown']:.4f}  events {summary['events']}",
                      flush=True)
    if mismatch:
        print(f"C and pure Python DIFFER in: {', '.join(mismatch)}")
    if args.save:
        Path(args.save).write_text(json.dumps(digests, indent=1) + "\n")
    if args.compare:
        base = json.loads(Path(args.compare).read_text())
        diff = [k for k in digests if base.get(k) != digests[k]]
        if diff:
            print(f"DIFFERENT from {args.compare}: {', '.join(diff)}")
            return 1
        print(f"identical to {args.compare} ({len(digests)} runs)")
    return 1 if mismatch else 0


if __name__ == "__main__":
    raise SystemExit(main())
