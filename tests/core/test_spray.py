"""Spray.take: the C round robin (CSpray) gives what the Python one (and next_ev) gives.

Two managers go through the same random life (runs taken, single next_ev calls with and
without an EV to avoid, SKIPs, retirements, probes that revive, denials, planes lost and
regained); one takes runs in C, the other in Python. Every run, every EV and every
counter must match, and a run must be exactly what that many next_ev calls would give.
The same with C's take that also gives each EV's run slot (take_slots, the sender's way
in mrcd): the same EVs, the slots its table holds, a stop exactly before a path the
table has no slot for, and nothing taken past it.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable

import pytest

from mrcnet.constants import EV_PATH_SHIFT
from mrcnet.core.evs import EVManager
from mrcnet.core.spray import CSpray, PathSlots, Spray
from mrcnet.native import HAVE_C, ffi

pytestmark = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")


def _snapshot(m: EVManager) -> tuple[object, ...]:
    m.stats()  # (folds the C rotation's per-EV counts into EVInfo.sent)
    sp = m.spray
    return (sp.rr_plane, dict(sp.rr), {k: v for k, v in sp.inst_rr.items() if v},
            {ev: (i.state, i.sent) for ev, i in m.evs.items()}, list(m.usable_planes))


def _pair(seed: int) -> tuple[EVManager, EVManager]:
    rnd = random.Random(seed)
    planes = {p: rnd.randint(1, 4) for p in range(rnd.randint(1, 3))}
    kw = {"evs_per_qp": rnd.choice([2, 4, 8, 16]), "min_active": rnd.randint(1, 3)}
    # (the Python one keeps its EVs' numbers in Python: it is deep-copied below)
    c, py = EVManager(7, planes, **kw), EVManager(7, planes, **kw, native=False)
    py.spray = Spray(py.active, py._skip_done)  # the Python rotation
    assert isinstance(c.spray, CSpray)
    return c, py


@pytest.mark.parametrize("seed", range(60))
def test_c_take_matches_python_take(seed: int) -> None:
    _life(seed, snap_every=1)


@pytest.mark.parametrize("seed", range(30))
def test_counters_held_in_c_between_reads(seed: int) -> None:
    """The same life read rarely: C keeps the counters across runs (nothing brings them
    back to Python between ops), and next_ev, a new layout and a late read must still
    see exactly the Python rotation's."""
    _life(seed + 1000, snap_every=25)


@pytest.mark.parametrize("seed", range(40))
def test_take_slots_gives_the_runs_ev_and_their_slots(seed: int) -> None:
    slots: dict[int, tuple[int, int] | None] = {}  # path key -> (port, slot) or none
    rnd = random.Random(seed + 5000)

    def lookup(key: int) -> tuple[int, int] | None:
        return slots[key]  # (KeyError: not made yet)

    table = PathSlots(lookup)

    def take_slots(c: EVManager, py: EVManager, k: int) -> None:
        spray = c.spray
        assert isinstance(spray, CSpray)
        while True:
            n = c.take_slots(k, table)
            stop = table.stop[0]
            got = ffi.unpack(spray.taken, n)
            assert got == py.take(n)  # (the reference takes as many: the same EVs)
            for i, ev in enumerate(got):
                assert slots[ev >> EV_PATH_SHIFT] == (table.ports[i], table.slots[i])
            if stop >= 0:  # stopped before an EV whose path the table has no slot for
                key = spray.path_ev(stop) >> EV_PATH_SHIFT
                assert slots.get(key) is None and (n < k)
            if n or stop < 0:
                return
            if table.path_slot[stop] == PathSlots.NONE:
                assert c.take(k) == py.take(k)  # (the sender's Python way)
                return
            made = None if rnd.random() < 0.15 else (rnd.randint(0, 3), rnd.randint(0, 999))
            slots[key] = made  # the sender makes the path's run slot
            table.set(stop, made)

    _life(seed + 3000, snap_every=1, take=take_slots)


def _take(c: EVManager, py: EVManager, k: int) -> None:
    """A run taken in one call is what k calls of next_ev would give."""
    ref = copy.deepcopy(py)
    ref_evs = [ref.next_ev().ev for _k in range(k)]
    got_c, got_py = c.take(k), py.take(k)
    assert got_c == got_py
    assert got_py == ref_evs[: len(got_py)]


def _life(seed: int, snap_every: int,
          take: Callable[[EVManager, EVManager, int], None] = _take) -> None:
    """Both managers' random life, runs taken by ``take(c, py, k)``; their snapshots
    compared after every ``snap_every``-th op (and the EVs each op gives, always)."""
    rnd = random.Random(seed)
    c, py = _pair(seed)
    now = 0.0
    for step in range(300):
        now += 1e-3
        op = rnd.random()
        evs = sorted(c.evs)
        ev = rnd.choice(evs)
        if op < 0.5:
            take(c, py, rnd.randint(1, 40))
        elif op < 0.6:
            avoid = ev if rnd.random() < 0.5 else -1
            assert c.next_ev(avoid).ev == py.next_ev(avoid).ev
        elif op < 0.7:
            cause = rnd.choice(["ecn", "trim", "receiver"])
            c.skip(ev, cause)
            py.skip(ev, cause)
        elif op < 0.8:
            c.assume_bad(ev, now, "loss")
            py.assume_bad(ev, now, "loss")
        elif op < 0.9:
            for m in (c, py):
                for info in m.probes_due(now + 1.0):
                    m.probe_result(info.ev, True, 1e-4, now)
        elif op < 0.95:
            planes = sorted(c.paths)
            keep = [p for p in planes if rnd.random() < 0.7] or planes[:1]
            c.set_planes(keep)
            py.set_planes(keep)
        elif op < 0.975:
            c.deny(ev)
            py.deny(ev)
        else:
            c.allow(ev)
            py.allow(ev)
        if step % snap_every == snap_every - 1:
            assert _snapshot(c) == _snapshot(py), seed
    assert _snapshot(c) == _snapshot(py), seed


def test_take_stops_before_a_skip() -> None:
    """A SKIP EV ends the run; next_ev then passes over it (and the run goes on)."""
    c, _ = _pair(3)
    first = c.take(1)[0]
    c.skip(first, "trim")
    # Go round until the skipped EV would be next: the run stops just before it.
    run = c.take(1000)
    assert first not in run and len(run) < 1000
    assert c.take(5) == []
    assert c.next_ev().ev != first
    assert c.take(3)


def test_a_table_is_laid_out_again_for_another_spray() -> None:
    """A QP's new EV manager brings a new spray whose layout versions start over: the
    sender's table must not keep the old spray's paths."""
    slots: dict[int, tuple[int, int] | None] = {}
    table = PathSlots(lambda key: slots[key])
    (a, _), (b, _) = _pair(1), _pair(2)
    a.take_slots(3, table)
    assert table.owner is a.spray
    b.take_slots(3, table)
    assert table.owner is b.spray and table.laid == b.spray._laid
