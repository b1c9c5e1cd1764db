"""The completion rings' doorbell: mrcd rings an armed ring once and disarms it; the
client arms its rings just before the library sleeps, or, once something outside the
library may wait on its socket (``outside_waiters``: ``Context.fileno()``), after every
look (mrcnet.api.shmclient). Real parts: the client's ClientQueues and CompletionRing (a
sealed memfd), mrcd's CompletionWriter mapping the same memfd, doorbells on a real Unix
socket pair; the producer in a thread.

A lost wake-up shows as a waiter asleep on the socket while a completion waits in its
ring: every wait here is bounded and a timeout fails the test."""

from __future__ import annotations

import random
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from mrcnet.api.shmclient import DOORBELL, ClientQueues, CompletionRing, Row
from mrcnet.api.shmqueues import encode_completions
from mrcnet.api.shmring import PRECISE
from mrcnet.core.events import WCOpcode, WCStatus
from mrcnet.daemon.rings import CompletionWriter

pytestmark = pytest.mark.skipif(not PRECISE, reason="the rings need the C module")

N = 3000  # completions per run
WAIT_MAX = 2.0  # s: no wait may take this long (the producer never pauses for so long)


class _Pair:
    """A client's queues with one CQ ring, and mrcd's writer on the same memfd."""

    def __init__(self, busy_poll_us: int) -> None:
        self.client_sock, self.mrcd_sock = socket.socketpair(socket.AF_UNIX,
                                                             socket.SOCK_SEQPACKET)
        self.q = ClientQueues(self.client_sock, busy_poll_us=busy_poll_us)
        self.cq = CompletionRing(64)
        self.q.add_cq(7, self.cq)
        self.writer = CompletionWriter(self.cq.fd, self.cq.nslots)
        self.doorbells = 0
        self.rows: list[Row] = []

    def put(self, wr_id: int) -> None:
        """mrcd's delivery of one completion: write it, ring if the put says so."""
        while True:
            n, rang = self.writer.put(encode_completions(
                [(WCStatus.SUCCESS, wr_id, WCOpcode.RDMA_WRITE, 8, None, 3)]))
            if rang:  # (a put that disarmed the ring always rings: delivery.py's rule)
                self.doorbells += 1
                self.mrcd_sock.send(DOORBELL)
            if n:
                return
            time.sleep(50e-6)  # full: the client makes room

    def read_socket(self, first: bool = False) -> int:
        """The client's read of its socket (every doorbell waiting; ``first``: up to the
        first), as Context does before it drains the rings; how many it read."""
        n = 0
        while True:
            try:
                data = self.client_sock.recv(16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return n
            assert data == DOORBELL
            n += 1
            if first:
                return n

    def drain(self) -> None:
        def sink(handle: int, rows: list[Row]) -> None:
            assert handle == 7
            self.rows += rows
        self.q.drain(sink)

    def close(self) -> None:
        self.writer.close()
        self.q.close()  # (and its CQ rings)
        self.client_sock.close()
        self.mrcd_sock.close()


@pytest.fixture
def pair() -> Iterator[Callable[[int], _Pair]]:
    made: list[_Pair] = []

    def make(busy_poll_us: int) -> _Pair:
        made.append(_Pair(busy_poll_us))
        return made[-1]
    yield make
    for p in made:
        p.close()


def test_one_doorbell_until_the_client_looks(pair: Callable[[int], _Pair]) -> None:
    """With a waiter outside the library: ten completions while the client does not
    look: one doorbell; its look (read the socket, drain) takes all ten and arms the ring
    again: the next one rings."""
    p = pair(0)
    p.q.outside_waiters()
    for i in range(10):
        p.put(i)
    assert p.doorbells == 1
    p.read_socket()
    p.drain()
    assert [r[1] for r in p.rows] == list(range(10))
    p.put(10)
    assert p.doorbells == 2
    p.read_socket()
    p.drain()
    assert [r[1] for r in p.rows] == list(range(11))


def _produce(p: _Pair, seed: int) -> threading.Thread:
    """mrcd in a thread: N completions, in bursts, with random pauses between them (so
    that puts land before, during and after the client's reads, drains and arms)."""
    rng = random.Random(seed)

    def run() -> None:
        i = 0
        while i < N:
            for _ in range(rng.choice((1, 1, 1, 2, 5))):
                if i < N:
                    p.put(i)
                    i += 1
            pause = rng.choice((0, 0, 1e-6, 20e-6, 200e-6))
            if pause:
                end = time.perf_counter() + pause
                while time.perf_counter() < end:
                    pass
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_no_doorbell_while_the_library_does_not_sleep(pair: Callable[[int], _Pair]) -> None:
    """Only the library waits: a completion that comes after a look and before the next
    wait rings nothing (the ring is disarmed); that wait finds it without sleeping. A
    wait that finds nothing arms the ring and sleeps: the next completion rings once,
    and the wait says the socket is readable."""
    p = pair(0)
    p.put(0)  # (a new ring comes armed)
    assert p.doorbells == 1
    assert p.q.wait(WAIT_MAX) is True
    assert p.read_socket(first=True) == 1
    p.drain()
    for i in range(1, 4):  # the application runs: no doorbell
        p.put(i)
    assert p.doorbells == 1
    t0 = time.monotonic()
    assert p.q.wait(WAIT_MAX) is False  # (found in the ring: no sleep, nothing to read)
    assert time.monotonic() - t0 < WAIT_MAX / 2
    p.drain()
    assert [r[1] for r in p.rows] == [0, 1, 2, 3]
    assert p.read_socket() == 0
    threading.Timer(0.05, p.put, (4,)).start()  # while the client sleeps
    assert p.q.wait(WAIT_MAX) is True
    assert p.doorbells == 2
    assert p.read_socket(first=True) == 1
    p.drain()
    assert [r[1] for r in p.rows] == [0, 1, 2, 3, 4]
    p.put(5)  # (after the look: disarmed again)
    assert p.doorbells == 2


@pytest.mark.parametrize("outside", [False, True], ids=["library", "outside"])
@pytest.mark.parametrize("busy_poll_us", [0, 50])
def test_no_lost_wake_up_with_wait(pair: Callable[[int], _Pair], busy_poll_us: int,
                                   outside: bool) -> None:
    """The library's own wait (busy-poll off and on), then the socket and the rings, as
    Context._pump for a CQ's wait: the socket read only when the wait slept, up to its
    first doorbell. Every completion arrives, in order, no wait sleeps through one, and
    doorbells do not pile up in the socket. Rings armed before sleeping only, and after
    every look (a waiter outside the library)."""
    p = pair(busy_poll_us)
    if outside:
        p.q.outside_waiters()
    t = _produce(p, 1 + busy_poll_us + outside)
    while len(p.rows) < N:
        t0 = time.monotonic()
        slept = p.q.wait(WAIT_MAX)
        assert time.monotonic() - t0 < WAIT_MAX, f"asleep with {len(p.rows)} of {N}"
        if slept:
            p.read_socket(first=not outside)
        p.drain()
    t.join(10)
    assert [r[1] for r in p.rows] == list(range(N))
    assert 0 < p.doorbells <= N
    assert p.read_socket() <= 1  # (left behind: one at most)


def _hub_like(p: _Pair, seed: int, *, looker: bool, first: Callable[[], bool],
              looker_until: int = N) -> int:
    """The socket API's hub's wait, in this thread, until N completions were taken: a
    sleeper counted and the rings armed under its lock (``arm_to_sleep``), asleep on the
    socket outside it, then (under the lock) the socket read, up to its first doorbell
    when ``first()``, and the rings; with ``looker``, another thread looks at the rings
    now and then under the same lock (a send pumps while a receive sleeps) until
    ``looker_until`` were taken. Every sleep is bounded; returns the most doorbells a
    wake-up left behind (a put counts its doorbell just before it sends it: one more
    may be in flight)."""
    lock = threading.Lock()
    stop = threading.Event()
    read = most_left = 0

    def other() -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            with lock:
                p.drain()
            time.sleep(rng.choice((0, 10e-6, 100e-6, 1e-3)))
    others = [threading.Thread(target=other, daemon=True)] if looker else []
    t = _produce(p, seed)
    for o in others:
        o.start()
    try:
        while True:
            with lock:  # (judged under the lock: the other thread takes rows too)
                if len(p.rows) >= N:
                    break
                p.q.sleepers += 1
                ready = p.q.arm_to_sleep()
            t0 = time.monotonic()
            r = [] if ready else select.select([p.client_sock], [], [], WAIT_MAX)[0]
            waited = time.monotonic() - t0
            with lock:
                p.q.sleepers -= 1
                assert waited < WAIT_MAX, f"asleep with {len(p.rows)} of {N}"
                if r:
                    read += p.read_socket(first=first())
                p.drain()
                most_left = max(most_left, p.doorbells - read)
            if len(p.rows) >= looker_until:
                stop.set()  # (the rest is the waiter's alone)
    finally:
        stop.set()
        for o in others:
            o.join(10)
    t.join(10)
    assert [r[1] for r in p.rows] == list(range(N))
    return most_left


def test_no_lost_wake_up_with_a_look_from_another_thread(
        pair: Callable[[int], _Pair]) -> None:
    """Only the library waits, as the socket API's hub does, reading the socket up to
    the first doorbell after every sleep, while another thread looks at the rings: a
    look while one sleeps arms again, so the sleeper is never left asleep with
    completions in the ring."""
    p = pair(0)
    _hub_like(p, 4, looker=True, first=lambda: True, looker_until=N // 2)


def test_no_lost_wake_up_for_a_waiter_on_the_socket(pair: Callable[[int], _Pair]) -> None:
    """A waiter that knows nothing of the rings (a select on the context's socket, as an
    application on ctx.fileno(), which calls outside_waiters), looking at them only when
    the socket is readable: the socket always becomes readable while completions wait."""
    p = pair(0)
    p.q.outside_waiters()
    t = _produce(p, 3)
    while len(p.rows) < N:
        r, _, _ = select.select([p.client_sock], [], [], WAIT_MAX)
        assert r, f"asleep with {len(p.rows)} of {N} completions taken"
        p.read_socket()
        p.drain()
    t.join(10)
    assert [r[1] for r in p.rows] == list(range(N))
    # (every completion left a doorbell or was taken by a drain the client made anyway)
    assert p.doorbells <= N


def test_a_sleep_armed_once_is_rung_once_at_most(pair: Callable[[int], _Pair]) -> None:
    """``rang_once_at_most`` (the socket API's hub reads its socket up to the first
    doorbell only then): a sleep that armed alone; not when a look armed again while it
    slept, nor with a waiter outside the library, nor with two rings."""
    p = pair(0)
    p.q.sleepers += 1
    p.q.arm_to_sleep()
    assert p.q.rang_once_at_most()
    p.drain()  # (another thread's look while this one sleeps: armed again)
    assert not p.q.rang_once_at_most()
    p.q.arm_to_sleep()
    assert p.q.rang_once_at_most()
    p.q.sleepers -= 1
    p.drain()  # (this sleeper's own look after it woke: disarms, counts nothing)
    assert p.q.rang_once_at_most()
    second = CompletionRing(64)
    p.q.add_cq(8, second)
    assert not p.q.rang_once_at_most()
    del p.q.cqs[8]
    second.close()
    p.q.outside_waiters()
    assert not p.q.rang_once_at_most()


@pytest.mark.parametrize("looker", [False, True], ids=["alone", "looker"])
def test_no_lost_wake_up_reading_to_the_first_doorbell(pair: Callable[[int], _Pair],
                                                       looker: bool) -> None:
    """The hub's rule: the socket read up to the first doorbell when
    ``rang_once_at_most`` (else all of it); another thread looking or not. Every
    completion arrives, in order, no sleep lasts through one, and doorbells do not pile
    up in the socket."""
    p = pair(0)
    assert _hub_like(p, 6 + looker, looker=looker, first=p.q.rang_once_at_most) <= 2
    assert p.read_socket() <= 1
