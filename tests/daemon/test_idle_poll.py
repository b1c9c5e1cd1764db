"""mrcd's look before it sleeps (mrcnet/daemon/idlepoll.py): it returns as soon as a
watched socket is readable, looks no longer than its span or the loop's next timer,
shortens its looks while they find nothing (a whole one every PROBE_EVERY-th) and
watches the fds anew when a client comes or goes. Real Unix sockets, a real clock."""

from __future__ import annotations

import socket
import threading
import time

from mrcnet.daemon.idlepoll import PROBE_EVERY, IdlePoll

SPAN_US = 200_000  # (long, so that a thread's write lands inside one look)


class _Watched:
    """A socket pair whose reading end the look watches."""

    def __init__(self) -> None:
        self.reader, self.writer = socket.socketpair()
        self.fds = [self.reader.fileno()]
        self.gen = 0
        self.deadline: float | None = None
        self.poll = IdlePoll(SPAN_US, lambda: list(self.fds), lambda: self.gen,
                             lambda: self.deadline)

    def timed_look(self) -> tuple[bool, float]:
        t0 = time.monotonic()
        found = self.poll.look()
        return found, time.monotonic() - t0

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


def test_a_look_ends_when_a_socket_becomes_readable() -> None:
    w = _Watched()
    try:
        later = threading.Timer(0.01, w.writer.send, (b"x",))
        later.start()
        found, took = w.timed_look()
        later.join()
        assert found and 0.005 < took < SPAN_US / 1e6 / 2
        assert (w.poll.looks, w.poll.hits) == (1, 1)
    finally:
        w.close()


def test_a_look_that_finds_nothing_lasts_its_span_or_until_the_timer() -> None:
    w = _Watched()
    try:
        found, took = w.timed_look()
        assert not found and took >= SPAN_US / 1e6
        w.deadline = time.monotonic() + 0.005  # the loop's timer is due first
        found, took = w.timed_look()
        assert not found and took < SPAN_US / 1e6 / 4
        assert (w.poll.looks, w.poll.hits) == (2, 0)
    finally:
        w.close()


def test_looks_that_find_nothing_shorten_then_probe_whole() -> None:
    w = _Watched()
    w.poll.seconds = 0.016  # (16 ms: a short look is 1 ms)
    try:
        spans = [w.timed_look()[1] for _ in range(2 * PROBE_EVERY)]
        # a whole look while the score stays above SCORE_MIN, then short ones ...
        assert spans[0] >= 0.016 and min(spans) < 0.004
        # ... but every PROBE_EVERY-th is whole again
        assert spans[PROBE_EVERY - 1] >= 0.016 and spans[2 * PROBE_EVERY - 1] >= 0.016
        assert w.poll.hits == 0
    finally:
        w.close()


def test_a_new_client_is_watched() -> None:
    w = _Watched()
    other_r, other_w = socket.socketpair()
    try:
        w.poll.seconds = 0.05
        assert not w.poll.look()
        w.fds.append(other_r.fileno())  # a client came ...
        other_w.send(b"x")
        assert not w.poll.look()  # (the same generation: not yet watched)
        w.gen += 1  # ... and the server's generation moved
        found, took = w.timed_look()
        assert found and took < 0.05
    finally:
        other_r.close()
        other_w.close()
        w.close()
