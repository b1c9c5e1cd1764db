"""When mrcd rings a client for its completions (mrcnet.api.shmclient), through two real
mrcds on a veth pair: a client waited on only through the library arms its rings just
before it sleeps, so a completion that comes while it runs costs no doorbell; once its
fd was asked for (``Context.fileno()``), its rings stay armed after every look, so a
``select`` on that fd never sleeps through a completion."""

from __future__ import annotations

import select
import struct
import time

import pytest
from mdnsutil import MrcdPair, needs_root

from mrcnet.api import Context
from mrcnet.api.client import CompletionQueue, MemoryRegion, QueuePair, WorkCompletion
from mrcnet.api.shmring import PRECISE

pytestmark = [needs_root, pytest.mark.skipif(not PRECISE, reason="the rings need C")]

WAIT_MAX = 5.0  # s: no select may sleep this long while a completion is on its way


def _connect(ca: Context, cb: Context, service: int) -> tuple[
        MemoryRegion, CompletionQueue, QueuePair, MemoryRegion, CompletionQueue, QueuePair]:
    mr_b, cq_b = cb.alloc_mr(4096), cb.create_cq()
    qp_b = cb.create_qp(cq_b)
    cb.listen(service, qp_b, expose=[mr_b])
    mr_a, cq_a = ca.alloc_mr(4096), ca.create_cq()
    qp_a = ca.create_qp(cq_a)
    qp_a.connect("hb", service, expose=[mr_a])
    qp_b.accept(timeout=10)
    return mr_a, cq_a, qp_a, mr_b, cq_b, qp_b


def _doorbells(ctx: Context) -> int:
    return int(ctx.stats()["doorbells"])


def _send_completion_while_running(outside: bool, mrcd_pair: MrcdPair) -> tuple[int, int]:
    """A write's completion that comes while its client does not wait (it sleeps in
    time.sleep, as an application at work): the doorbells mrcd rang for it, and the
    completions a poll then finds."""
    with Context(mrcd_pair.a.socket) as ca, Context(mrcd_pair.b.socket) as cb:
        mr_a, cq_a, qp_a, _mr_b, cq_b, qp_b = _connect(ca, cb, 31)
        assert qp_a.peer is not None
        qp_b.post_recv(wr_id=5)
        if outside:
            ca.fileno()  # (as a select on it would)
        before = _doorbells(ca)  # (and the client has looked: its rings as it leaves them)
        qp_a.post_write(mr_a, 0, 8, qp_a.peer.regions[0], imm=1, wr_id=9)
        deadline = time.monotonic() + WAIT_MAX
        got = cq_b.wait(timeout=WAIT_MAX)  # the write arrived ...
        assert [w.wr_id for w in got] == [5]
        time.sleep(0.3)  # ... and its ACK (held at most ack_delay) while ca runs
        rang = _doorbells(ca) - before
        wcs: list[WorkCompletion] = []
        while not wcs and time.monotonic() < deadline:
            wcs = cq_a.poll()
        assert [(w.wr_id, w.ok) for w in wcs] == [(9, True)]
        return rang, len(wcs)


def test_a_completion_while_the_client_runs_rings_nothing(mrcd_pair: MrcdPair) -> None:
    """Waited on only through the library: the rings are disarmed after each look, so
    the write's completion lands without a doorbell, and a poll finds it."""
    rang, n = _send_completion_while_running(False, mrcd_pair)
    assert (rang, n) == (0, 1)


def test_a_completion_while_the_client_runs_rings_for_a_waiter_on_its_fd(
        mrcd_pair: MrcdPair) -> None:
    """Once the context's fd was asked for, the rings are armed after each look: the
    same completion rings once (a select on the fd would wake)."""
    rang, n = _send_completion_while_running(True, mrcd_pair)
    assert (rang, n) == (1, 1)


def test_a_completion_before_the_first_fileno_wakes_the_select(mrcd_pair: MrcdPair) -> None:
    """The fd asked for the first time after a look (a select right after a poll): a
    completion published between the two found the rings disarmed, so no doorbell
    announces it; the first ``fileno()`` finds it and has mrcd ring, and the select
    wakes (it slept its whole timeout before: the intermittent lost wake-up of the
    ping-pong below, on its first round trip)."""
    with Context(mrcd_pair.a.socket, busy_poll_us=0) as ca, \
            Context(mrcd_pair.b.socket, busy_poll_us=0) as cb:
        mr_a, _cq_a, qp_a, _mr_b, cq_b, qp_b = _connect(ca, cb, 33)
        assert qp_a.peer is not None
        qp_b.post_recv(wr_id=5)
        qp_a.post_write(mr_a, 0, 8, qp_a.peer.regions[0], imm=1)
        assert cq_b.poll() == []  # (a look before the write landed: the rings disarmed)
        deadline = time.monotonic() + WAIT_MAX
        while not cq_b.ctx._q.cqs[cq_b.handle].ring.ready():  # (the write lands)
            assert time.monotonic() < deadline
            time.sleep(0.001)
        r, _, _ = select.select([cb], [], [], WAIT_MAX)
        assert r, "a select slept through a completion published before the first fileno()"
        assert [w.wr_id for w in cq_b.poll()] == [5]


def test_ping_pong_with_select_on_fileno(mrcd_pair: MrcdPair) -> None:
    """Both applications wait with a bare ``select`` on ``ctx.fileno()`` and poll their
    CQ when it is readable (as an event loop would): 200 round trips, every select
    woken in time, every payload in place."""
    with Context(mrcd_pair.a.socket, busy_poll_us=0) as ca, \
            Context(mrcd_pair.b.socket, busy_poll_us=0) as cb:
        mr_a, cq_a, qp_a, mr_b, cq_b, qp_b = _connect(ca, cb, 32)
        assert qp_a.peer is not None and qp_b.peer is not None
        for i in range(4):
            qp_a.post_recv(wr_id=i)
            qp_b.post_recv(wr_id=i)

        def recv_on(ctx: Context, cq: CompletionQueue) -> WorkCompletion:
            while True:
                for w in cq.poll():
                    if w.opcode == "RECV_RDMA_WITH_IMM":
                        return w
                r, _, _ = select.select([ctx], [], [], WAIT_MAX)
                assert r, "asleep on the fd with a completion on its way"

        for i in range(200):
            payload = struct.pack("<Q", i)
            mr_a.buf[:8] = payload
            qp_a.post_write(mr_a, 0, 8, qp_a.peer.regions[0], imm=i)
            w = recv_on(cb, cq_b)
            assert w.imm == i and bytes(mr_b.buf[:8]) == payload
            qp_b.post_recv(wr_id=w.wr_id)
            qp_b.post_write(mr_b, 0, 8, qp_b.peer.regions[0], imm=i)
            w = recv_on(ca, cq_a)
            assert w.imm == i and bytes(mr_a.buf[:8]) == payload
            qp_a.post_recv(wr_id=w.wr_id)
