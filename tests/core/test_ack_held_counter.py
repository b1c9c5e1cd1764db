"""The ``ack_held`` counter, a plain integer of the responder (``Responder.acks_held``)
rather than a ``QueuePair.count`` call per held ACK: the QP's and the host's counters
read the same totals, with the receive lane and without it, and the host's still
holds a destroyed QP's."""

from __future__ import annotations

from typing import Any

import pytest

from mrcnet.constants import Opcode
from mrcnet.core import HostConfig
from mrcnet.core.qp import QueuePair
from mrcnet.core.responder import Responder

from .harness import Net, connect
from .test_mrc_acks import HOLD, _ack_frames, _answer, _data, _warm_up

PINGS = 5


def _ping(net: Net, hb: Any, qb: int, md: Any, i: int, t: float) -> list[Any]:
    """Ping ``i`` (a write-with-immediate with a timestamp: the lane completes it) at
    ``t``; the acknowledgements h1 sends in that pass."""
    hb.post_recv(qb, i, t)
    hb.receive(_data(net, qb, md, 1000 + i, opcode=Opcode.WRITE_ONLY_IMM, imm=i, rqmsn=i,
                     timestamp=7), 0, t)
    return _ack_frames(hb.frames_to_send(t))


@pytest.mark.parametrize("lane", [True, False])
def test_held_acks_are_counted_without_a_count_call(
        lane: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ping after the first holds its ACK: ``ack_held`` counts them (the QP's
    and the host's counters, also once the QP is gone), and no ``count`` call does."""
    net = Net(config=HostConfig(ack_with_data=True, ack_delay=HOLD))
    _qa, qb = connect(net, 0, 1, psn_a=1000)
    hb = net.h(1)
    if not lane:
        hb._lane = None
    md = hb.register_mr(bytearray(8192))
    counted: list[str] = []
    real_count = QueuePair.count

    def count(self: QueuePair, name: str, n: int = 1) -> None:
        counted.append(name)
        real_count(self, name, n)

    monkeypatch.setattr(QueuePair, "count", count)
    done: list[int] = []
    real_done = Responder.lane_completed

    def lane_completed(self: Responder, rec: Any, n: int, now: float) -> None:
        done.append(n)
        real_done(self, rec, n, now)

    monkeypatch.setattr(Responder, "lane_completed", lane_completed)
    assert hb.counters().get("ack_held") is None  # (none yet: absent, as before)
    _warm_up(net, hb, qb, md)
    for i in range(1, PINGS + 1):
        t = i * 1e-3
        assert _ping(net, hb, qb, md, i, t) == []  # held
        _answer(hb, qb, md, i, t + 1e-5)
    assert "ack_held" not in counted
    assert bool(done) == lane  # (the lane's completions, or on_data's: both ways tried)
    assert hb.qp(qb).counters()["ack_held"] == PINGS
    assert hb.counters()["ack_held"] == PINGS
    hb.destroy_qp(qb)
    assert hb.counters()["ack_held"] == PINGS
