"""A QP's packet in flight on a route another QP of the host finds dead
(``HostConfig.verdict_inflight``; mrcnet/core/tailloss.py ``_shared_retired``;
docs/COLLECTIVES.md, "session 14"), on the virtual clock: QP B's tail (its write's only
packet: nothing sent after it lets RACK see it lost) leaves on a path that dies under
it; QP A of the same host then sprays a burst over every path, and A's RACK retires the
dead one. With the knob B's tail is resent at A's verdict; without it, at B's own
tail-loss probe."""

from __future__ import annotations

from mrcnet.core import HostConfig
from mrcnet.wire import parse_frame

from .harness import _INNER_DST, Net, connect

FLOOR = 1e-3  # the retransmission timeout's floor: far above every RTT here
# B's probe waits 6 smoothed RTTs (60 us here): what an incast's queues make of the
# 2 of RFC 8985 in the 64-host all-to-all, where the tail's probe came 70-100 us after
PROBE_SRTTS = 6.0


def _tail_after_burst(dead: tuple[int, int] | None, gap: float,
                      **cfg: object) -> tuple[float, dict[str, int], tuple[int, int]]:
    """After a warm-up, path ``dead`` (plane, spine) goes dark as QP A's 48-packet write
    leaves; ``gap`` later QP B's one-packet write. Returns how long B's write took, h0's
    counters over the two writes and the path (plane, spine) B's packet took."""
    net = Net(n_hosts=3, planes=2, spines=8,
              config=HostConfig(**{"timeout_floor": FLOOR, "ack_every": 1,  # type: ignore[arg-type]
                                   "evs_per_qp": 16, "tlp_srtts": PROBE_SRTTS, **cfg}))
    qa, _ = connect(net, 0, 1)
    qb, _ = connect(net, 0, 2)
    h0, h1, h2 = net.h(0), net.h(1), net.h(2)
    mtu = h0.config.mtu_payload
    src = bytes(range(256)) * (64 * mtu // 256)
    ms = h0.register_mr(bytearray(src))
    da, db = bytearray(len(src)), bytearray(len(src))
    ma, mb = h1.register_mr(da), h2.register_mr(db)
    # warm-up: both QPs measure their RTT over every path
    h0.post_write(qa, 0, ms, 0, 16 * mtu, ma.addr, ma.rkey)
    h0.post_write(qb, 0, ms, 0, 16 * mtu, mb.addr, mb.rkey)
    net.run(until=lambda: len(h0.qp(qa).cq) >= 1 and len(h0.qp(qb).cq) >= 1, max_time=1.0)
    tail = h0.qp(qb).snd.next_seq
    took: list[tuple[int, int]] = []

    def see(frame: bytes) -> bool:
        """Note the path of B's tail (its resend's if ``dead`` dropped it)."""
        dst = net.ip_host.get(bytes(frame[_INNER_DST : _INNER_DST + 16]))
        if not took and dst is not None and dst[0] == "h2":
            f = parse_frame(frame)
            if f.is_data and f.bth.psn == tail:
                took.append((dst[1], net._spine(frame)))
        return False

    net.imp.drop_if = see
    if dead is not None:
        net.imp.dead_paths = {dead}
    before = dict(h0.counters())
    h0.post_write(qa, 1, ms, 16 * mtu, 48 * mtu, ma.addr + 16 * mtu, ma.rkey)
    t_a = net.now
    net.run(until=lambda: net.now >= t_a + gap, max_time=1.0)
    t0 = net.now
    h0.post_write(qb, 1, ms, 16 * mtu, mtu, mb.addr + 16 * mtu, mb.rkey)
    net.run(until=lambda: len(h0.qp(qb).cq) >= 2, max_time=1.0)
    t_b = net.now - t0
    net.run(until=lambda: len(h0.qp(qa).cq) >= 2, max_time=1.0)
    assert bytes(db[:17 * mtu]) == src[:17 * mtu]
    assert bytes(da[:64 * mtu]) == src[:64 * mtu]
    after = h0.counters()
    return t_b, {k: v - before.get(k, 0) for k, v in after.items()
                 if v != before.get(k, 0)}, took[0]


def _tail_then_burst(**cfg: object) -> tuple[float, dict[str, int]]:
    """B's tail sent 15 us after A's burst onto the path that died as the burst left
    (the 64-host all-to-all's failure step: the tail left 21 us after the link died).
    Which path B's tail takes is the spray's: a first run without a failure finds it
    (the runs are alike up to then: the virtual clock, the spray's fixed order)."""
    _, _, path = _tail_after_burst(None, 15e-6, **cfg)
    took, counts, _ = _tail_after_burst(path, 15e-6, **cfg)
    return took, counts


def test_tail_resent_at_another_qps_verdict() -> None:
    """Without the knob B's tail waits for its probe (6 srtt + the hold after it left);
    with it B's tail is resent when A's RACK retires the path (the loss found an RTT
    and RACK's allowance after A's burst, then half an RTT's grace), well before."""
    off, c_off = _tail_then_burst()
    assert c_off.get("lost_tlp", 0) == 1 and "verdict_inflight" not in c_off
    assert off > PROBE_SRTTS * 10e-6
    on, c_on = _tail_then_burst(verdict_inflight=True)
    assert c_on.get("verdict_inflight") == 1 and "lost_tlp" not in c_on
    assert on < off - 10e-6


def test_no_verdict_no_change() -> None:
    """Without a path dying the knob changes nothing: the same writes take the same
    time."""
    def quiet(**cfg: object) -> tuple[float, dict[str, int]]:
        net = Net(n_hosts=3, planes=2, spines=8,
                  config=HostConfig(**{"ack_every": 1, "evs_per_qp": 16, **cfg}))  # type: ignore[arg-type]
        qa, _ = connect(net, 0, 1)
        qb, _ = connect(net, 0, 2)
        h0 = net.h(0)
        mtu = h0.config.mtu_payload
        ms = h0.register_mr(bytearray(32 * mtu))
        ma = net.h(1).register_mr(bytearray(32 * mtu))
        mb = net.h(2).register_mr(bytearray(32 * mtu))
        h0.post_write(qa, 0, ms, 0, 32 * mtu, ma.addr, ma.rkey)
        h0.post_write(qb, 0, ms, 0, 32 * mtu, mb.addr, mb.rkey)
        net.run(until=lambda: len(h0.qp(qa).cq) >= 1 and len(h0.qp(qb).cq) >= 1, max_time=1.0)
        return net.now, dict(h0.counters())
    assert quiet() == quiet(verdict_inflight=True)
