"""QPTimers (the host's heap of QP deadlines, whose moved QP's stale entry on top is
replaced in one step, and whose size is looked at only after a push) against a model
without a heap: random deadline moves, timers taken and QPs leaving give the same
earliest deadlines, the same QPs due in the same order, the same armed deadlines, and a
heap that stays bounded."""

from __future__ import annotations

import random
from collections.abc import Mapping

from mrcnet.core.qptimers import QPTimers

_INF = float("inf")


class FakeQP:
    """What QPTimers reads of a QP: its timer version and its deadline."""

    def __init__(self) -> None:
        self.tv = 0
        self._evm = None
        self.d = _INF

    def deadline(self) -> float:
        return self.d


class Model:
    """What QPTimers promises, without a heap: a dirty QP's deadline re-read when its
    version moved; the earliest armed deadline; the due ones taken in (deadline, qpn)
    order."""

    def __init__(self) -> None:
        self.armed: dict[int, float] = {}
        self.seen: dict[int, int] = {}

    def refresh(self, dirty: set[int], qps: Mapping[int, FakeQP]) -> float:
        for q in dirty:
            qp = qps.get(q)
            if qp is not None and self.seen.get(q) != qp.tv:
                self.seen[q] = qp.tv
                self.armed[q] = qp.deadline()
        return min(self.armed.values(), default=_INF)

    def take_due(self, now: float) -> list[int]:
        due = sorted((d, q) for q, d in self.armed.items() if d <= now)
        for _, q in due:
            del self.armed[q]
            self.seen.pop(q, None)
        return [q for _, q in due]

    def forget(self, q: int) -> None:
        self.armed.pop(q, None)
        self.seen.pop(q, None)


def _live(t: QPTimers) -> set[tuple[float, int]]:
    return {e for e in t.heap if t.armed.get(e[1]) == e[0]}


def test_refresh_finds_what_it_found() -> None:
    for seed in range(40):
        rng = random.Random(seed)
        nqp = rng.choice((1, 2, 5, 40))
        qps = {q: FakeQP() for q in range(nqp)}
        new, ref = QPTimers(), Model()
        now = 0.0
        for _ in range(3000):
            now += rng.choice((0.0, 1e-4, 1e-3))
            dirty = set()
            for _ in range(rng.choice((0, 1, 1, 1, 2, 5))):
                q = rng.randrange(nqp + 1)  # (nqp: a QP that is not there)
                dirty.add(q)
                qp = qps.get(q)
                if qp is not None and rng.random() < 0.8:
                    qp.tv += 1
                    # (a few values again and again: a deadline back to one it had)
                    qp.d = rng.choice((_INF, now + 1e-3, now + 5e-3, now, 7.0, 7.0))
            assert new.refresh(set(dirty), qps) == ref.refresh(set(dirty), qps)
            r = rng.random()
            if r < 0.1:
                assert new.take_due(now) == ref.take_due(now)
            elif r < 0.12:
                q = rng.randrange(nqp)
                new.forget(q)
                ref.forget(q)
            assert new.armed == ref.armed and new.seen == ref.seen
            # every armed deadline has its entry (stale ones aside), and no more
            assert _live(new) == {(d, q) for q, d in ref.armed.items() if d < _INF}
            assert len(new.heap) <= 4 * nqp + 64 + 5  # (rebuilt when it grows past)
