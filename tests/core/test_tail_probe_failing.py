"""The tail-loss probe while the host holds a route failing, on the virtual clock
(mrcnet/core/tailloss.py, ``HostConfig.tlp_fail_rtt`` and ``tlp_fail_path``;
docs/COLLECTIVES.md, "session 13"): a tail lost on a dead path is found within two
*newest* RTT samples and the hold (not two smoothed RTTs that a queue inflated), and the
probe's resend goes on a path proven since the failure; neither rule fires while no
route is known failing."""

from __future__ import annotations

from mrcnet.core import HostConfig
from mrcnet.wire import parse_frame

from .harness import Impairments, Net, connect
from .test_tail_loss import _lone_writes

FLOOR = 1e-3  # the retransmission timeout's floor: far above every RTT here
HOLD = HostConfig().ack_delay  # the peer's ACK hold the probe's timeout allows


def _settle_first(net: Net) -> None:
    """Each host settles the acknowledgements it received (``Host.settle_acks``: the
    probe re-armed from them) before its timers are read, as mrc-sim's hosts do (they
    send, then read the timers). The harness reads the timers between a frame's arrival
    and the flush that settles it, so a probe re-armed earlier by the acknowledgements
    waits for the next frame or the deadline armed before."""
    for h in net.hosts.values():
        def next_timer(h: object = h, read: object = h.next_timer) -> float | None:
            h.settle_acks(net.now)  # type: ignore[attr-defined]
            return read()  # type: ignore[operator, no-any-return]
        h.next_timer = next_timer  # type: ignore[method-assign]


def _tail_after_queues(npkts: int, early: frozenset[tuple[int, int]],
                       **cfg: object) -> tuple[float, dict[str, int], float]:
    """A warm-up write from h0 to h1 while every packet meets 25 us of queue each way
    (the smoothed RTT about 50 us), then the queues drain (5 us each way) and a write of
    ``npkts`` packets whose last (the QP's tail) is lost on its first transmission.
    ``early`` paths (plane, spine) drop everything from the start: the warm-up finds them
    and the host holds their routes failing. Returns how long the second write took,
    h0's counters over it and h0's smoothed RTT when it was posted."""
    net = Net(planes=2, spines=8, imp=Impairments(delay=25e-6),
              config=HostConfig(**{"timeout_floor": FLOOR, "ack_every": 1,  # type: ignore[arg-type]
                                   "evs_per_qp": 16, **cfg}))
    _settle_first(net)
    qa, _ = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    mtu = ha.config.mtu_payload
    src = bytes(range(256)) * (32 * mtu // 256)
    dst = bytearray(len(src))
    ms, md = ha.register_mr(bytearray(src)), hb.register_mr(dst)
    net.imp.dead_paths = set(early)
    ha.post_write(qa, 0, ms, 0, 16 * mtu, md.addr, md.rkey)
    net.run(until=lambda: len(ha.qp(qa).cq) >= 1, max_time=1.0)
    net.imp.delay = 5e-6
    base = ha.qp(qa).snd.next_seq
    dropped: list[int] = []

    def drop(frame: bytes) -> bool:
        f = parse_frame(frame)
        if f.is_data and f.bth.psn == base + npkts - 1 and not dropped:
            dropped.append(f.bth.psn)
            return True
        return False

    net.imp.drop_if = drop
    before = dict(ha.counters())
    srtt = ha.qp(qa).srtt
    t0 = net.now
    ha.post_write(qa, 1, ms, 16 * mtu, npkts * mtu, md.addr + 16 * mtu, md.rkey)
    net.run(until=lambda: len(ha.qp(qa).cq) >= 2, max_time=1.0)
    assert dropped
    assert bytes(dst[:(16 + npkts) * mtu]) == src[:(16 + npkts) * mtu]
    after = ha.counters()
    return net.now - t0, {k: v - before.get(k, 0) for k, v in after.items()
                          if v != before.get(k, 0)}, srtt


def test_tail_on_a_dead_path_is_probed_within_the_newest_rtt() -> None:
    """``tlp_fail_rtt``: the host holds a route failing; the queues that made its
    smoothed RTT 50 us have drained when a write's tail is lost. The probe fires two
    newest RTT samples (10 us) and the hold after the tail left (not after its
    siblings' acknowledgements, which came 10 us later), and the write ends one round
    trip after that: within 2 x 10 + hold + 10 us of its post. Without the rule it waits
    two smoothed RTTs (still over 30 us each: three samples move it an eighth each) and
    the hold from the last acknowledgement."""
    early = frozenset({(0, 1)})
    on, c_on, srtt = _tail_after_queues(4, early, tlp_fail_rtt=True)
    assert srtt > 40e-6
    assert c_on.get("lost_tlp") == 1 and "rto_rounds" not in c_on
    assert on <= 3 * 10e-6 + HOLD + 1e-9
    off, c_off, _ = _tail_after_queues(4, early)
    assert c_off.get("lost_tlp") == 1 and "rto_rounds" not in c_off
    assert off > on + 50e-6


def test_probe_rules_do_not_fire_without_a_failing_route() -> None:
    """``tlp_fail_rtt`` and ``tlp_fail_path`` act only while the host holds a route
    failing: with every path alive until the tail's loss, the same times and counters
    as without them (the probe waits two smoothed RTTs, as RFC 8985 has it, and its
    resend goes where the spray sends it)."""
    on, c_on, _ = _tail_after_queues(4, frozenset(), tlp_fail_rtt=True, tlp_fail_path=True)
    off, c_off, _ = _tail_after_queues(4, frozenset())
    assert on == off and c_on == c_off
    assert c_on.get("lost_tlp") == 1 and "tlp_path_moved" not in c_on


def test_probe_resend_goes_on_a_path_proven_since_the_failure() -> None:
    """``tlp_fail_path``: the host holds a route failing (a path dark from the start),
    then five more paths go dark; lone writes' tails land on them and the probe resends
    each. Sprayed, a resend lands on another dark path not found yet and waits for the
    retransmission timeout (1 ms); with the rule every resend goes on a path that
    delivered since the failure and every write ends within one probe (two RTTs and the
    hold) and one round trip."""
    dead, early = {(1, 2), (1, 3), (0, 3), (0, 4), (1, 4)}, frozenset({(0, 1)})
    off, c_off = _lone_writes(28, dead, 8, early)
    assert c_off.get("rto_rounds", 0) >= 1 and max(off) > FLOOR
    on, c_on = _lone_writes(28, dead, 8, early, tlp_fail_path=True)
    assert c_on.get("lost_tlp", 0) >= len(dead) and c_on.get("tlp_path_moved", 0) >= 1
    assert "rto_rounds" not in c_on and "lost_timeout" not in c_on
    assert max(on) <= 2 * 10e-6 + HOLD + 10e-6 + 1e-9


def test_probe_rules_wait_for_a_recent_verdict_with_a_window() -> None:
    """``tlp_fail_window``: the rules act only within the window of the newest failing
    verdict. The dark path's verdict is 10 us old when the tail's probe is armed: a
    5 us window leaves the probe as without the rules, a 1 ms one lets them act."""
    early = frozenset({(0, 1)})
    off, c_off, _ = _tail_after_queues(4, early)
    old, c_old, _ = _tail_after_queues(4, early, tlp_fail_rtt=True, tlp_fail_window=5e-6)
    assert old == off and c_old == c_off
    new, _, _ = _tail_after_queues(4, early, tlp_fail_rtt=True, tlp_fail_window=1e-3)
    assert new < off - 50e-6


def test_newest_rtt_rule_acts_without_a_failing_route_when_ungated() -> None:
    """``tlp_fail_gate=False``: ``tlp_fail_rtt`` acts on every probe, so the tail lost
    with every route alive is found as soon as with a route failing (2 x 10 us + the
    hold after it left), over 50 us before the gated rule finds it."""
    gated, _, _ = _tail_after_queues(4, frozenset(), tlp_fail_rtt=True)
    ungated, c, _ = _tail_after_queues(4, frozenset(), tlp_fail_rtt=True, tlp_fail_gate=False)
    assert c.get("lost_tlp") == 1 and "rto_rounds" not in c
    assert ungated <= 3 * 10e-6 + HOLD + 1e-9 < gated - 50e-6
