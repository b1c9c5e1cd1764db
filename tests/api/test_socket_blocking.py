"""The blocking socket API end to end: two mrcds on two namespaces joined by a veth."""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sockutil import MIB, echo_concurrently, recv_exactly

from mrcnet.api.socket import (
    BrokenPipe,
    ConnectionRefused,
    ConnectionReset,
    EndOfStream,
    MrcdNotRunning,
    MrcListener,
    MrcSocket,
    PeerUnreachable,
    SocketClosed,
    SocketTimeout,
    WouldBlock,
    create_connection,
    create_server,
)
from mrcnet.errors import MrcError

if TYPE_CHECKING:  # annotations only: which `conftest` module a run imports varies
    from conftest import MrcdPair


class Server:
    """A listener on hb with one handler thread per accepted connection."""

    def __init__(self, pair: MrcdPair, service: int, handler: Callable[[MrcSocket], None],
                 **kw: object) -> None:
        self.srv: MrcListener = create_server(service, mrcd=pair.b.socket, **kw)  # type: ignore[arg-type]
        self.handler = handler
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.stop = threading.Event()
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.srv.accept(timeout=0.2)
            except SocketTimeout:
                continue
            except MrcError as e:
                if not self.stop.is_set():
                    self.errors.append(e)
                return
            t = threading.Thread(target=self._run, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _run(self, conn: MrcSocket) -> None:
        try:
            with conn:
                self.handler(conn)
        except BaseException as e:  # reported by close()
            self.errors.append(e)

    def close(self) -> None:
        self.stop.set()
        self.acceptor.join(30)
        for t in self.threads:
            t.join(60)
        self.srv.close()
        assert not any(t.is_alive() for t in self.threads)


@pytest.fixture
def server_factory(mrcd_pair: MrcdPair) -> Iterator[Callable[..., Server]]:
    made: list[Server] = []

    def make(service: int, handler: Callable[[MrcSocket], None], **kw: object) -> Server:
        s = Server(mrcd_pair, service, handler, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
        assert not s.errors, s.errors


def echo(conn: MrcSocket) -> None:
    while data := conn.recv(1 << 20):
        conn.sendall(data)


def echo_messages(conn: MrcSocket) -> None:
    for msg in conn.messages():
        conn.send_message(msg)


def test_echo_and_large_send(mrcd_pair: MrcdPair, server_factory: Callable[..., Server]
                             ) -> None:
    server_factory(7, echo)
    with create_connection(("hb", 7), timeout=60, mrcd=mrcd_pair.a.socket) as s:
        assert s.getpeername()[0] == "hb"
        s.sendall(b"hello")
        assert recv_exactly(s, 5) == b"hello"
        # 16 MiB through a 4 MiB ring each way: byte-exact, in order. The echo runs
        # concurrently (a thread), so the sender reads while it sends.
        dt = echo_concurrently(s, os.urandom(16 * MIB), join=120)
        print(f"16 MiB echoed in {dt:.2f} s: {2 * 16 * 8 / dt:.0f} Mbit/s both ways")


def test_message_boundaries_any_size(mrcd_pair: MrcdPair,
                                     server_factory: Callable[..., Server]) -> None:
    # A 64 KiB ring each way: the 300 KB message is fragmented and reassembled, and
    # every size wraps the ring somewhere.
    server_factory(8, echo_messages, ring_size=64 << 10)
    sizes = [0, 1, 7, 4096, 65536, 300_000, 0, 5, 65535, 70_000, 3]
    msgs = [os.urandom(n) for n in sizes]
    with create_connection(("hb", 8), timeout=60, mrcd=mrcd_pair.a.socket,
                           ring_size=64 << 10) as s:
        for m in msgs:
            s.send_message(m)
            assert s.recv_message() == m
        # Pipelined: a reader thread takes the echoes while all are sent (the sender
        # would otherwise wait on the echo, which waits on the sender's full ring).
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.extend(s.recv_message() for _ in msgs))
        reader.start()
        for m in msgs:
            s.send_message(m)
        reader.join(60)
        assert got == msgs


def test_many_small_messages(mrcd_pair: MrcdPair, server_factory: Callable[..., Server]
                             ) -> None:
    count = 3000
    done: list[int] = []

    def sink(conn: MrcSocket) -> None:
        n = 0
        for i, msg in enumerate(conn.messages()):
            assert msg == i.to_bytes(4, "big") * (1 + i % 16)
            n += 1
        done.append(n)

    server_factory(9, sink)
    with create_connection(("hb", 9), timeout=60, mrcd=mrcd_pair.a.socket) as s:
        t0 = time.monotonic()
        for i in range(count):
            s.send_message(i.to_bytes(4, "big") * (1 + i % 16))
        assert s.flush(timeout=60)
        dt = time.monotonic() - t0
        print(f"{count} small messages in {dt:.2f} s: {count / dt:.0f} msg/s")
    deadline = time.monotonic() + 30
    while not done and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done == [count]


def test_timeouts(mrcd_pair: MrcdPair) -> None:
    with create_server(10, mrcd=mrcd_pair.b.socket, ring_size=16 << 10) as srv:
        t0 = time.monotonic()
        with pytest.raises(SocketTimeout, match="no connection on service 10"):
            srv.accept(timeout=0.3)
        assert 0.25 < time.monotonic() - t0 < 10
        with create_connection(("hb", 10), mrcd=mrcd_pair.a.socket) as s:
            conn, (peer, _qpn) = srv.accept(timeout=30)
            assert peer == "ha"
            with conn:
                s.settimeout(0.3)
                t0 = time.monotonic()
                with pytest.raises(TimeoutError, match=r"recv timed out after 0\.3 s"):
                    s.recv(10)
                assert 0.25 < time.monotonic() - t0 < 10
                s.setblocking(False)
                with pytest.raises(WouldBlock):
                    s.recv(10)
                # The peer does not read: its 16 KiB ring fills, then send times out.
                s.settimeout(1.0)
                t0 = time.monotonic()
                with pytest.raises(SocketTimeout, match="send timed out"):
                    s.sendall(b"x" * (64 << 10))
                assert 0.9 < time.monotonic() - t0 < 10  # one timeout for the whole call
                # Reading frees the ring; what was sent arrives in order.
                conn.settimeout(30)
                assert recv_exactly(conn, 16 << 10) == b"x" * (16 << 10)
                s.settimeout(30)
                s.sendall(b"after")
                rest = b""
                conn.settimeout(2)
                with pytest.raises(SocketTimeout):
                    while True:
                        rest += conn.recv(1 << 20)
                assert rest.endswith(b"after") and set(rest[:-5]) <= {ord("x")}


def test_close_from_client_side(mrcd_pair: MrcdPair) -> None:
    with create_server(11, mrcd=mrcd_pair.b.socket) as srv:
        s = create_connection(("hb", 11), timeout=30, mrcd=mrcd_pair.a.socket)
        conn, _ = srv.accept(timeout=30)
        conn.settimeout(30)
        s.sendall(b"last words")
        s.close()
        s.close()  # idempotent
        assert recv_exactly(conn, 10) == b"last words"
        assert conn.recv(100) == b""  # orderly end of stream
        assert conn.recv(100) == b""
        with pytest.raises(BrokenPipe, match="closed the connection"):
            conn.sendall(b"too late")
        conn.close()


def test_close_from_server_side(mrcd_pair: MrcdPair) -> None:
    with create_server(12, mrcd=mrcd_pair.b.socket) as srv, \
            create_connection(("hb", 12), timeout=30, mrcd=mrcd_pair.a.socket) as s:
        with srv.accept(timeout=30)[0] as conn:
            conn.send_message(b"bye")
        assert s.recv_message() == b"bye"
        with pytest.raises(EndOfStream):
            s.recv_message()
        assert list(s.messages()) == []
        with pytest.raises(BrokenPipe):
            s.send_message(b"x")


def test_half_close(mrcd_pair: MrcdPair, server_factory: Callable[..., Server]) -> None:
    def count_then_answer(conn: MrcSocket) -> None:
        n = 0
        while data := conn.recv(1 << 16):
            n += len(data)
        conn.sendall(str(n).encode())

    server_factory(13, count_then_answer)
    with create_connection(("hb", 13), timeout=30, mrcd=mrcd_pair.a.socket) as s:
        s.sendall(b"a" * 100_000)
        s.shutdown(socket.SHUT_WR)
        with pytest.raises(BrokenPipe, match="shut down writing"):
            s.send(b"x")
        assert s.recv(100) == b"100000"
        assert s.recv(100) == b""


def test_listener_accepts_back_to_back_connects(mrcd_pair: MrcdPair,
                                                server_factory: Callable[..., Server]
                                                ) -> None:
    server_factory(14, echo_messages)
    socks = [create_connection(("hb", 14), timeout=30, mrcd=mrcd_pair.a.socket)
             for _ in range(4)]
    try:
        for i, s in enumerate(socks):
            s.send_message(b"conn %d" % i)
        assert [s.recv_message() for s in socks] == [b"conn %d" % i for i in range(4)]
    finally:
        for s in socks:
            s.close()


def test_peer_mrcd_killed(mrcd_pair: MrcdPair) -> None:
    with create_server(15, mrcd=mrcd_pair.b.socket) as srv:
        s = create_connection(("hb", 15), timeout=60, mrcd=mrcd_pair.a.socket)
        conn, _ = srv.accept(timeout=30)
        s.send_message(b"ping")
        conn.settimeout(30)
        assert conn.recv_message() == b"ping"
        mrcd_pair.b.kill()  # SIGKILL, as a crash: nothing tells ha
        # ha only reads: its keepalive write finds the peer gone (retry budget).
        t0 = time.monotonic()
        with pytest.raises(ConnectionReset, match="peer unreachable") as ei:
            s.recv(10)
        assert time.monotonic() - t0 < 30
        assert isinstance(ei.value, ConnectionResetError) and isinstance(ei.value, MrcError)
        assert "hb" in ei.value.reason
        with pytest.raises(ConnectionReset):
            s.sendall(b"more")
        s.close()  # no hang, no raise
        # The listener's side lost its mrcd: it says so, with the path.
        with pytest.raises(MrcdNotRunning, match=re.escape(mrcd_pair.b.socket)):
            conn.recv(10)


def test_peer_closes_without_close_message(mrcd_pair: MrcdPair) -> None:
    """A peer process that just goes away (mrcd destroys its QP): reset, not a hang."""
    with create_server(16, mrcd=mrcd_pair.b.socket) as srv:
        s = create_connection(("hb", 16), timeout=30, mrcd=mrcd_pair.a.socket)
        conn, _ = srv.accept(timeout=30)
        srv.close()
        conn._hub.ctx.close()  # as if the process exited: no CLOSE sent
        t0 = time.monotonic()
        with pytest.raises(ConnectionReset, match="peer unreachable"):
            s.sendall(b"x" * 1000)
            s.recv(10)
        assert time.monotonic() - t0 < 30
        s.close()


def test_connect_errors(mrcd_pair: MrcdPair, tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(ConnectionRefused, match="hb service 99: connection refused") as e1:
        create_connection(("hb", 99), mrcd=mrcd_pair.a.socket, refused_retry=0.2)
    assert isinstance(e1.value, ConnectionRefusedError)
    assert time.monotonic() - t0 < 10
    with pytest.raises(PeerUnreachable, match="nowhere service 1: peer unreachable") as e2:
        create_connection(("nowhere", 1), mrcd=mrcd_pair.a.socket)
    assert isinstance(e2.value, ConnectionError)


def test_mrcd_not_running_names_the_path(tmp_path: Path) -> None:
    path = str(tmp_path / "no-mrcd.sock")
    with pytest.raises(MrcdNotRunning, match=re.escape(f"mrcd is not running at {path}")) as ei:
        create_connection(("hb", 1), mrcd=path)
    assert ei.value.path == path
    assert isinstance(ei.value, ConnectionRefusedError) and isinstance(ei.value, MrcError)
    with pytest.raises(MrcdNotRunning, match=re.escape(path)):
        create_server(1, mrcd=path)


def test_stream_reads_skip_empty_messages(mrcd_pair: MrcdPair) -> None:
    with create_server(17, mrcd=mrcd_pair.b.socket) as srv, \
            create_connection(("hb", 17), timeout=30, mrcd=mrcd_pair.a.socket) as s:
        conn, _ = srv.accept(timeout=30)
        with conn:
            conn.settimeout(30)
            s.send_message(b"")
            s.send_message(b"")
            s.sendall(b"data")
            assert conn.recv(100) == b"data"  # not b"" (that would mean the end)
            s.send_message(b"")
            conn.settimeout(0.3)
            with pytest.raises(SocketTimeout):
                conn.recv(100)


def test_close_wakes_a_blocked_reader(mrcd_pair: MrcdPair) -> None:
    with create_server(18, mrcd=mrcd_pair.b.socket) as srv, \
            create_connection(("hb", 18), mrcd=mrcd_pair.a.socket) as s:
        conn, _ = srv.accept(timeout=30)
        errors: list[BaseException] = []

        def reader() -> None:
            try:
                s.recv(10)
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=reader)
        t.start()
        time.sleep(0.5)
        s.close()  # from another thread, while recv waits (no timeout)
        t.join(30)
        assert not t.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], SocketClosed), errors
        conn.settimeout(30)
        assert conn.recv(10) == b""  # the peer saw the CLOSE
        conn.close()


def test_verbs_peer_is_not_accepted(mrcd_pair: MrcdPair) -> None:
    """A plain verbs QP connecting to a socket service is dropped; the listener goes on."""
    from mrcnet.api import Context

    with create_server(19, mrcd=mrcd_pair.b.socket) as srv, \
            Context(mrcd_pair.a.socket) as ctx:
        qp = ctx.create_qp(ctx.create_cq())
        qp.connect("hb", 19)  # mrcd accepts for the listener; the socket layer drops it
        with pytest.raises(SocketTimeout):
            srv.accept(timeout=0.5)
        with create_connection(("hb", 19), timeout=30, mrcd=mrcd_pair.a.socket) as s:
            conn, _ = srv.accept(timeout=30)
            with conn:
                s.send_message(b"ok")
                conn.settimeout(30)
                assert conn.recv_message() == b"ok"
    # And a socket client connecting to a verbs listener is refused, saying why.
    with Context(mrcd_pair.b.socket) as vctx:
        vqp = vctx.create_qp(vctx.create_cq())
        vctx.listen(20, vqp, expose=[vctx.alloc_mr(8192)])
        with pytest.raises(ConnectionRefused, match="not a socket-API peer"):
            create_connection(("hb", 20), timeout=30, mrcd=mrcd_pair.a.socket)
