"""recv_raw (mrcnet/api/protocol.py): one datagram with the fds that came along, the
caller's flags honoured."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from mrcnet.api.protocol import MAX_FDS, recv_raw, send_raw


def test_datagram_and_fds_arrive_together() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    r, w = os.pipe()
    with a, b:
        send_raw(a, b'{"op": "x"}', [r, w])
        send_raw(a, b"!")
        got = recv_raw(b)
        assert got is not None
        data, fds, flags = got
        assert data == b'{"op": "x"}' and len(fds) == 2 and flags == 0
        os.write(fds[1], b"k")  # the same pipe, through the fds that came along
        assert os.read(r, 1) == b"k"
        assert recv_raw(b) == (b"!", [], 0)
        a.close()
        assert recv_raw(b) is None  # end of stream
    for fd in (r, w, *fds):
        os.close(fd)


def test_too_many_fds_say_so() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pipes = [os.pipe() for _ in range(MAX_FDS)]
    sent = [fd for p in pipes for fd in p]  # twice MAX_FDS
    with a, b:
        send_raw(a, b"many", sent)
        got = recv_raw(b)
        assert got is not None
        data, fds, flags = got
        assert data == b"many" and len(fds) <= MAX_FDS and flags & socket.MSG_CTRUNC
    for fd in sent + fds:
        os.close(fd)


_DONTWAIT = """
import socket
from mrcnet.api.protocol import recv_raw
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # blocking
try:
    recv_raw(b, flags=socket.MSG_DONTWAIT)
except BlockingIOError:
    print("EAGAIN")
"""


def test_dontwait_returns_on_a_blocking_socket() -> None:
    # (a recv_raw that dropped the flags would wait here for a datagram never sent)
    r = subprocess.run([sys.executable, "-c", _DONTWAIT], capture_output=True,
                       text=True, timeout=10)
    assert r.stdout.strip() == "EAGAIN", r.stderr
