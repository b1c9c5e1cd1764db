"""The C receive lane's write-with-immediate (rxlane.h MRC_RX_IMM: a WRITE_ONLY_IMM in
order, a receive posted for it) against the pure-Python responder, frame by frame: the
same frames sent, memory written, completions (wr_id, bytes, immediate, in order),
counters and responder state (credit, MSN, held-ACK state), record by record, for
traffic in order, reordered, with duplicates and retransmissions, with the receive
credit running out (and posted again), without any posted receive, and with the
receiver answering (ack_with_data's ping-pong: the ACK held for the answer)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mrcnet.api.shmclient import CompletionRing
from mrcnet.core import HostConfig, receive
from mrcnet.core.events import WCOpcode, WCStatus
from mrcnet.core.rxlane import RX_DONE, RX_IMM, RX_IMM_COUNT_MASK, RX_POS_SHIFT
from mrcnet.daemon.rings import CompletionWriter
from mrcnet.native import HAVE_C
from mrcnet.wire.parsed import py_parse

from .harness import Impairments, Net, connect
from .test_hotpath_batch import BatchNet
from .test_rxlane import _batches, feed

pytestmark = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")

SIZE = 64  # bytes per write: one packet each
WRITES = 48
_OP_WRITE_ONLY_IMM = 0xCB


def _config(**kw: Any) -> HostConfig:
    return HostConfig(**{"ack_every": 8, **kw})


def _setup(kw: dict[str, Any], recvs: int, seed: int = 1,
           imp: Impairments | None = None) -> tuple[Net, Any]:
    net = Net(n_hosts=2, planes=2, spines=2, config=_config(**kw), imp=imp, seed=seed)
    qa, qb = connect(net, 0, 1, recvs=recvs)
    ha, hb = net.h(0), net.h(1)
    src = bytearray(random.Random(7).randbytes(SIZE * WRITES))
    ms, md = ha.register_mr(src), hb.register_mr(bytearray(SIZE * WRITES))
    back = hb.register_mr(bytearray(random.Random(8).randbytes(SIZE)))  # the answers'
    return net, (qa, qb, ms, md, back)


def _generate(kw: dict[str, Any], loss: float = 0.0) -> list[tuple[int, bytes]]:
    """The data frames h0 sends for WRITES single-packet writes with an immediate (with
    ``loss``, its retransmissions too), as sent."""
    imp = Impairments(loss=loss) if loss else None
    net, (qa, _qb, ms, md, _back) = _setup(kw, recvs=WRITES, imp=imp)
    net.log_tx = True
    ha = net.h(0)
    for k in range(WRITES):
        ha.post_write(qa, k, ms, k * SIZE, SIZE, md.addr + k * SIZE, md.rkey, imm=1000 + k)
    net.run(until=lambda: len(ha.qp(qa).cq) >= WRITES, max_time=5.0)
    assert len(ha.qp(qa).cq) >= WRITES
    frames = [(p, bytes(f)) for _, s, p, f in net.tx_log if s == "h0"]
    return [(p, f) for p, f in frames if py_parse(f, False).is_data]


def _replay(mode: str, batches: list[list[tuple[int, bytes]]], kw: dict[str, Any],
            recvs: int, answer_every: int = 0, post_at: int | None = None
            ) -> dict[str, Any]:
    """Feed ``batches`` to a fresh receiver (``mode`` "c": the C lane; "ring": the C
    lane with a client's ring for the receive CQ, as mrcd gives it; "ref": frame by
    frame through the Python responder) and record everything it does, after each
    batch (the completions: those the lane wrote into the ring, then the CQ's).
    ``answer_every``: the receiver writes back after every so many batches (a
    ping-pong); ``post_at``: before that batch, WRITES more receives are posted."""
    if mode == "ring":  # (mrcd's: no event per completion, unless the test asks)
        kw = {"completion_events": False, **kw}
    net, (_qa, qb, ms, md, back) = _setup(kw, recvs)
    hb = net.h(1)
    resp = hb.qp(qb).resp
    completed = [0]  # writes-with-immediate the lane completed
    ring = _RingOf(resp.rcq) if mode == "ring" else None
    if mode != "ref":
        assert hb._lane is not None
        done = resp.lane_completed

        def counting(rec: Any, n: int, now: float) -> None:
            completed[0] += n & RX_IMM_COUNT_MASK
            done(rec, n, now)

        resp.lane_completed = counting  # type: ignore[method-assign]
    else:
        hb._lane = None  # (no lane at all: the pure-Python responder)
    steps: list[Any] = []
    now = 1.0
    for b, batch in enumerate(batches):
        if b == post_at:
            for i in range(WRITES):
                hb.post_recv(qb, 20_000 + i)
        now += 7e-6
        feed(hb, batch, now, mode == "ref")
        if answer_every and b % answer_every == answer_every - 1:
            hb.post_write(qb, 30_000 + b, back, 0, SIZE, ms.addr, ms.rkey, imm=b)
        t = hb.next_timer()
        if t is not None and t <= now:
            hb.handle_timer(now)
        out = [bytes(f) for _p, f in hb.frames_to_send(now)]
        cq = ring.take() if ring is not None else []
        cq += [(c.status, c.wr_id, c.opcode, c.byte_len, c.imm) for c in resp.rcq.poll(100)]
        rx = resp.rx
        steps.append((b, out, cq, resp.imm_done, resp.msgs_done, resp.recv_posted,
                      list(resp.recv_wrs), resp.held, resp.pingpong, resp.alone_at,
                      rx.rcv_nxt, rx.rx_msg_bytes, rx.since_ack, rx.ack_at, rx.unrep_n,
                      rx.rcvd_bytes, rx.ack_seq))
    return {"steps": steps, "counters": hb.counters(), "dst": bytes(md.view),
            "completed": completed[0], "in_ring": ring.taken if ring is not None else 0,
            "rang": ring.rang if ring is not None else 0}


class _RingOf:
    """A client's completion ring for ``cq``, mrcd's writer on it attached to the CQ as
    mrcd's delivery attaches it (the lane may write the CQ's receives there itself)."""

    def __init__(self, cq: Any, depth: int = 16) -> None:
        self.client = CompletionRing(depth)
        self.writer = CompletionWriter(self.client.fd, self.client.nslots)
        self.taken = self.rang = 0
        cq.attach_ring(self.writer.c, self._rang)

    def _rang(self, owed: int) -> None:
        self.rang += 1
        self.client.ring.sleep()  # (the client, woken, looks and sleeps again)

    def take(self) -> list[tuple[Any, ...]]:
        """What the lane wrote since the last take, as the CQ's rows (no qpn)."""
        data, _ = self.client.ring.take(self.client.nslots)
        rows = [(WCStatus(st), wr_id, WCOpcode(op), n, imm)
                for st, wr_id, op, n, imm, _qpn in self.client.rows(data)]
        self.taken += len(rows)
        return rows


def _compare(batches: list[list[tuple[int, bytes]]], kw: dict[str, Any], recvs: int,
             **extra: Any) -> dict[str, dict[str, Any]]:
    res = {m: _replay(m, batches, kw, recvs, **extra) for m in ("c", "ring", "ref")}
    ref = res["ref"]
    for m in ("c", "ring"):
        for sc, sr in zip(res[m]["steps"], ref["steps"], strict=True):
            assert sc == sr, f"{m}: batch {sr[0]}"
        assert res[m]["counters"] == ref["counters"]
        assert res[m]["dst"] == ref["dst"]
    # (the ring holds only completions the lane made: not those of the Python path)
    assert res["ring"]["in_ring"] <= res["ring"]["completed"]
    return res


def _in_order(frames: list[tuple[int, bytes]], rng: random.Random
              ) -> list[list[tuple[int, bytes]]]:
    res, i = [], 0
    while i < len(frames):
        k = rng.randrange(1, 8)
        res.append(frames[i : i + k])
        i += k
    return res


@pytest.mark.parametrize("kw", [{}, {"ack_with_data": True}, {"ack_req_burst": True},
                                {"ack_with_data": True, "completion_events": True},
                                # (a held ACK that ack_every sends anyway, in the lane)
                                {"ack_with_data": True, "ack_every": 2}])
@pytest.mark.parametrize("answer_every", [0, 1, 3])
def test_in_order_the_lane_completes_them(kw: dict[str, Any], answer_every: int) -> None:
    frames = _generate(kw)
    assert all(py_parse(f, False).opcode == _OP_WRITE_ONLY_IMM for _, f in frames)
    res = _compare(_in_order(frames, random.Random(3)), kw, recvs=WRITES,
                   answer_every=answer_every)
    # every one in the lane but the first two: the lane serves no QP until a data frame
    # took the full path, and meets the region at the next one (WHY_MR_MISS)
    assert res["c"]["completed"] == res["ring"]["completed"] == WRITES - 2
    # ... and, given the ring, the lane wrote every one of those into it itself (unless
    # asked for an event per completion: then the CQ has them all)
    events = kw.get("completion_events", False)
    assert res["ring"]["in_ring"] == (0 if events else WRITES - 2)
    assert events or res["ring"]["rang"] > 0  # (the client slept: doorbells owed)
    ref = res["ref"]
    assert sum(len(s[2]) for s in ref["steps"]) == WRITES
    if kw.get("ack_with_data") and answer_every == 1:
        assert ref["counters"].get("ack_held", 0) > 0  # the held ACK was exercised


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kw", [{}, {"ack_with_data": True}])
def test_reordered_duplicated_trimmed(seed: int, kw: dict[str, Any]) -> None:
    frames = _generate(kw)
    rng = random.Random(seed)
    res = _compare(_batches(frames, rng, dup=0.15, trim_p=0.05), kw, recvs=WRITES,
                   answer_every=2)
    c = res["ref"]["counters"]
    assert c.get("rx_duplicate", 0) > 0
    # (a write-with-immediate that finds anything out of order takes the Python path)
    assert res["c"]["completed"] < WRITES


def test_retransmissions() -> None:
    """Frames of a sender that lost some (its retransmissions, RTX set, among them)."""
    kw: dict[str, Any] = {"ack_with_data": True}
    frames = _generate(kw, loss=0.15)
    assert any(py_parse(f, False).rtx for _, f in frames)
    res = _compare(_in_order(frames, random.Random(5)), kw, recvs=WRITES, answer_every=1)
    assert res["ref"]["counters"].get("rx_duplicate", 0) > 0
    assert res["c"]["completed"] > 0


def test_credit_runs_out_and_comes_back() -> None:
    """Ten receives for 48 writes: the rest are NACKed NO_RESOURCE (by Python) until
    more are posted; then the lane completes them again."""
    kw: dict[str, Any] = {}
    frames = _generate(kw)
    batches = _in_order(frames, random.Random(9))
    # all of them, then (more receives posted) all of them again, as the sender resends
    res = _compare(batches + batches, kw, recvs=10, post_at=len(batches))
    ref = res["ref"]
    assert ref["counters"].get("rx_no_recv_credit", 0) > 0
    assert ref["counters"].get("tx_nack", 0) > 0
    assert sum(len(s[2]) for s in ref["steps"]) == WRITES
    assert res["c"]["completed"] > 10  # after the new receives too


def test_no_posted_receive() -> None:
    kw: dict[str, Any] = {"ack_with_data": True}
    frames = _generate(kw)
    res = _compare(_in_order(frames, random.Random(11)), kw, recvs=0)
    assert res["c"]["completed"] == 0
    assert res["ref"]["counters"].get("rx_no_recv_credit", 0) == len(frames)


@pytest.mark.parametrize("kw", [{}, {"ack_with_data": True}])
def test_both_ways_in_batches(kw: dict[str, Any]) -> None:
    """Two hosts writing to each other in bursts, every frame due at one instant handed
    over as one batch (BatchNet): the C lane's completions (several per batch, among the
    SACKs for the host's own writes, whose send completions share the CQ) against the
    same run without a lane, every frame sent and every CQ entry in order."""
    res = {m: _both_ways(kw, lane) for m, lane in (("c", True), ("ref", False))}
    c, ref = res["c"], res["ref"]
    assert c["tx"] == ref["tx"]
    assert c["cq"] == ref["cq"]
    assert c["counters"] == ref["counters"]
    assert c["multi"] > 0  # runs that completed several
    assert c["early"] > 0  # ... and returned before a SACK's record would follow them
    assert c["completed"] > WRITES  # most of both hosts' in the lane
    assert len(ref["cq"][0]) == len(ref["cq"][1]) == 2 * 4 * 16  # sends and receives


class _DataFirst(BatchNet):
    """BatchNet whose batches carry their data frames before their SACKs (frames due at
    one instant, as two spines may deliver them): completions of writes-with-immediate,
    then SACKs completing the host's own writes, in one batch."""

    def _hand_over(self) -> None:
        self._run.sort(key=lambda f: not py_parse(f, False).is_data)
        super()._hand_over()


def _both_ways(kw: dict[str, Any], lane: bool) -> dict[str, Any]:
    net = _DataFirst(n_hosts=2, planes=1, spines=2, config=_config(**kw), seed=3)
    qa, qb = connect(net, 0, 1, recvs=4 * 16)
    ha, hb = net.h(0), net.h(1)
    regions = []
    for h in (ha, hb):
        if not lane:
            h._lane = None
        regions.append((h.register_mr(bytearray(random.Random(7).randbytes(SIZE * 16))),
                        h.register_mr(bytearray(SIZE * 16))))
    counts = {"completed": 0, "multi": 0, "early": 0}
    for h, q in ((ha, qa), (hb, qb)):
        if lane:  # runs that returned before a SACK for the completions before it
            run = h._lane.run

            def counting_run(i: int, n: int, now: float, plane: int, run: Any = run) -> int:
                r = run(i, n, now, plane)
                if r & 3 == RX_DONE and r & RX_IMM and (r >> RX_POS_SHIFT) + 1 < n:
                    counts["early"] += 1
                return r

            h._lane.run = counting_run
        resp = h.qp(q).resp
        done = resp.lane_completed

        def counting(rec: Any, n: int, now: float, done: Any = done) -> None:
            counts["completed"] += n
            counts["multi"] += n > 1
            done(rec, n, now)

        resp.lane_completed = counting  # type: ignore[method-assign]
    net.log_tx = True
    pairs = ((ha, qa, regions[0][0], regions[1][1]), (hb, qb, regions[1][0], regions[0][1]))
    for burst in range(4):
        # a burst each way, each answering the other's as soon as it is in (with
        # ack_with_data, the ACK then leaves behind the answer: data, then a SACK)
        for s, (h, q, src, dst) in enumerate(pairs):
            for k in range(16):
                h.post_write(q, burst * 100 + k, src, k * SIZE, SIZE, dst.addr + k * SIZE,
                             dst.rkey, imm=burst * 100 + k)
            peer, pq = pairs[1 - s][:2]
            want = 16 * (burst + 1)
            net.run(until=lambda peer=peer, pq=pq, want=want: peer.qp(pq).imm_done >= want,
                    max_time=net.now + 5.0)
            assert peer.qp(pq).imm_done >= want
    net.run(until=lambda: all(len(h.qp(q).cq) >= 2 * 16 * 4 for h, q, _s, _d in pairs),
            max_time=net.now + 5.0)
    cqs = [[(e.status, e.wr_id, e.opcode, e.byte_len, e.imm) for e in h.qp(q).cq.poll(1000)]
           for h, q in ((ha, qa), (hb, qb))]
    return {"tx": [(s, p, bytes(f)) for _, s, p, f in net.tx_log], "cq": cqs,
            "counters": [h.counters() for h in (ha, hb)], **counts}


def test_imm_state_given_when_its_version_moved() -> None:
    """The responder hands the lane its write-with-immediate state (imm_set) when its
    ``imm_ver`` moved since the ``seen`` it last returned (-1: always), and not while it
    did not; verified, a change of the lane's copy behind its back, or a change without
    ``imm_ver``, is caught."""
    net, (_qa, qb, _ms, _md, _back) = _setup({}, recvs=4)
    hb = net.h(1)
    resp, lane = hb.qp(qb).resp, hb._lane
    assert lane is not None
    calls: list[tuple[Any, ...]] = []
    imm_set = lane.imm_set

    def counting(*a: Any) -> None:
        calls.append(a[:4])  # (the state; then the ring's pointers: NULL without a ring)
        imm_set(*a)

    lane.imm_set = counting
    lane.clear_qp()
    seen = resp.lane_imm_setup(lane)
    assert seen == resp.imm_ver
    resp.lane_imm_setup(lane, seen, True)  # (verified: the lane holds it)
    assert resp.lane_imm_setup(lane, seen) == seen  # (nothing moved: nothing given)
    assert calls == [(resp.imm_done, 4, False, False)]
    assert lane._c.imm_credit == 4
    hb.post_recv(qb, 99)  # a receive more: a change, given
    assert resp.imm_ver > seen
    seen = resp.lane_imm_setup(lane, seen)
    assert calls[-1] == (resp.imm_done, 5, False, False) and len(calls) == 2
    lane._c.imm_credit = 3  # behind the responder's back
    resp.lane_imm_setup(lane, seen)
    assert len(calls) == 2 and lane._c.imm_credit == 3  # unverified: not seen
    with pytest.raises(AssertionError, match="imm_ver"):
        resp.lane_imm_setup(lane, seen, True)
    lane.clear_qp()  # (credit 0): given again when the caller has seen nothing
    seen = resp.lane_imm_setup(lane)
    assert len(calls) == 3 and lane._c.imm_credit == 5
    resp.recv_posted += 1  # a writer without imm_ver: caught where the loop would skip
    with pytest.raises(AssertionError, match="imm_ver"):
        resp.lane_imm_setup(lane, seen, True)


def test_the_receive_loop_gives_the_imm_state_when_its_version_moved() -> None:
    """The receive loop calls lane_imm_setup for a batch only when the responder's
    imm_ver moved since it last did (or the lane's QP changed); writes-with-immediate
    still complete in the lane, as the comparisons above check frame by frame."""
    kw: dict[str, Any] = {}
    frames = _generate(kw)
    net, (_qa, qb, _ms, _md, _back) = _setup(kw, recvs=WRITES)
    hb = net.h(1)
    resp = hb.qp(qb).resp
    asked = [0]
    setup = resp.lane_imm_setup

    def counting(lane: Any, seen: int = -1, verify: bool = False) -> int:
        asked[0] += seen != resp.imm_ver
        return setup(lane, seen, verify)

    resp.lane_imm_setup = counting  # type: ignore[method-assign]
    batches = _in_order(frames, random.Random(3))
    for b, batch in enumerate(batches):
        feed(hb, batch, 1.0 + 7e-6 * b, False)
        hb.frames_to_send(1.0 + 7e-6 * b)
    assert resp.imm_done == WRITES and asked[0] > 0
    feed(hb, batches[-1][-1:], 2.0, False)
    before = asked[0]
    for _ in range(3):  # duplicates: nothing of the state moved, not asked again
        feed(hb, batches[-1][-1:], 2.0, False)
    assert asked[0] == before
    hb.post_recv(qb, 7)  # a receive posted: asked before the next batch
    feed(hb, batches[-1][-1:], 2.1, False)
    assert asked[0] == before + 1


def test_completions_leave_the_lane_nothing_to_be_given(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """The lane moves its MSN and credit as it completes writes-with-immediate, to the
    state the responder has after ``lane_completed``, which therefore leaves ``imm_ver``
    as it was: nothing is given again once the lane completes them (no ``imm_set``), and
    the receive loop's checks (VERIFY_SETUP) find the lane holding exactly the
    responder's state."""
    monkeypatch.setattr(receive, "VERIFY_SETUP", True)
    kw: dict[str, Any] = {}
    frames = _generate(kw)
    net, (_qa, qb, _ms, _md, _back) = _setup(kw, recvs=WRITES)
    hb = net.h(1)
    resp, lane = hb.qp(qb).resp, hb._lane
    assert lane is not None
    calls: list[int] = []  # the lane's completions so far at each imm_set
    lane_done = [0]
    imm_set, take_imm_n = lane.imm_set, lane.take_imm_n

    def counting(*a: Any) -> None:
        calls.append(lane_done[0])
        imm_set(*a)

    def taking() -> int:
        n: int = take_imm_n()
        lane_done[0] += n
        return n

    lane.imm_set, lane.take_imm_n = counting, taking
    for b, batch in enumerate(_in_order(frames, random.Random(3))):
        feed(hb, batch, 1.0 + 7e-6 * b, False)
        hb.frames_to_send(1.0 + 7e-6 * b)
    # (the first writes take the per-frame path while the lane meets the QP and its
    # region: given then; none once the lane completes them)
    assert resp.imm_done == WRITES and lane_done[0] > WRITES // 2
    assert calls and calls == [0] * len(calls)
    lane.check_imm((WRITES, 0, False, False))  # (what it holds)
