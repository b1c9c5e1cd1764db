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


def test_mrc_h_attribute_names() -> None:
    net = Net()
    h = net.h(0)
    q = h.create_qp(h.create_cq())
    h.modify_qp(q, S.INIT, ev_profile_id="ecmp", cc_profile_id="fixed")
    h.modify_qp(q, S.RTR, peer="h1", dest_qp_num=1, rq_psn=0, max_wimm_dest=3, mpr_dest=2)
    h.modify_qp(q, S.RTS, sq_psn=0, max_wimm=5, mpr=1, retry_linear_cnt=2, retry_exp_cnt=4,
                timeout=10)
    qp = h.qp(q)
    a = qp.attrs
    assert (a.ev_profile, a.cc_profile, a.max_imm_outstanding) == ("ecmp", "fixed", 5)
    assert (qp.tx_window, qp.rx_window) == (128, 256)
    assert (qp.retry_linear, qp.retry_budget) == (2, 6)
    h.modify_qp(q, S.RTS, retry_exp_cnt=25)
    assert qp.retry_budget >= 1 << 30  # 25 = retry forever
    with pytest.raises(InvalidAttribute, match="retry_linear_cnt"):
        h.modify_qp(q, S.RTS, retry_linear_cnt=8)
    with pytest.raises(InvalidAttribute, match="units of 128"):
        h.modify_qp(q, S.RTS, mpr=0)


def test_mpr_limits_outstanding_psns() -> None:
    from mrcnet.core import HostConfig

    net = Net(config=HostConfig(base_rtt_hint=100e-6))  # a window far above 128 packets
    ha, hb = net.h(0), net.h(1)
    qa, qb = ha.create_qp(ha.create_cq()), hb.create_qp(hb.create_cq())
    for h, q, peer, other in ((ha, qa, "h1", qb), (hb, qb, "h0", qa)):
        h.modify_qp(q, S.INIT)
        h.modify_qp(q, S.RTR, peer=peer, dest_qp_num=other, rq_psn=0, max_wimm_dest=2)
        h.modify_qp(q, S.RTS, sq_psn=0)
    for i in range(10):
        hb.post_recv(qb, i)
    ha.modify_qp(qa, S.RTS, mpr=1)
    net.run(max_time=1e-4)
    src = bytearray(300 * 4096)
    dst = bytearray(300 * 4096)
    ms, md = ha.register_mr(src), hb.register_mr(dst)
    ha.post_write(qa, 1, ms, 0, len(src), md.addr, md.rkey)
    net.flush()
    qp = ha.qp(qa)
    assert qp.next_seq - qp.snd_una == 128  # MPR 1 = 128 PSNs outstanding at most
    net.run(until=lambda: len(qp.cq) > 0, max_time=1.0)
    assert dst == src
