"""A socket-like API over MRC: connections built on write-with-immediate into a receive
ring with credits (the protocol: :mod:`mrcnet.api.ring`; asyncio: :mod:`mrcnet.api.stream`).

::

    from mrcnet.api.socket import create_connection, create_server

    with create_server(7, mrcd="/run/mrcd/h1.sock") as srv:      # on h1
        conn, (peer, qpn) = srv.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    with create_connection(("h1", 7), timeout=5, mrcd="/run/mrcd/h0.sock") as s:   # on h0
        s.sendall(b"hello")
        s.recv(5)
        s.send_message(b"one"); s.recv_message()               # boundaries kept

An address is ``(host, service)``: the peer's host name as mrcd knows it (fabric
description or ``[peers]``) and the service number its listener uses. ``mrcd`` is the
local mrcd's socket path (default ``$MRCD_SOCKET``). Errors are the classes re-exported
here (each an :class:`mrcnet.errors.MrcError` and the matching builtin ``OSError``).
"""

from __future__ import annotations

import socket as _socket
import threading
import time
from collections.abc import Callable, Iterator
from types import EllipsisType, TracebackType
from typing import TypeVar

from mrcnet.api.acceptor import Acceptor
from mrcnet.api.errors import (
    BrokenPipe,
    ConnectError,
    ConnectionRefused,
    ConnectionReset,
    EndOfStream,
    MrcdAccessDenied,
    MrcdNotRunning,
    PeerUnreachable,
    SocketClosed,
    SocketError,
    SocketTimeout,
    WouldBlock,
)
from mrcnet.api.ring import DEFAULT_MAX_CHUNK, DEFAULT_RING, MAGIC, Channel
from mrcnet.api.socket_base import (
    DEFAULT_LINGER,
    REFUSED_PAUSE,
    BytesLike,
    ConnectAttempts,
    SocketBase,
    deadline_after,
)
from mrcnet.api.stream import (
    AsyncMrcSocket,
    MrcServer,
    MrcStreamReader,
    MrcStreamWriter,
    connect_async,
    open_connection,
    start_server,
)

__all__ = [
    "AsyncMrcSocket",
    "BrokenPipe",
    "ConnectionRefused",
    "ConnectionReset",
    "EndOfStream",
    "MrcListener",
    "MrcServer",
    "MrcSocket",
    "MrcStreamReader",
    "MrcStreamWriter",
    "MrcdAccessDenied",
    "MrcdNotRunning",
    "PeerUnreachable",
    "SocketClosed",
    "SocketError",
    "SocketTimeout",
    "WouldBlock",
    "connect_async",
    "create_connection",
    "create_server",
    "open_connection",
    "start_server",
]

T = TypeVar("T")


class MrcSocket(SocketBase[threading.Lock]):
    """One connection (blocking, with an optional timeout like :class:`socket.socket`).

    Stream calls (:meth:`send`, :meth:`sendall`, :meth:`recv`, :meth:`recv_into`) ignore
    message boundaries; :meth:`send_message`/:meth:`recv_message` keep them (any size:
    large messages are fragmented and reassembled). Use one style per connection.
    Safe to use from several threads (one sender and one receiver at a time).
    """

    def __init__(self, ch: Channel, service: int, timeout: float | None = None,
                 linger: float = DEFAULT_LINGER) -> None:
        super().__init__(ch, linger, threading.Lock)
        self._service = service
        self._timeout = timeout

    # -- properties (peer, closed, getpeername: SocketBase) --
    def getsockname(self) -> tuple[str, int]:
        """(this host, this connection's QP number)."""
        return self._sockname()

    def settimeout(self, timeout: float | None) -> None:
        """None: block; 0: non-blocking (:class:`WouldBlock`); else :class:`SocketTimeout`
        after that many seconds."""
        if timeout is not None and timeout < 0:
            raise ValueError("timeout must be None or >= 0")
        self._timeout = timeout

    def gettimeout(self) -> float | None:
        """The current timeout."""
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        """As :meth:`socket.socket.setblocking`."""
        self._timeout = None if flag else 0.0

    # -- waiting --
    def _wait(self, ready: Callable[[], bool], what: str, deadline: float | None) -> None:
        """Wait (hub lock held) until ``ready()``; raise once ``deadline`` passed."""
        t = self._timeout
        if not self._hub.wait(ready, deadline, self._ch.idle):
            if t == 0 and self._hub.error is None:
                raise WouldBlock(f"{what} would block")
            raise self._wait_failed(what, t)

    # -- receiving --
    def _receive(self, what: str, take: Callable[[], T | None]) -> T:
        """Wait (locks held) until ``take()`` gives something (it raises at the end)."""
        deadline = deadline_after(self._timeout)
        while True:
            self._wait(self._ch.readable, what, deadline)
            got = take()
            if got is not None:
                return got

    def recv_into(self, buffer: BytesLike, nbytes: int = 0) -> int:
        """Receive up to ``nbytes`` (default: the buffer's size) into ``buffer``; 0 at the
        end of the stream (the peer closed or shut down writing)."""
        mv = memoryview(buffer).cast("B")
        if nbytes:
            mv = mv[:nbytes]
        with self._rlock, self._hub.lock:
            self._check_open()
            if not mv:
                return 0
            return self._receive("recv", lambda: self._take_into(mv))

    def recv(self, bufsize: int) -> bytes:
        """Up to ``bufsize`` bytes; ``b""`` at the end of the stream."""
        with self._rlock, self._hub.lock:
            self._check_open()
            if bufsize <= 0:
                return b""
            return self._receive("recv", lambda: self._take_bytes(bufsize))

    def recv_message(self) -> bytes:
        """The next whole message (as sent by one :meth:`send_message`); raises
        :class:`EndOfStream` after the peer closed."""
        with self._rlock, self._hub.lock:
            self._check_open()
            return self._receive("recv_message", self._take_message)

    def messages(self) -> Iterator[bytes]:
        """Iterate over received messages until the peer closes."""
        while True:
            try:
                yield self.recv_message()
            except EndOfStream:
                return

    # -- sending --
    def _send(self, data: BytesLike, *, message: bool, all_: bool) -> int:
        mv = memoryview(data).cast("B")
        ch = self._ch
        with self._wlock, self._hub.lock:
            self._check_open()
            deadline = deadline_after(self._timeout)
            sent = 0
            while True:
                self._hub.pump(False)  # credits that arrived meanwhile (the rings)
                sent += ch.write_some(mv[sent:], message_end=message)
                if sent >= len(mv) or (sent and not all_):
                    return sent
                self._wait(ch.writable, "send", deadline)

    def send(self, data: BytesLike) -> int:
        """Send what the peer's ring has room for now (waiting for at least one byte);
        returns the number of bytes taken."""
        return self._send(data, message=False, all_=False)

    def sendall(self, data: BytesLike) -> None:
        """Send all of ``data`` (waiting for ring space as often as needed). On a timeout
        an unknown part may have been sent, as with :meth:`socket.socket.sendall`."""
        self._send(data, message=False, all_=True)

    def send_message(self, data: BytesLike) -> None:
        """Send ``data`` as one message: :meth:`recv_message` returns exactly it. Any
        size (fragmented over the ring, reassembled by the receiver); empty is allowed."""
        self._send(data, message=True, all_=True)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything sent so far is acknowledged by the peer's mrcd (True),
        or ``timeout`` passed (False)."""
        with self._hub.cond:
            deadline = deadline_after(timeout)
            self._ch.settle()
            ok = self._hub.wait(self._ch.flushed, deadline, self._ch.idle)
            if self._ch.error is not None:
                raise self._ch.error
            return ok

    # -- the end --
    def shutdown(self, how: int) -> None:
        """``socket.SHUT_WR``/``SHUT_RDWR``: no more sends (the peer reads the end of the
        stream after the data before it). ``SHUT_RD`` changes nothing here."""
        with self._hub.cond:
            self._check_open()
            if how in (_socket.SHUT_WR, _socket.SHUT_RDWR):
                self._ch.shutdown_write()

    def close(self) -> None:
        """Tell the peer (CLOSE), wait up to :attr:`linger` s for what was sent to be
        acknowledged, destroy the QP. Never raises for the peer's state; idempotent."""
        hub = self._hub
        with hub.cond:
            ch = self._ch
            if ch.destroyed:
                return
            try:
                ch.begin_close()
                hub.wait(ch.flushed, time.monotonic() + self.linger)
            except (SocketError, OSError):
                pass  # closing anyway
            finally:
                ch.destroy()
                hub.cond.notify_all()

    def __enter__(self) -> MrcSocket:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._ch.destroyed else "open"
        peer = f"{self._ch.peer.host}/{self._ch.peer.qpn}" if self._ch.peer else "?"
        return f"<MrcSocket {state} qpn={self._ch.qp.qpn} peer={peer}>"


def create_connection(address: tuple[str, int], timeout: float | None = None, *,
                      mrcd: str | None = None, ring_size: int = DEFAULT_RING,
                      max_chunk: int = DEFAULT_MAX_CHUNK, keepalive: float = 1.0,
                      connect_timeout: float = 10.0,
                      refused_retry: float = 1.0) -> MrcSocket:
    """Connect to ``(host, service)`` through the local mrcd at ``mrcd``.

    ``timeout``: the socket's timeout afterwards (and for connecting, if given; else
    ``connect_timeout``). ``refused_retry``: for this long a refusal because nothing
    listens is retried (a listener re-arms its service between two accepts).
    Raises :class:`MrcdNotRunning`, :class:`PeerUnreachable`, :class:`ConnectionRefused`
    or :class:`SocketTimeout`.
    """
    host, service = address
    ch = Channel.open(mrcd, ring_size, max_chunk=max_chunk, keepalive=keepalive)
    hub = ch.hub
    with hub.cond:
        try:
            attempts = ConnectAttempts(host, service, timeout if timeout else connect_timeout,
                                       refused_retry)
            while True:
                left = attempts.left()
                try:
                    peer = hub.call(ch.qp.connect, host, service, expose=[ch.ring],
                                    private=MAGIC, timeout=left)
                    break
                except ConnectError as e:
                    if (err := attempts.failed(e)) is not None:
                        raise err from None
                    time.sleep(REFUSED_PAUSE)
                except TimeoutError:
                    raise attempts.timed_out() from None
            ch.connected(peer)
        except BaseException:
            ch.destroy()
            raise
    return MrcSocket(ch, service, timeout)


class MrcListener:
    """Listens on a service number; :meth:`accept` returns connections. One QP always
    listens; the next is armed as soon as one connects (up to ``backlog`` unaccepted)."""

    def __init__(self, service: int, *, mrcd: str | None = None, backlog: int = 8,
                 ring_size: int = DEFAULT_RING, max_chunk: int = DEFAULT_MAX_CHUNK,
                 keepalive: float = 1.0, timeout: float | None = None) -> None:
        self.service = service
        self._timeout = timeout
        self._acc = Acceptor.open(mrcd, service, ring_size=ring_size, backlog=backlog,
                                  max_chunk=max_chunk, keepalive=keepalive)
        self._hub = self._acc.hub

    def getsockname(self) -> tuple[str, int]:
        """(this host, the service)."""
        return (self._hub.ctx.host, self.service)

    def settimeout(self, timeout: float | None) -> None:
        """Timeout of :meth:`accept` (None: wait forever)."""
        self._timeout = timeout

    def accept(self, timeout: float | EllipsisType | None = ...
               ) -> tuple[MrcSocket, tuple[str, int]]:
        """Wait for a connection: ``(socket, (peer host, peer QP number))``. The socket
        inherits no timeout (blocking). ``timeout``: default the listener's."""
        t = self._timeout if isinstance(timeout, EllipsisType) else timeout
        acc, hub = self._acc, self._hub
        with hub.cond:
            if acc.closed:
                raise SocketClosed("the listener is closed")
            deadline = deadline_after(t)
            ok = hub.wait(lambda: bool(acc.ready) or acc.closed or acc.error is not None,
                          deadline)
            if hub.error is not None:
                raise hub.error
            if acc.error is not None:
                raise acc.error
            ch = acc.take() if ok else None
            if ch is None:
                if acc.closed:
                    raise SocketClosed("the listener is closed")
                raise SocketTimeout(f"no connection on service {self.service} in {t} s")
            assert ch.peer is not None
            return MrcSocket(ch, self.service), (ch.peer.host, ch.peer.qpn)

    def close(self) -> None:
        """Stop listening. Accepted connections stay open."""
        with self._hub.cond:
            self._acc.close()
            self._hub.cond.notify_all()

    def __enter__(self) -> MrcListener:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def create_server(service: int, *, mrcd: str | None = None, backlog: int = 8,
                  ring_size: int = DEFAULT_RING, max_chunk: int = DEFAULT_MAX_CHUNK,
                  keepalive: float = 1.0, timeout: float | None = None) -> MrcListener:
    """Listen on ``service`` through the local mrcd at ``mrcd`` (see :class:`MrcListener`)."""
    return MrcListener(service, mrcd=mrcd, backlog=backlog, ring_size=ring_size,
                       max_chunk=max_chunk, keepalive=keepalive, timeout=timeout)
