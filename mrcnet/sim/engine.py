"""The discrete-event engine: one heap of (time, sequence, callback, argument).

Time is virtual, in float seconds. Callbacks take exactly one argument (a frame, a
timer token or ``None``): a fixed arity keeps the hot loop free of ``*args`` packing, and
the sequence number makes events at the same instant run in the order they were
scheduled, so every run is deterministic.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from collections.abc import Callable
from typing import Any

Callback = Callable[[Any], None]


class Simulator:
    """A virtual clock and its event queue.

    ``rng`` is the only source of randomness in a simulation (random loss, flow
    placement): seeding it makes a run reproducible.
    """

    __slots__ = (
        "_stopped", "cpu_seconds", "events", "now", "queue", "rng", "seq", "wall_seconds",
    )

    def __init__(self, seed: int = 1) -> None:
        self.now = 0.0
        self.events = 0  #: callbacks run so far
        self.wall_seconds = 0.0  #: real time spent inside run()
        self.cpu_seconds = 0.0  #: CPU time of this process inside run() (immune to noisy
        #: neighbours on a shared machine, unlike wall time)
        self.rng = random.Random(seed)
        #: The heap. Hot paths (links) push onto it directly with :attr:`seq` for speed;
        #: everything else goes through :meth:`at`.
        self.queue: list[tuple[float, int, Callback, Any]] = []
        #: Tie-breaker: events at the same instant run in the order they were scheduled.
        self.seq = itertools.count(1)
        self._stopped = False

    def at(self, when: float, fn: Callback, arg: Any = None) -> None:
        """Run ``fn(arg)`` at virtual time ``when`` (never earlier than now)."""
        if when < self.now:
            when = self.now
        heapq.heappush(self.queue, (when, next(self.seq), fn, arg))

    def after(self, delay: float, fn: Callback, arg: Any = None) -> None:
        """Run ``fn(arg)`` ``delay`` seconds from now."""
        self.at(self.now + delay, fn, arg)

    def stop(self) -> None:
        """Make :meth:`run` return after the current event."""
        self._stopped = True

    @property
    def pending(self) -> int:
        """Events still queued."""
        return len(self.queue)

    def run(self, until: float | None = None, max_events: int | None = None) -> None:
        """Run events in time order until the queue is empty, ``until`` is reached,
        ``max_events`` have run, or a callback called :meth:`stop`.

        With ``until`` the clock ends exactly at ``until`` if the queue outlasts it.
        """
        self._stopped = False
        queue = self.queue
        pop = heapq.heappop
        budget = -1 if max_events is None else max_events
        n = 0
        start = time.perf_counter()
        cpu_start = time.process_time()
        try:
            if until is None:
                # The common case, kept lean: no horizon to compare each event with.
                while queue and n != budget:
                    when, _, fn, arg = pop(queue)
                    self.now = when
                    fn(arg)
                    n += 1
                    if self._stopped:
                        break
            else:
                while queue and not self._stopped and n != budget:
                    if queue[0][0] > until:
                        self.now = until
                        break
                    when, _, fn, arg = pop(queue)
                    self.now = when
                    fn(arg)
                    n += 1
                else:
                    if not queue and self.now < until:
                        self.now = until
        finally:
            self.events += n
            self.wall_seconds += time.perf_counter() - start
            self.cpu_seconds += time.process_time() - cpu_start

    @property
    def events_per_second(self) -> float:
        """Simulator throughput so far: callbacks per CPU second of this process."""
        return self.events / self.cpu_seconds if self.cpu_seconds > 0 else 0.0
