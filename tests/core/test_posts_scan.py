"""mrcd reads a doorbell's slots in C (:class:`mrcnet.daemon.posts.SlotScan`): the same
work requests reach the core, in the same order and groups, and the same posts are
refused with the same errors, as the row-by-row reference (``Posts(native=False)``),
over doorbells that mix writes of two QPs and two regions, immediates, receives, slots
out of a region's bounds, unknown keys, another client's QP and unknown opcodes."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mrcnet.api.shmqueues import F_IMM, OP_RECV, OP_WRITE, WORK_REQUEST_SLOT
from mrcnet.core import HostConfig
from mrcnet.daemon.posts import Posts
from mrcnet.native import HAVE_C

from .harness import Net, connect
from .posts_fakes import FakeEngine, OutboxSession

pytestmark = pytest.mark.skipif(not HAVE_C, reason="the slot scan is C")


def _slots(rng: random.Random, qps: list[int], other_qp: int, mrs: list[Any]) -> bytes:
    """A doorbell of 1-300 slots, mostly writes that pass, runs of one QP and region."""
    out = []
    qpn, mr = rng.choice(qps), rng.choice(mrs)
    for _ in range(rng.randint(1, 300)):
        if rng.random() < 0.1:
            qpn, mr = rng.choice(qps), rng.choice(mrs)
        op, flags, lkey = OP_WRITE, 0, mr.lkey
        length = rng.choice([0, 1, 64, 64, 64, 700, 3000])
        addr = mr.addr + rng.randrange(0, mr.length - length + 1)
        q, imm = qpn, rng.getrandbits(32)
        r = rng.random()
        if r < 0.02:
            addr = mr.addr + mr.length - length + rng.randint(1, 5)  # past the end
        elif r < 0.03:
            addr = mr.addr - rng.randint(1, 5)  # before the start
        elif r < 0.04:
            lkey ^= 0x5A5A  # no such region
        elif r < 0.05:
            q = other_qp  # another client's QP
        elif r < 0.07:
            op = OP_RECV
        elif r < 0.075:
            op = 7  # unknown opcode
        elif r < 0.075 + 0.001:
            length = 0xFFFFFFFF  # huge
        if rng.random() < 0.1:
            flags = F_IMM
        out.append(WORK_REQUEST_SLOT.pack(op, flags, q, rng.getrandbits(64), lkey, length,
                                          addr & (1 << 64) - 1, rng.getrandbits(64),
                                          rng.getrandbits(32), imm))
    return b"".join(out)


def _run(native: bool, seed: int) -> tuple[list[Any], list[Any], list[Any]]:
    """Post a few doorbells; returns (what each of the two QPs' send queues holds, every
    post_writes call's group (qpn, count), the pushes to the client)."""
    net = Net(seed=seed, config=HostConfig(mtu_payload=1024))
    qa, _ = connect(net, 0, 1, recvs=0)
    qb, _ = connect(net, 0, 1, recvs=0)
    qc, _ = connect(net, 0, 1, recvs=0)
    host = net.h(0)
    s = OutboxSession(None, None, 1)  # type: ignore[arg-type]
    bufs = [bytearray(1 << 16), bytearray(5000)]
    regs = [host.register_mr(buf) for buf in bufs]
    s.mrs = {m.lkey: m for m in regs}
    s.qps = {qa, qb}
    other = OutboxSession(None, None, 2)  # type: ignore[arg-type]
    owners = {qa: s, qb: s, qc: other}
    posts = Posts(FakeEngine(host), owners, native=native)  # type: ignore[arg-type]
    groups: list[Any] = []
    post_writes = host.post_writes

    def recording(qpn: int, mr: Any, writes: Any, checked: bool = False) -> None:
        groups.append((qpn, len(writes)))
        post_writes(qpn, mr, writes, checked=checked)

    host.post_writes = recording  # type: ignore[method-assign]
    rng = random.Random(seed)
    for _ in range(6):
        data = _slots(rng, [qa, qb], qc, regs)
        if native:
            posts._post_slots(s, data)
        else:
            posts._post_rows(s, list(WORK_REQUEST_SLOT.iter_unpack(data)))
    queued = [[(w.wr_id, w.offset, w.length, w.remote_addr, w.rkey, w.imm, w.npkts,
                w.view.obj is bufs[0]) for w in host.qp(q).snd.sq] for q in (qa, qb)]
    pushes = list(s.outbox)
    return queued, groups, pushes


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_slot_scan_posts_what_the_row_loop_posts(seed: int) -> None:
    queued, groups, pushes = _run(True, seed)
    queued0, groups0, pushes0 = _run(False, seed)
    assert sum(map(len, queued)) > 300  # (most were posted)
    assert len(pushes) > 5  # (and some refused)
    assert queued == queued0
    assert groups == groups0
    assert pushes == pushes0
