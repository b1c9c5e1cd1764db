"""Micro-benchmark of the core's per-packet path: ``python tools/bench_core.py``.

Two Hosts wired back to back (no network model): host A writes ``--size`` bytes to host
B; every frame is handed straight to the other side. The time spent inside each host's
calls is measured separately, so the report gives packets/s per core for the sender
(segmentation, EV choice, frame build, SACK processing) and for the receiver (parse,
checks, placement, SACK build).

Modes run in interleaved rounds (A B C D A B C D ...) and the best round of each is
kept, so machine noise hits them alike: compare rows of one run, not across runs.
``parse_frame`` rows use the reference parser (``HostConfig(fast_parse=False)``: what
the receiver did before the C parser), the others ``mrcnet.wire.parsed.FrameParser``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from collections.abc import Sequence

from mrcnet.core.config import HostConfig, Port, QPAttrs
from mrcnet.core.host import Host
from mrcnet.core.states import QPState
from mrcnet.wire import Route, usid_container

_BLOCK = b"\xfc\x00\x00\x00"


class _Paths:
    def __init__(self, me: int, spines: int) -> None:
        self.me, self.spines = me, spines

    def planes(self, peer: str) -> Sequence[int]:
        return (0,)

    def routes(self, peer: str, plane: int) -> Sequence[Route]:
        dst = 1 - self.me
        return [Route(bytes([2, 0, 0, 0, 0, self.me]), bytes([2, 0, 0, 0, 0, dst]),
                      bytes(15) + bytes([self.me + 1]), bytes(15) + bytes([dst + 1]),
                      usid=usid_container(_BLOCK, [0x10, 0x100 + s, 0x10, 0x200 + dst]))
                for s in range(self.spines)]


def pair(config: HostConfig, spines: int = 8) -> tuple[Host, Host, int, int]:
    """Two Hosts ``b0`` and ``b1`` back to back over ``spines`` paths, and a connected QP
    on each (in RTS): ``(a, b, qpn of a, qpn of b)``. The wire between them has no delay
    (a SACK comes back at the instant its packet left), so the "too early" SACK check
    (``ack_rtt_floor``) is off: it would take every SACK for a forgery."""
    config = dataclasses.replace(config, ack_rtt_floor=0.0)
    hosts = [Host(f"b{i}", [Port(0, 0, bytes([2, 0, 0, 0, 0, i]), bytes(15) + bytes([i + 1]))],
                  _Paths(i, spines), config) for i in range(2)]
    a, b = hosts
    qa, qb = a.create_qp(a.create_cq(), QPAttrs()), b.create_qp(b.create_cq(), QPAttrs())
    for h, q, peer, pq in ((a, qa, "b1", qb), (b, qb, "b0", qa)):
        h.modify_qp(q, QPState.INIT)
        h.modify_qp(q, QPState.RTR, peer=peer, dest_qp_num=pq, rq_psn=0)
        h.modify_qp(q, QPState.RTS, sq_psn=0)
    return a, b, qa, qb


def idle(a: Host, b: Host, now: float, step: float) -> float:
    """Neither host had anything to send: jump to the earlier timer (at most ``step``
    ahead), run both hosts' timers, and return the new time."""
    t = min(x for x in (a.next_timer(), b.next_timer(), now + step) if x is not None)
    now = max(now, t)
    a.handle_timer(now)
    b.handle_timer(now)
    return now


def run(size: int, config: HostConfig, reorder: bool = False) -> dict[str, float]:
    """Transfer ``size`` bytes once; return packets/s of sender and receiver.
    ``reorder``: each burst the sender emits arrives shuffled (what spraying over paths
    of different delays does)."""
    a, b, qa, _ = pair(config)
    src, dst = bytearray(size), bytearray(size)
    ms, md = a.register_mr(src), b.register_mr(dst)
    a.post_write(qa, 1, ms, 0, size, md.addr, md.rkey)
    ta = tb = 0.0
    now = 0.0
    packets = 0
    cq = a.qp(qa).cq
    pc = time.perf_counter
    rng = random.Random(1)
    sacks = 0
    while not len(cq):
        now += 1e-6
        t0 = pc()
        out = a.frames_to_send(now)
        if reorder:
            rng.shuffle(out)
        t1 = pc()
        for port, f in out:
            b.receive(f, port, now)
        back = b.frames_to_send(now)
        t2 = pc()
        for port, f in back:
            a.receive(f, port, now)
        ta += t1 - t0 + pc() - t2
        tb += t2 - t1
        packets += len(out)
        sacks += len(back)
        if not out and not back:
            now = idle(a, b, now, 1e-5)
    assert dst == src
    return {"packets": packets, "sender_pps": packets / ta, "receiver_pps": packets / tb,
            "both_pps": packets / (ta + tb), "sacks_per_packet": sacks / packets}


def modes(mtu: int) -> dict[str, tuple[HostConfig, bool]]:
    """The configurations compared, by name: (config, reordered delivery)."""
    m = {name: (cfg, False) for name, cfg in {
        "templates+verify": HostConfig(mtu_payload=mtu),
        "templates+verify, parse_frame": HostConfig(mtu_payload=mtu, fast_parse=False),
        "templates, no verify": HostConfig(mtu_payload=mtu, verify_checksums=False),
        "build_data+verify": HostConfig(mtu_payload=mtu, use_templates=False),
    }.items()}
    m["reordered (sprayed)"] = (HostConfig(mtu_payload=mtu), True)
    m["reordered, sack_on_reorder"] = (HostConfig(mtu_payload=mtu, sack_on_reorder=True), True)
    return m


def main(argv: Sequence[str] | None = None) -> None:
    """Print packets/s per core for sender and receiver, with and without checks."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=32 << 20)
    ap.add_argument("--mtu", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds, best kept")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    for _ in range(args.rounds):
        for name, (cfg, reorder) in modes(args.mtu).items():
            r = run(args.size, cfg, reorder)
            best = results.setdefault(name, r)
            for k in ("sender_pps", "receiver_pps", "both_pps"):
                best[k] = max(best[k], r[k])
    if args.json:
        print(json.dumps(results))
        return
    print(f"{'mode':32} {'packets':>8} {'sender pkt/s':>14} {'receiver pkt/s':>15} "
          f"{'SACKs/pkt':>10}")
    for name, r in results.items():
        print(f"{name:32} {r['packets']:8.0f} {r['sender_pps']:14,.0f} "
              f"{r['receiver_pps']:15,.0f} {r['sacks_per_packet']:10.3f}")


if __name__ == "__main__":
    main()
