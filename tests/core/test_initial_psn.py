"""Any initial PSN works, on either side, including next to the 24-bit wrap, with loss,
duplicates and trims: mrcd draws each QP's at random at connect (a window that cannot be
guessed from the QP number), the simulator from its seed."""

from __future__ import annotations

import os
import random

import pytest

from mrcnet.constants import PSN_MASK
from mrcnet.core import WCStatus

from .harness import Impairments, Net, connect

_R = random.Random(13)
START = [0, 1, PSN_MASK, PSN_MASK - 1, PSN_MASK - 40, (1 << 23) - 3, (1 << 23) + 5,
         *(_R.randrange(PSN_MASK + 1) for _ in range(3))]


@pytest.mark.parametrize("psn_a", START)
def test_transfers_both_ways_complete_from_any_initial_psn(psn_a: int) -> None:
    psn_b = (psn_a * 7 + 12345) & PSN_MASK
    net = Net(seed=psn_a & 0xFF, imp=Impairments(loss=0.01, dup=0.01, trim=0.02,
                                                 jitter=5e-6))
    qa, qb = connect(net, 0, 1, psn_a=psn_a, psn_b=psn_b, recvs=2)
    ha, hb = net.h(0), net.h(1)
    size = 600_000  # ~150 packets: both sides cross the wrap when they start near it
    a_src, b_src = bytearray(os.urandom(size)), bytearray(os.urandom(size))
    a_dst, b_dst = bytearray(size), bytearray(size)
    ma_s, ma_d = ha.register_mr(a_src), ha.register_mr(a_dst)
    mb_s, mb_d = hb.register_mr(b_src), hb.register_mr(b_dst)
    ha.post_write(qa, 1, ma_s, 0, size, mb_d.addr, mb_d.rkey, imm=5)
    hb.post_write(qb, 2, mb_s, 0, size, ma_d.addr, ma_d.rkey, imm=6)
    cqa, cqb = ha.qp(qa).cq, hb.qp(qb).cq
    net.run(until=lambda: len(cqa) >= 2 and len(cqb) >= 2, max_time=10.0)
    assert b_dst == a_src and a_dst == b_src
    got = ha.poll_cq(cqa, 8) + hb.poll_cq(cqb, 8)
    assert len(got) == 4 and all(c.status is WCStatus.SUCCESS for c in got)
    assert net.internal_errors() == 0
    assert (ha.qp(qa).next_seq - psn_a) & PSN_MASK == (hb.qp(qb).rcv_nxt - psn_a) & PSN_MASK

