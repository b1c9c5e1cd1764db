"""``Responder.note_answer`` runs only while its QP does not hold its ACKs yet: the host's
send pass tests ``pingpong`` itself (once a ping-pong's QP holds its ACKs, every answer
called it to do nothing). The QP still starts holding after the same answer."""

from __future__ import annotations

import pytest

from mrcnet.core import HostConfig
from mrcnet.core.responder import Responder

from .harness import Net, connect
from .test_ack_held_counter import _ping
from .test_mrc_acks import HOLD, _answer, _warm_up

PINGS = 6


def test_note_answer_is_called_only_until_the_qp_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up's answer turns holding on (the one call that has news); the answers
    after it do not call ``note_answer``, and their pings' ACKs are still held."""
    net = Net(config=HostConfig(ack_with_data=True, ack_delay=HOLD))
    _qa, qb = connect(net, 0, 1, psn_a=1000)
    hb = net.h(1)
    md = hb.register_mr(bytearray(8192))
    calls: list[bool] = []
    real = Responder.note_answer

    def note_answer(self: Responder, now: float) -> None:
        calls.append(self.pingpong)
        real(self, now)

    monkeypatch.setattr(Responder, "note_answer", note_answer)
    _warm_up(net, hb, qb, md)
    resp = hb.qp(qb).resp
    assert resp.pingpong and calls == [False]  # the warm-up's answer: holding from now
    for i in range(1, PINGS + 1):
        t = i * 1e-3
        assert _ping(net, hb, qb, md, i, t) == []  # held
        _answer(hb, qb, md, i, t + 1e-5)
    assert calls == [False]
    assert resp.acks_held == PINGS
