"""Can a packet arrive and stay unreported while a packet sent after it is reported?

RACK's allowance (``Recovery._reorder_allowance``) adds the peer's ACK hold because the
answer is yes for a coalescing responder: docs/CORE.md, "Session 9: loss detection
time", has the cases; each is shown here on the responder alone (frames crafted, one per
receive call as a NIC hands them, virtual clock). Q, a packet sent after P, is already
reported in a SACK when P arrives; is P reported at once, or only at ``ack_delay``?
"""

from __future__ import annotations

from typing import Any

import pytest

from mrcnet.constants import Opcode
from mrcnet.core import make_ev
from mrcnet.wire import build_data, parse_frame

from .harness import Net, connect

_BASE = 1000
_MID = Opcode.WRITE_MIDDLE


def _world() -> tuple[Net, int, Any]:
    net = Net()
    _qa, qb = connect(net, 0, 1, psn_a=_BASE)
    md = net.h(1).register_mr(bytearray(1 << 16))
    return net, qb, md


def _data(net: Net, qb: int, md: Any, psn: int, op: Opcode = _MID, *, ack_req: bool = False,
          rtx: bool = False) -> bytes:
    route = net.fabric.provider("h0").routes("h1", 0)[1]
    return build_data(route, ev=make_ev(0, 1, 0), dest_qp=qb, psn=psn,
                      va=md.addr + 64 * (psn - _BASE), rkey=md.rkey, payload=b"y" * 64,
                      opcode=op, ack_req=ack_req, rtx=rtx, timestamp=psn)


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


def test_a_gap_fill_that_completes_a_message_is_reported_at_once() -> None:
    """Case 1 (``ack_gap_fill``): the message's last packet Q (with its AckReq) came
    first and was SACKed at once; P, the packet before it, completes the message."""
    net, qb, md = _world()
    assert _arrive(net, qb, md, _BASE + 1, 0.0, Opcode.WRITE_LAST, ack_req=True)
    [f] = _arrive(net, qb, md, _BASE, 1e-6, Opcode.WRITE_FIRST)
    assert f.seth.cack_psn == _BASE + 1


def test_a_gap_fill_inside_a_message_waits_for_ack_delay() -> None:
    """Case 2: P fills the hole at the cumulative point, but the message's end has not
    come: Q..Q+3 (sent after P) were SACKed by ``ack_every``, P is held ``ack_delay``."""
    net, qb, md = _world()
    hb = net.h(1)
    acks = []
    for i in range(1, 5):
        acks += _arrive(net, qb, md, _BASE + i, i * 1e-7)
    assert len(acks) == 1  # the fourth arrival's SACK reports Q = BASE + 1 .. BASE + 4
    t = 1e-6
    assert not _arrive(net, qb, md, _BASE, t, Opcode.WRITE_FIRST)
    assert _reported_at(net, _BASE + 4, t) - t == pytest.approx(hb.config.ack_delay)


def test_a_late_packet_above_another_hole_waits_for_ack_delay() -> None:
    """Case 3: P arrives out of order above a hole that is younger than
    ``reorder_floor`` (the packet before it is lost or late too): held ``ack_delay``."""
    net, qb, md = _world()
    hb = net.h(1)
    acks = []
    for i in range(2, 6):
        acks += _arrive(net, qb, md, _BASE + i, i * 1e-7)
    assert len(acks) == 1
    t = 1e-6
    assert t < hb.config.reorder_floor
    assert not _arrive(net, qb, md, _BASE + 1, t)
    due = hb.next_timer()
    assert due is not None and due - t == pytest.approx(hb.config.ack_delay)


def test_a_packet_in_order_after_a_later_retransmission_waits_for_ack_delay() -> None:
    """Case 4: the original of PSN 0 was lost, its retransmission (sent after P = PSN 1)
    arrived first and was SACKed at once (RTX); P then arrives in order, nothing out of
    order: nothing hints that it is late, it is held ``ack_delay``."""
    net, qb, md = _world()
    hb = net.h(1)
    assert _arrive(net, qb, md, _BASE, 0.0, Opcode.WRITE_FIRST, rtx=True)
    t = 2e-6
    assert not _arrive(net, qb, md, _BASE + 1, t)
    assert _reported_at(net, _BASE + 1, t) - t == pytest.approx(hb.config.ack_delay)


def test_an_old_hole_is_reported_at_once() -> None:
    """Case 3 once the hole at the cumulative point is older than ``reorder_floor``:
    the next out-of-order arrival is SACKed at once (and bounds case 3's hold)."""
    net, qb, md = _world()
    hb = net.h(1)
    for i in range(2, 6):
        _arrive(net, qb, md, _BASE + i, i * 1e-7)
    t = 2e-7 + hb.config.reorder_floor
    [f] = _arrive(net, qb, md, _BASE + 1, t)
    assert f.seth.cack_psn == _BASE - 1
