"""mrcd arms a client's doorbell only after sending what its posts made
(:meth:`mrcnet.daemon.posts.Posts.settle`): a post the client makes while mrcd sends
(a ping-pong's receive behind its answer) rings no doorbell and is taken in the same
wake-up; once settled, the next post rings. Real parts: the client's send queue (a
sealed memfd) and mrcd's end of it on the same memfd, the doorbells on a Unix socket
pair, mrcd's posting code into a real core on the virtual clock."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import threading
from typing import Any

import pytest

from mrcnet.api.shmclient import DOORBELL, ClientQueues
from mrcnet.api.shmring import PRECISE
from mrcnet.core import HostConfig
from mrcnet.daemon.posts import Posts
from mrcnet.daemon.rings import SessionQueues

from .harness import Net, connect
from .posts_fakes import FakeEngine, OutboxSession

pytestmark = pytest.mark.skipif(not PRECISE, reason="the rings need the C module")


class _SendingEngine(FakeEngine):
    """An engine whose send (the pump after a take) runs ``during`` first: the client
    posting while mrcd sends."""

    def __init__(self, host: Any) -> None:
        super().__init__(host)
        self.during: list[Any] = []
        self.pumps = 0

    def after_requests(self) -> None:
        self.pumps += 1
        while self.during:
            self.during.pop(0)()


class _Client:
    """A client with one connected QP, its queues, and mrcd's Posts of them."""

    def __init__(self, busy_poll_us: int = 0) -> None:
        net = Net(seed=3, config=HostConfig(mtu_payload=1024))
        self.qpn, _ = connect(net, 0, 1, recvs=0)
        host = net.h(0)
        self.recvs: list[int] = []
        post_recv = host.post_recv

        def recording(qpn: int, wr_id: int, now: float = 0.0) -> None:
            self.recvs.append(wr_id)
            post_recv(qpn, wr_id, now)

        host.post_recv = recording  # type: ignore[method-assign]
        self.client, self.mrcd = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.q = ClientQueues(self.client, busy_poll_us=0, sq_depth=64)
        self.engine = _SendingEngine(host)
        self.engine.cfg = dataclasses.replace(self.engine.cfg, busy_poll_us=busy_poll_us)
        self.s = OutboxSession(None, None, 1)  # type: ignore[arg-type]
        self.s.queues = SessionQueues([self.q.fd], self.q.nslots)
        self.posts = Posts(self.engine, {self.qpn: self.s})  # type: ignore[arg-type]
        assert not self.s.queues.rest()  # mrcd asleep: the first post rings

    def recv(self, wr_id: int) -> None:
        self.q.post_recv(self.qpn, wr_id, 1.0)

    def doorbells(self) -> int:
        """The doorbells rung since the last look (read off mrcd's socket)."""
        got: list[bytes] = []
        with contextlib.suppress(BlockingIOError):
            while True:
                got.append(self.mrcd.recv(16, socket.MSG_DONTWAIT))
        assert set(got) <= {DOORBELL}
        return len(got)

    def close(self) -> None:
        self.s.queues.close()
        self.q.close()
        self.mrcd.close()


def test_a_post_made_while_mrcd_sends_rings_no_doorbell() -> None:
    c = _Client()
    try:
        c.recv(1)
        assert c.doorbells() == 1  # mrcd slept
        # mrcd's wake-up: it takes the post, and while it sends, the client posts again
        c.posts.take(c.s)
        c.engine.during.append(lambda: c.recv(2))
        c.engine.after_requests()
        assert c.recvs == [1] and c.doorbells() == 0  # awake: no doorbell for it
        c.posts.settle(c.s)
        assert c.recvs == [1, 2]  # taken before mrcd slept ...
        assert c.engine.pumps == 2  # ... and sent (its own pump)
        c.recv(3)
        assert c.doorbells() == 1  # settled: asleep, the next post rings
        assert c.recvs == [1, 2]
    finally:
        c.close()


def test_settle_with_nothing_new_arms_at_once() -> None:
    c = _Client()
    try:
        c.recv(1)
        c.doorbells()
        c.posts.take(c.s)
        c.engine.after_requests()
        c.posts.settle(c.s)
        assert c.recvs == [1] and c.engine.pumps == 1
        c.recv(2)
        assert c.doorbells() == 1
    finally:
        c.close()


def test_the_busy_poll_takes_a_post_that_comes_during_it() -> None:
    # busy_poll_us: after the send, mrcd watches the queue (no doorbell needed) before
    # it arms; a post found is taken and sent, then it watches again, finds nothing, arms
    c = _Client(busy_poll_us=200_000)  # (long: the posting thread must come within it)
    try:
        c.recv(1)
        c.doorbells()
        c.posts.take(c.s)
        c.engine.after_requests()
        later = threading.Timer(0.005, c.recv, (2,))
        later.start()
        c.posts.settle(c.s)
        later.join()
        assert c.recvs == [1, 2] and c.engine.pumps == 2
        assert c.doorbells() == 0
        c.recv(3)
        assert c.doorbells() == 1
    finally:
        c.close()
