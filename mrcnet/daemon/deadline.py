"""mrcd's one timer: the core's earliest deadline on the event loop, re-armed lazily.

The core's deadlines move by about a round trip on every loop pass (every SACK pushes
the retransmission timer on, every answer takes a held ACK with it), and re-arming on
each move cost a uvloop timer made and another cancelled per pass. So, as the kernel's
and many event loops' timers do: when the deadline moves *later*, the armed timer is
kept, and when it fires it asks for the deadline again, runs the pass only if something
is due and otherwise re-arms for the real deadline (a cheap check, no port read, no
pump). Only a deadline *earlier* than the armed one arms the loop anew. No deadline is
missed: the armed timer is never later than the earliest deadline.

One exception keeps a wake-up off the round trip: a timer about to fire (within
``near`` seconds) for a deadline that moved later or went away is moved (or cancelled)
rather than left to fire for nothing, since an idle wake-up (a context switch, an epoll
return, this check) costs more than a cancel and a new timer (the held ACK that leaves
with the answer, once per round trip: see :data:`mrcnet.daemon.engine.KEEP_EARLY_TIMER`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

__all__ = ["LazyTimer", "timer_delay"]


def timer_delay(delay: float) -> float:
    """The delay to give the loop for a deadline due in ``delay`` seconds.

    uvloop (libuv) timers count whole milliseconds and *round* the delay: a timer due in
    0.4 ms fires at once, and re-arming it until it is due busy-spins the loop (measured:
    367 wake-ups for one 0.4 ms timer; the receiving mrcd pumped twice per data packet,
    mostly from such spins of the 0.5 ms delayed-SACK timer). So a future deadline is
    rounded *up* to the next millisecond: at most 1 ms late, never early.
    """
    if delay <= 0.0:
        return 0.0
    return math.ceil(delay * 1000.0) / 1000.0


class LazyTimer:
    """One deadline (on ``time.monotonic``'s clock) kept armed on ``loop``.

    ``deadline()`` gives the earliest deadline now (None: nothing to wait for);
    ``fire(now)`` runs when it is due (and ends by calling :meth:`want` with the next
    one, as after any pass). :meth:`want` is what a pass calls with the new deadline.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 deadline: Callable[[], float | None], fire: Callable[[float], None],
                 near: float = 0.0) -> None:
        self._loop = loop
        self._deadline = deadline
        self._fire = fire
        self.near = near
        self._handle: asyncio.TimerHandle | None = None
        #: The deadline the loop's timer is armed for (None: not armed).
        self.armed_at: float | None = None
        #: Loop timers made, and fires that found nothing due (re-checked, re-armed).
        self.arms = 0
        self.idle = 0

    def want(self, t: float | None) -> None:
        """The earliest deadline is now ``t`` (None: there is none)."""
        at = self.armed_at
        if at is not None:
            if t is not None and t < at:
                pass  # earlier: re-arm below
            elif at == t or not self.near or at - time.monotonic() > self.near:
                return  # later or gone: the armed timer re-checks when it fires
            if self._handle is not None:
                self._handle.cancel()
            self._handle = None
            self.armed_at = None
        if t is not None:
            self._arm(t)

    def _arm(self, t: float) -> None:
        self.armed_at = t
        self.arms += 1
        self._handle = self._loop.call_later(timer_delay(t - time.monotonic()),
                                             self._on_fire)

    def _on_fire(self) -> None:
        self._handle = None
        self.armed_at = None
        try:
            t = self._deadline()
        except Exception:  # (a bug: the pass meets it again, where it is logged)
            t = 0.0
        if t is None:
            self.idle += 1
            return
        now = time.monotonic()
        if t > now:  # moved on since armed: wait for the real one
            self.idle += 1
            self._arm(t)
            return
        self._fire(now)

    def cancel(self) -> None:
        """Disarm (the engine closes)."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self.armed_at = None
