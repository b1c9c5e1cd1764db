"""Python bytecodes per data packet in the sender's core: a measure the machine's load
cannot move.

Two Hosts back to back (tools/bench_core.py's harness), mrcd's core settings, a 1 MiB
write of 8 KiB packets per round: the sender's calls (``frames_to_send``, and
``receive_batch`` of the SACKs) run under ``sys.settrace`` with opcode tracing, and every
bytecode executed in them is counted, per function. The receiver runs untraced. Compare
trees by running the same command in each (``PYTHONPATH=<tree>``).

    .venv/bin/python tools/bench_opcodes.py [--mib 8] [--top 15] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import types
from typing import Any

from bench_core import idle, pair

from mrcnet.core import HostConfig
from mrcnet.daemon.config import DAEMON_CORE


def _count(counts: collections.Counter[str]) -> Any:
    def tracer(frame: types.FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            name = code.co_filename.rsplit("/", 1)[-1]
            counts[f"{name}:{code.co_firstlineno}:{code.co_name}"] += 1
        return tracer
    return tracer


def run(mib: int) -> dict[str, Any]:
    """Move ``mib`` MiB once; return sender bytecodes per data packet, per function."""
    cfg = HostConfig(**{k: v for k, v in DAEMON_CORE.items() if k != "link_rate"},
                     mtu_payload=8192)
    a, b, qa, _ = pair(cfg, spines=4)
    size = mib << 20
    src, dst = bytearray(size), bytearray(size)
    ms, md = a.register_mr(src), b.register_mr(dst)
    for i in range(mib):
        a.post_write(qa, i, ms, i << 20, 1 << 20, md.addr + (i << 20), md.rkey)
    counts: collections.Counter[str] = collections.Counter()
    tracer = _count(counts)
    cq = a.qp(qa).cq
    now, packets = 0.0, 0
    while len(cq) < mib:
        now += 20e-6
        sys.settrace(tracer)
        out = a.frames_to_send(now)
        sys.settrace(None)
        packets += len(out)
        b.receive_batch([f for _, f in out], 0, now)
        back = b.frames_to_send(now)
        sys.settrace(tracer)
        a.receive_batch([f for _, f in back], 0, now)
        sys.settrace(None)
        if not out and not back:
            now = idle(a, b, now, 1e-4)
    assert dst == src
    total = sum(counts.values())
    return {"packets": packets, "per_packet": total / packets,
            "functions": {k: v / packets for k, v in counts.most_common()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=8, help="MiB moved (1 MiB writes)")
    ap.add_argument("--top", type=int, default=15, help="functions listed")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    r = run(args.mib)
    if args.json:
        print(json.dumps(r))
        return 0
    print(f"sender: {r['per_packet']:.0f} Python bytecodes per data packet "
          f"({r['packets']} packets)")
    for name, n in list(r["functions"].items())[: args.top]:
        print(f"  {n:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
