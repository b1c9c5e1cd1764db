"""A lost packet that nothing sent after it reveals, on the virtual clock: found by
RACK's tie-break (a burst's packets share one send time) or by the tail-loss probe,
well before the retransmission timeout (mrcnet/core/recovery.py)."""

from __future__ import annotations

from mrcnet.core import HostConfig
from mrcnet.wire import parse_frame

from .harness import Impairments, Net, connect

FLOOR = 1e-3  # the retransmission timeout's floor: far above the 10 us RTT


def _write_losing(psn_index: int, npkts: int, trim_first: bool = False,
                  **cfg: object) -> tuple[float, dict[str, int]]:
    """A warm-up write (every path measured), then one write of ``npkts`` packets from
    h0 to h1 whose packet ``psn_index`` is lost on its first transmission (with
    ``trim_first``: trimmed on its first, lost on its second). Returns how long that
    write took and h0's counters."""
    net = Net(planes=2, spines=4, imp=Impairments(delay=5e-6),
              config=HostConfig(**{"timeout_floor": FLOOR, "ack_every": 1,  # type: ignore[arg-type]
                                   "evs_per_qp": 8, **cfg}))
    qa, _ = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    mtu = ha.config.mtu_payload
    warm = 16
    src = bytes(range(256)) * (max(npkts, warm) * mtu // 256)
    dst = bytearray(len(src))
    ms, md = ha.register_mr(bytearray(src)), hb.register_mr(dst)
    ha.post_write(qa, 0, ms, 0, len(src), md.addr, md.rkey)
    net.run(until=lambda: len(ha.qp(qa).cq) >= 1, max_time=1.0)
    base = ha.qp(qa).snd.next_seq
    dropped: list[int] = []
    seen: list[bytes] = []  # transmissions of the packet so far

    def drop(frame: bytes) -> bool:
        f = parse_frame(frame)
        if f.is_data and f.bth.psn == base + psn_index and not dropped:
            seen.append(frame)
            if len(seen) == 1 + trim_first:
                dropped.append(f.bth.psn - base)
                return True
        return False

    net.imp.drop_if = drop
    net.imp.trim_if = lambda frame: trim_first and seen == [frame]
    before = dict(ha.counters())
    t0 = net.now
    dst[:] = bytes(len(dst))
    ha.post_write(qa, 1, ms, 0, npkts * mtu, md.addr, md.rkey)
    net.run(until=lambda: len(ha.qp(qa).cq) >= 2, max_time=1.0)
    assert dropped == [psn_index]
    assert bytes(dst[:npkts * mtu]) == src[:npkts * mtu]
    after = ha.counters()
    return net.now - t0, {k: v - before.get(k, 0) for k, v in after.items()
                          if v != before.get(k, 0)}


def test_lost_tail_is_probed_not_timed_out() -> None:
    """The last packet of a write is lost: nothing after it can reveal it. The probe
    resends it after about two RTTs; without the probe it waits for the timeout."""
    done, c = _write_losing(3, 4)
    assert c.get("lost_tlp") == 1
    assert "rto_rounds" not in c
    assert done < FLOOR / 4
    late, c_off = _write_losing(3, 4, tail_probe=False)
    assert c_off.get("rto_rounds") == 1 and "lost_tlp" not in c_off
    assert late > FLOOR > 4 * done


def test_lost_packet_of_a_burst_is_found_by_the_tie_break() -> None:
    """The first packet of a burst sent at one instant is lost and its siblings are
    acknowledged: RACK's sequence tie-break finds it within the reorder allowance."""
    done, c = _write_losing(0, 4)
    assert c.get("loss_rack_tie") == 1
    assert "rto_rounds" not in c and "lost_tlp" not in c
    assert done < FLOOR / 4


def test_lost_retransmission_of_a_trim_is_probed_not_timed_out() -> None:
    """A two-packet write: the first is trimmed, its NACK comes with the second's SACK
    (nothing left in flight then), and its retransmission is lost (a link dying under
    it). The probe must cover the queued retransmission; before, the SACK disarmed it
    and the write waited for the retransmission timeout (the all-to-all of issue 16:
    200 us in the failure's step)."""
    done, c = _write_losing(0, 2, trim_first=True)
    assert c.get("lost_trim") == 1 and c.get("lost_tlp") == 1
    assert "rto_rounds" not in c
    assert done < FLOOR / 4
    late, c_off = _write_losing(0, 2, trim_first=True, tail_probe=False)
    assert c_off.get("lost_trim") == 1 and c_off.get("rto_rounds") == 1
    assert late > FLOOR > 4 * done


def test_tied_loss_on_a_path_never_sampled_is_found_by_rack() -> None:
    """SACKs every fourth packet: the same packet positions trigger them write after
    write, so some paths deliver (their packets acknowledged in the bitmaps) without
    ever giving an RTT sample. A burst's packet lost on such a path is bounded by the
    QP's slowest measured path and found by the tie-break, not left to the probe (the
    all-reduce ring of issue 16: 64 KiB writes, SACKed by the same positions)."""
    done, c = _write_losing(0, 4, ack_every=4)
    assert c.get("loss_rack_tie") == 1
    assert "lost_tlp" not in c and "rto_rounds" not in c
    assert done < FLOOR / 4


def _lone_writes(n: int, dead: set[tuple[int, int]], spines: int,
                 early: frozenset[tuple[int, int]] = frozenset(),
                 **cfg: object) -> tuple[list[float], dict[str, int]]:
    """A warm-up write, then ``n`` one-packet writes from h0 to h1 over 2 planes of
    ``spines`` paths (one EV each), each posted when the one before has completed: every
    packet is the QP's tail (nothing follows it). ``early`` paths (plane, spine) drop
    everything from the start (the warm-up loses a packet on each, and RACK retires
    them: the host holds their routes failing); ``dead`` paths from the ninth write on
    (the QP's last eight runs were then all on live paths). Returns the times of the
    writes from the ninth on and h0's counters over them."""
    net = Net(planes=2, spines=spines, imp=Impairments(delay=5e-6),
              config=HostConfig(**{"timeout_floor": FLOOR, "ack_every": 1,  # type: ignore[arg-type]
                                   "evs_per_qp": 2 * spines, **cfg}))
    qa, _ = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    mtu = ha.config.mtu_payload
    src = bytes(range(256)) * (max(n, 16) * mtu // 256)
    dst = bytearray(len(src))
    ms, md = ha.register_mr(bytearray(src)), hb.register_mr(dst)
    net.imp.dead_paths = set(early)
    ha.post_write(qa, 0, ms, 0, 16 * mtu, md.addr, md.rkey)
    net.run(until=lambda: len(ha.qp(qa).cq) >= 1, max_time=1.0)
    before: dict[str, int] = {}
    times = []
    for i in range(n):
        if i == 8:
            net.imp.dead_paths = set(early) | dead
            before = dict(ha.counters())
        t0 = net.now
        ha.post_write(qa, 1 + i, ms, i * mtu, mtu, md.addr + i * mtu, md.rkey)
        net.run(until=lambda i=i: len(ha.qp(qa).cq) >= 2 + i, max_time=1.0)
        times.append(net.now - t0)
    assert bytes(dst[:n * mtu]) == src[:n * mtu]
    after = ha.counters()
    return times[8:], {k: v - before.get(k, 0) for k, v in after.items()
                       if v != before.get(k, 0)}


def test_tail_avoids_a_path_not_proven_since_the_last_runs() -> None:
    """``tail_path``: the host holds a route failing (a spine of plane 0 dark from the
    start: the warm-up found it), then a spine of plane 1 goes dark too. One-packet
    writes follow one another, each the QP's tail, sprayed over 16 paths, so a path's
    last use is older than the QP's last eight runs. Sprayed, the newly dark path takes
    a tail, found only by the probe (two smoothed RTTs and the peer's hold after it
    left: 50 us); with the rule no tail goes on a path that has not delivered lately,
    and every write takes one round trip (10 us: 5 us each way)."""
    early = frozenset({(0, 1)})
    off, c_off = _lone_writes(40, {(1, 2)}, 8, early, tail_path=False)
    assert c_off.get("lost_tlp", 0) >= 1 and "tail_path_moved" not in c_off
    assert max(off) > 4 * 10e-6
    on, c_on = _lone_writes(40, {(1, 2)}, 8, early, tail_path=True)
    assert c_on.get("tail_path_moved", 0) >= 1
    assert not any(k.startswith("lost_") for k in c_on)
    assert max(on) < 12e-6


def test_tail_path_moves_nothing_while_every_path_delivers() -> None:
    """``tail_path`` must not fire while the host knows of no failing route (16 paths:
    each one's last use is older than the last eight runs, which would move every tail
    once a route is failing): the same paths, the same times as without it."""
    off, c_off = _lone_writes(32, set(), 8, tail_path=False)
    on, c_on = _lone_writes(32, set(), 8, tail_path=True)
    assert "tail_path_moved" not in c_on
    assert on == off and c_on == c_off
