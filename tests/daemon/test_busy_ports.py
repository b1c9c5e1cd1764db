"""mrcd's ports out of the event loop while busy (mrcnet/daemon/busyports.py), on a real
uvloop loop with a socket standing for a port: the loop stops watching it only after a
run of look hits that each followed a batch; while it is out, the looks schedule its
passes and nothing else reads it; a look that finds nothing puts it back, and one that
finds only a client's socket schedules another look."""

from __future__ import annotations

import asyncio
import select
import socket
from collections.abc import Iterator

import pytest
import uvloop

from mrcnet.daemon.busyports import BusyPorts

HIT = select.POLLIN


class Port:
    """A datagram socket pair: ``fd`` plays the port, ``send`` a frame arriving."""

    def __init__(self) -> None:
        self.sock, self.peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        self.fd = self.sock.fileno()
        self.passes = 0  # port passes run (each reads what is there)

    def send(self) -> None:
        self.peer.send(b"frame")

    def on_readable(self, index: int) -> None:
        assert index == 0
        self.passes += 1
        while True:
            try:
                self.sock.recv(64)
            except BlockingIOError:
                return


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = uvloop.new_event_loop()
    yield lp
    lp.close()


def _spin(loop: asyncio.AbstractEventLoop) -> None:
    """Let the loop run its ready callbacks and poll its fds a few times."""
    loop.run_until_complete(asyncio.sleep(0.02))


def _busy(loop: asyncio.AbstractEventLoop, port: Port, looks: list[int],
          enter_after: int = 3) -> BusyPorts:
    b = BusyPorts(loop, [port.fd], port.on_readable, lambda: looks.append(1), enter_after)
    b.watch()
    return b


def test_watched_port_is_read_by_the_loop(loop: asyncio.AbstractEventLoop) -> None:
    port, looks = Port(), []
    _busy(loop, port, looks)
    port.send()
    _spin(loop)
    assert port.passes == 1


def test_round_trip_hits_never_take_the_port_out(loop: asyncio.AbstractEventLoop) -> None:
    port, looks = Port(), []
    b = _busy(loop, port, looks)
    for _ in range(20):  # hits after passes that read a frame or two
        b.after_look([(port.fd, HIT)], bulk=False)
    assert not b.out and b.left == 0
    _spin(loop)
    assert port.passes == 0  # nothing scheduled: the loop's epoll reports the port


def test_a_run_of_batch_hits_takes_the_port_out_until_a_look_misses(
        loop: asyncio.AbstractEventLoop) -> None:
    port, looks = Port(), []
    b = _busy(loop, port, looks, enter_after=3)
    b.after_look([(port.fd, HIT)], bulk=True)
    b.after_look([(port.fd, HIT)], bulk=False)  # (a round trip's pass between: again)
    b.after_look([(port.fd, HIT)], bulk=True)
    b.after_look([(port.fd, HIT)], bulk=True)
    assert not b.out
    b.after_look([(port.fd, HIT)], bulk=True)  # the third in a row
    assert b.out and b.left == 1
    _spin(loop)
    assert port.passes == 1  # the look scheduled the port's pass
    port.send()
    _spin(loop)
    assert port.passes == 1  # out of the loop: only a look finds it now
    b.after_look([(port.fd, HIT)], bulk=True)
    _spin(loop)
    assert port.passes == 2
    port.send()
    b.after_look(None, bulk=True)  # a look that found nothing: the loop watches again
    assert not b.out and b.streak == 0
    _spin(loop)
    assert port.passes == 3  # the loop's reader took the frame


def test_a_client_hit_while_out_schedules_a_look(loop: asyncio.AbstractEventLoop) -> None:
    port, looks = Port(), []
    b = _busy(loop, port, looks, enter_after=1)
    b.after_look([(port.fd, HIT)], bulk=True)
    assert b.out
    client, other = socket.socketpair()
    with client, other:
        b.after_look([(client.fileno(), HIT)], bulk=True)
        _spin(loop)
    assert looks == [1] and b.out
    b.after_look([(client.fileno(), HIT)], bulk=True)  # out: a look scheduled
    b.watch()  # (what the engine does after a failed pass)
    b.after_look([(client.fileno(), HIT)], bulk=True)  # watched: none needed
    _spin(loop)
    assert looks == [1, 1]
