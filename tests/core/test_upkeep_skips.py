"""The per-frame upkeep the receive loop and the simulator skip (docs/SIM.md, the ninth
session): each skip is checked against the call it replaces, and a writer that changes
what a skip relies on behind its back is caught."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from mrcnet.core import HostConfig, receive
from mrcnet.errors import InvalidAttribute
from mrcnet.native import HAVE_C
from mrcnet.sim.matrix import permutation
from mrcnet.sim.runner import SimRun
from mrcnet.sim.topology import parse_topology

needs_c = pytest.mark.skipif(not HAVE_C, reason="needs the C module")

SPEC = "leafspine:planes=4,spines=2,leaves=2,hosts=4"


def _run(max_events: int | None = None, plain_activity: bool = False) -> SimRun:
    topo = parse_topology(SPEC)
    run = SimRun(topo, permutation(topo.leaves * topo.hosts, 1 << 20, seed=5), seed=5)
    if plain_activity:  # the runner called after every input, as before activity_if
        for node in run.fabric.hosts:
            node.activity_if = None
    run.run(max_events=max_events)
    return run


def _digest(run: SimRun) -> str:
    d = run.result().as_dict()
    return hashlib.sha256(json.dumps([d["flows"], d["ports"], d["hosts"]],
                                     sort_keys=True).encode()).hexdigest()


def _synced_receivers(run: SimRun) -> list[Any]:
    """The receive loops whose lane takes its ack QP's SACKs at the window it last
    handed over (the batch loop would skip ack_sync for it)."""
    out = []
    for h in run.hosts:
        rx = h._rx
        qp = rx._ack_qp
        if qp is not None and rx._ack_una >= 0 and (rx._ack_una, rx._ack_nxt) == (
                qp.snd_una, qp.next_seq) and not qp.lost_log and not qp.suspects:
            out.append(rx)
    return out


@needs_c
def test_a_skipped_ack_sync_is_the_lanes_state() -> None:
    """Mid-run, where the loop would skip ack_sync, the lane holds exactly the window
    it would have been given, and the verified check agrees."""
    run = _run(max_events=4_000)
    rxs = _synced_receivers(run)
    assert rxs
    for rx in rxs:
        qp = rx._ack_qp
        assert rx._lane.ack_state() == (qp.snd_una, qp.next_seq, rx._ack_floor, True)
        rx._ack_sync()  # (VERIFY_SETUP: checks the skip) no AssertionError


@needs_c
def test_a_lane_paused_behind_the_skip_is_caught() -> None:
    """A writer that pauses the lane without resetting what the loop last handed over:
    unverified, the next batch would skip ack_sync and the lane would stay paused; the
    verified check raises."""
    run = _run(max_events=4_000)
    rx = _synced_receivers(run)[0]
    rx._lane.ack_pause()  # (behind the loop's back)
    assert rx._lane.ack_state()[3] is False
    with pytest.raises(AssertionError, match="ack lane holds"):
        rx._ack_sync()


@needs_c
def test_unverified_skips_decide_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole run with the skips taken (unverified) and with every skipped ack_sync
    checked: the same decisions; and the runner called only after inputs that left an
    event decides as the runner called after every input."""
    verified = _digest(_run())
    monkeypatch.setattr(receive, "VERIFY_SETUP", False)
    assert _digest(_run()) == verified
    assert _digest(_run(plain_activity=True)) == verified


def test_runner_is_called_after_every_input_once_all_flows_ended() -> None:
    """activity_if (the host's event queues) while flows are pending; None (every input)
    once none is: the runner then stops the run at the next input, as it did."""
    run = _run(max_events=4_000)
    assert all(n.activity_if is not None for n in run.fabric.hosts)
    host = run.hosts[0]
    assert run.fabric.hosts[0].activity_if == (host._events, host.path_events)
    run.run()
    assert run._pending == 0
    assert all(n.activity_if is None for n in run.fabric.hosts)


def test_qp_counters_reach_the_host() -> None:
    """QueuePair.count and count_each bump the QP's and the host's counters (the host's
    dict in place: HostContext.counters is Host.count's) as Host.count would."""
    run = _run(max_events=2_000)
    host = run.hosts[0]
    qp = next(iter(host._qps.values()))
    assert qp.ctx.counters is host._counters
    before = host.counters()
    qp.count("t_one")
    qp.count("t_one", 2)
    qp.count_each((("t_a", 4), ("t_b", 1), ("t_a", 1)))
    after = host.counters()
    assert {k: after[k] - before.get(k, 0) for k in ("t_one", "t_a", "t_b")} == {
        "t_one": 3, "t_a": 5, "t_b": 1}
    assert (qp.stats["t_one"], qp.stats["t_a"], qp.stats["t_b"]) == (3, 5, 1)


def test_backoff_first_round_needs_no_retry_linear() -> None:
    """Recovery.backoff is 1.0 with no retry round for every retry_linear a host or QP
    may have, as the formula gives; HostConfig refuses a negative one (which would not)."""
    with pytest.raises(InvalidAttribute, match="retry_linear"):
        HostConfig(retry_linear=-1)
    run = _run(max_events=2_000)
    rec = next(iter(run.hosts[0]._qps.values())).rec
    for lin in range(8):
        rec.qp.attrs.retry_linear = lin
        for retries in range(12):
            rec.retries = retries
            k = retries - lin
            assert rec.backoff() == (1.0 if k <= 0 else float(1 << min(k, 30)))
    rec.retries = 0


def test_take_events_gives_what_next_event_would() -> None:
    """Host.take_events (the runner's drain in one call): the events next_event gives
    until None, in the same order (path events flushed behind the queued ones), and
    the queue empty after."""
    from mrcnet.core.events import WriteCompleted

    def queue(h: Any) -> None:
        h.emit(WriteCompleted(1, 10, 100))
        h.path_events.append("p1")
        h.emit(WriteCompleted(2, 20, 200))
        h.path_events.append("p2")

    a, b = (_run(max_events=100).hosts[0] for _ in range(2))
    for h in (a, b):
        h.take_events()
        queue(h)
    one_by_one = []
    while (ev := a.next_event()) is not None:
        one_by_one.append(ev)
    assert b.take_events() == one_by_one
    assert [getattr(e, "qpn", e) for e in one_by_one] == [1, "p1", 2, "p2"]
    assert not b.has_events() and b.take_events() == []
