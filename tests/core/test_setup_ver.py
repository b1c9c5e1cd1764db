"""QueuePair.setup_ver: the receive loop skips its checks of what the receive lane was
set up with (the lane's QP and the ack QP) while the version stands still; every writer
of that setup moves it. These tests show that a writer which forgets is caught (the
tests/conftest.py runs every test with the checks verified), that the
writers which remember are followed, and that verifying changes no decision."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from mrcnet.core import QPState, receive
from mrcnet.native import HAVE_C
from mrcnet.sim.matrix import permutation
from mrcnet.sim.runner import SimRun
from mrcnet.sim.topology import parse_topology

from .test_rxlane import _generate, _setup

needs_c = pytest.mark.skipif(not HAVE_C, reason="needs the C module")


def _lane_on(psn: int = 0) -> tuple[Any, int, list[bytes]]:
    """h1 with its lane serving QP ``qb``, its setup checked at the QP's present
    setup_ver (a batch that made a SACK template moved it), and the frames not yet
    received."""
    frames = [f for _, f in _generate(psn, {})]
    _net, (_qa, qb, *_), hb = _setup("c", psn, {}, 600_000)
    qp = hb.qp(qb)
    hb.receive_batch(frames[:20], 0, 1.0)
    k = 20
    while hb._rx._lane_seen != qp.setup_ver:
        hb.receive_batch(frames[k : k + 1], 0, 1.0)
        k += 1
    assert hb._rx._lane_qp is qp and k < 60
    return hb, qb, frames[k:]


@needs_c
def test_a_writer_that_forgets_is_caught() -> None:
    """New peers put in place behind the version's back: the verified check sees it."""
    hb, qb, frames = _lane_on()
    qp = hb.qp(qb)
    qp.peer_ips = frozenset(set(qp.peer_ips))  # (equal, but not the object the lane was given)
    with pytest.raises(AssertionError, match="setup_ver did not move"):
        hb.receive_batch(frames[:1], 0, 1.1)


@needs_c
def test_a_writer_that_remembers_is_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same change with changed(): unverified, the lane is set up again (its copy of
    the peers is the new object) and takes the frames as before."""
    monkeypatch.setattr(receive, "VERIFY_SETUP", False)
    hb, qb, frames = _lane_on()
    qp = hb.qp(qb)
    before = qp.rx_packets
    qp.peer_ips = peers = frozenset(set(qp.peer_ips))
    qp.changed()
    hb.receive_batch(frames[:20], 0, 1.1)
    assert hb._rx._lane_peers is peers and hb._rx._lane_seen == qp.setup_ver
    assert qp.rx_packets == before + 20


@needs_c
def test_every_writer_moves_the_version() -> None:
    """The state changes the lane depends on, through the host's API: each one moves
    setup_ver (and the lane stops taking the QP's frames once it is not ready)."""
    hb, qb, frames = _lane_on()
    qp = hb.qp(qb)
    v = qp.setup_ver
    hb.modify_qp(qb, QPState.ERROR)
    assert qp.setup_ver > v
    v = qp.setup_ver
    hb.receive_batch(frames[:10], 0, 1.1)
    assert hb.counters().get("rx_qp_not_ready", 0) == 10
    hb.destroy_qp(qb)
    assert qp.setup_ver > v


def _digest(spec: str, verify: bool, monkeypatch: pytest.MonkeyPatch,
            size: int = 256 << 10) -> str:
    monkeypatch.setattr(receive, "VERIFY_SETUP", verify)
    topo = parse_topology(spec)
    flows = permutation(topo.leaves * topo.hosts, size, seed=3)
    res = SimRun(topo, flows, seed=3).run()
    d = res.as_dict()
    assert res.summary()["completed"] == len(flows)
    return hashlib.sha256(json.dumps([d["flows"], d["ports"], d["hosts"]],
                                     sort_keys=True).encode()).hexdigest()


def test_verified_run_decides_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """A permutation on 8 planes, with every skipped check verified and without: no
    change the version missed, and the same decisions (flows, ports, host counters)."""
    spec = "leafspine:planes=8,spines=2,leaves=2,hosts=4"
    assert _digest(spec, True, monkeypatch) == _digest(spec, False, monkeypatch)


def test_timer_heap_kept_clean_between_refreshes(monkeypatch: pytest.MonkeyPatch) -> None:
    """QPTimers.refresh drops the heap's stale top (and rebuilds a heap grown too large)
    only when an armed deadline moved since (``moved``): after every refresh of a
    permutation run, the top is an armed deadline and the heap within its bound, as when
    it looked every time; and the decisions are the same."""
    from mrcnet.core.qptimers import QPTimers

    refresh = QPTimers.refresh
    calls = [0]

    def checked(self: QPTimers, dirty: set[int], qps: Any, verify: bool = False) -> None:
        refresh(self, dirty, qps, verify)
        heap, armed = self.heap, self.armed
        assert not heap or armed.get(heap[0][1]) == heap[0][0]
        assert len(heap) <= 4 * len(qps) + 64
        calls[0] += 1

    spec = "leafspine:planes=8,spines=2,leaves=2,hosts=4"
    plain = _digest(spec, False, monkeypatch, 1 << 20)
    monkeypatch.setattr(QPTimers, "refresh", checked)
    assert _digest(spec, False, monkeypatch, 1 << 20) == plain
    assert calls[0] > 1000, calls
