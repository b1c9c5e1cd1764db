"""Integrity: random writes arrive byte-exact under loss, reordering, duplication and
trimming, and every completion fires exactly once (hypothesis-driven)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrcnet.core import Host, HostConfig, WCOpcode, WCStatus

from .harness import Impairments, Net, connect

_MAX_TOTAL = 2 << 20


def _transfer(sizes: list[int], imms: list[bool], imp: Impairments, seed: int,
              psn: int, bidirectional: bool = False, max_time: float = 30.0) -> Net:
    net = Net(imp=imp, seed=seed)
    qa, qb = connect(net, 0, 1, psn_a=psn, psn_b=(psn * 7) & 0xFFFFFF, recvs=len(sizes))
    pairs = [(net.h(0), qa, net.h(1), qb)]
    if bidirectional:
        pairs.append((net.h(1), qb, net.h(0), qa))
    total = sum(sizes)
    checks = []
    for src_h, sq, dst_h, _dq in pairs:
        src = bytearray(random.Random(seed).randbytes(total))
        dst = bytearray(total + 16)
        ms, md = src_h.register_mr(src), dst_h.register_mr(dst)
        off = 0
        for i, (n, imm) in enumerate(zip(sizes, imms, strict=True)):
            src_h.post_write(sq, i, ms, off, n, md.addr + off, md.rkey,
                             imm=(i * 1000 + 7) if imm else None)
            off += n
        checks.append((src, dst))

    def writes_done(h: Host, q: int) -> int:
        return sum(c.opcode is WCOpcode.RDMA_WRITE for c in h.qp(q).cq.peek())

    def done() -> bool:
        return all(writes_done(h, q) >= len(sizes) for h, q, _, _ in pairs)


    net.run(until=done, max_time=max_time)
    net.run(max_time=net.now + 0.01)  # linger: nothing may complete twice
    allc = {(h.name, q): h.qp(q).cq.peek() for h in net.hosts.values()
            for q in (qa, qb) if q in h._qps}
    for (src_h, sq, dst_h, dq), (src, dst) in zip(pairs, checks, strict=True):
        comps = [c for c in allc[(src_h.name, sq)] if c.opcode is WCOpcode.RDMA_WRITE]
        assert [c.wr_id for c in comps] == list(range(len(sizes)))
        assert all(c.status is WCStatus.SUCCESS for c in comps), comps
        assert [c.byte_len for c in comps] == sizes
        assert dst[:total] == src and dst[total:] == bytes(16)
        recv = [c for c in allc[(dst_h.name, dq)] if c.opcode is WCOpcode.RECV_RDMA_WITH_IMM]
        want = [(i * 1000 + 7, 0) for i, imm in enumerate(imms) if imm]
        # each immediate exactly once, in order; byte_len = bytes since the last message
        assert [(c.imm, 0) for c in recv] == want
        ends = [i for i, imm in enumerate(imms) if imm]
        assert all(c.status is WCStatus.SUCCESS for c in recv)
        for c, e in zip(recv, ends, strict=True):
            assert c.byte_len == sizes[e]
    assert net.internal_errors() == 0
    return net


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    writes=st.lists(
        st.tuples(st.integers(1, 400_000), st.booleans()), min_size=1, max_size=12
    ).filter(lambda w: sum(n for n, _ in w) <= _MAX_TOTAL),
    loss=st.sampled_from([0.0, 0.01, 0.05, 0.1]),
    dup=st.sampled_from([0.0, 0.02, 0.05]),
    trim=st.sampled_from([0.0, 0.02, 0.05]),
    jitter=st.sampled_from([0.0, 5e-6, 30e-6, 100e-6]),
    seed=st.integers(0, 2**16),
    psn=st.sampled_from([0, 1, (1 << 24) - 3, 123456]),
)
def test_random_writes_are_byte_exact_and_complete_once(
    writes: list[tuple[int, bool]], loss: float, dup: float, trim: float, jitter: float,
    seed: int, psn: int,
) -> None:
    sizes = [n for n, _ in writes]
    imms = [i for _, i in writes]
    imp = Impairments(loss=loss, dup=dup, trim=trim, jitter=jitter)
    _transfer(sizes, imms, imp, seed, psn, bidirectional=seed % 2 == 0)


@pytest.mark.parametrize(("loss", "seed"), [(0.0, 1), (0.05, 2), (0.1, 3)])
def test_16_mib_write(loss: float, seed: int) -> None:
    imp = Impairments(loss=loss, dup=0.02, trim=0.02, jitter=10e-6)
    _transfer([16 << 20], [True], imp, seed, (1 << 24) - 100)


def test_sizes_around_the_mtu() -> None:
    mtu = HostConfig().mtu_payload
    sizes = [1, mtu - 1, mtu, mtu + 1, 2 * mtu, 2 * mtu + 1, 3]
    _transfer(sizes, [i % 2 == 0 for i in range(len(sizes))],
              Impairments(loss=0.05, jitter=20e-6, trim=0.05), 9, 0)
