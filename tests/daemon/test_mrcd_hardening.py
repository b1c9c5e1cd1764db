"""A local client cannot hurt mrcd: sealed memory only, fds never leak, per-client quotas.

The attacks speak the raw message protocol (:class:`Raw`) where the client library would
not let them do it (an unsealed memfd, malformed messages, fds where none belong).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mdnsutil import MrcdPair, needs_root

from mrcnet.api import Context, MemoryNotSealed
from mrcnet.api.protocol import PROTOCOL_VERSION

KIB = 1 << 10
MIB = 1 << 20


class Raw:
    """A client speaking the socket protocol by hand (no checks of the library)."""

    def __init__(self, path: str, hello: bool = True) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)
        self.sock.settimeout(10.0)
        self.next_id = 1
        if hello:
            assert "ok" in self.call("hello", v=PROTOCOL_VERSION, pid=os.getpid())

    def send_raw(self, data: bytes, fds: list[int] | None = None) -> None:
        if fds:
            socket.send_fds(self.sock, [data], fds)
        else:
            self.sock.send(data)

    def reply(self, rid: Any = None) -> dict[str, Any]:
        """The next response (pushes skipped); with ``rid`` the one for that id."""
        while True:
            data, fds, _, _ = socket.recv_fds(self.sock, 1 << 20, 4)
            for fd in fds:
                os.close(fd)
            assert data, "mrcd closed the connection"
            msg = json.loads(data)
            if "push" in msg:
                continue
            if rid is None or msg.get("id") == rid:
                return dict(msg)

    def call(self, op: str, fds: list[int] | None = None, **args: Any) -> dict[str, Any]:
        rid = self.next_id
        self.next_id += 1
        self.send_raw(json.dumps({"id": rid, "op": op, **args}).encode(), fds)
        return self.reply(rid)

    def close(self) -> None:
        self.sock.close()


def memfd(length: int, seals: int = 0, sealing: bool = True) -> int:
    """A memfd of ``length`` bytes with ``seals`` added."""
    fd = os.memfd_create("test-mr", os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if sealing else 0))
    os.ftruncate(fd, length)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def punch_hole(fd: int, offset: int, length: int) -> None:
    """fallocate(PUNCH_HOLE | KEEP_SIZE): allowed on a shrink-sealed memfd; the range
    reads back as zeros afterwards (fresh pages, never a fault)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, 0x02 | 0x01, offset, length) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def assert_serving(pair: MrcdPair) -> None:
    """Both mrcds run and answer a new client."""
    for m in (pair.a, pair.b):
        assert m.proc.poll() is None, m.logs()
        with Context(m.socket) as c:
            assert "host" in c.stats()
            c.alloc_mr(4096).deregister()


@pytest.fixture
def kept_fds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every memfd the client library creates, dup-ed: an attacker keeping its fd."""
    kept: list[int] = []
    real = os.memfd_create

    def keep(name: str, flags: int = os.MFD_CLOEXEC) -> int:
        fd = real(name, flags)
        kept.append(os.dup(fd))
        return fd

    monkeypatch.setattr(os, "memfd_create", keep)
    try:
        yield kept
    finally:
        for fd in kept:
            os.close(fd)


# --- item 1: sealed memory only ------------------------------------------------------

@needs_root
def test_unsealed_memory_is_refused(mrcd_pair: MrcdPair, tmp_path: Path) -> None:
    raw = Raw(mrcd_pair.a.socket)
    try:
        # No seal at all, sealing not even allowed, a plain file: refused, saying what to do.
        for fd, why in ((memfd(64 * KIB), "not sealed against shrinking"),
                        (memfd(64 * KIB, sealing=False), "not sealed against shrinking"),
                        (memfd(64 * KIB, fcntl.F_SEAL_GROW), "not sealed against shrinking"),
                        (os.open(tmp_path / "file", os.O_RDWR | os.O_CREAT), "not a memfd")):
            try:
                os.ftruncate(fd, 64 * KIB)
                r = raw.call("reg_mr", fds=[fd], length=64 * KIB)
            finally:
                os.close(fd)
            assert r["error"]["type"] == "MemoryNotSealed", r
            assert why in r["error"]["message"] and "F_SEAL_SHRINK" in r["error"]["message"]
            assert "alloc_mr" in r["error"]["message"]
        # Sealed, but shorter than the length claimed: refused (the seal makes the size
        # check final, there is no race).
        fd = memfd(4 * KIB, fcntl.F_SEAL_SHRINK)
        try:
            r = raw.call("reg_mr", fds=[fd], length=64 * KIB)
        finally:
            os.close(fd)
        assert r["error"]["type"] == "OutOfBounds", r
        # A shrink-sealed memfd made by hand is fine, and cannot be shrunk afterwards.
        fd = memfd(64 * KIB, fcntl.F_SEAL_SHRINK)
        try:
            r = raw.call("reg_mr", fds=[fd], length=64 * KIB)
            assert "lkey" in r["ok"], r
            with pytest.raises(OSError) as e:
                os.ftruncate(fd, 0)
            assert e.value.errno == errno.EPERM
        finally:
            os.close(fd)
        # The typed error on the library's side.
        with Context(mrcd_pair.a.socket) as c:
            fd = memfd(4096)
            try:
                with pytest.raises(MemoryNotSealed, match="F_SEAL_SHRINK"):
                    c._call("reg_mr", fds=[fd], length=4096)
            finally:
                os.close(fd)
    finally:
        raw.close()
    assert_serving(mrcd_pair)


@needs_root
def test_shrink_attack_on_both_sides(mrcd_pair: MrcdPair, kept_fds: list[int]) -> None:
    """A client keeps a dup of its regions' memfds and tries to shrink them while the
    sender's mrcd reads from one and the receiver's mrcd writes into the other."""
    with Context(mrcd_pair.b.socket) as cb, Context(mrcd_pair.a.socket) as ca:
        mr_b = cb.alloc_mr(MIB)
        cq_b = cb.create_cq()
        qp_b = cb.create_qp(cq_b)
        cb.listen(7, qp_b, expose=[mr_b])
        for i in range(4):
            qp_b.post_recv(wr_id=i)
        mr_a = ca.alloc_mr(MIB)
        cq_a = ca.create_cq()
        qp_a = ca.create_qp(cq_a)
        peer = qp_a.connect("hb", 7)
        qp_b.accept(timeout=10)
        assert len(kept_fds) == 2  # the attacker holds both files
        fd_b, fd_a = kept_fds
        data = os.urandom(MIB)
        mr_a.buf[:] = data
        for fd in (fd_a, fd_b):
            assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK
            for size in (0, MIB // 2, MIB - 1):
                with pytest.raises(OSError) as e:
                    os.ftruncate(fd, size)
                assert e.value.errno == errno.EPERM
            with pytest.raises(OSError):  # and no one can take the seal away
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
            assert os.fstat(fd).st_size == MIB
        # What sealing still allows: punching holes. Pages come back as zeros, never a
        # fault: on the sender's region (mrcd reads zeros from it) and on the
        # receiver's (mrcd writes into fresh pages).
        punch_hole(fd_a, 0, 64 * KIB)
        punch_hole(fd_b, 0, MIB)
        qp_a.post_write(mr_a, 0, MIB, peer.regions[0], imm=1, wr_id=1)
        wcs = cq_a.wait(timeout=10)
        assert wcs and wcs[0].ok, wcs
        got: list[Any] = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got = cq_b.wait(timeout=1)
        assert got and got[0].ok and got[0].imm == 1
        want = bytes(64 * KIB) + data[64 * KIB:]
        assert bytes(mr_b.buf) == want
        punch_hole(fd_b, 0, MIB)  # behind the receiving mrcd's mapping, mid-connection
        qp_a.post_write(mr_a, 0, MIB, peer.regions[0], imm=2, wr_id=2)
        assert cq_a.wait(timeout=10)[0].ok
        assert cq_b.wait(timeout=10)[0].imm == 2
        assert bytes(mr_b.buf) == want
    assert_serving(mrcd_pair)
    for m in (mrcd_pair.a, mrcd_pair.b):
        assert "Fatal Python error" not in m.logs()
