"""An unreachable peer puts the QP into ERROR with a clear reason within the retry budget."""

from __future__ import annotations

import pytest

from mrcnet.core import HostConfig, QPError, WCStatus, retry_schedule

from .harness import Impairments, Net, connect


def _errors(net: Net, host: int) -> list[QPError]:
    out = []
    h = net.h(host)
    while (e := h.next_event()) is not None:
        if isinstance(e, QPError):
            out.append(e)
    return out


@pytest.mark.parametrize("timeout_exp", [8, 12])
def test_dead_peer_from_the_start(timeout_exp: int) -> None:
    cfg = HostConfig(timeout_floor=100e-6)
    net = Net(config=cfg, imp=Impairments(dead_hosts={"h1"}))
    qa, _ = connect(net, 0, 1, attrs={"timeout": timeout_exp, "retry_cnt": 5})
    ha = net.h(0)
    buf = bytearray(50_000)
    mr = ha.register_mr(buf)
    ha.post_write(qa, 1, mr, 0, len(buf), 0x1000, 0x42)
    ha.post_write(qa, 2, mr, 0, 10, 0x1000, 0x42)
    base = max(cfg.timeout_floor, 1.024e-6 * (1 << timeout_exp))
    bound = sum(retry_schedule(base, 5, cfg.retry_linear))
    net.run(until=lambda: ha.qp(qa).error_reason is not None, max_time=100.0)
    assert ha.qp(qa).error_reason is not None, "QP hung instead of failing"
    # the failure comes within the budget (plus one base timeout of slack for the
    # retransmission's own send time), and not before the budget was spent
    assert sum(retry_schedule(base, 5, cfg.retry_linear)[:-1]) <= net.now <= bound + base
    (err,) = _errors(net, 0)
    assert err.qpn == qa
    assert "unreachable" in err.reason and "h1" in err.reason and "retry budget" in err.reason
    comps = ha.poll_cq(ha.qp(qa).cq, 10)
    assert [(c.wr_id, c.status) for c in comps] == [
        (1, WCStatus.RETRY_EXC_ERR), (2, WCStatus.WR_FLUSH_ERR)]
    assert ha.next_timer() is None  # nothing left armed: no busy loop, no hang


def test_peer_dies_mid_transfer() -> None:
    cfg = HostConfig(timeout_floor=200e-6)
    imp = Impairments()
    net = Net(config=cfg, imp=imp)
    qa, _ = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    src = bytearray(4 << 20)
    dst = bytearray(4 << 20)
    ms, md = ha.register_mr(src), hb.register_mr(dst)
    ha.post_write(qa, 1, ms, 0, len(src), md.addr, md.rkey)
    net.run(until=lambda: ha.qp(qa).srtt > 0 and hb.counters()["rx_data"] > 100, max_time=1.0)
    imp.dead_hosts.add("h1")
    t0 = net.now
    srtt = ha.qp(qa).srtt
    assert srtt > 0
    net.run(until=lambda: ha.qp(qa).error_reason is not None, max_time=t0 + 10)
    assert ha.qp(qa).error_reason is not None
    bound = sum(retry_schedule(cfg.timeout_floor, cfg.retry_cnt, cfg.retry_linear))
    # RTO is the floor here (RTT is microseconds); one extra floor of slack
    assert net.now - t0 <= bound + cfg.timeout_floor
    (c,) = ha.poll_cq(ha.qp(qa).cq, 10)
    assert c.status is WCStatus.RETRY_EXC_ERR


def test_waiting_for_receive_credit_of_a_dead_peer_fails() -> None:
    cfg = HostConfig(timeout_floor=100e-6)
    net = Net(config=cfg, imp=Impairments(dead_hosts={"h1"}))
    qa, _ = connect(net, 0, 1, attrs={"timeout": 8})
    ha = net.h(0)
    mr = ha.register_mr(bytearray(8))
    ha.post_write(qa, 1, mr, 0, 8, 0, 0, imm=1)  # no credit: the peer posted no receive
    net.run(until=lambda: ha.qp(qa).error_reason is not None, max_time=10.0)
    reason = ha.qp(qa).error_reason
    assert reason is not None and "unreachable" in reason
    assert net.now < 1.0
