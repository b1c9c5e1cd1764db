"""The receive lane's completions written straight into a client's CQ ring (rxlane.h
``imm_cq``, docs/C-PASS.md step 1), with mrcd's delivery (mrcnet/daemon/delivery.py)
putting the rest behind them: whatever the lane writes itself and whatever takes the
Python path, a full ring included, the client reads every receive's completion once,
in the order the pure-Python responder completes them."""

from __future__ import annotations

import contextlib
import random
import socket
from typing import Any

import pytest

from mrcnet.api.shmclient import DOORBELL, CompletionRing
from mrcnet.core.cq import CompletionQueue
from mrcnet.core.events import WCOpcode, WCStatus
from mrcnet.core.recvq import CRecvQueue, RecvQueue, new_recvq
from mrcnet.core.rxlane import RX_IMM_COUNT_MASK, RX_IMM_WRITTEN_SHIFT
from mrcnet.daemon.delivery import Delivery
from mrcnet.daemon.rings import CompletionWriter
from mrcnet.native import HAVE_C, ffi

from .test_rximm import WRITES, _generate, _in_order, _replay, _setup
from .test_rxlane import _batches, feed

pytestmark = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")

Row = tuple[Any, ...]


class _Owner:
    """The session whose CQ it is: its queues' writer, its socket (``sock``: mrcd's end,
    or None), and the doorbells mrcd's Python rang for it."""

    def __init__(self, handle: int, writer: CompletionWriter,
                 sock: socket.socket | None = None) -> None:
        self.queues: Any = type("Q", (), {"cqs": {handle: writer}})()
        self.sock = sock
        self.rang = 0

    def ring(self) -> None:
        self.rang += 1


def _rows(client: CompletionRing) -> list[Row]:
    """What the client finds in its ring, then armed again (it would sleep next)."""
    data, _ = client.ring.take(client.nslots)
    client.ring.sleep()
    return [(WCStatus(st), wr_id, WCOpcode(op), n, imm)
            for st, wr_id, op, n, imm, _qpn in client.rows(data)]


def _through_delivery(batches: list[list[tuple[int, bytes]]], kw: dict[str, Any],
                      depth: int, take_every: int,
                      sock: socket.socket | None = None) -> dict[str, Any]:
    """Feed ``batches`` to a receiver whose receive CQ has a ring of ``depth`` slots,
    mrcd's delivery run after each batch; the client takes the ring every
    ``take_every`` batches (so that it fills up) and everything at the end. ``sock``:
    mrcd's end of the client's socket (the lane rings it), if any."""
    kw = {"completion_events": False, **kw}
    net, (_qa, qb, _ms, md, _back) = _setup(kw, WRITES)
    hb = net.h(1)
    resp = hb.qp(qb).resp
    cq = resp.rcq
    client = CompletionRing(depth)
    writer = CompletionWriter(client.fd, client.nslots)
    owner = _Owner(cq.handle, writer, sock)
    d = Delivery(log=None)
    d.add(cq.handle, cq, owner, writer)  # type: ignore[arg-type]
    takes: list[tuple[int, int]] = []  # (completed, written into the ring) per lane take
    done = resp.lane_completed

    def counting(rec: Any, taken: int, now: float) -> None:
        takes.append((taken & RX_IMM_COUNT_MASK,
                      taken >> RX_IMM_WRITTEN_SHIFT & RX_IMM_COUNT_MASK))
        done(rec, taken, now)

    resp.lane_completed = counting  # type: ignore[method-assign]
    got: list[Row] = []
    now = 1.0
    for b, batch in enumerate(batches):
        now += 7e-6
        feed(hb, batch, now, False)
        hb.frames_to_send(now)
        assert d.completions(hb) == []  # type: ignore[arg-type]
        if b % take_every == take_every - 1:
            got += _rows(client)
    while cq.entries or client.ring.ready():
        got += _rows(client)
        d.completions(hb)  # type: ignore[arg-type]
    return {"got": got, "takes": takes, "rang": owner.rang, "dst": bytes(md.view),
            "counters": hb.counters(), "bells": writer.bells,
            "lane_bells": d.lane_bells()}


def _reference(batches: list[list[tuple[int, bytes]]], kw: dict[str, Any]
               ) -> dict[str, Any]:
    ref = _replay("ref", batches, kw, WRITES)
    return {"got": [row for step in ref["steps"] for row in step[2]], "dst": ref["dst"],
            "counters": ref["counters"]}


@pytest.mark.parametrize("kw", [{}, {"ack_with_data": True}])
@pytest.mark.parametrize(("depth", "take_every"), [(64, 1), (16, 1), (16, 4)])
def test_in_order_the_client_reads_them_all_in_order(kw: dict[str, Any], depth: int,
                                                     take_every: int) -> None:
    frames = _generate(kw)
    batches = _in_order(frames, random.Random(3))
    res, ref = _through_delivery(batches, kw, depth, take_every), _reference(batches, kw)
    assert res["got"] == ref["got"]
    assert len(res["got"]) == WRITES
    assert res["dst"] == ref["dst"]
    assert res["rang"] > 0
    written = sum(w for _n, w in res["takes"])
    completed = sum(n for n, _w in res["takes"])
    assert completed == WRITES - 2  # (the first two take the Python path)
    if take_every == 1:
        assert written == completed  # room all along: the lane wrote every one itself
    else:  # the ring filled up: the lane stopped at it, the rest went behind, in order
        assert 0 < written < completed
        assert any(w < n for n, w in res["takes"])


def test_reordered_duplicated_trimmed_through_a_small_ring() -> None:
    """Traffic the lane handles only in part (out of order, duplicates, trims): the
    Python path's completions and the lane's interleave, in order, in a ring that
    fills up."""
    kw: dict[str, Any] = {"ack_with_data": True}
    frames = _generate(kw)
    written = python = 0
    for seed, reorder in ((1, 1), (2, 1), (3, 2), (4, 3), (5, 6)):
        batches = _batches(frames, random.Random(seed), reorder=reorder, dup=0.1,
                           trim_p=0.05)
        res, ref = _through_delivery(batches, kw, 16, 3), _reference(batches, kw)
        assert res["got"] == ref["got"], seed
        assert res["dst"] == ref["dst"], seed
        written += sum(w for _n, w in res["takes"])
        python += len(res["got"]) - sum(w for _n, w in res["takes"])
    assert written > 10 and python > 10  # (both paths, many times)


def test_the_lane_rings_the_doorbell_itself() -> None:
    """With the client's socket, the lane rings the doorbell itself as it publishes a
    completion that finds the client asleep (one byte per arming, as mrcd's delivery
    rings); mrcd's Python rings only for what it put there itself."""
    kw: dict[str, Any] = {"ack_with_data": True}
    frames = _generate(kw)
    batches = _in_order(frames, random.Random(3))
    mrcd_end, client_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with mrcd_end, client_end:
        res = _through_delivery(batches, kw, 64, 1, sock=mrcd_end)
        client_end.setblocking(False)
        got = []
        with contextlib.suppress(BlockingIOError):
            while True:
                got.append(client_end.recv(16))
    assert res["got"] == _reference(batches, kw)["got"]
    # the client armed its ring after each look: every batch the lane completed into
    # it rang once, from C; the first (the Python path's) from Python
    assert res["bells"] == len(got) == len(batches) - 1 > 10
    assert set(got) == {DOORBELL}
    assert res["rang"] == 1
    assert res["lane_bells"] == res["bells"]


def test_a_ring_let_go_of_gets_nothing_more() -> None:
    """The client's session ends while the lane still holds its ring (mrcd forgets the
    CQ and unmaps the ring; the QP's receives go on until the lane learns): the lane
    writes nothing more into the mapping, and what completes after is the CQ's, in
    order, none lost."""
    kw: dict[str, Any] = {"completion_events": False}
    frames = _generate(kw)
    batches = _in_order(frames, random.Random(3))
    net, (_qa, qb, _ms, _md, _back) = _setup(kw, WRITES)
    hb = net.h(1)
    cq = hb.qp(qb).resp.rcq
    client = CompletionRing(64)
    writer = CompletionWriter(client.fd, client.nslots)
    d = Delivery(log=None)
    d.add(cq.handle, cq, _Owner(cq.handle, writer), writer)  # type: ignore[arg-type]
    got: list[Row] = []
    now = 1.0
    half = len(batches) // 2
    for batch in batches[:half]:
        now += 7e-6
        feed(hb, batch, now, False)
        d.completions(hb)  # type: ignore[arg-type]
    got += _rows(client)
    in_ring = len(got)
    d.forget(cq.handle)  # (verbs.on_session_closed's order: the CQ, then the queues)
    writer.close()
    assert cq.ring_out is None and writer.c.base == ffi.NULL
    for batch in batches[half:]:
        now += 7e-6
        feed(hb, batch, now, False)
    got += [(c.status, c.wr_id, c.opcode, c.byte_len, c.imm) for c in cq.poll(100)]
    assert in_ring > 10
    assert got == _reference(batches, kw)["got"]


def test_a_moderated_cq_gets_nothing_from_the_lane() -> None:
    """While the CQ is moderated (modify_cq) the lane writes nothing into its ring: its
    completions wait in the CQ for their count or period, as every other's."""
    client = CompletionRing(16)
    writer = CompletionWriter(client.fd, client.nslots)
    cq = CompletionQueue(5)
    d = Delivery(log=None)
    d.add(5, cq, _Owner(5, writer), writer)  # type: ignore[arg-type]
    assert cq.ring_out is writer.c and writer.c.direct == 1
    d.moderate(5, 4, 0.01)
    assert writer.c.direct == 0
    d.moderate(5, 1, 0.0)
    assert writer.c.direct == 1 and 5 not in d.mod
    d.forget(5)
    assert cq.ring_out is None
    writer.close()  # (nothing is written after: the lane finds no mapping)
    assert writer.c.base == ffi.NULL and writer.c.direct == 0


def test_posted_receives_in_c_are_a_deque() -> None:
    """CRecvQueue against the deque it twins: appends, pops and clears across its
    growth and its ring's wrap, and the 64-bit range of a wr_id."""
    c, py = new_recvq(True), new_recvq(False)
    assert isinstance(c, CRecvQueue) and isinstance(py, RecvQueue)
    rng = random.Random(4)
    for step in range(3000):
        r = rng.random()
        if r < 0.55:
            v = rng.choice([0, (1 << 64) - 1, rng.getrandbits(64)])
            c.append(v)
            py.append(v)
        elif r < 0.98:
            assert bool(c) == bool(py)
            if py:
                assert c.popleft() == py.popleft()
            else:
                with pytest.raises(IndexError):
                    c.popleft()
        else:
            c.clear()
            py.clear()
        assert len(c) == len(py), step
    assert list(c) == list(py)
