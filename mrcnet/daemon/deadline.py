"""mrcd's timer: the core's earliest deadline on the event loop, re-armed lazily.

The core's deadlines move by about a round trip on every loop pass (every SACK pushes
the retransmission timer on, every answer takes a held ACK with it), and re-arming on
each move cost a uvloop timer made and another cancelled per pass. So, as the kernel's
and many event loops' timers do: when the deadline moves *later*, the armed timer is
kept, and when it fires it asks for the deadline again, runs the pass only if something
is due and otherwise re-arms for the real deadline (a cheap check, no port read, no
pump). Only a deadline *earlier* than the armed one arms the loop anew. No deadline is
missed: the armed timer is never later than the earliest deadline.

One exception keeps a wake-up off the round trip: a timer about to fire (within
``near`` seconds) for a deadline that moved later or went away is cancelled (and the
deadline armed anew if no other timer covers it) rather than left to fire for nothing:
an idle wake-up (a context switch, an epoll return, this check) costs more than a
cancel and a new timer (measured on this machine class: a uvloop ``call_later`` and
``cancel`` 1-2 us of CPU, one timer syscall ~18 us; kept, the held ACK's timer fired
for nothing 0.55-0.75 times per round trip on each mrcd). So a second timer holds a
sooner deadline (the held ACK) under the kept one (the retransmission timer), and the
ACK that leaves with the answer costs a cancel only (:class:`LazyTimer`).
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
    """The earliest deadline (on ``time.monotonic``'s clock) kept armed on ``loop``.

    ``deadline()`` gives the earliest deadline now (None: nothing to wait for);
    ``fire(now)`` runs when it is due (and ends by calling :meth:`want` with the next
    one, as after any pass). :meth:`want` is what a pass calls with the new deadline.

    Two loop timers at most: one kept lazily (a retransmission deadline that every
    answer pushes on), and another under it for a sooner deadline (a held ACK). When
    the sooner deadline goes (the ACK left with the answer), that timer is only
    cancelled: the kept one still covers what is left, where a single timer had to be
    cancelled and made anew for it (two loop timers per round trip, measured).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 deadline: Callable[[], float | None], fire: Callable[[float], None],
                 near: float = 0.0) -> None:
        self._loop = loop
        self._deadline = deadline
        self._fire = fire
        self.near = near
        self._handles: list[asyncio.TimerHandle | None] = [None, None]
        #: The deadline each of the two timers is armed for (None: not armed).
        self.slots: list[float | None] = [None, None]
        #: Loop timers made, and fires that found nothing due (re-checked, re-armed).
        self.arms = 0
        self.idle = 0

    @property
    def armed_at(self) -> float | None:
        """The earliest armed deadline (None: no timer armed)."""
        a, b = self.slots
        return b if a is None else a if b is None or a <= b else b

    def want(self, t: float | None) -> None:
        """The earliest deadline is now ``t`` (None: there is none)."""
        slots = self.slots
        a, b = slots
        # (each slot's test once: the slot if armed for a deadline earlier than t, or
        # if t went away; else None)
        ea = a if a is not None and (t is None or a < t) else None
        eb = b if b is not None and (t is None or b < t) else None
        if (ea is not None or eb is not None) and self.near:
            # A timer about to fire for a deadline that moved later or went away is
            # dropped (an idle wake-up costs more than a timer: see the module).
            soon = time.monotonic() + self.near
            if ea is not None and ea <= soon:
                self._drop(0)
                a = None
            if eb is not None and eb <= soon:
                self._drop(1)
                b = None
        if t is None:
            return
        if (a is not None and a <= t) or (b is not None and b <= t):
            return  # later: the armed timer re-checks when it fires
        # Earlier than both: a free slot, else the one armed for the later deadline.
        i = 0 if a is None else 1 if b is None or b > a else 0
        if slots[i] is not None:  # (a free slot has nothing to cancel)
            self._drop(i)
        slots[i] = t
        self.arms += 1
        self._handles[i] = self._loop.call_later(timer_delay(t - time.monotonic()),
                                                 self._fired, i)

    def _drop(self, i: int) -> None:
        h = self._handles[i]
        if h is not None:
            h.cancel()
        self._handles[i] = self.slots[i] = None

    def _fired(self, i: int) -> None:
        """Timer ``i`` fired: run the pass if something is due, else re-arm for it."""
        self._handles[i] = self.slots[i] = None
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
            self.want(t)
            return
        self._fire(now)

    def cancel(self) -> None:
        """Disarm (the engine closes)."""
        self._drop(0)
        self._drop(1)
