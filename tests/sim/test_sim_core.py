"""The protocol core on the simulated fabric: the issue's done-when scenarios.

Everything runs on the virtual clock; no root, no sockets. Sizes are chosen so each test
takes a few CPU seconds at most.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from simtraffic import SendTap, SentFrame

from mrcnet.core import EVState, ev_path
from mrcnet.sim.failures import parse_failure
from mrcnet.sim.matrix import Flow, incast, permutation
from mrcnet.sim.runner import SimRun
from mrcnet.sim.topology import parse_topology, with_options


def _core_total(run: SimRun, counter: str) -> int:
    return sum(h.counters().get(counter, 0) for h in run.hosts)


def _paths(sent: Iterable[SentFrame]) -> set[tuple[int, int]]:
    return {ev_path(s.ev)[:2] for s in sent}


def test_one_flow_completes_near_line_rate_over_every_path() -> None:
    spec = parse_topology("leafspine:planes=2,spines=4,leaves=2,hosts=1")
    run = SimRun(spec, [Flow(0, 0, 1, 10e-6, 4 << 20)])
    tap = SendTap(run.hosts[0])
    run.fabric.hosts[0].endpoint = tap
    res = run.run(until=0.1)
    r = res.flows[0]
    assert r.error is None and r.finish is not None and r.finish > 10e-6
    assert r.slowdown is not None and r.slowdown < 1.15
    assert _paths(tap.sent) == {(p, s) for p in range(2) for s in range(4)}
    assert _core_total(run, "tx_retransmit") == 0
    # Both planes carry the same share (the core keeps planes evenly loaded).
    per_plane = [sum(1 for s in tap.sent if ev_path(s.ev)[0] == p) for p in (0, 1)]
    assert abs(per_plane[0] - per_plane[1]) <= 1


def test_ecmp_baseline_keeps_each_flow_on_one_hashed_path() -> None:
    spec = parse_topology("leafspine:planes=2,spines=4,leaves=4,hosts=2")
    flows = permutation(8, 1 << 20, seed=3)
    run = SimRun(spec, flows, transport="ecmp")
    taps = []
    for node in run.fabric.hosts:
        tap = SendTap(node.endpoint)
        node.endpoint = tap
        taps.append(tap)
    res = run.run(until=0.5)
    assert all(r.finish is not None and r.error is None for r in res.flows)
    for f in flows:
        assert len(_paths(taps[f.src].sent)) == 1  # one flow per source host here
    # A single path gets one NIC port's rate at most: half of the host's two planes.
    assert min(r.slowdown or 0 for r in res.flows) > 1.9


def _incast_run(trim: bool) -> SimRun:
    # Eight senders on two other leaves, one receiver: only its downlinks are shared.
    spec = with_options(parse_topology("leafspine:planes=2,spines=8,leaves=3,hosts=4"), trim=trim)
    run = SimRun(spec, incast(range(4, 12), 0, 4 << 20))
    run.run(until=1.0)
    return run


@pytest.fixture(scope="module")
def incast_runs() -> dict[str, SimRun]:
    return {"trim": _incast_run(True), "droptail": _incast_run(False)}


def test_incast_with_trimming_finishes_near_ideal_without_timeouts(
        incast_runs: dict[str, SimRun]) -> None:
    run = incast_runs["trim"]
    res = run.result()
    assert all(r.finish is not None and r.error is None for r in res.flows)
    assert res.makespan is not None
    ratio = res.makespan / res.makespan_ideal
    assert ratio <= 1.15, f"8->1 incast took {ratio:.3f}x the ideal"
    assert _core_total(run, "lost_timeout") == 0  # no timeout-driven retransmissions
    assert _core_total(run, "rto_rounds") == 0
    trimmed = sum(c["trimmed"] for c in res.ports.values())
    assert trimmed > 0 and _core_total(run, "lost_trim") == trimmed  # every trim recovered
    assert sum(c["drop_queue"] for c in res.ports.values()) == 0


def test_incast_trims_are_last_hop_nacked_so_and_move_no_ev(
        incast_runs: dict[str, SimRun]) -> None:
    """The leaf ports to the receiver trim (marked TRIMMED_LASTHOP), the receiver NACKs
    every trim TRIMMED_LASTHOP, and no sender's EV changes state for them."""
    run = incast_runs["trim"]
    res = run.result()
    trimming = {name for name, c in res.ports.items() if c["trimmed"]}
    assert trimming and all(name.split(">")[1] == "h0" for name in trimming), trimming
    rx = run.hosts[0].counters()
    assert rx["rx_trimmed"] == rx["rx_trimmed_lasthop"] == rx["tx_nack_lasthop"] > 0
    assert rx["tx_nack"] == rx["tx_nack_lasthop"]
    for f in run.flows:
        stats = run.hosts[f.src].ev_stats(run.qps[f.id][0]).values()
        assert all(st["state"] == EVState.GOOD.value for st in stats), f


def test_incast_with_drop_tail_is_reported_beside_it(incast_runs: dict[str, SimRun]) -> None:
    trim, drop = incast_runs["trim"].result(), incast_runs["droptail"].result()
    assert all(r.finish is not None and r.error is None for r in drop.flows)
    assert sum(c["drop_queue"] for c in drop.ports.values()) > 0
    assert sum(c["trimmed"] for c in drop.ports.values()) == 0
    assert drop.makespan is not None and trim.makespan is not None
    assert drop.makespan > trim.makespan  # losses cost timeouts; trims do not
    assert _core_total(incast_runs["droptail"], "lost_timeout") > 0


FAIL_AT, HEAL_AT = 0.5e-3, 1.5e-3
Failover = tuple[SimRun, SendTap, list[tuple[float, int]], float]


@pytest.fixture(scope="module")
def failover() -> Failover:
    """A 2-plane, 8-spine fabric; one long flow h0 -> h1; L0.0-S0.3 fails at 0.5 ms and
    heals at 1.5 ms. Probes every 250 us (3 successes revive an EV)."""
    spec = parse_topology("leafspine:planes=2,spines=8,leaves=2,hosts=1")
    fail = parse_failure(f"link:L0.0-S0.3@{FAIL_AT * 1e3}ms..{HEAL_AT * 1e3}ms:down")
    run = SimRun(spec, [Flow(0, 0, 1, 0.0, 80 << 20)], failures=[fail],
                 host_config={"probe_interval": 250e-6})
    tap = SendTap(run.hosts[0])
    run.fabric.hosts[0].endpoint = tap
    sq, rq = run.qps[0]
    samples: list[tuple[float, int]] = []
    rtt: list[float] = []

    def sample(_: object) -> None:
        samples.append((run.sim.now, run.hosts[1].qp(rq).rcvd_bytes))
        run.sim.after(50e-6, sample)

    run.sim.at(0.0, sample)
    run.sim.at(FAIL_AT - 1e-9, lambda _: rtt.append(run.hosts[0].qp(sq).srtt))
    run.run(until=0.05)
    return run, tap, samples, rtt[0]


def _goodput(samples: list[tuple[float, int]], t0: float, t1: float) -> float:
    a = min(samples, key=lambda s: abs(s[0] - t0))
    b = min(samples, key=lambda s: abs(s[0] - t1))
    return (b[1] - a[1]) * 8 / (b[0] - a[0])


def test_failed_spine_link_is_abandoned_within_three_rtts(failover: Failover) -> None:
    run, tap, _, rtt = failover
    assert 0 < rtt < 50e-6
    bad = [(t, ev_path(e.ev)) for t, h, e in run.path_events
           if h == "h0" and e.new is EVState.ASSUMED_BAD and t >= FAIL_AT]
    first_signal = min(t for t, (plane, path, _) in bad if (plane, path) == (0, 3))
    # Noticed fast too (RTT + RACK reorder allowance + ACK delay: about 2.7 RTTs here).
    assert first_signal - FAIL_AT < 5 * rtt
    on_failed = [s.time for s in tap.sent
                 if ev_path(s.ev)[:2] == (0, 3) and first_signal <= s.time < HEAL_AT]
    last = max(on_failed, default=first_signal)
    assert last - first_signal <= 3 * rtt, (
        f"data still sent on the failed path {(last - first_signal) / rtt:.1f} RTTs after "
        "the first loss signal")


def test_goodput_holds_and_no_qp_error_during_the_failure(failover: Failover) -> None:
    run, _, samples, _ = failover
    res = run.result()
    assert res.flows[0].error is None and res.flows[0].finish is not None
    n = run.spec.spines
    before = _goodput(samples, 0.2e-3, FAIL_AT)
    during = _goodput(samples, FAIL_AT, HEAL_AT)
    assert during >= (n - 1) / n * before, f"goodput {during / 1e9:.1f}G vs {before / 1e9:.1f}G"
    assert _core_total(run, "lost_timeout") == 0


def test_probes_bring_the_path_back_after_the_link_heals(failover: Failover) -> None:
    run, _, _, _ = failover
    revived = [t for t, h, e in run.path_events
               if h == "h0" and e.new is EVState.GOOD and e.cause == "probe"
               and ev_path(e.ev)[:2] == (0, 3)]
    # Every EV retired on the failed path comes back once probes succeed, and none
    # before the link healed (no probe got through while it was down).
    retired = {e.ev for t, h, e in run.path_events
               if h == "h0" and e.new is EVState.ASSUMED_BAD and ev_path(e.ev)[:2] == (0, 3)}
    back = {e.ev for t, h, e in run.path_events
            if h == "h0" and e.new is EVState.GOOD and e.cause == "probe"
            and ev_path(e.ev)[:2] == (0, 3)}
    assert revived and all(t > HEAL_AT for t in revived)
    assert retired and back == retired
    info = run.hosts[0].ev_stats(run.qps[0][0])
    assert all(info[ev]["state"] == EVState.GOOD.value for ev in back)


def test_the_healed_path_carries_data_again(failover: Failover) -> None:
    run, tap, _, _ = failover
    revived = [t for t, h, e in run.path_events
               if h == "h0" and e.new is EVState.GOOD and e.cause == "probe"
               and ev_path(e.ev)[:2] == (0, 3)]
    assert any(ev_path(s.ev)[:2] == (0, 3) and s.time > min(revived) for s in tap.sent)


def _goodput_run(spec: str, fails: list[str]) -> tuple[SimRun, list[tuple[float, int]]]:
    run = SimRun(parse_topology(spec), [Flow(0, 0, 1, 0.0, 40 << 20)],
                 failures=[parse_failure(f) for f in fails])
    rq = run.qps[0][1]
    samples: list[tuple[float, int]] = []

    def sample(_: object) -> None:
        samples.append((run.sim.now, run.hosts[1].qp(rq).rcvd_bytes))
        run.sim.after(50e-6, sample)

    run.sim.at(0.0, sample)
    run.run(until=0.05)
    return run, samples


def test_goodput_holds_when_the_spines_are_the_bottleneck() -> None:
    """12.5G spine links, 100G NICs: a failed spine link of plane 0 leaves it 87.5G of
    uplinks. With planes loaded exactly evenly that caps the QP at 2 x 87.5G (0.875) and
    the CE marks on plane 0 cut the QP's one window (measured 0.82-0.86). An ECN echo
    hands the EV's next packet to the other plane (EVManager.next_ev), so plane 1 picks
    up the slack while the EV counts per plane stay even: measured 0.88-0.90 of before
    (0.9375 would be ideal)."""
    spec = "leafspine:planes=2,spines=8,leaves=2,hosts=1,rate=12.5gbit,host_rate=100gbit"
    run, samples = _goodput_run(spec, ["link:L0.0-S0.3@0.5ms..1.5ms:down"])
    assert run.result().flows[0].error is None
    before = _goodput(samples, 0.2e-3, FAIL_AT)
    during = _goodput(samples, FAIL_AT + 0.1e-3, HEAL_AT)
    assert during >= 7 / 8 * before, f"{during / before:.3f} of before"
    evm = run.hosts[0].qp(run.qps[0][0]).evm
    assert evm is not None
    assert len(evm.active[0]) == len(evm.active[1]) == 64  # EV counts stay even
    sent = [sum(i.sent for i in evm.evs.values() if i.plane == p) for p in (0, 1)]
    assert sent[1] > sent[0]  # plane 1 took more of the packets


@pytest.mark.parametrize(("fail", "bound"), [
    ("loss:*=0.1%", 1.10),  # the paper: 0.1% random loss barely matters
    ("switch:S0.2@0.3ms:blackhole", 1.10),  # a silently dead switch barely matters
])
def test_random_loss_and_a_dead_switch_barely_matter(fail: str, bound: float) -> None:
    spec = parse_topology("leafspine:planes=2,spines=8,leaves=2,hosts=1")
    run = SimRun(spec, [Flow(0, 0, 1, 0.0, 40 << 20)], failures=[parse_failure(fail)])
    res = run.run(until=0.05)
    r = res.flows[0]
    assert r.error is None and r.slowdown is not None and r.slowdown <= bound
    drops = sum(c["drop_loss"] for c in res.ports.values()) + sum(
        c["drop_blackhole"] for c in res.switches.values())
    assert drops > 0  # the failure did hit the flow


@pytest.mark.parametrize("srv6", ["usid", "srh"])
def test_core_accepts_every_forwarded_frame_with_checksums_verified(srv6: str) -> None:
    spec = parse_topology(f"leafspine:planes=2,spines=4,leaves=2,hosts=2,srv6={srv6},queue=4pkt")
    # Two flows into one host: trims and NACKs too, all checked by the receiving core.
    run = SimRun(spec, incast([0, 1], 3, 2 << 20), host_config={"verify_checksums": True})
    res = run.run(until=0.05)
    assert all(r.finish is not None and r.error is None for r in res.flows)
    for name, counters in res.hosts.items():
        bad = {k: v for k, v in counters.items() if k.startswith("rx_malformed")}
        assert not bad, f"{name} rejected frames: {bad}"


def test_a_failure_on_the_ecmp_path_kills_the_baseline_but_not_mrc() -> None:
    spec = parse_topology("leafspine:planes=2,spines=8,leaves=2,hosts=1")
    flows = [Flow(0, 0, 1, 0.0, 40 << 20)]
    probe = SimRun(spec, flows, transport="ecmp")
    (ev,) = probe.hosts[0].ev_stats(probe.qps[0][0])
    plane, spine, _ = ev_path(ev)
    fail = parse_failure(f"link:L{plane}.0-S{plane}.{spine}@0.3ms:down")
    ecmp = SimRun(spec, flows, transport="ecmp", failures=[fail]).run(until=1.0)
    mrc = SimRun(spec, flows, transport="mrc", failures=[fail]).run(until=1.0)
    # No routing reconvergence in a static fabric: the hashed path stays dead, the QP
    # exhausts its retries. MRC retires the EVs on it and hardly notices.
    assert ecmp.flows[0].finish is None
    assert ecmp.flows[0].error is not None and "retry budget exhausted" in ecmp.flows[0].error
    assert mrc.flows[0].error is None
    assert mrc.flows[0].slowdown is not None and mrc.flows[0].slowdown < 1.1


def test_a_7_to_1_incast_does_not_hurt_a_victim_flow_beside_it() -> None:
    # The victim h12 -> h1 lands on the incast receiver's leaf, so it shares the spine
    # downlinks into that leaf with the incast; only h0's own port is oversubscribed.
    spec = parse_topology("leafspine:planes=2,spines=8,leaves=4,hosts=4")
    victim = Flow(100, 12, 1, 0.0, 8 << 20)
    crowd = [Flow(i, s, 0, 0.0, 4 << 20) for i, s in enumerate(range(4, 11))]
    alone = SimRun(spec, [victim]).run(until=1.0).flows[0]
    res = SimRun(spec, [victim, *crowd]).run(until=1.0)
    beside = next(r for r in res.flows if r.flow.id == 100)
    assert alone.slowdown is not None and beside.slowdown is not None
    assert beside.slowdown <= 1.05 * alone.slowdown
    assert sum(c["trimmed"] for c in res.ports.values()) > 0  # the incast did congest


@pytest.mark.parametrize("port", ["h0-L1.0", "h1-L1.1"], ids=["local", "peer"])
def test_a_nic_port_down_halves_a_two_plane_flow_then_heals(port: str) -> None:
    # The NIC reports carrier loss to its host's core (set_port_state); a peer learns it
    # from PORT_STATUS. Either way the QP moves to the surviving plane at once.
    spec = parse_topology("leafspine:planes=2,spines=8,leaves=2,hosts=1")
    run = SimRun(spec, [Flow(0, 0, 1, 0.0, 40 << 20)], sample_interval=50e-6,
                 failures=[parse_failure(f"link:{port}@0.3ms..1ms:down")])
    res = run.run(until=0.05)
    assert res.flows[0].error is None and res.flows[0].finish is not None
    series = dict(res.goodput_series())

    def mean(t0: float, t1: float) -> float:
        vals = [g for t, g in series.items() if t0 < t <= t1]
        return sum(vals) / len(vals)

    before = mean(0.1e-3, 0.3e-3)
    assert 0.45 <= mean(0.35e-3, 1e-3) / before <= 0.55  # (planes - 1) / planes
    assert mean(1.1e-3, 1.6e-3) / before >= 0.95  # both planes again after the heal
