"""What the blocking (:mod:`mrcnet.api.socket`) and the asyncio (:mod:`mrcnet.api.stream`)
front ends of the socket-like API share: :class:`SocketBase` (one connection's
:class:`~mrcnet.api.ring.Channel` seen by a front end), the clock of a connect
(:class:`ConnectAttempts`) and the deadline of a call."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Generic, TypeVar

from mrcnet.api.client import PeerInfo
from mrcnet.api.errors import (
    ConnectError,
    ConnectionRefused,
    ConnectionReset,
    EndOfStream,
    PeerUnreachable,
    SocketClosed,
    SocketError,
    SocketTimeout,
)
from mrcnet.api.ring import Channel

__all__ = ["DEFAULT_LINGER", "REFUSED_PAUSE", "BytesLike", "ConnectAttempts", "SocketBase",
           "connect_error", "deadline_after"]

#: How long close() waits for the data already sent (and the CLOSE) to be acknowledged.
DEFAULT_LINGER = 5.0
#: Pause between two connects refused because the listener is re-arming its service.
REFUSED_PAUSE: Final = 0.05

LockT = TypeVar("LockT")
#: What send calls take (anything with the buffer protocol, in bytes).
BytesLike = bytes | bytearray | memoryview


def connect_error(e: ConnectError, host: str, service: int) -> SocketError:
    """mrcd's :class:`ConnectError` as refused (the peer answered no) or unreachable."""
    text = str(e)
    if "peer refused" in text or "no QP listens" in text:
        return ConnectionRefused(f"{host} service {service}: connection refused ({text})")
    return PeerUnreachable(f"{host} service {service}: peer unreachable ({text})")


class ConnectAttempts:
    """The clock of one connect to ``host`` ``service``, shared by the blocking and the
    asyncio front ends: ``limit`` s in all, refusals retried for ``refused_retry`` s (a
    listener re-arms its service between two accepts)."""

    def __init__(self, host: str, service: int, limit: float, refused_retry: float) -> None:
        self.host = host
        self.service = service
        self.limit = limit
        self.refused_retry = refused_retry
        self.start = time.monotonic()

    def timed_out(self) -> SocketTimeout:
        """The error once ``limit`` passed."""
        return SocketTimeout(f"connecting to {self.host} service {self.service} timed "
                             f"out after {self.limit} s")

    def left(self) -> float:
        """Seconds left for the next attempt; raises :meth:`timed_out` when none are."""
        left = self.limit - (time.monotonic() - self.start)
        if left <= 0:
            raise self.timed_out()
        return left

    def failed(self, e: ConnectError) -> SocketError | None:
        """The error to raise for ``e``, or None: refused early enough to try again
        after :data:`REFUSED_PAUSE`."""
        err = connect_error(e, self.host, self.service)
        if isinstance(err, ConnectionRefused) and \
                time.monotonic() - self.start < min(self.refused_retry, self.limit):
            return None
        return err


def deadline_after(timeout: float | None) -> float | None:
    """The monotonic deadline ``timeout`` s from now (None: none). One deadline per
    call: a call that waits several times (sendall) still ends after the timeout in all,
    as :meth:`socket.socket.sendall` does."""
    return None if timeout is None else time.monotonic() + timeout



class SocketBase(Generic[LockT]):
    """One connection's :class:`Channel` seen by a front end (:class:`MrcSocket
    <mrcnet.api.socket.MrcSocket>`, :class:`AsyncMrcSocket
    <mrcnet.api.stream.AsyncMrcSocket>`): its peer, and what a receive call does once
    the channel is readable (the hub's lock held). ``new_lock`` makes the front end's
    kind of lock (threads or asyncio) for one receiver and one sender at a time."""

    def __init__(self, ch: Channel, linger: float, new_lock: Callable[[], LockT]) -> None:
        self._ch = ch
        self._hub = ch.hub
        self.linger = linger
        self._msg = bytearray()  # a message's fragments received so far
        self._rlock = new_lock()
        self._wlock = new_lock()

    @property
    def peer(self) -> PeerInfo:
        """The peer's host, QP number and ring."""
        assert self._ch.peer is not None
        return self._ch.peer

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._ch.destroyed

    def getpeername(self) -> tuple[str, int]:
        """(peer host, peer QP number)."""
        return (self.peer.host, self.peer.qpn)

    def _sockname(self) -> tuple[str, int]:
        """(this host, this connection's QP number)."""
        return (self._hub.ctx.host, self._ch.qp.qpn)

    def _check_open(self) -> None:
        if self._ch.destroyed:
            raise SocketClosed("the socket is closed")

    def _wait_failed(self, what: str, timeout: float | None) -> SocketError:
        """The error of a wait that ended unready: the context's, else a timeout."""
        if self._hub.error is not None:
            return self._hub.error
        return SocketTimeout(f"{what} timed out after {timeout} s")

    def _dead(self) -> SocketError:
        """Readable with nothing arrived and no end of stream: the connection's error."""
        if self._ch.error is not None:
            return self._ch.error
        return SocketClosed("the socket is closed")

    def _take_into(self, out: memoryview) -> int | None:
        """Arrived bytes copied into ``out`` (a count), 0 at the end of the stream, None
        when only empty messages were queued (not the end: wait again)."""
        ch = self._ch
        if ch.arrived:
            return ch.read_into(out) or None
        if ch.eof:
            return 0
        raise self._dead()

    def _take_bytes(self, bufsize: int) -> bytes | None:
        """:meth:`_take_into` as bytes (``b""``: the end of the stream)."""
        # Sized by what arrived, not bufsize: recv(1 << 20) of a few bytes allocates a
        # few bytes.
        buf = bytearray(min(bufsize, self._ch.arrived_bytes))
        with memoryview(buf) as mv:  # released before buf is cut to size
            n = self._take_into(mv)
        if n is None:
            return None
        del buf[n:]
        return bytes(buf)

    def _take_message(self) -> bytes | None:
        """The next whole message, or None while fragments are missing; raises
        :class:`EndOfStream` after the peer closed."""
        ch = self._ch
        if ch.arrived:
            if not ch.read_message_part(self._msg):
                return None
            out = bytes(self._msg)
            self._msg.clear()
            return out
        if ch.eof:
            if self._msg:
                raise ConnectionReset("the peer closed in the middle of a message")
            raise EndOfStream(f"{self.peer.host} closed the connection")
        raise self._dead()
