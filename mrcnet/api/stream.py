"""asyncio front end of the socket-like API (protocol: :mod:`mrcnet.api.ring`).

::

    from mrcnet.api.stream import open_connection, start_server

    async def echo(reader, writer):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async with await start_server(echo, 7, mrcd="/run/mrcd/h1.sock") as srv:
        await srv.serve_forever()

    reader, writer = await open_connection("h1", 7, mrcd="/run/mrcd/h0.sock")
    writer.write(b"hi"); await writer.drain(); await reader.readexactly(2)
    writer.write_message(b"one"); await reader.read_message()   # boundaries kept

Or without streams: ``sock = await connect_async("h1", 7)`` gives an
:class:`AsyncMrcSocket` (``send``/``sendall``/``recv``/``send_message``/``recv_message``).
One loop reader per mrcd context wakes every waiter; nothing blocks the loop except the
short request/answer exchanges with the local mrcd when a connection is set up.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

from mrcnet.api.acceptor import Acceptor
from mrcnet.api.errors import ConnectError, EndOfStream, SocketClosed, SocketError
from mrcnet.api.ring import DEFAULT_MAX_CHUNK, DEFAULT_RING, MAGIC, Channel
from mrcnet.api.socket_base import (
    DEFAULT_LINGER,
    REFUSED_PAUSE,
    BytesLike,
    ConnectAttempts,
    SocketBase,
    deadline_after,
)

__all__ = [
    "AsyncMrcSocket",
    "MrcServer",
    "MrcStreamReader",
    "MrcStreamWriter",
    "connect_async",
    "open_connection",
    "start_server",
]

T = TypeVar("T")


class AsyncMrcSocket(SocketBase[asyncio.Lock]):
    """One connection for asyncio. ``timeout`` (None: none) bounds every call
    (:class:`SocketTimeout`). Stream and message calls as in
    :class:`mrcnet.api.socket.MrcSocket`; use one style per connection."""

    def __init__(self, ch: Channel, service: int, timeout: float | None = None,
                 linger: float = DEFAULT_LINGER) -> None:
        super().__init__(ch, linger, asyncio.Lock)
        self.service = service
        self.timeout = timeout

    # peer, closed, getpeername: SocketBase

    def _deadline(self) -> float | None:
        return deadline_after(self.timeout)

    async def _wait(self, ready: Callable[[], bool], what: str,
                    deadline: float | None) -> None:
        t = self.timeout
        if not await self._hub.wait_async(ready, deadline, self._ch.idle):
            raise self._wait_failed(what, t)

    # -- receiving --
    async def _receive(self, what: str, take: Callable[[], T | None]) -> T:
        """Wait until ``take()`` (run under the hub's lock) gives something (it raises at
        the end)."""
        deadline = self._deadline()
        while True:
            await self._wait(self._ch.readable, what, deadline)
            with self._hub.cond:
                got = take()
            if got is not None:
                return got

    async def recv(self, n: int) -> bytes:
        """Up to ``n`` bytes; ``b""`` at the end of the stream."""
        async with self._rlock:
            self._check_open()
            if n <= 0:
                return b""
            return await self._receive("recv", lambda: self._take_bytes(n))

    async def recv_message(self) -> bytes:
        """The next whole message; :class:`EndOfStream` after the peer closed."""
        async with self._rlock:
            self._check_open()
            return await self._receive("recv_message", self._take_message)

    def __aiter__(self) -> AsyncMrcSocket:
        return self

    async def __anext__(self) -> bytes:
        """Messages until the peer closes."""
        try:
            return await self.recv_message()
        except EndOfStream:
            raise StopAsyncIteration from None

    # -- sending --
    def try_send(self, data: memoryview, *, message: bool) -> int:
        """Post what fits now without waiting (raises if sending is impossible)."""
        with self._hub.cond:
            self._check_open()
            self._hub.pump()
            return self._ch.write_some(data, message_end=message)

    async def _send(self, data: BytesLike, *, message: bool, all_: bool) -> int:
        mv = memoryview(data).cast("B")
        async with self._wlock:
            deadline = self._deadline()
            sent = 0
            while True:
                sent += self.try_send(mv[sent:], message=message)
                if sent >= len(mv) or (sent and not all_):
                    return sent
                await self._wait(self._ch.writable, "send", deadline)

    async def send(self, data: BytesLike) -> int:
        """Send what fits in the peer's ring (at least one byte); returns the count."""
        return await self._send(data, message=False, all_=False)

    async def sendall(self, data: BytesLike) -> None:
        """Send all of ``data``."""
        await self._send(data, message=False, all_=True)

    async def send_message(self, data: BytesLike) -> None:
        """Send ``data`` as one message (any size, empty allowed)."""
        await self._send(data, message=True, all_=True)

    async def flush(self) -> None:
        """Wait until everything sent is acknowledged by the peer's mrcd."""
        with self._hub.cond:
            self._ch.settle()
        await self._wait(self._ch.flushed, "flush", self._deadline())
        if self._ch.error is not None:
            raise self._ch.error

    def shutdown_write(self) -> None:
        """No more sends; the peer reads the end of the stream after the data."""
        with self._hub.cond:
            self._check_open()
            self._ch.shutdown_write()

    async def close(self) -> None:
        """CLOSE to the peer, wait up to :attr:`linger` s for the data to be
        acknowledged, destroy the QP. Idempotent; never raises for the peer's state."""
        ch, hub = self._ch, self._hub
        if ch.destroyed:
            return
        with hub.cond:
            ch.begin_close()
        with contextlib.suppress(SocketError, OSError):
            await hub.wait_async(ch.flushed, time.monotonic() + self.linger)
        with hub.cond:
            ch.destroy()
            hub.cond.notify_all()
        hub.wake_async()

    async def __aenter__(self) -> AsyncMrcSocket:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()


async def connect_async(host: str, service: int, *, mrcd: str | None = None,
                        timeout: float | None = None, connect_timeout: float = 10.0,
                        ring_size: int = DEFAULT_RING, max_chunk: int = DEFAULT_MAX_CHUNK,
                        keepalive: float = 1.0, refused_retry: float = 1.0
                        ) -> AsyncMrcSocket:
    """Connect to ``(host, service)`` (as :func:`mrcnet.api.socket.create_connection`)."""
    ch = Channel.open(mrcd, ring_size, max_chunk=max_chunk, keepalive=keepalive)
    hub = ch.hub
    try:
        attempts = ConnectAttempts(host, service, timeout if timeout else connect_timeout,
                                   refused_retry)
        while True:
            left = attempts.left()
            try:
                # A fresh context: nothing else waits on it yet, so the library's own
                # asyncio connect may use the socket.
                peer = await ch.qp.connect_async(host, service, expose=[ch.ring],
                                                 private=MAGIC, timeout=left)
                break
            except ConnectError as e:
                if (err := attempts.failed(e)) is not None:
                    raise err from None
                await asyncio.sleep(REFUSED_PAUSE)
            except TimeoutError:
                raise attempts.timed_out() from None
        with hub.cond:
            ch.connected(peer)
    except BaseException:
        with hub.cond:
            ch.destroy()
        raise
    return AsyncMrcSocket(ch, service, timeout)


# --- streams ----------------------------------------------------------------------------


class MrcStreamReader:
    """:class:`asyncio.StreamReader`-like reading from an :class:`AsyncMrcSocket`."""

    def __init__(self, sock: AsyncMrcSocket, limit: int = 1 << 16) -> None:
        self.sock = sock
        self._buf = bytearray()
        self._eof = False
        self._limit = limit

    async def _fill(self) -> bool:
        data = await self.sock.recv(self._limit)
        if not data:
            self._eof = True
            return False
        self._buf += data
        return True

    def at_eof(self) -> bool:
        """True when the buffer is empty and the peer closed."""
        return self._eof and not self._buf

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (``-1``: until the end of the stream); ``b""`` at EOF."""
        if n == 0:
            return b""
        if n < 0:
            while await self._fill():
                pass
            out = bytes(self._buf)
            self._buf.clear()
            return out
        if not self._buf and not self._eof:
            await self._fill()
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def readexactly(self, n: int) -> bytes:
        """Exactly ``n`` bytes, or :class:`asyncio.IncompleteReadError` at EOF."""
        while len(self._buf) < n:
            if self._eof or not await self._fill():
                partial = bytes(self._buf)
                self._buf.clear()
                raise asyncio.IncompleteReadError(partial, n)
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def readuntil(self, separator: bytes = b"\n") -> bytes:
        """Up to and including ``separator`` (IncompleteReadError at EOF)."""
        start = 0
        while (i := self._buf.find(separator, start)) < 0:
            start = max(0, len(self._buf) - len(separator) + 1)
            if self._eof or not await self._fill():
                partial = bytes(self._buf)
                self._buf.clear()
                raise asyncio.IncompleteReadError(partial, None)
        end = i + len(separator)
        out = bytes(self._buf[:end])
        del self._buf[:end]
        return out

    async def readline(self) -> bytes:
        """A line with its ``\\n`` (the rest at EOF, as asyncio's)."""
        try:
            return await self.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            return e.partial

    async def read_message(self) -> bytes:
        """The next whole message (:class:`EndOfStream` at EOF). Do not mix with the
        byte-stream reads on the same connection."""
        if self._buf:
            raise SocketError("read_message after byte-stream reads left data buffered")
        return await self.sock.recv_message()


class MrcStreamWriter:
    """:class:`asyncio.StreamWriter`-like writing: :meth:`write` posts what fits at once
    and queues the rest (sent by a task in order); :meth:`drain` waits for the queue."""

    def __init__(self, sock: AsyncMrcSocket, high_water: int = 1 << 22) -> None:
        self.sock = sock
        self._queue: collections.deque[tuple[memoryview, bool]] = collections.deque()
        self._queued = 0
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._closing = False
        self._closed = asyncio.Event()
        self._eof_pending = False
        self.high_water = high_water

    def _put(self, data: BytesLike, message: bool) -> None:
        if self._error is not None:
            raise self._error
        if self._closing:
            raise SocketClosed("the writer is closing")
        mv = memoryview(data).cast("B")
        if not self._queue:
            n = self.sock.try_send(mv, message=message)  # usually all of it
            if n == len(mv):  # an empty message was posted too
                return
            mv = mv[n:]
        self._queue.append((memoryview(bytes(mv)), message))  # a copy: caller may reuse
        self._queued += len(mv)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        try:
            while self._queue:
                mv, message = self._queue[0]
                await self.sock._send(mv, message=message, all_=True)
                self._queue.popleft()
                self._queued -= len(mv)
            if self._eof_pending:
                self.sock.shutdown_write()
                self._eof_pending = False
        except BaseException as e:  # kept for the next drain/write
            self._error = e
            self._queue.clear()
            self._queued = 0

    def write(self, data: BytesLike) -> None:
        """Queue ``data`` (byte stream)."""
        if data:
            self._put(data, False)

    def writelines(self, data: list[bytes]) -> None:
        """Queue each of ``data``."""
        for d in data:
            self.write(d)

    def write_message(self, data: BytesLike) -> None:
        """Queue ``data`` as one message (:meth:`MrcStreamReader.read_message`)."""
        self._put(data, True)

    async def drain(self) -> None:
        """Wait until the queue is below ``high_water`` (posted, not necessarily
        acknowledged); raises the error that stopped sending."""
        while self._task is not None and not self._task.done() \
                and self._queued > self.high_water:
            await asyncio.wait({self._task}, timeout=0.05)
        if self._error is not None:
            raise self._error
        if self.sock._ch.error is not None:
            raise self.sock._ch.error

    def can_write_eof(self) -> bool:
        """True: :meth:`write_eof` is supported."""
        return True

    def write_eof(self) -> None:
        """End of the stream for the peer, after what is queued."""
        if self._task is not None and not self._task.done():
            self._eof_pending = True
        else:
            self.sock.shutdown_write()

    def is_closing(self) -> bool:
        """True after :meth:`close`."""
        return self._closing

    def close(self) -> None:
        """Send what is queued, then close the connection (in a task; see
        :meth:`wait_closed`)."""
        if self._closing:
            return
        self._closing = True
        asyncio.get_running_loop().create_task(self._close())

    async def _close(self) -> None:
        try:
            if self._task is not None:
                await asyncio.wait({self._task}, timeout=self.sock.linger)
            await self.sock.close()
        finally:
            self._closed.set()

    async def wait_closed(self) -> None:
        """Wait until :meth:`close` finished."""
        await self._closed.wait()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """``peername`` (host, QP number), ``sockname``, ``socket`` (the
        :class:`AsyncMrcSocket`)."""
        if name == "peername":
            return self.sock.getpeername()
        if name == "sockname":
            return self.sock._sockname()
        if name == "socket":
            return self.sock
        return default


async def open_connection(host: str, service: int, *, mrcd: str | None = None,
                          limit: int = 1 << 16, **kw: Any
                          ) -> tuple[MrcStreamReader, MrcStreamWriter]:
    """Connect and return ``(reader, writer)`` (as :func:`asyncio.open_connection`);
    keyword arguments as :func:`connect_async`."""
    sock = await connect_async(host, service, mrcd=mrcd, **kw)
    return MrcStreamReader(sock, limit), MrcStreamWriter(sock)


ClientCallback = Callable[[MrcStreamReader, MrcStreamWriter], Awaitable[None] | None]


class MrcServer:
    """What :func:`start_server` returns (as :class:`asyncio.Server`)."""

    def __init__(self, cb: ClientCallback, service: int, *, mrcd: str | None,
                 backlog: int, ring_size: int, max_chunk: int, keepalive: float,
                 limit: int) -> None:
        self.service = service
        self._cb = cb
        self._limit = limit
        self._acc = Acceptor.open(mrcd, service, ring_size=ring_size, backlog=backlog,
                                  max_chunk=max_chunk, keepalive=keepalive)
        self._hub = self._acc.hub
        self._task: asyncio.Task[None] | None = None
        self._clients: set[asyncio.Task[Any]] = set()
        self._closed = asyncio.Event()

    def start(self) -> None:
        """Start accepting (done by :func:`start_server`)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._accept_loop())

    async def _accept_loop(self) -> None:
        acc, hub = self._acc, self._hub
        while not acc.closed:
            await hub.wait_async(lambda: bool(acc.ready) or acc.closed
                                 or hub.error is not None, None)
            if hub.error is not None:
                return
            with hub.cond:
                ch = acc.take()
            if ch is None:
                continue
            sock = AsyncMrcSocket(ch, self.service)
            reader, writer = MrcStreamReader(sock, self._limit), MrcStreamWriter(sock)
            t = asyncio.get_running_loop().create_task(self._run(reader, writer))
            self._clients.add(t)
            t.add_done_callback(self._clients.discard)

    async def _run(self, reader: MrcStreamReader, writer: MrcStreamWriter) -> None:
        r = self._cb(reader, writer)
        if inspect.isawaitable(r):
            await r

    def is_serving(self) -> bool:
        """True until :meth:`close`."""
        return not self._acc.closed

    def getsockname(self) -> tuple[str, int]:
        """(this host, the service)."""
        return (self._hub.ctx.host, self.service)

    def close(self) -> None:
        """Stop accepting (connections already handed out stay open)."""
        if self._task is not None:
            self._task.cancel()
        with self._hub.cond:
            self._acc.close()
        self._hub.wake_async()
        self._closed.set()

    async def wait_closed(self) -> None:
        """Wait until closed and the accept task ended."""
        await self._closed.wait()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def serve_forever(self) -> None:
        """Accept until :meth:`close` (or cancellation)."""
        self.start()
        try:
            await self._closed.wait()
        finally:
            self.close()

    async def __aenter__(self) -> MrcServer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
        await self.wait_closed()


async def start_server(client_connected_cb: ClientCallback, service: int, *,
                       mrcd: str | None = None, backlog: int = 8,
                       ring_size: int = DEFAULT_RING, max_chunk: int = DEFAULT_MAX_CHUNK,
                       keepalive: float = 1.0, limit: int = 1 << 16) -> MrcServer:
    """Listen on ``service``; call ``client_connected_cb(reader, writer)`` for every
    connection (as :func:`asyncio.start_server`)."""
    srv = MrcServer(client_connected_cb, service, mrcd=mrcd, backlog=backlog,
                    ring_size=ring_size, max_chunk=max_chunk, keepalive=keepalive,
                    limit=limit)
    srv.start()
    return srv
