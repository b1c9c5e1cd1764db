#!/usr/bin/env python3
"""Bring-up / tear-down benchmark of mrc-fabric (needs root).

    .venv/bin/python tools/bench_fabric.py [--spec SPEC] [--runs 5]

Default spec: the issue's 2-plane, 4-spine, 4-leaf, 8-host fabric. Prints min / median /
max of: bring-up (BPF object cached), status, and tear-down (``down`` returns; the kernel
frees the namespaces' veths asynchronously after that). One cold bring-up
(empty BPF cache, so clang runs) is measured first. Fabric names are "fbb<hex>" in a
private state directory; everything is removed even on error.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_SPEC = "leafspine:planes=2,spines=4,leaves=4,hosts=2,rate=1gbit,mtu=9000"


def _fmt(xs: list[float]) -> str:
    return f"min {min(xs):.3f}  median {statistics.median(xs):.3f}  max {max(xs):.3f} s"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--spec", default=DEFAULT_SPEC)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_fabric: needs root (network namespaces)", file=sys.stderr)
        return 1
    tmp = tempfile.TemporaryDirectory(prefix="mrcbench")
    os.environ["MRC_FABRIC_STATE_DIR"] = str(Path(tmp.name) / "state")
    os.environ["MRC_FABRIC_BPF_CACHE"] = str(Path(tmp.name) / "bpfcache")

    from mrcnet.fabric.fabric import Fabric, down, list_names
    from mrcnet.fabric.nsutil import netns_exists
    from mrcnet.fabric.spec import parse_spec

    spec = parse_spec(args.spec)
    print(f"spec: {args.spec}")
    ups: list[float] = []
    downs: list[float] = []
    stats: list[float] = []
    cold = 0.0
    n_nodes = n_links = 0
    try:
        for run in range(args.runs + 1):
            name = "fbb" + secrets.token_hex(3)
            t0 = time.perf_counter()
            fab = Fabric.up(spec, name=name)
            t1 = time.perf_counter()
            fab.status()
            t2 = time.perf_counter()
            netns = list(fab.record.netns)
            fab.down()
            t3 = time.perf_counter()
            assert not any(netns_exists(n) for n in netns)
            if run == 0:
                cold = t1 - t0
                n_nodes = len(netns)
                n_links = len(fab.description.links)
                continue
            ups.append(t1 - t0)
            stats.append(t2 - t1)
            downs.append(t3 - t2)
    finally:
        for n in list_names():
            down(n, force=True)
        tmp.cleanup()
    print(f"fabric: {n_nodes} namespaces, {n_links} veth links, {args.runs} runs")
    print(f"bring-up, cold (clang compiles): {cold:.3f} s")
    print(f"bring-up, BPF cached:  {_fmt(ups)}")
    print(f"status:                {_fmt(stats)}")
    print(f"tear-down:             {_fmt(downs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
