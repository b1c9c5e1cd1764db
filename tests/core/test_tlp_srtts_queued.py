"""``HostConfig.tlp_srtts_queued`` (mrcnet/core/tailloss.py ``TailLoss.pto``;
docs/COLLECTIVES.md, "session 14"): the tail-loss probe's shorter multiple only for a QP
whose RTT samples show queueing, on the virtual clock. A QP whose samples met a queue
finds a lost tail sooner; a queue-free QP keeps ``tlp_srtts``' probe to the nanosecond;
the knob off changes nothing. Both recoveries (C's common case and the pure-Python
reference) decide alike."""

from __future__ import annotations

import pytest

from mrcnet.core import HostConfig, evs
from mrcnet.wire import parse_frame

from .harness import Impairments, Net, connect

QUEUE = 20e-6  # the queueing bound (tlp_queue)
FLOOR = 1e-3  # the retransmission timeout's floor: far above every RTT here


def _tail_lost(queued: bool, native: bool, **cfg: object) -> tuple[float, dict[str, int],
                                                                    float, float]:
    """h0 writes 16 packets to h1 (5 us each way), then (``queued``) 16 more while every
    packet meets 25 us each way (a queue: srtt far above min_RTT), then a write of 4
    packets whose last (the QP's tail) is lost once. Returns how long the last write
    took, h0's counters over it, and h0's QP's ``pto()`` and smoothed RTT at its post."""
    mp = pytest.MonkeyPatch()
    mp.setattr(evs, "NATIVE", native)
    try:
        net = Net(planes=2, spines=4, imp=Impairments(delay=5e-6),
                  config=HostConfig(**{"timeout_floor": FLOOR, "ack_every": 1,  # type: ignore[arg-type]
                                       **cfg}))
        qa, _ = connect(net, 0, 1)
    finally:
        mp.undo()
    ha, hb = net.h(0), net.h(1)
    mtu = ha.config.mtu_payload
    src = bytes(range(256)) * (36 * mtu // 256 + 1)
    dst = bytearray(len(src))
    ms, md = ha.register_mr(bytearray(src)), hb.register_mr(dst)
    ha.post_write(qa, 0, ms, 0, 16 * mtu, md.addr, md.rkey)
    net.run(until=lambda: len(ha.qp(qa).cq) >= 1, max_time=1.0)
    if queued:
        net.imp.delay = 25e-6
    ha.post_write(qa, 1, ms, 16 * mtu, 16 * mtu, md.addr + 16 * mtu, md.rkey)
    net.run(until=lambda: len(ha.qp(qa).cq) >= 2, max_time=1.0)
    base = ha.qp(qa).snd.next_seq
    dropped: list[int] = []

    def drop(frame: bytes) -> bool:
        f = parse_frame(frame)
        if f.is_data and f.bth.psn == base + 3 and not dropped:
            dropped.append(f.bth.psn)
            return True
        return False

    net.imp.drop_if = drop
    rec = ha.qp(qa).rec
    pto, srtt = rec.pto(), rec.srtt
    before = dict(ha.counters())
    t0 = net.now
    ha.post_write(qa, 2, ms, 32 * mtu, 4 * mtu, md.addr + 32 * mtu, md.rkey)
    net.run(until=lambda: len(ha.qp(qa).cq) >= 3, max_time=1.0)
    assert dropped
    assert bytes(dst[:36 * mtu]) == src[:36 * mtu]
    after = ha.counters()
    return net.now - t0, {k: v - before.get(k, 0) for k, v in after.items()
                          if v != before.get(k, 0)}, pto, srtt


@pytest.mark.parametrize("native", [True, False])
def test_queued_qp_takes_the_shorter_probe(native: bool) -> None:
    """The QP's samples met 25 us of queue each way after a 10 us round trip: its probe
    waits 1.5 smoothed RTTs, not 2, and the lost tail's write ends sooner (by about
    half a smoothed RTT, over 15 us here)."""
    on, c_on, pto_on, srtt = _tail_lost(True, native, tlp_srtts_queued=1.5, tlp_queue=QUEUE)
    off, c_off, pto_off, _ = _tail_lost(True, native)
    hold = HostConfig().ack_delay
    assert srtt > 30e-6
    assert pto_on == pytest.approx(1.5 * srtt + hold)
    assert pto_off == pytest.approx(2 * srtt + hold)
    assert c_on.get("lost_tlp") == 1 and c_off.get("lost_tlp") == 1
    assert "rto_rounds" not in c_on and "rto_rounds" not in c_off
    assert on < off - 15e-6


@pytest.mark.parametrize("native", [True, False])
def test_queue_free_qp_keeps_tlp_srtts(native: bool) -> None:
    """Every sample 10 us (no queue): the knob on gives the same probe, times and
    counters as without it."""
    on, c_on, pto_on, srtt = _tail_lost(False, native, tlp_srtts_queued=1.5, tlp_queue=QUEUE)
    off, c_off, pto_off, _ = _tail_lost(False, native)
    assert pto_on == pto_off == pytest.approx(2 * srtt + HostConfig().ack_delay)
    assert on == off and c_on == c_off
    assert c_on.get("lost_tlp") == 1


def test_c_and_python_alike() -> None:
    """C's common case and the pure-Python reference: the same times and counters with
    the knob on, queued or not."""
    for queued in (True, False):
        c = _tail_lost(queued, True, tlp_srtts_queued=1.5, tlp_queue=QUEUE)
        py = _tail_lost(queued, False, tlp_srtts_queued=1.5, tlp_queue=QUEUE)
        assert c[0] == py[0] and c[2] == py[2]


def test_bound_defaults_to_rack_prompt_queue() -> None:
    """``tlp_queue`` 0: the bound is ``rack_prompt_queue``'s (a QP takes either the
    shorter RACK wait or the shorter probe); a negative multiple is refused."""
    _, _, pto, srtt = _tail_lost(True, True, tlp_srtts_queued=1.5, rack_prompt_queue=QUEUE)
    assert pto == pytest.approx(1.5 * srtt + HostConfig().ack_delay)
    with pytest.raises(Exception, match="tlp_srtts_queued"):
        HostConfig(tlp_srtts_queued=-1.0)
