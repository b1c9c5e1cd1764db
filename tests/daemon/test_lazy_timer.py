"""mrcd's lazy timer (mrcnet.daemon.deadline) on a real event loop: deadlines that move
later keep the armed timer, earlier ones re-arm it, and none is ever missed."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
import uvloop

from mrcnet.daemon.deadline import LazyTimer


class Deadlines:
    """A stand-in for the core's next deadline, and a log of the passes it got."""

    def __init__(self) -> None:
        self.t: float | None = None
        self.fired: list[tuple[float, float]] = []  # (now, the deadline then)
        self.timer: LazyTimer | None = None

    def deadline(self) -> float | None:
        return self.t

    def fire(self, now: float) -> None:
        assert self.t is not None
        self.fired.append((now, self.t))
        self.t = None  # handled, as the core's handle_timer does
        assert self.timer is not None
        self.timer.want(self.t)


def _timer(loop: asyncio.AbstractEventLoop, near: float = 0.0) -> tuple[LazyTimer, Deadlines]:
    d = Deadlines()
    d.timer = LazyTimer(loop, d.deadline, d.fire, near=near)
    return d.timer, d


def _run(main) -> None:  # type: ignore[no-untyped-def]
    """On uvloop, as mrcd runs (libuv's millisecond timers)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


async def _until(cond, limit: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, "the timer never fired"
        await asyncio.sleep(0.001)


def test_a_deadline_moving_later_keeps_one_timer_and_fires_once_when_due() -> None:
    async def main() -> None:
        timer, d = _timer(asyncio.get_running_loop())
        start = time.monotonic()
        for k in range(50):  # fifty passes, each pushing the deadline on by 4 ms
            d.t = start + 0.05 + k * 0.004
            timer.want(d.t)
        assert timer.arms == 1  # re-armed on every pass before
        final = d.t
        await _until(lambda: d.fired)
        await asyncio.sleep(0.01)
        assert len(d.fired) == 1 and d.fired[0][1] == final
        assert d.fired[0][0] >= final  # never early
        # (fired for the first deadline and re-armed, unless the loop was that late)
        assert timer.arms == 1 + timer.idle

    _run(main)


def test_an_earlier_deadline_rearms_and_a_vanished_one_fires_for_nothing() -> None:
    async def main() -> None:
        timer, d = _timer(asyncio.get_running_loop())
        now = time.monotonic()
        d.t = now + 10.0
        timer.want(d.t)
        d.t = now + 0.01  # earlier: must not wait for the armed one
        timer.want(d.t)
        assert timer.arms == 2 and timer.armed_at == d.t
        await _until(lambda: d.fired)
        assert d.fired[0][0] >= d.fired[0][1]
        d.t = time.monotonic() + 0.005
        timer.want(d.t)
        d.t = None  # gone (the ACK left with an answer): the timer stays, finds nothing
        timer.want(None)
        assert timer.armed_at is not None
        await _until(lambda: timer.idle >= 1)
        assert len(d.fired) == 1 and timer.idle >= 1  # (libuv may wake a little early)

    _run(main)


def test_a_near_timer_for_a_deadline_that_moved_is_moved() -> None:
    async def main() -> None:
        timer, _ = _timer(asyncio.get_running_loop(), near=0.005)
        now = time.monotonic()
        timer.want(now + 0.002)
        timer.want(now + 0.5)  # later, but the armed one fires within `near`: moved
        assert timer.armed_at == now + 0.5 and timer.arms == 2
        timer.want(None)  # gone, armed one far: kept
        assert timer.armed_at == now + 0.5
        timer.cancel()

    _run(main)


def test_a_held_ack_under_a_kept_timer_costs_one_timer_per_round_trip() -> None:
    """A ping-pong's deadlines: the retransmission timer ~20 ms away, pushed on by each
    answer, and an ACK held 0.5 ms that leaves with the answer. The kept timer covers
    the retransmission deadline; each held ACK arms one timer, only cancelled when the
    ACK leaves (a single re-armed timer made two per round trip)."""

    async def main() -> None:
        timer, d = _timer(asyncio.get_running_loop(), near=0.005)
        for k in range(20):
            now = time.monotonic()
            rto = now + 0.02 + k * 0.0001
            d.t = rto
            timer.want(rto)  # the post: the retransmission deadline
            d.t = now + 0.0005
            timer.want(d.t)  # the answer's data arrived: an ACK held for it
            assert timer.armed_at == d.t
            d.t = rto + 0.0001
            timer.want(d.t)  # the ACK left with the next post
            assert timer.armed_at is not None and timer.armed_at <= d.t
        assert timer.arms == 1 + 20 and not d.fired
        timer.cancel()

    _run(main)


@pytest.mark.parametrize("near", [0.0, 0.005])
def test_random_deadlines_are_never_missed(near: float) -> None:
    """Deadlines moving earlier and later across passes: the armed timer is never later
    than the earliest deadline, and each one that is left in place fires, not early."""

    async def main() -> None:
        timer, d = _timer(asyncio.get_running_loop(), near)
        rng = random.Random(15)
        for _ in range(400):
            now = time.monotonic()
            r = rng.random()
            if r < 0.1:
                d.t = None
            elif r < 0.5 or d.t is None:
                d.t = now + rng.uniform(0.0, 0.02)  # maybe earlier
            else:
                d.t = d.t + rng.uniform(0.0, 0.003)  # later
            timer.want(d.t)
            if d.t is not None:
                assert timer.armed_at is not None and timer.armed_at <= d.t
            await asyncio.sleep(rng.choice((0.0, 0.0005, 0.002)))
        for now_fired, due in d.fired:
            assert now_fired >= due
        if d.t is not None:
            last = d.t
            await _until(lambda: bool(d.fired) and d.fired[-1][1] == last)
        assert d.fired  # some deadlines were due and ran

    _run(main)
