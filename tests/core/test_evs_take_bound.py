"""``EVManager.take`` is the spray's own ``take`` (the usable planes bound) while the
manager's method would only forward to it: re-bound when the spray or the usable planes
are replaced, the manager's method again under ECMP or with no plane usable; the same
runs as the manager's method gives in every case, and no frame of the manager's per
run."""

from __future__ import annotations

from typing import Any

from mrcnet.core.evs import EVManager
from mrcnet.core.spray import Spray

from .pycalls import python_calls


def _ref(m: EVManager, k: int) -> list[int]:
    """The manager's own method (the contract), on the manager itself."""
    return EVManager.take(m, k)


def test_take_goes_straight_to_the_spray() -> None:
    m = EVManager(7, {0: 2, 1: 3}, evs_per_qp=8)
    seen = python_calls(lambda: m.take(5))
    assert "EVManager.take" not in seen
    assert any(name.endswith("Spray.take") for name in seen)


def test_take_follows_a_new_spray() -> None:
    """A spray put in place of the first takes the runs (the old one gives no more)."""
    m = EVManager(7, {0: 2, 1: 3}, evs_per_qp=8)
    old = m.spray
    calls: list[int] = []

    class Counted(Spray[Any]):
        __slots__ = ()

        def take(self, planes: Any, k: int) -> list[int]:
            calls.append(k)
            return super().take(planes, k)

    m.spray = Counted(m.active, m._skip_done)
    assert m.spray is not old
    got = m.take(4)
    assert calls == [4] and len(got) == 4
    assert all(ev in m.evs for ev in got)


def test_take_follows_the_usable_planes() -> None:
    """Planes taken away and given back: runs on the usable planes only, the same as the
    manager's method gives; none with no plane usable."""
    a = EVManager(7, {0: 2, 1: 3, 2: 1}, evs_per_qp=12)
    b = EVManager(7, {0: 2, 1: 3, 2: 1}, evs_per_qp=12)
    for planes in ([1], [0, 2], [], [2], [0, 1, 2]):
        a.set_planes(planes)
        b.set_planes(planes)
        got, ref = a.take(9), _ref(b, 9)
        assert got == ref
        assert {a.evs[ev].plane for ev in got} <= set(planes)
        assert bool(got) == bool(planes)


def test_ecmp_takes_nothing() -> None:
    """ECMP: no run (the caller asks next_ev), before and after a change of planes."""
    m = EVManager(7, {0: 2, 1: 2}, evs_per_qp=4, ecmp_key="flow")
    assert m.take(3) == []
    m.set_planes([1])
    assert m.take(3) == []
