"""Selective signalling in mrcd (mrcnet/daemon/signalling.py: verbs' ``sq_sig_all``
false and ``IBV_SEND_SIGNALED``), on the core's virtual clock: send-queue slots with and
without :data:`~mrcnet.api.shmqueues.F_UNSIGNALED` go through mrcd's real posting code
(the C slot scan and the row loop) into a real core, two hosts exchange the frames, and
the CQ is what the client's ring would get: a successful write posted unsignalled leaves
no completion, a signalled one after it completes (and the earlier ones have retired by
then), an unsignalled write that fails completes with its error, receives always
complete, and a QP created with every write signalled ignores the flag."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mrcnet.api.shmqueues import F_IMM, F_UNSIGNALED, OP_WRITE, WORK_REQUEST_SLOT
from mrcnet.core import HostConfig
from mrcnet.core.events import WCOpcode, WCStatus
from mrcnet.daemon.posts import Posts
from mrcnet.daemon.signalling import Signalling
from mrcnet.native import HAVE_C

from .harness import Net, connect, write_regions
from .posts_fakes import FakeEngine, OutboxSession

#: The slot scan is C; without it only the row loop runs.
PATHS = [pytest.param(True, id="scan", marks=pytest.mark.skipif(not HAVE_C, reason="C")),
         pytest.param(False, id="rows")]


class _Lab:
    """Host 0's QP ``qa`` (its client's posts go through :class:`Posts`) connected to
    host 1's ``qb``; ``selective``: ``qa`` was created with ``sq_sig_all`` false."""

    def __init__(self, native: bool, selective: bool = True, seed: int = 1) -> None:
        self.net = net = Net(seed=seed, config=HostConfig(mtu_payload=1024))
        self.qa, self.qb = connect(net, 0, 1, recvs=64)
        rng = random.Random(seed)
        self.dst, _, self.src, self.dst_mr, _ = write_regions(net, rng)
        self.host = host = net.h(0)
        self.cq = host.qp(self.qa).cq
        self.sig = Signalling()
        if selective:
            self.sig.add_qp(self.qa, self.cq)
        self.s = OutboxSession(None, None, 1)  # type: ignore[arg-type]
        self.s.mrs = {self.src.lkey: self.src}
        self.s.qps = {self.qa}
        engine: Any = FakeEngine(host)
        self.posts = Posts(engine, {self.qa: self.s}, native=native, signalling=self.sig)
        self.native = native

    def slot(self, wr_id: int, offset: int, length: int, *, signaled: bool,
             imm: int | None = None, rkey: int | None = None) -> bytes:
        flags = (0 if signaled else F_UNSIGNALED) | (0 if imm is None else F_IMM)
        return WORK_REQUEST_SLOT.pack(OP_WRITE, flags, self.qa, wr_id, self.src.lkey,
                                      length, self.src.addr + offset,
                                      self.dst_mr.addr + offset,
                                      self.dst_mr.rkey if rkey is None else rkey,
                                      imm or 0)

    def post(self, slots: list[bytes]) -> None:
        """One doorbell's slots, as mrcd takes them."""
        data = b"".join(slots)
        if self.native:
            self.posts._post_slots(self.s, data)
        else:
            self.posts._post_rows(self.s, list(WORK_REQUEST_SLOT.iter_unpack(data)))

    def settle(self, seconds: float = 0.05) -> None:
        """Run the virtual clock until nothing is left to happen (or ``seconds``)."""
        self.net.run(max_time=self.net.now + seconds)

    def completions(self) -> list[tuple[Any, ...]]:
        return [(c.status, c.wr_id, c.opcode) for c in self.cq.poll(1 << 16)]


@pytest.mark.parametrize("native", PATHS)
def test_only_signalled_writes_complete_and_retire_the_unsignalled_before_them(
        native: bool) -> None:
    lab = _Lab(native)
    n = 40  # (one doorbell of 40: the scan's path; the row loop takes it as well)
    signalled = {9, 19, 29, n - 1}
    lab.post([lab.slot(i, i * 512, 512, signaled=i in signalled,
                       imm=i if i % 7 == 0 else None) for i in range(n)])
    assert [f & F_UNSIGNALED for f in lab.sig.flags[lab.qa]] == [
        0 if i in signalled else F_UNSIGNALED for i in range(n)]
    lab.settle()
    ok, write = WCStatus.SUCCESS, WCOpcode.RDMA_WRITE
    assert lab.completions() == [(ok, i, write) for i in sorted(signalled)]
    assert lab.dst[:n * 512] == bytes(lab.src.view[:n * 512])
    assert not lab.sig.flags[lab.qa]  # every write retired, in order
    assert lab.host.qp(lab.qa).snd.imm_outstanding == 0
    # The peer's receives for the immediates complete as always.
    got = [c.wr_id for c in lab.net.h(1).qp(lab.qb).rcq.poll(64)]
    assert len(got) == len([i for i in range(n) if i % 7 == 0])


@pytest.mark.parametrize("native", PATHS)
def test_an_unsignalled_write_that_fails_completes_with_its_error(native: bool) -> None:
    lab = _Lab(native)
    lab.post([lab.slot(i, 0, 64, signaled=False) for i in range(5)]
             + [lab.slot(5, 0, 64, signaled=True)])
    lab.settle()
    assert [c[1] for c in lab.completions()] == [5]
    lab.post([lab.slot(77, 0, 64, signaled=False, rkey=lab.dst_mr.rkey ^ 0x5A5A)])
    lab.settle()
    got = lab.completions()
    assert [c for c in got if c[2] is WCOpcode.RDMA_WRITE] == [
        (WCStatus.REM_ACCESS_ERR, 77, WCOpcode.RDMA_WRITE)]
    # (the QP failed: its posted receives are flushed, with their errors, as always)
    assert {c[0] for c in got if c[2] is not WCOpcode.RDMA_WRITE} == {WCStatus.WR_FLUSH_ERR}


def test_receives_on_a_selective_qps_cq_always_complete() -> None:
    """The CQ of a QP that signals selectively also takes its receives: host 1 writes
    with immediates into host 0, every receive completes on host 0."""
    lab = _Lab(False)
    h1 = lab.net.h(1)
    buf = bytearray(4096)
    mr0 = lab.host.register_mr(buf)
    src1 = h1.register_mr(bytearray(b"x" * 4096))
    for i in range(3):
        h1.post_write(lab.qb, 100 + i, src1, 0, 16, mr0.addr, mr0.rkey, imm=i)
    lab.settle()
    got = lab.completions()
    assert [(c[0], c[2]) for c in got] == [(WCStatus.SUCCESS,
                                            WCOpcode.RECV_RDMA_WITH_IMM)] * 3
    assert bytes(buf[:16]) == b"x" * 16


@pytest.mark.parametrize("native", PATHS)
def test_a_qp_made_with_every_write_signalled_ignores_the_flag(native: bool) -> None:
    lab = _Lab(native, selective=False)
    lab.post([lab.slot(i, i * 64, 64, signaled=False) for i in range(20)])
    lab.settle()
    assert [c[1] for c in lab.completions()] == list(range(20))
    assert lab.qa not in lab.sig.flags


def test_a_reset_or_destroyed_qp_forgets_its_flags() -> None:
    sig = Signalling()
    lab = _Lab(False)
    sig.add_qp(lab.qa, lab.cq)
    sig.posted(lab.qa, [F_UNSIGNALED, 0])
    sig.reset(lab.qa)
    assert not sig.flags[lab.qa]
    sig.forget(lab.qa)
    assert lab.qa not in sig.flags
    sig.posted(lab.qa, [F_UNSIGNALED])  # (a QP no longer known: nothing kept)
    assert lab.qa not in sig.flags
