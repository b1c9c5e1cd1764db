"""The QP state table: every legal transition works, every illegal one raises."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from mrcnet.core import (
    QP_TRANSITIONS,
    IllegalTransition,
    InvalidAttribute,
    QPState,
    WCStatus,
)
from mrcnet.errors import MrcError

from .harness import Net, connect

S = QPState
_CONNECT: dict[QPState, dict[str, Any]] = {
    S.RTR: {"peer": "h1", "dest_qp_num": 1, "rq_psn": 0},
    S.RTS: {"sq_psn": 0},
}
_PATH = [S.RESET, S.INIT, S.RTR, S.RTS]


def _qp_in(net: Net, state: QPState) -> int:
    h = net.h(0)
    q = h.create_qp(h.create_cq())
    if state is S.ERROR:
        h.modify_qp(q, S.ERROR)
        return q
    for st in _PATH[1 : _PATH.index(state) + 1]:
        h.modify_qp(q, st, **_CONNECT.get(st, {}))
    return q


@pytest.mark.parametrize(("a", "b"), list(itertools.product(QPState, QPState)))
def test_transition_table(a: QPState, b: QPState) -> None:
    net = Net()
    h = net.h(0)
    q = _qp_in(net, a)
    assert h.qp(q).state is a
    if (a, b) in QP_TRANSITIONS:
        h.modify_qp(q, b, **(_CONNECT.get(b, {}) if a is not b else {}))
        assert h.qp(q).state is b
    else:
        with pytest.raises(IllegalTransition) as ei:
            h.modify_qp(q, b, **_CONNECT.get(b, {}))
        assert isinstance(ei.value, MrcError)
        assert f"{a.value} -> {b.value}" in str(ei.value)
        assert h.qp(q).state is a  # unchanged


def test_missing_and_unknown_attributes_raise() -> None:
    net = Net()
    h = net.h(0)
    q = _qp_in(net, S.INIT)
    with pytest.raises(InvalidAttribute, match="needs"):
        h.modify_qp(q, S.RTR, peer="h1")
    with pytest.raises(InvalidAttribute, match="does not take"):
        h.modify_qp(q, S.RTR, peer="h1", dest_qp_num=1, rq_psn=0, bogus=1)
    with pytest.raises(InvalidAttribute, match="24-bit"):
        h.modify_qp(q, S.RTR, peer="h1", dest_qp_num=1, rq_psn=1 << 24)
    assert h.qp(q).state is S.INIT


def test_modify_to_error_flushes_outstanding_writes() -> None:
    net = Net()
    qa, _ = connect(net, 0, 1)
    ha = net.h(0)
    buf = bytearray(10)
    mr = ha.register_mr(buf)
    ha.post_write(qa, 5, mr, 0, 10, 0, 0)
    ha.modify_qp(qa, S.ERROR)
    (c,) = ha.poll_cq(ha.qp(qa).cq, 4)
    assert (c.wr_id, c.status) == (5, WCStatus.WR_FLUSH_ERR)
    ev = ha.next_event()
    assert ev is not None and getattr(ev, "reason", "") == "moved to ERROR by modify_qp"
