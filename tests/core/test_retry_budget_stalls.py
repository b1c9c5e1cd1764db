"""The retry budget against endpoint stalls, on the virtual clock, with mrcd's timing.

mrcd: ``timeout_floor`` 20 ms, ``retry_linear`` 3 and ``retry_cnt`` 9, derived by
:func:`retry_cnt_for` from the stall it must ride out (``STALL_TOLERANCE``, 1 s): timeouts
of 1, 1, 1, 1, 2, 4, 8, 16, 32, 64 x the base RTO (mrc.h: a linear phase, then doubling),
so retransmissions leave 20, 40, 60, 80, 120, 200, 360, 680 and 1320 ms after the first
transmission and "peer unreachable" comes at 130 x 20 ms = 2.6 s.

A peer that takes in nothing for a while (every frame either way lost) answers the first
retransmission after it wakes: a silence of up to 1.32 s is ridden out (a loaded 2-core
machine's measured 0.35-0.4 s, docs/CORE.md); a longer one, and a peer silent for good,
end in ERROR within the budget's total. Counters ``retries_peak`` and
``rto_silence_peak_ms`` say how deep into the budget a stall went.
"""

from __future__ import annotations

import pytest

from mrcnet.core import HostConfig, retry_schedule
from mrcnet.core.recovery import retry_cnt_for
from mrcnet.daemon.config import DAEMON_CORE, STALL_TOLERANCE

from .harness import Impairments, Net, connect

# mrcd's timers; the "too early" floor of the harness's fabric (10 us RTT), not mrcd's
# (20 us: a Python peer answers later than that), or every SACK would be taken for forged.
CFG = HostConfig(**{k: v for k, v in DAEMON_CORE.items()
                    if hasattr(HostConfig, k) and k != "ack_rtt_floor"})
SCHEDULE = retry_schedule(CFG.timeout_floor, CFG.retry_cnt, CFG.retry_linear)
BUDGET = sum(SCHEDULE)
LAST_RTX = sum(SCHEDULE[:-1])


def _transfer(stall: float) -> tuple[Net, int, float]:
    imp = Impairments()
    net = Net(config=CFG, imp=imp)
    qa, _ = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    src, dst = bytearray(4 << 20), bytearray(4 << 20)
    ms, md = ha.register_mr(src), hb.register_mr(dst)
    ha.post_write(qa, 1, ms, 0, len(src), md.addr, md.rkey)
    net.run(until=lambda: hb.counters().get("rx_data", 0) > 50, max_time=5.0)
    t0 = net.now
    # the peer stalls: every frame sent in [t0, t0 + stall) is lost, both ways
    imp.drop_if = lambda _f: t0 <= net.now < t0 + stall
    net.run(until=lambda: ha.qp(qa).error_reason is not None or bool(ha.poll_cq(
        ha.qp(qa).cq, 1)), max_time=t0 + min(stall, 5) + 60)
    return net, qa, t0


def test_the_budget_derived_from_the_stall_to_ride_out() -> None:
    assert (CFG.timeout_floor, CFG.retry_linear, CFG.retry_cnt) == (0.02, 3, 9)
    assert [round(x / CFG.timeout_floor) for x in SCHEDULE] == [
        1, 1, 1, 1, 2, 4, 8, 16, 32, 64]
    assert abs(LAST_RTX - 1.32) < 1e-9 and abs(BUDGET - 2.6) < 1e-9
    assert retry_cnt_for(0.02, 3, STALL_TOLERANCE) == 9
    assert retry_cnt_for(0.02, 3, 0.36) == 7  # mrcd's count before: last rtx at 360 ms
    assert retry_cnt_for(0.02, 3, 0.0) == 0
    # mrc.h's limits: retry_linear_cnt <= 7, retry_exp_cnt <= 25 (25 = forever)
    assert CFG.retry_cnt - CFG.retry_linear <= 24


@pytest.mark.parametrize("stall", [0.05, 0.4, 1.0, 1.3])
def test_a_stalled_peer_is_not_declared_unreachable(stall: float) -> None:
    net, qa, _ = _transfer(stall)
    q = net.h(0).qp(qa)
    assert q.error_reason is None, q.error_reason
    c = q.counters()
    assert 1 <= c["retries_peak"] <= CFG.retry_cnt
    # the longest silence ridden out covers the stall (from the oldest packet's send)
    assert c["rto_silence_peak_ms"] >= stall * 1e3 - 1


def test_a_silence_past_the_last_retransmission_fails() -> None:
    net, qa, _ = _transfer(LAST_RTX + 0.01)
    assert net.h(0).qp(qa).error_reason is not None


def test_a_dead_peer_is_declared_within_the_budget() -> None:
    net, qa, t0 = _transfer(60.0)
    q = net.h(0).qp(qa)
    assert q.error_reason is not None and "retry budget" in q.error_reason
    assert q.counters()["retries_peak"] == CFG.retry_cnt + 1
    # base RTO is the floor here (RTT microseconds); one floor of slack for the send time
    assert LAST_RTX <= net.now - t0 <= BUDGET + CFG.timeout_floor
