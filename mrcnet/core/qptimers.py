"""The host's QP timers: one heap of (deadline, qpn) for every QP of a host.

Deletion is lazy (a heap has no cheap delete): a QP whose deadline moved gets a new
entry, and the old one stays until it reaches the top, where it is found stale (its
deadline is not the armed one) and dropped. The host re-reads only the deadlines of the
QPs touched since the last look (its "dirty" set), so a look costs O(touched), not
O(QPs); a touched QP whose timer version (``QueuePair.tv``, plus its EV manager's) did
not move since its deadline was last read is not even re-read; and the top is checked
for staleness only when an armed deadline moved since, which is the only way it can
become stale.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from heapq import heappop, heappush, heapreplace
from typing import Protocol

_INF = float("inf")


class _Versioned(Protocol):
    tv: int  #: bumped by every write of ``next_probe``


class _Timed(Protocol):
    tv: int  #: bumped by every write of what :meth:`deadline` reads (but the EVs')

    @property
    def _evm(self) -> _Versioned | None:
        """The QP's EV manager (its ``next_probe`` is read by :meth:`deadline`)."""

    def deadline(self) -> float:
        """Earliest time the QP needs its timer."""


class QPTimers:
    """The armed deadline of each QP and the heap that orders them."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int]] = []  #: (deadline, qpn), stale ones included
        self.armed: dict[int, float] = {}  #: qpn -> its armed deadline
        #: qpn -> the timer version its armed deadline was read at (none: read it)
        self.seen: dict[int, int] = {}
        #: an armed deadline moved (or a QP left, or timers were taken) since the top
        #: was last found live: only then can it be stale, or the heap need a rebuild
        self.moved = False

    def refresh(self, dirty: set[int], qps: Mapping[int, _Timed],
                verify: bool = False) -> float:
        """Re-read the deadlines of the ``dirty`` QPs (then emptied) whose timer version
        moved; the top is then the earliest armed deadline, which it returns (inf: none).
        ``verify``: re-read the others too, and raise if one moved (a writer that did
        not bump the version)."""
        heap = self.heap
        pushed = False  # (only a push can make the heap too long: then look at its size)
        if dirty:
            armed, seen = self.armed, self.seen
            for qpn in dirty:
                qp = qps.get(qpn)
                if qp is None:
                    continue
                evm = qp._evm
                # (versions only grow: their sum moves whenever one does)
                tv = qp.tv if evm is None else qp.tv + evm.tv
                if seen.get(qpn) == tv:
                    if verify and armed.get(qpn) != qp.deadline():
                        raise AssertionError(
                            f"QP {qpn}: its deadline moved and its timer version did not "
                            "(a timer writer without tv += 1)")
                    continue
                seen[qpn] = tv
                d = qp.deadline()
                old = armed.get(qpn)
                if old != d:
                    armed[qpn] = d
                    self.moved = True
                    if heap and heap[0] == (old, qpn):
                        # Its entry on top is stale now: replaced (or popped) in one
                        # step, where a push then a pop of the stale top took two (a
                        # single busy QP's every move). The entries left are the same.
                        if d < _INF:
                            heapreplace(heap, (d, qpn))
                        else:
                            heappop(heap)
                    elif d < _INF:
                        heappush(heap, (d, qpn))
                        pushed = True
            dirty.clear()
        if self.moved:
            self.moved = False
            armed = self.armed
            while heap and armed.get(heap[0][1]) != heap[0][0]:
                heappop(heap)
            if pushed and len(heap) > 4 * len(qps) + 64:  # too many stale entries: rebuild
                self.heap = heap = [(d, q) for q, d in armed.items() if d < _INF and q in qps]
                heapq.heapify(heap)
        return heap[0][0] if heap else _INF

    def take_due(self, now: float) -> list[int]:
        """The QPs whose armed deadline is at or before ``now``, disarmed, in deadline
        order; after :meth:`refresh`."""
        heap, armed = self.heap, self.armed
        due = []
        while heap and heap[0][0] <= now:
            d, qpn = heappop(heap)
            if armed.get(qpn) == d:
                armed.pop(qpn, None)
                self.seen.pop(qpn, None)  # (read its deadline again after its timer)
                due.append(qpn)
        self.moved = True  # (what is left on top may be stale now)
        return due

    def forget(self, qpn: int) -> None:
        """QP ``qpn`` left the host."""
        self.armed.pop(qpn, None)
        self.seen.pop(qpn, None)
        self.moved = True
