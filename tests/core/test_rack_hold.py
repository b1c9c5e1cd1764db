"""Can a packet arrive and stay unreported while a packet sent after it is reported?

RACK's allowance (``Recovery._reorder_allowance``) adds the peer's ACK hold because the
answer is yes for a coalescing responder: docs/CORE.md, "Session 9: loss detection
time", has the cases; each is shown here on the responder alone (frames crafted, one per
receive call as a NIC hands them, virtual clock). Q, a packet sent after P, is already
reported in a SACK when P arrives; is P reported at once, or only at ``ack_delay``?
With ``HostConfig.ack_late`` (docs/CORE.md, "Session 10") cases 2-4 are reported at
once as well; each case runs with the C receive lane and with the pure-Python path.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from mrcnet.constants import Opcode
from mrcnet.core import HostConfig, make_ev
from mrcnet.core.rxlane import RX_LATE_WINDOW
from mrcnet.native import HAVE_C
from mrcnet.wire import build_data, parse_frame
from mrcnet.wire.parsed import py_parse

from .harness import Impairments, Net, connect
from .test_rxlane import _batches, _compare, _send_writes, _setup

_BASE = 1000
_MID = Opcode.WRITE_MIDDLE


def _world(ack_late: bool = False, fast: bool = True) -> tuple[Net, int, Any]:
    net = Net(config=HostConfig(ack_late=ack_late, fast_parse=fast))
    _qa, qb = connect(net, 0, 1, psn_a=_BASE)
    md = net.h(1).register_mr(bytearray(1 << 16))
    return net, qb, md


def _data(net: Net, qb: int, md: Any, psn: int, op: Opcode = _MID, *, ack_req: bool = False,
          rtx: bool = False, ts: int | None = None) -> bytes:
    """The data packet ``psn``, sent at microsecond ``ts`` (its stamp; default: ``psn``,
    first transmissions leaving in sequence order)."""
    route = net.fabric.provider("h0").routes("h1", 0)[1]
    return build_data(route, ev=make_ev(0, 1, 0), dest_qp=qb, psn=psn,
                      va=md.addr + 64 * (psn - _BASE), rkey=md.rkey, payload=b"y" * 64,
                      opcode=op, ack_req=ack_req, rtx=rtx,
                      timestamp=(psn if ts is None else ts) & 0xFFFF)


def _arrive(net: Net, qb: int, md: Any, psn: int, t: float, op: Opcode = _MID,
            **kw: Any) -> list[Any]:
    """One packet handed to the responder at ``t``: the acknowledgements it sends now."""
    hb = net.h(1)
    hb.receive(_data(net, qb, md, psn, op, **kw), 0, t)
    frames = [parse_frame(f) for _, f in hb.frames_to_send(t)]
    return [f for f in frames if f.opcode in (Opcode.SACK, Opcode.ACK)]


def _reported_at(net: Net, psn: int, t: float) -> float:
    """When the held acknowledgement that reports ``psn`` leaves (the timer)."""
    hb = net.h(1)
    due = hb.next_timer()
    assert due is not None and due > t
    hb.handle_timer(due)
    [f] = [p for p in (parse_frame(f) for _, f in hb.frames_to_send(due))
           if p.opcode is Opcode.SACK]
    assert f.seth.cack_psn >= psn
    return due


_LANES = pytest.mark.parametrize("fast", [True, False], ids=["C-lane", "python"])
_LATE = pytest.mark.parametrize("ack_late", [False, True], ids=["held", "ack_late"])


def _held_or_at_once(net: Net, qb: int, md: Any, psn: int, t: float, reported: int,
                     ack_late: bool, **kw: Any) -> None:
    """P (``psn``) arrives at ``t``, after packets sent after it were reported: without
    ``ack_late`` its report waits ``ack_delay`` (and reports up to ``reported``); with
    it, a SACK reporting it leaves at once."""
    hb = net.h(1)
    acks = _arrive(net, qb, md, psn, t, **kw)
    if ack_late:
        [f] = acks
        assert f.seth.cack_psn + f.seth.ack_psn_offset == psn  # the SACK answers P
        return
    assert not acks
    assert _reported_at(net, reported, t) - t == pytest.approx(hb.config.ack_delay)


@_LANES
@_LATE
def test_a_gap_fill_that_completes_a_message_is_reported_at_once(ack_late: bool,
                                                                 fast: bool) -> None:
    """Case 1 (``ack_gap_fill``): the message's last packet Q (with its AckReq) came
    first and was SACKed at once; P, the packet before it, completes the message."""
    net, qb, md = _world(ack_late, fast)
    assert _arrive(net, qb, md, _BASE + 1, 0.0, Opcode.WRITE_LAST, ack_req=True)
    [f] = _arrive(net, qb, md, _BASE, 1e-6, Opcode.WRITE_FIRST)
    assert f.seth.cack_psn == _BASE + 1


@_LANES
@_LATE
def test_a_gap_fill_inside_a_message(ack_late: bool, fast: bool) -> None:
    """Case 2: P fills the hole at the cumulative point, but the message's end has not
    come: Q..Q+3 (sent after P) were SACKed by ``ack_every``; P is held ``ack_delay``,
    or with ``ack_late`` reported at once."""
    net, qb, md = _world(ack_late, fast)
    acks = []
    for i in range(1, 5):
        acks += _arrive(net, qb, md, _BASE + i, i * 1e-7)
    assert len(acks) == 1  # the fourth arrival's SACK reports Q = BASE + 1 .. BASE + 4
    _held_or_at_once(net, qb, md, _BASE, 1e-6, _BASE + 4, ack_late, op=Opcode.WRITE_FIRST)


@_LANES
@_LATE
def test_a_late_packet_above_another_hole(ack_late: bool, fast: bool) -> None:
    """Case 3: P arrives out of order above a hole that is younger than
    ``reorder_floor`` (the packet before it is lost or late too): held ``ack_delay``,
    or with ``ack_late`` reported at once (in the SACK's bitmap)."""
    net, qb, md = _world(ack_late, fast)
    hb = net.h(1)
    acks = []
    for i in range(2, 6):
        acks += _arrive(net, qb, md, _BASE + i, i * 1e-7)
    assert len(acks) == 1
    t = 1e-6
    assert t < hb.config.reorder_floor
    _held_or_at_once(net, qb, md, _BASE + 1, t, _BASE - 1, ack_late)


@_LANES
@_LATE
def test_a_packet_in_order_after_a_later_retransmission(ack_late: bool, fast: bool) -> None:
    """Case 4: the original of PSN 0 was lost, its retransmission (sent after P = PSN 1:
    a newer stamp) arrived first and was SACKed at once (RTX); P then arrives in order,
    nothing out of order: held ``ack_delay``, or with ``ack_late`` reported at once (its
    stamp is older than the reported retransmission's)."""
    net, qb, md = _world(ack_late, fast)
    assert _arrive(net, qb, md, _BASE, 0.0, Opcode.WRITE_FIRST, rtx=True, ts=_BASE + 12)
    _held_or_at_once(net, qb, md, _BASE + 1, 2e-6, _BASE + 1, ack_late)


@_LANES
def test_ack_late_leaves_new_data_coalesced(fast: bool) -> None:
    """``ack_late`` costs a SACK only for a packet sent before something reported: new
    data after a SACK, in or out of order, and packets sent after a reported
    retransmission (newer stamps) are coalesced as before (``ack_every``)."""
    net, qb, md = _world(True, fast)
    assert _arrive(net, qb, md, _BASE, 0.0, Opcode.WRITE_FIRST, rtx=True, ts=5)
    acks = []
    for k, psn in enumerate((3, 1, 2, 4, 6, 5, 7, 8)):  # reordered, none before a report
        acks += _arrive(net, qb, md, _BASE + psn, (k + 1) * 1e-7, ts=6 + psn)
    assert len(acks) == 2  # the 4th and the 8th arrival's (ack_every)
    assert acks[-1].seth.cack_psn == _BASE + 8


@_LANES
def test_ack_late_compares_stamps_only_near_the_retransmission(fast: bool) -> None:
    """A retransmission's stamp is compared for ``RX_LATE_WINDOW`` after it arrived
    (16-bit microsecond stamps wrap every 65.5 ms): a packet long after it is
    coalesced even when its stamp reads as older."""
    net, qb, md = _world(True, fast)
    assert _arrive(net, qb, md, _BASE, 0.0, Opcode.WRITE_FIRST, rtx=True, ts=40_000)
    t = RX_LATE_WINDOW + 1e-3
    assert not _arrive(net, qb, md, _BASE + 1, t, ts=40_000 - 10)
    # a (spurious) retransmission of P, a duplicate: reported, its stamp kept now
    assert _arrive(net, qb, md, _BASE + 1, t, rtx=True, ts=50_000)
    assert _arrive(net, qb, md, _BASE + 2, t + 1e-6, ts=50_000 - 10)


@_LANES
def test_ack_late_with_ack_req_burst_answers_at_the_burst_end(fast: bool) -> None:
    """With ``ack_req_burst`` the late packet's SACK waits for its receive burst's end,
    as a gap fill's does: due at once, sent by frames_to_send."""
    net = Net(config=HostConfig(ack_late=True, ack_req_burst=True, fast_parse=fast))
    _qa, qb = connect(net, 0, 1, psn_a=_BASE)
    md = net.h(1).register_mr(bytearray(1 << 16))
    for i in range(1, 5):
        _arrive(net, qb, md, _BASE + i, i * 1e-7)
    hb = net.h(1)
    hb.receive_batch([_data(net, qb, md, _BASE, Opcode.WRITE_FIRST)], 0, 1e-6)
    frames = [parse_frame(f) for _, f in hb.frames_to_send(1e-6)]
    [f] = [p for p in frames if p.opcode is Opcode.SACK]
    assert f.seth.cack_psn == _BASE + 4


@_LANES
def test_an_old_hole_is_reported_at_once(fast: bool) -> None:
    """Case 3 once the hole at the cumulative point is older than ``reorder_floor``:
    the next out-of-order arrival is SACKed at once (and bounds case 3's hold)."""
    net, qb, md = _world(False, fast)
    hb = net.h(1)
    for i in range(2, 6):
        _arrive(net, qb, md, _BASE + i, i * 1e-7)
    t = 2e-7 + hb.config.reorder_floor
    [f] = _arrive(net, qb, md, _BASE + 1, t)
    assert f.seth.cack_psn == _BASE - 1


def _lossy_frames(kw: dict[str, Any], size: int = 600_000, writes: int = 5
                  ) -> list[tuple[int, bytes]]:
    """The data frames h0 sends for a few writes over a path that loses 3 % of them,
    in the order they left, the lost ones left out and the one sent right after each
    of those held back until three frames after the lost one's retransmission (case 4:
    a packet arrives after a retransmission sent after it)."""
    net, (qa, _qb, ms, md, _src), _hb = _setup("c" if HAVE_C else "py", 0, kw, size)
    rng, lost = random.Random(3), set()

    def drop(frame: bytes) -> bool:
        if rng.random() < 0.03 and py_parse(frame, False).is_data:
            lost.add(bytes(frame))
            return True
        return False

    net.imp = Impairments(drop_if=drop)
    _send_writes(net, qa, ms, md, size, writes)
    out: list[tuple[int, bytes]] = []
    after: int | None = None  # the PSN lost just before (its next frame waits for it)
    held: dict[int, tuple[int, bytes]] = {}  # lost PSN -> the frame sent after it
    due: list[tuple[int, tuple[int, bytes]]] = []  # (where it goes, frame)
    for _, s, p, fr in net.tx_log:
        f = bytes(fr)
        d = py_parse(f, False)
        if s != "h0" or not d.is_data:
            continue
        if f in lost:
            after = d.psn if not d.rtx else None
            continue
        if after is not None and not d.rtx:
            held[after], after = (p, f), None
            continue
        out.append((p, f))
        if d.rtx and d.psn in held:
            due.append((len(out) + 3, held.pop(d.psn)))
        while due and due[0][0] <= len(out):
            out.append(due.pop(0)[1])
    return out + [pf for _, pf in due] + list(held.values())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ack_late_in_the_lane_is_frame_by_frame(seed: int) -> None:
    """``ack_late`` decides the same in the C lane, its Python oracle, the batch path
    and frame by frame (the same frames out, batch for batch), on reordered frames with
    retransmissions among them (late originals, duplicates); and it adds SACKs there."""
    kw: dict[str, Any] = {"ack_late": True, "ack_delay": 20e-6, "reorder_floor": 20e-6}
    frames = _lossy_frames(kw)
    assert any(py_parse(f, False).rtx for _p, f in frames)
    batches = _batches(frames, random.Random(seed), trim_p=0.0)
    on = _compare(batches, 0, kw)
    off = _compare(batches, 0, {**kw, "ack_late": False})
    assert on["ref"]["dst"] == off["ref"]["dst"]
    assert len(on["ref"]["out"]) > len(off["ref"]["out"])
