"""The completion rings' doorbell: mrcd rings an armed ring once and disarms it, the
client's every look at the rings arms them again (mrcnet.api.shmclient). Real parts: the
client's ClientQueues and CompletionRing (a sealed memfd), mrcd's CompletionWriter
mapping the same memfd, doorbells on a real Unix socket pair; the producer in a thread.

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
            n, rang = self.writer.put([(WCStatus.SUCCESS, wr_id, WCOpcode.RDMA_WRITE, 8,
                                        None, 3)])
            if rang:  # (a put that disarmed the ring always rings: delivery.py's rule)
                self.doorbells += 1
                self.mrcd_sock.send(DOORBELL)
            if n:
                return
            time.sleep(50e-6)  # full: the client makes room

    def read_socket(self) -> None:
        """The client's read of its socket (every doorbell waiting), as Context does
        before it drains the rings."""
        while True:
            try:
                data = self.client_sock.recv(16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            assert data == DOORBELL

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
    """Ten completions while the client does not look: one doorbell; its look (read the
    socket, drain) takes all ten and arms the ring again: the next one rings."""
    p = pair(0)
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


@pytest.mark.parametrize("busy_poll_us", [0, 50])
def test_no_lost_wake_up_with_wait(pair: Callable[[int], _Pair], busy_poll_us: int) -> None:
    """The library's own wait (busy-poll off and on), then the socket and the rings, as
    Context._pump: every completion arrives, in order, and no wait sleeps through one."""
    p = pair(busy_poll_us)
    t = _produce(p, 1 + busy_poll_us)
    while len(p.rows) < N:
        t0 = time.monotonic()
        p.q.wait(WAIT_MAX)
        assert time.monotonic() - t0 < WAIT_MAX, f"asleep with {len(p.rows)} of {N}"
        p.read_socket()
        p.drain()
    t.join(10)
    assert [r[1] for r in p.rows] == list(range(N))
    assert 0 < p.doorbells <= N


def test_no_lost_wake_up_for_a_waiter_on_the_socket(pair: Callable[[int], _Pair]) -> None:
    """A waiter that knows nothing of the rings (a select on the context's socket, as an
    application on ctx.fileno()), looking at them only when the socket is readable: the
    socket always becomes readable while completions wait."""
    p = pair(0)
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
