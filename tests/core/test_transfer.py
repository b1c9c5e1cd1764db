"""End-to-end transfers between two Hosts through the in-memory pipe."""

from __future__ import annotations

import os
from typing import Any

from mrcnet.core import ImmediateReceived, WCOpcode, WCStatus, WriteCompleted

from .harness import Net, connect


def _setup(net: Net, size: int, recvs: int = 8, **kw: Any) -> tuple[Any, ...]:
    qa, qb = connect(net, 0, 1, recvs=recvs, **kw)
    ha, hb = net.h(0), net.h(1)
    src = bytearray(os.urandom(size))
    dst = bytearray(size)
    return qa, qb, ha, hb, src, dst, ha.register_mr(src), hb.register_mr(dst)


def test_lossless_write_with_immediate_across_psn_wrap() -> None:
    net = Net()
    qa, qb, ha, hb, src, dst, ms, md = _setup(net, 100_000, psn_a=(1 << 24) - 5)
    ha.post_write(qa, 7, ms, 0, len(src), md.addr, md.rkey, imm=42)
    net.run(until=lambda: len(ha.qp(qa).cq) > 0, max_time=1.0)
    assert dst == src
    (c,) = ha.poll_cq(ha.qp(qa).cq, 10)
    assert (c.status, c.wr_id, c.byte_len, c.opcode) == (
        WCStatus.SUCCESS, 7, 100_000, WCOpcode.RDMA_WRITE)
    (r,) = hb.poll_cq(hb.qp(qb).cq, 10)
    assert (r.status, r.imm, r.byte_len, r.opcode) == (
        WCStatus.SUCCESS, 42, 100_000, WCOpcode.RECV_RDMA_WITH_IMM)
    assert r.wr_id == 10_000
    assert ha.next_event() == WriteCompleted(qa, 7, 100_000)
    assert hb.next_event() == ImmediateReceived(qb, 10_000, 42, 100_000)
    assert net.internal_errors() == 0
    # 25 packets of 4096 bytes (the last one shorter), every one with its own RETH
    assert hb.counters()["rx_data"] == 25


def test_zero_and_one_byte_writes_complete_in_order() -> None:
    net = Net()
    qa, qb, ha, hb, src, dst, ms, md = _setup(net, 16)
    ha.post_write(qa, 1, ms, 0, 0, md.addr, md.rkey)
    ha.post_write(qa, 2, ms, 3, 1, md.addr + 3, md.rkey)
    ha.post_write(qa, 3, ms, 5, 1, md.addr + 5, md.rkey, imm=9)
    net.run(until=lambda: len(ha.qp(qa).cq) >= 3, max_time=1.0)
    assert [c.wr_id for c in ha.poll_cq(ha.qp(qa).cq, 10)] == [1, 2, 3]
    assert dst[3] == src[3] and dst[5] == src[5]
    assert dst[:3] == bytes(3) and dst[4] == 0
    (r,) = hb.poll_cq(hb.qp(qb).cq, 10)
    assert (r.imm, r.byte_len) == (9, 1)


def test_all_to_all_many_qps_lossy() -> None:
    from .harness import Impairments

    net = Net(n_hosts=4, planes=2, spines=4, seed=3,
              imp=Impairments(loss=0.02, dup=0.02, trim=0.05, jitter=10e-6))
    jobs = []
    for a in range(4):
        for b in range(4):
            if a == b:
                continue
            qa, _qb = connect(net, a, b, recvs=1)
            ha, hb = net.h(a), net.h(b)
            size = 20_000 + 7919 * (a * 4 + b)
            src = bytearray(os.urandom(size))
            dst = bytearray(size)
            ms, md = ha.register_mr(src), hb.register_mr(dst)
            ha.post_write(qa, a * 10 + b, ms, 0, size, md.addr, md.rkey, imm=a * 10 + b)
            jobs.append((ha, qa, src, dst))
    net.run(until=lambda: all(len(h.qp(q).cq) for h, q, _, _ in jobs), max_time=5.0)
    for h, q, src, dst in jobs:
        (c,) = [c for c in h.poll_cq(h.qp(q).cq, 10) if c.opcode is WCOpcode.RDMA_WRITE]
        assert c.status is WCStatus.SUCCESS
        assert dst == src
    assert net.internal_errors() == 0


def test_separate_receive_cq() -> None:
    from mrcnet.core import QPState

    net = Net()
    ha, hb = net.h(0), net.h(1)
    qa = ha.create_qp(ha.create_cq())
    scq, rcq = hb.create_cq(), hb.create_cq()
    qb = hb.create_qp(scq, recv_cq=rcq)
    for h, q, peer, other in ((ha, qa, "h1", qb), (hb, qb, "h0", qa)):
        h.modify_qp(q, QPState.INIT)
        h.modify_qp(q, QPState.RTR, peer=peer, dest_qp_num=other, rq_psn=0)
        h.modify_qp(q, QPState.RTS, sq_psn=0)
    hb.post_recv(qb, 77)
    ms, md = ha.register_mr(bytearray(10)), hb.register_mr(bytearray(10))
    ha.post_write(qa, 1, ms, 0, 10, md.addr, md.rkey, imm=3)
    net.run(until=lambda: len(rcq) > 0, max_time=1.0)
    assert len(scq) == 0
    (c,) = hb.poll_cq(rcq, 4)
    assert (c.wr_id, c.imm, c.opcode) == (77, 3, WCOpcode.RECV_RDMA_WITH_IMM)


def test_immediate_sequence_numbers_wrap() -> None:
    net = Net()
    qa, qb = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    start = (1 << 24) - 2  # MSNs are 24 bits on the wire
    ha.qp(qa).next_msn = start
    rq = hb.qp(qb)
    rq.imm_done = start
    rq.recv_posted = start
    for i in range(5):
        hb.post_recv(qb, 500 + i)
    ms, md = ha.register_mr(bytearray(5)), hb.register_mr(bytearray(5))
    net.run(max_time=1e-4)
    for i in range(5):
        ha.post_write(qa, i, ms, i, 1, md.addr + i, md.rkey, imm=100 + i)
    net.run(until=lambda: len(ha.qp(qa).cq) >= 5, max_time=1.0)
    assert [c.status for c in ha.poll_cq(ha.qp(qa).cq, 10)] == [WCStatus.SUCCESS] * 5
    got = hb.poll_cq(rq.cq, 10)
    assert [(c.wr_id, c.imm) for c in got] == [(500 + i, 100 + i) for i in range(5)]
    assert hb.counters().get("rx_msn_mismatch", 0) == 0
    assert rq.imm_done == start + 5
