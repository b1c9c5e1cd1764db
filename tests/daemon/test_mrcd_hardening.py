"""A local client cannot hurt mrcd: sealed memory only, fds never leak, per-client quotas.

The attacks speak the raw message protocol (:class:`Raw`) where the client library would
not let them do it (an unsealed memfd, malformed messages, fds where none belong).
"""

from __future__ import annotations

import contextlib
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
from mdnsutil import Mrcd, MrcdPair, VethPair, needs_root, start_mrcd, write_config

from mrcnet.api import Context, LimitExceeded, MemoryNotSealed
from mrcnet.api.protocol import PROTOCOL_VERSION
from mrcnet.daemon.config import ClientLimits, ConfigError, parse_config

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
    """Every memory region's memfd the client library creates, dup-ed: an attacker
    keeping its fd (the queues it shares with mrcd are memfds of other names)."""
    kept: list[int] = []
    real = os.memfd_create

    def keep(name: str, flags: int = os.MFD_CLOEXEC) -> int:
        fd = real(name, flags)
        if name == "mrc-mr":
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


# --- item 2: fds never leak; per-client quotas ------------------------------------------

def fd_links(pid: int) -> list[str]:
    """What mrcd's fds are (for a failure's message)."""
    out = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            out.append(os.readlink(f"/proc/{pid}/fd/{name}"))
    return sorted(out)


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_fd_count(pid: int, want: int, timeout: float = 5.0) -> int:
    """mrcd's fd count once it is ``want`` (or whatever it is after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while (n := fd_count(pid)) != want and time.monotonic() < deadline:
        time.sleep(0.02)
    return n


def _bad_requests(rid: int) -> list[tuple[bytes, int, str]]:
    """Malformed requests of every kind: (bytes, fds to attach, the error type)."""
    def req(**kw: Any) -> bytes:
        return json.dumps({"id": rid, **kw}).encode()
    deep = 5000
    return [
        (b"not json at all", 1, "ProtocolError"),
        (b"[1, 2, 3]", 2, "ProtocolError"),
        (req(op="no_such_op"), 1, "InvalidArgument"),
        (req(op="stats"), 3, "InvalidArgument"),  # takes no fd
        (req(op="reg_mr", length=4096), 2, "InvalidArgument"),  # two memfds
        (req(op="reg_mr", length="x"), 1, "InvalidArgument"),
        (req(op="reg_mr", length=-1), 1, "InvalidArgument"),
        (req(op="reg_mr", length=4096, unsealed=True), 1, "MemoryNotSealed"),
        (req(op="create_qp", cq="nope"), 1, "InvalidArgument"),
        (req(op="stats")[:-1] + b',"x":' + b"[" * deep + b"]" * deep + b"}", 1,
         "LimitExceeded"),
        (req(op="stats", pad="x" * 70000), 2, "LimitExceeded"),  # longer than a message
        (req(op="stats"), 8, "ProtocolError"),  # more fds than a request may carry
    ]


@needs_root
def test_malformed_messages_with_fds_leave_the_fd_count_flat(mrcd_pair: MrcdPair) -> None:
    pid = mrcd_pair.a.proc.pid
    path = mrcd_pair.a.socket
    with Context(path) as c:  # whatever mrcd opens once (lazily) is open now
        c.alloc_mr(4096).deregister()
    before = wait_fd_count(pid, -1, timeout=0.2)
    raw = Raw(path)
    with_client = fd_count(pid)
    assert with_client == before + 1
    sent = 0
    replies: dict[str, int] = {}
    try:
        while sent < 1000:
            rid = sent
            for data, nfds, kind in _bad_requests(rid):
                unsealed = b'"unsealed"' in data
                fds = [memfd(4096, 0 if unsealed else fcntl.F_SEAL_SHRINK)
                       for _ in range(nfds)]
                try:
                    raw.send_raw(data, fds)
                finally:
                    for fd in fds:
                        os.close(fd)
                r = raw.reply()
                assert r["error"]["type"] == kind, (data[:60], r)
                # The answer goes to the request's id whenever its bytes start with one.
                assert r["id"] == (None if data[:1] != b"{" else rid)
                replies[kind] = replies.get(kind, 0) + 1
                sent += 1
        # (mrcd closes a request's fds right after answering it: give it a moment)
        assert wait_fd_count(pid, with_client) == with_client, (replies, fd_links(pid))
        # Clients that send fds and go at once; clients that skip hello.
        for i in range(50):
            c2 = Raw(path, hello=i % 2 == 0)
            fds = [memfd(4096, fcntl.F_SEAL_SHRINK) for _ in range(3)]
            c2.send_raw(json.dumps({"id": 1, "op": "reg_mr", "length": 4096}).encode(), fds)
            for fd in fds:
                os.close(fd)
            c2.close()
        assert "host" in raw.call("stats")["ok"]  # the same session still served
    finally:
        raw.close()
    assert wait_fd_count(pid, before) == before
    assert mrcd_pair.a.proc.poll() is None


@needs_root
def test_deeply_nested_json_gets_an_answer(mrcd_pair: MrcdPair) -> None:
    raw = Raw(mrcd_pair.a.socket)
    try:
        t0 = time.monotonic()
        # 100k deep: longer than a message, too (answered as such, to its id).
        raw.send_raw(b'{"id":9,"op":"stats","x":' + b"[" * 100_000)
        r = raw.reply()
        assert r["id"] == 9 and r["error"]["type"] == "LimitExceeded"
        assert r["error"]["key"] == "limits.max_message"
        # 30k deep inside a message: the depth limit.
        raw.send_raw(b'{"id":10,"op":"stats","x":' + b"[" * 30_000 + b"]" * 30_000 + b"}")
        r = raw.reply()
        assert r["id"] == 10 and r["error"]["key"] == "limits.max_json_depth"
        assert "limits.max_json_depth" in r["error"]["message"]
        # Brackets inside strings are not nesting.
        assert "ok" in raw.call("stats", note="[" * 1000)
        assert time.monotonic() - t0 < 5
    finally:
        raw.close()
    assert_serving(mrcd_pair)


LIMITS = {"max_qps": 3, "max_cqs": 4, "max_mrs": 3, "max_mr_bytes": 256 * KIB,
          "max_recvs": 5, "max_message": 4096, "max_json_depth": 8}


@pytest.fixture
def limited(veth: VethPair, tmp_path: Path) -> Iterator[Mrcd]:
    """One mrcd with small per-client limits (:data:`LIMITS`)."""
    cfg, sock = str(tmp_path / "ha.toml"), str(tmp_path / "ha.sock")
    write_config(cfg, "ha", veth.if_a, veth.ip_a, sock, {"hb": veth.ip_b},
                 extra="[limits]\n" + "".join(f"{k} = {v}\n" for k, v in LIMITS.items()),
                 log_level="info")
    m = start_mrcd("ha", veth.ns_a, cfg, sock, str(tmp_path))
    try:
        yield m
    finally:
        m.stop()


def _hits(key: str, e: pytest.ExceptionInfo[LimitExceeded]) -> None:
    assert e.value.key == f"limits.{key}" and e.value.limit == LIMITS[key]
    assert f"limits.{key}" in str(e.value) and "configuration" in str(e.value)


@needs_root
def test_each_quota_gives_its_typed_error(limited: Mrcd) -> None:
    with Context(limited.socket) as c, Context(limited.socket) as other:
        cq = c.create_cq()
        qps = [c.create_qp(cq) for _ in range(3)]
        with pytest.raises(LimitExceeded) as e:
            c.create_qp(cq)
        _hits("max_qps", e)
        other.create_qp(other.create_cq())  # limits are per client
        qps.pop().destroy()
        qps.append(c.create_qp(cq))  # room again
        for _ in range(3):
            c.create_cq()
        with pytest.raises(LimitExceeded) as e:
            c.create_cq()
        _hits("max_cqs", e)
        mrs = [c.alloc_mr(4 * KIB) for _ in range(3)]
        with pytest.raises(LimitExceeded) as e:
            c.alloc_mr(4 * KIB)
        _hits("max_mrs", e)
        for mr in mrs:
            mr.deregister()
        big = c.alloc_mr(256 * KIB)
        with pytest.raises(LimitExceeded) as e:
            c.alloc_mr(4 * KIB)
        _hits("max_mr_bytes", e)
        big.deregister()
        c.alloc_mr(200 * KIB).deregister()
        # Receives: 5 queued on the client's QPs together; posts are pipelined, so the
        # refusal comes with the next call.
        for i in range(5):
            qps[i % 2].post_recv(wr_id=i)
        qps[2].post_recv(wr_id=5)
        with pytest.raises(LimitExceeded) as e:
            c.stats()
        _hits("max_recvs", e)
        assert "an earlier post_recv failed" in str(e.value)
        qps[0].destroy()  # its receives go with it
        qps[2].post_recv(wr_id=6)
        assert "host" in c.stats()
        # Message size and JSON depth: the library checks before sending...
        with pytest.raises(LimitExceeded) as e:
            c.listen(1, qps[1], private="x" * 5000)
        _hits("max_message", e)
        nested: Any = 1
        for _ in range(10):
            nested = [nested]
        with pytest.raises(LimitExceeded) as e:
            c.listen(1, qps[1], private=nested)
        _hits("max_json_depth", e)
        c.listen(1, qps[1], private=[[[1]]])
    # ...and mrcd answers a client that does not.
    raw = Raw(limited.socket)
    try:
        r = raw.call("stats", pad="x" * 5000)
        assert r["error"]["type"] == "LimitExceeded" and r["error"]["key"] == "limits.max_message"
        r = raw.call("stats", deep=[[[[[[[[[[1]]]]]]]]]])
        assert r["error"]["key"] == "limits.max_json_depth"
        assert r["error"]["limit"] == LIMITS["max_json_depth"]
    finally:
        raw.close()
    assert limited.proc.poll() is None


def test_limits_configuration() -> None:
    base = {"host": "h0", "port": [{"ifname": "eth0", "plane": 0}],
            "peers": {"h1": {"control": "fd00::b", "addresses": ["fd00::b"]}}}
    assert parse_config(base).limits == ClientLimits()
    assert parse_config({**base, "limits": {"max_qps": 7}}).limits.max_qps == 7
    for bad, why in (({"max_qp": 1}, "unknown key(s) limits.max_qp"),
                     ({"max_qps": 0}, "limits.max_qps = 0: must be at least 1"),
                     ({"max_message": 100}, "must be from 4096 to"),
                     ({"max_json_depth": 10_000}, "must be from 2 to 500"),
                     ({"max_cqs": "many"}, "max_cqs must be int")):
        with pytest.raises(ConfigError, match=why.replace("(", r"\(").replace(")", r"\)")):
            parse_config({**base, "limits": bad})
