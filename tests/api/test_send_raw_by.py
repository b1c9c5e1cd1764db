"""``send_raw_by``: a send on a full non-blocking socket waits for room until its
deadline (the client's requests and its ring-back share it)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from mrcnet.api.protocol import send_raw_by


def _full_pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    a.setblocking(False)
    while True:  # fill a's way to b
        try:
            a.send(b"x" * 1024)
        except BlockingIOError:
            return a, b


def test_a_full_socket_times_out_at_the_deadline() -> None:
    a, b = _full_pair()
    with a, b:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            send_raw_by(a, b"?", t0 + 0.2)
        assert time.monotonic() - t0 >= 0.2


def test_a_full_socket_sends_once_the_reader_makes_room() -> None:
    a, b = _full_pair()
    with a, b:
        b.setblocking(False)
        got: list[bytes] = []

        def drain() -> None:  # (the reader catches up: the socket is writable again)
            while True:
                try:
                    got.append(b.recv(2048))
                except BlockingIOError:
                    return

        threading.Timer(0.1, drain).start()
        t0 = time.monotonic()
        send_raw_by(a, b"?", t0 + 5.0)
        assert time.monotonic() - t0 < 2.0  # (woken by the room, not by the deadline)
        time.sleep(0.05)
        drain()
        assert got.count(b"?") == 1  # (sent, once)
