"""LazyTimer.want against the rule it had before its common case was cut down (each
slot's test made once, no ``_drop`` of a free slot): on a fake loop and a fake clock,
random deadlines give the same slots, the same loop timers made (with the same delays)
and cancelled, and the same counts."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from mrcnet.daemon import deadline
from mrcnet.daemon.deadline import LazyTimer, timer_delay


class Clock:
    """``time.monotonic`` for the timer under test (moved by the test)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


CLOCK = Clock()


class Handle:
    def __init__(self, log: list[tuple[Any, ...]], key: int) -> None:
        self.log, self.key = log, key

    def cancel(self) -> None:
        self.log.append(("cancel", self.key))


class FakeLoop:
    """Records every timer made and cancelled (in order, by the order they were made)."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.made = 0

    def call_later(self, delay: float, cb: Any, *args: Any) -> Handle:
        self.made += 1
        self.log.append(("call_later", self.made, delay, args))
        return Handle(self.log, self.made)


def reference_want(self: LazyTimer, t: float | None) -> None:
    """want as it was: every slot's test made twice, a free slot dropped too."""
    slots = self.slots
    a, b = slots
    if self.near and ((a is not None and (t is None or a < t))
                      or (b is not None and (t is None or b < t))):
        soon = CLOCK() + self.near
        if a is not None and (t is None or a < t) and a <= soon:
            self._drop(0)
            a = None
        if b is not None and (t is None or b < t) and b <= soon:
            self._drop(1)
            b = None
    if t is None:
        return
    if (a is not None and a <= t) or (b is not None and b <= t):
        return
    i = 0 if a is None else 1 if b is None or b > a else 0
    self._drop(i)
    slots[i] = t
    self.arms += 1
    self._handles[i] = self._loop.call_later(timer_delay(t - CLOCK()),
                                             self._fired, i)


def _drive(want: Any, seed: int, near: float, clock: Clock) -> tuple[Any, ...]:
    rng = random.Random(seed)
    loop = FakeLoop()
    timer = LazyTimer(loop, lambda: None, lambda now: None, near=near)  # type: ignore[arg-type]
    clock.now = 100.0
    trace = []
    for _ in range(400):
        # (steps and offsets in 1/1024 s too, so that a deadline meets the clock and
        # ``near`` exactly: the edges of every test)
        clock.now += rng.choice((0.0, 1e-5, 3e-4, 2e-3, 7e-3, 2**-10, 2**-8))
        r = rng.random()
        if r < 0.15:
            t = None
        elif r < 0.3 and timer.armed_at is not None:
            t = timer.armed_at  # the same deadline again
        else:
            t = clock.now + rng.choice((-1e-3, 0.0, 2e-4, 1e-3, 4e-3, 6e-3, 0.05, 0.2,
                                        2**-10, 2**-8, 2**-7))
        if rng.random() < 0.1:
            # A timer fired: its slot is free again (LazyTimer._fired's first step)
            i = rng.randrange(2)
            timer._handles[i] = timer.slots[i] = None
        want(timer, t)
        trace.append((tuple(timer.slots), timer.arms))
    return tuple(trace), tuple(loop.log), timer.idle


@pytest.mark.parametrize("near", [0.0, 0.005, 2**-8])
def test_want_does_what_it_did(near: float, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = CLOCK
    monkeypatch.setattr(deadline, "time", SimpleNamespace(monotonic=clock))
    for seed in range(100):
        assert _drive(LazyTimer.want, seed, near, clock) == \
            _drive(reference_want, seed, near, clock), seed
