"""NSCC: each quadrant, quick adapt, the window cap, BDP scaling, and the CC registry."""

from __future__ import annotations

import random

import pytest

from mrcnet.core import CC_REGISTRY, NSCC, CongestionControl, create_cc, register_cc
from mrcnet.core.cc import CNSCC, NSCC_ALPHA, NSCC_GAMMA, NSCC_MAX_BDP
from mrcnet.native import HAVE_C

MSS = 4096
RATE = 100e9 / 8  # bytes/s
BASE = 10e-6  # base RTT: BDP = 125 kB


def _cc(cwnd: float = 60_000.0) -> NSCC:
    cc = NSCC(MSS, RATE, BASE)
    cc.on_ack(0, BASE, False, 0.0)  # learn the base RTT
    cc.cwnd = cwnd
    return cc


def test_scaled_to_bdp() -> None:
    cc = _cc()
    assert cc.bdp == pytest.approx(RATE * BASE)
    assert cc.maxwnd == pytest.approx(NSCC_MAX_BDP * RATE * BASE)
    assert cc.target == pytest.approx(0.5 * BASE)
    # a smaller base RTT rescales everything
    cc.on_ack(0, BASE / 2, False, 1e-3)
    assert cc.bdp == pytest.approx(RATE * BASE / 2)
    assert cc.maxwnd == pytest.approx(NSCC_MAX_BDP * RATE * BASE / 2)


def test_proportional_increase_when_no_ecn_and_low_delay() -> None:
    cc = _cc()
    d = cc.target / 4
    cc.on_ack(MSS, BASE + d, False, 1e-3)
    assert cc.quadrant == "proportional_increase"
    want = 60_000 + NSCC_ALPHA * MSS * (cc.target - d) / cc.target
    assert cc.cwnd == pytest.approx(want)


def test_fair_increase_when_no_ecn_and_high_delay() -> None:
    cc = _cc()
    d = 2 * cc.target
    cc.on_ack(MSS, BASE + d, False, 1e-3)
    assert cc.quadrant == "fair_increase"
    assert cc.cwnd == pytest.approx(60_000 + cc.fi * MSS / 60_000)


def test_multiplicative_decrease_once_per_base_rtt_and_only_on_new_feedback() -> None:
    cc = _cc()
    d = 3 * cc.target
    cc.on_ack(MSS, BASE + d, True, 1e-3)
    assert cc.quadrant == "multiplicative_decrease"
    factor = max(1 - NSCC_GAMMA * (d - cc.target) / d, 0.5)
    assert cc.cwnd == pytest.approx(60_000 * factor)
    after_first = cc.cwnd
    cc.on_ack(MSS, BASE + d, True, 1e-3 + BASE / 2)  # same base RTT: no second cut
    assert cc.cwnd == pytest.approx(after_first)
    # a base RTT later, but about a packet sent before the cut: still no cut
    cc.on_ack(MSS, BASE + d, True, 1e-3 + 2 * BASE)
    assert cc.cwnd == pytest.approx(after_first)
    # feedback from a packet sent after the cut: cut again
    cc.on_ack(MSS, BASE + d, True, 1e-3 + 2 * (BASE + d))
    assert cc.cwnd < after_first


def test_decrease_is_at_most_half() -> None:
    cc = _cc()
    d = 3.9 * cc.target  # large delay, still below the quick-adapt threshold
    cc.on_ack(MSS, BASE + d, True, 1e-3)
    assert cc.cwnd >= 0.5 * 60_000 - 1e-6


def test_no_change_when_ecn_and_low_delay() -> None:
    cc = _cc()
    cc.on_ack(MSS, BASE + cc.target / 2, True, 1e-3)
    assert cc.quadrant == "no_change"
    assert cc.cwnd == 60_000


def test_quick_adapt_on_trim_sets_window_to_delivered_in_last_rtt() -> None:
    cc = _cc(100_000)
    t = 1e-3
    for i in range(5):  # 5 x MSS delivered within one RTT
        cc.on_ack(MSS, BASE, False, t + i * 1e-7)
    cc.on_trim(t + 1e-6, lasthop=False)
    cc.on_ack(MSS, BASE, False, t + 2e-6)
    assert cc.quadrant == "quick_adapt"
    assert cc.cwnd == pytest.approx(6 * MSS)


def test_quick_adapt_on_huge_delay_at_most_once_per_rtt() -> None:
    cc = _cc(100_000)
    t = 1e-3
    cc.on_ack(MSS, BASE, False, t)
    big = BASE + 5 * cc.target
    cc.on_ack(MSS, big, False, t + 1e-7)
    assert cc.quadrant == "fair_increase"  # one sample: not yet
    cc.on_ack(MSS, big, False, t + 2e-7)  # the second in a row: a queue
    assert cc.quadrant == "quick_adapt"
    w = cc.cwnd
    cc.on_ack(MSS, big, False, t + 3e-7)  # within the same RTT: ordinary quadrant
    assert cc.quadrant == "fair_increase"
    assert cc.cwnd >= w


@pytest.mark.parametrize("cls", [NSCC, CNSCC] if HAVE_C else [NSCC])
def test_one_held_sack_is_not_a_queue(cls: type[NSCC]) -> None:
    """A SACK the receiver held ``ack_delay`` (20 us, coalescing behind a reordered or
    lost sibling) gives one sample of base + 20 us, over the quick-adapt threshold of a
    10 us path (4 x 5 us): alone it must not cut the window to what the last RTT
    delivered; the samples around it are the base RTT (the all-reduce ring of issue 16:
    1570 -> 8 KiB on one such sample, a 180 us hop)."""
    cc = cls(MSS, RATE, BASE)
    cc.on_ack(0, BASE, False, 0.0)
    cc.cwnd = 150_000.0
    t = 1e-3
    cc.on_ack(MSS, BASE, False, t)
    cc.on_ack(MSS, BASE + 20e-6, False, t + 1e-6)  # the held one
    assert cc.quadrant != "quick_adapt" and cc.cwnd >= 150_000.0
    cc.on_ack(MSS, BASE, False, t + 2e-6)
    cc.on_ack(MSS, BASE + 20e-6, False, t + 3e-6)  # another, not in a row
    assert cc.quadrant != "quick_adapt" and cc.cwnd >= 150_000.0
    cc.on_ack(MSS, None, False, t + 4e-6)  # an ACK without a sample is no second one
    assert cc.quadrant != "quick_adapt"
    cc.on_ack(MSS, BASE + 21e-6, False, t + 5e-6)  # two in a row: a queue, adapt
    assert cc.quadrant == "quick_adapt" and cc.cwnd < 150_000.0


def test_window_capped_at_one_and_a_half_bdp() -> None:
    cc = _cc()
    for i in range(10_000):
        cc.on_ack(MSS, BASE, False, 1e-3 + i * 1e-7)
    assert cc.cwnd == pytest.approx(NSCC_MAX_BDP * RATE * BASE)


def test_receiver_window_penalty() -> None:
    cc = _cc(100_000)
    cc.on_penalty(127, 1e-3)
    assert cc.cwnd == pytest.approx(50_000)
    cc.on_penalty(127, 1e-3 + 1e-7)  # once per RTT
    assert cc.cwnd == pytest.approx(50_000)


def test_registry() -> None:
    assert {"nscc", "fixed"} <= set(CC_REGISTRY)
    assert isinstance(create_cc("nscc", MSS, RATE, BASE), NSCC)
    with pytest.raises(KeyError, match="known"):
        create_cc("cubic", MSS, RATE, BASE)

    @register_cc("test-double")
    class Double(CongestionControl):
        def on_ack(self, acked: int, rtt: float | None, ece: bool, now: float) -> None:
            self.cwnd *= 2

    cc = create_cc("test-double", MSS, RATE, BASE)
    cc.on_ack(1, None, False, 0.0)
    assert cc.cwnd == 2 * RATE * BASE
    del CC_REGISTRY["test-double"]


_FIELDS = ("cwnd", "base_rtt", "delay", "srtt", "scale_rtt", "bdp", "maxwnd", "target", "fi",
           "last_md", "last_qa", "qa_pending", "quadrant", "delay_prev")


@pytest.mark.skipif(not HAVE_C, reason="C fast path not built")
@pytest.mark.parametrize("seed", range(12))
def test_c_nscc_is_nscc_to_the_bit(seed: int) -> None:
    """CNSCC (nscc.c) and NSCC on the same random stream of ACKs (with and without RTT
    samples, ECE, bursts and gaps, falling base RTTs), trims, losses and penalties, with
    and without the delay filter and the floors: every field equal after every step
    (floats compared exactly)."""
    rng = random.Random(seed)
    kw = rng.choice([{}, {"target_floor": 1e-3, "rtt_floor": 1.5e-3, "delay_filter": 0.5},
                     {"delay_filter": 2.0}, {"rtt_floor": 2e-4}])
    mss, rate, hint = rng.choice([1024, 8192]), rng.choice([1.25e9, 6.25e7, 10**9]), 5e-4
    py, c = NSCC(mss, rate, hint, **kw), CNSCC(mss, rate, hint, **kw)
    assert type(create_cc("nscc", mss, rate, hint, **kw)) is CNSCC
    now = 1.0
    base = rng.uniform(1e-5, 2e-3)
    for step in range(3000):
        now += rng.choice([0.0, rng.expovariate(1e5), rng.expovariate(1e3)])
        r, lasthop, penalty = rng.random(), rng.random() < 0.5, rng.randrange(-1, 128)
        for cc in (py, c):
            if r < 0.02:
                cc.on_trim(now, lasthop)
            elif r < 0.03:
                cc.on_loss(now)
            elif r < 0.05:
                cc.on_penalty(penalty, now)
        if r >= 0.05:
            if rng.random() < 0.01:
                base *= rng.uniform(0.5, 1.0)
            acked = rng.choice([0, mss, 3 * mss, rng.randrange(1, 20 * mss)])
            rtt = None if rng.random() < 0.2 else base * rng.uniform(0.9, 5.0)
            if rtt is not None and rng.random() < 0.01:
                rtt = 0.0
            ece = rng.random() < 0.15
            py.on_ack(acked, rtt, ece, now)
            c.on_ack(acked, rtt, ece, now)
        assert [getattr(c, f) for f in _FIELDS] == [getattr(py, f) for f in _FIELDS], step
    assert {py.quadrant} != {""}
