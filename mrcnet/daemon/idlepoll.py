"""mrcd's look before it sleeps (``idle_poll_us``): at the end of a pass, instead of
going straight back to the event loop's ``epoll_wait``, look (``poll(2)``, no wait) at
the ports and the clients' sockets for a short while, and return to the loop as soon as
one is readable, so that the loop finds it without sleeping.

Why: a process that sleeps lets its CPU go idle, and on a virtual machine an idle vCPU
halts; waking it again is the host's work, measured on this machine class at tens of
microseconds (docs/PERFORMANCE.md, "Session 19": a kernel UDP round trip between two
netns hosts is 15 us with the guest's halt-polling on and ~90 us without, two such
wake-ups). A verbs round trip through two mrcds wakes each mrcd for the frame that
answers it; looking a little longer keeps that wake-up off the round trip.

The look is adaptive (:class:`LookSpan`, which the answer's look,
:meth:`mrcnet.daemon.posts.Posts.await_answer`, shares): its whole length while most
recent looks found something (:data:`SCORE_MIN`, a moving average of hits), else a
sixteenth of it, but every :data:`PROBE_EVERY`-th look the whole of it again. It never
runs past the loop's next
timer, and the API server skips it after a request that a task answers (a connect:
the task's first step is a ready callback of the loop, which no fd announces). What it
does not watch (the control plane's TCP connections, the link watch, signals, other
asyncio callbacks) waits at most one look.

Between two polls it yields the CPU (``sched_yield``): on a host with fewer CPUs than
busy processes (a netns fabric on two vCPUs: two mrcds and their applications), the
process the look waits for may be queued on this very CPU, and a look that did not give
way held it there until the scheduler preempted mrcd (measured: P99 3-4 ms, P50s
twice as long in some runs). With nothing else to run, the yield returns at once.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from typing import Final

__all__ = ["IdlePoll", "LookSpan"]

#: The moving average of looks that found something: each look's weight in it, the
#: average under which looks are short, how often a short look is a whole one anyway,
#: and how much shorter a short look is.
WEIGHT: Final = 0.125
SCORE_MIN: Final = 0.25
PROBE_EVERY: Final = 16
SHORT: Final = 16


class LookSpan:
    """How long a busy look lasts, from how the recent ones went: the whole of it
    while the moving average of hits is above :data:`SCORE_MIN`, else a
    :data:`SHORT`-th of it, but every :data:`PROBE_EVERY`-th look the whole of it again
    (a halving rule that doubles back only on a hit stays short once its looks are
    too short to hit). mrcd's look before it sleeps and its look for a client's answer
    (one per client) each keep one."""

    def __init__(self) -> None:
        #: Looks, and those that found something.
        self.looks = 0
        self.hits = 0
        self.score = 1.0

    def span(self, top: float) -> float:
        """The next look's length (``top``: a whole look's), counted as a look."""
        self.looks += 1
        if self.score > SCORE_MIN or not self.looks % PROBE_EVERY:
            return top
        return top / SHORT

    def found(self, hit: bool) -> None:
        """How the look went (True: it found something)."""
        self.hits += hit
        self.score += WEIGHT * (hit - self.score)


class IdlePoll(LookSpan):
    """The look of ``poll_us`` microseconds at the fds ``fds()`` gives (asked again
    whenever ``generation()`` changes: a client came or went), never past
    ``deadline()`` (``time.monotonic``'s clock; None: no timer armed)."""

    def __init__(self, poll_us: int, fds: Callable[[], list[int]],
                 generation: Callable[[], int],
                 deadline: Callable[[], float | None]) -> None:
        super().__init__()
        self.seconds = poll_us / 1e6
        self._fds = fds
        self._generation = generation
        self._deadline = deadline
        self._poll: select.poll | None = None
        self._gen = -1
        #: What ended the last look: poll(2)'s (fd, events) of the readable fds, or [].
        self.ready: list[tuple[int, int]] = []

    def _poller(self) -> select.poll:
        gen = self._generation()
        p = self._poll
        if p is None or gen != self._gen:
            p = self._poll = select.poll()
            for fd in self._fds():
                if fd >= 0:
                    p.register(fd, select.POLLIN)
            self._gen = gen
        return p

    def look(self) -> bool:
        """Look until something is readable (True) or the look's time is up (False)."""
        if not self.seconds:
            return False
        poll = self._poller().poll
        clock = time.monotonic
        end = clock() + self.span(self.seconds)
        due = self._deadline()
        if due is not None and due < end:
            end = due
        ready: list[tuple[int, int]] = []
        give_way = os.sched_yield
        while clock() < end:
            ready = poll(0)
            if ready:
                break
            give_way()  # (a process that needs this CPU runs now, not after the look)
        self.ready = ready
        self.found(bool(ready))
        return bool(ready)
