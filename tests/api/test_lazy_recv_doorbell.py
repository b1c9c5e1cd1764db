"""Lazy receives (mrcnet.api.shmclient ``ClientQueues.post_recv(lazy=True)``, the socket
API's re-posts): a receive that replaces one just used does not wake a sleeping mrcd on
its own; the doorbell is owed and rung by the next post (an answer: one wake-up for
both), by the library before it sleeps, or at the LAZY_MAX-th lazy receive; never lazy
once something outside the library may sleep on the socket. Real parts: the client's
send queue (a sealed memfd), mrcd's end of it (SessionQueues) on the same memfd, and the
doorbells on a real Unix socket pair."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from mrcnet.api.shmclient import DOORBELL, LAZY_MAX, ClientQueues
from mrcnet.api.shmqueues import OP_RECV, OP_WRITE
from mrcnet.api.shmring import PRECISE
from mrcnet.daemon.rings import SessionQueues

pytestmark = pytest.mark.skipif(not PRECISE, reason="the rings need the C module")


class _Ends:
    """A client's queues and mrcd's end of its send queue; mrcd asleep to begin with."""

    def __init__(self) -> None:
        self.client, self.mrcd = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.q = ClientQueues(self.client, busy_poll_us=0, sq_depth=64)
        self.session = SessionQueues([self.q.fd], self.q.nslots)
        self.taken: list[int] = []
        self.sleep()

    def sleep(self) -> None:
        """mrcd takes what is posted and sleeps (its next doorbell wakes it)."""
        self.taken += [w[0] for w in self.session.take()]
        assert not self.session.rest()

    def doorbells(self) -> int:
        """The doorbells mrcd would wake for now (read off its socket)."""
        n = 0
        while True:
            try:
                assert self.mrcd.recv(16, socket.MSG_DONTWAIT) == DOORBELL
            except BlockingIOError:
                return n
            n += 1

    def recv(self, wr_id: int, lazy: bool = True) -> None:
        self.q.post_recv(5, wr_id, 1.0, lazy=lazy)

    def write(self) -> None:
        self.q.post_write(5, 99, 1, 0, 8, 0, 2, None, 1.0)

    def close(self) -> None:
        self.session.close()
        self.q.close()
        self.mrcd.close()


@pytest.fixture
def ends() -> Iterator[_Ends]:
    e = _Ends()
    yield e
    e.close()


def test_a_lazy_receive_waits_for_the_answer(ends: _Ends) -> None:
    ends.recv(1)
    assert ends.doorbells() == 0 and ends.q.owed == 1
    ends.write()  # the answer: one doorbell for both
    assert ends.doorbells() == 1 and ends.q.owed == 0
    ends.sleep()
    assert ends.taken == [OP_RECV, OP_WRITE]  # mrcd found both, in order


def test_a_plain_receive_rings_at_once(ends: _Ends) -> None:
    ends.recv(1, lazy=False)
    assert ends.doorbells() == 1


def test_the_library_pays_before_it_sleeps(ends: _Ends) -> None:
    ends.recv(1)
    assert ends.doorbells() == 0
    assert ends.q.wait(0.01) is False  # asleep on the socket until the timeout ...
    assert ends.doorbells() == 1  # ... after ringing mrcd for the receive
    ends.sleep()  # (mrcd woke, took it and sleeps again)
    ends.recv(2)
    assert ends.doorbells() == 0
    ends.q.pay()  # (the socket API's hub: Context._before_sleep)
    assert ends.doorbells() == 1


def test_at_most_lazy_max_receives_wait(ends: _Ends) -> None:
    for i in range(LAZY_MAX):
        ends.recv(i)
    assert ends.doorbells() == 0
    ends.recv(LAZY_MAX)  # one more than may wait
    assert ends.doorbells() == 1 and ends.q.owed == 0
    ends.sleep()
    assert ends.taken == [OP_RECV] * (LAZY_MAX + 1)


def test_never_lazy_with_outside_waiters(ends: _Ends) -> None:
    ends.q.outside_waiters()  # (Context.fileno(): a bare select may sleep on the socket)
    ends.recv(1)
    assert ends.doorbells() == 1


def test_mrcd_awake_needs_no_doorbell(ends: _Ends) -> None:
    ends.session.sq.wake()  # mrcd looking at the ring: nothing to ring for
    ends.recv(1)
    ends.write()
    assert ends.doorbells() == 0 and ends.q.owed == 0
