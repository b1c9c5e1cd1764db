"""The timer version (``QueuePair.tv``): the host re-reads a QP's deadline only when a
timer writer bumped it; under ``receive.VERIFY_SETUP`` a writer that forgot is caught."""

from __future__ import annotations

from typing import Any

import pytest

from mrcnet.core import receive
from mrcnet.core.qp import QueuePair
from mrcnet.core.qptimers import QPTimers
from mrcnet.native import HAVE_C
from mrcnet.sim.matrix import permutation
from mrcnet.sim.runner import SimRun
from mrcnet.sim.topology import parse_topology

from .test_rxlane import _setup

needs_c = pytest.mark.skipif(not HAVE_C, reason="needs the C module")


def _armed_qp() -> tuple[Any, QueuePair]:
    """A host whose QP's deadline has been read (its version seen), and that QP."""
    _net, (_qa, qb, *_), hb = _setup("c", 0, {}, 600_000)
    qp = hb.qp(qb)
    hb.next_timer()
    assert hb._timers.seen.get(qb) is not None
    return hb, qp


@needs_c
def test_a_timer_writer_that_forgets_is_caught() -> None:
    """A timer moved behind the version's back: the verified refresh raises."""
    hb, qp = _armed_qp()
    qp.rec.rto_at = 1e-3  # (a part's own write: no tv += 1)
    hb._dirty.add(qp.qpn)
    with pytest.raises(AssertionError, match="timer version did not"):
        hb.next_timer()


@needs_c
def test_unverified_the_read_is_skipped_until_the_version_moves(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Unverified, the same forgotten write is not seen (the read is really skipped);
    once the version moves the new deadline is armed."""
    monkeypatch.setattr(receive, "VERIFY_SETUP", False)
    hb, qp = _armed_qp()
    before = hb.next_timer()
    assert before is None or before > 1e-3
    qp.rec.rto_at = 1e-3
    hb._dirty.add(qp.qpn)
    assert hb.next_timer() == before
    qp.tv += 1
    hb._dirty.add(qp.qpn)
    assert hb.next_timer() == 1e-3


def test_most_deadline_reads_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a permutation run, far fewer deadlines are read than QPs are looked at (the
    versions moved for a minority)."""
    monkeypatch.setattr(receive, "VERIFY_SETUP", False)
    reads, looked = [0], [0]
    deadline, refresh = QueuePair.deadline, QPTimers.refresh

    def counted(self: QueuePair) -> float:
        reads[0] += 1
        return deadline(self)

    def looking(self: QPTimers, dirty: set[int], qps: Any, verify: bool = False) -> None:
        looked[0] += sum(q in qps for q in dirty)
        refresh(self, dirty, qps, verify)

    monkeypatch.setattr(QueuePair, "deadline", counted)
    monkeypatch.setattr(QPTimers, "refresh", looking)
    topo = parse_topology("leafspine:planes=8,spines=2,leaves=2,hosts=4")
    flows = permutation(topo.leaves * topo.hosts, 1 << 20, seed=3)
    res = SimRun(topo, flows, seed=3).run()
    assert res.summary()["completed"] == len(flows)
    assert 0 < reads[0] < looked[0] // 2
