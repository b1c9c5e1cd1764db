"""The receive-ring protocol under :mod:`mrcnet.api.socket` (blocking) and
:mod:`mrcnet.api.stream` (asyncio), the exceptions of both, and what both front ends
share (:class:`SocketBase`, :class:`ConnectAttempts`, :meth:`Acceptor.open`).

One connection is one connected QP pair. Each side registers a *receive ring* (a memory
region of ``ring_size`` bytes plus a small control area behind it) and exposes it when
connecting (``connect(expose=)`` / ``listen(expose=)``); the peer learns its address,
length and rkey from the connection exchange, and the ring size from the length.

Data: the sender copies bytes into a local staging region at the same offset they will
have in the peer's ring (its tail), then RDMA-WRITEs them there *with immediate*. The
32-bit immediate is ``kind << 29 | value``; for data the value is the ring offset (so
the receiver checks it against where it expects the next bytes) and the length is the
completion's ``byte_len``. A write never wraps: it is split at the ring's end. Messages
larger than what fits are *fragmented*: every fragment but the last has kind
``DATA_MORE``, so the receiver reassembles them and message boundaries survive any size.

Flow control: immediates complete in order and exactly once, so the receiver knows its
ring's contents; the sender never writes past ``min(credit, completed) + ring_size``:
``credit`` is how far the receiver has consumed (returned with a zero-length
write-with-immediate ``CREDIT`` into the control area, once a quarter of the ring has been
consumed, or at once when the sender said it is blocked with ``CREDIT_REQ``), and
``completed`` how far the sender's own writes have completed (only then may the staging
bytes be reused). Credits never need ring space, so both directions blocked on full rings
still make progress as soon as either application reads.

Receives (one per incoming immediate) are re-posted as soon as a completion is *polled*,
not when the application reads: the ring, not the receive queue, is the flow control.

End of a connection: ``FIN`` (no more data from me; the peer's reads return ``b""``
after the data before it) and ``CLOSE`` (FIN, and my QP is going away: the peer's sends
fail at once with :class:`BrokenPipe`). A QP error (peer's mrcd killed, peer's QP
destroyed without CLOSE, fabric unreachable) fails every call with
:class:`ConnectionReset` carrying mrcd's reason. A waiter that has seen no traffic for
``keepalive`` seconds sends an 8-byte RDMA WRITE (no immediate) to the peer's control
area, so a peer that vanished while this side only reads is noticed too (the write's
retry budget runs out: about a second with mrcd's defaults).

Threads: everything sharing one mrcd :class:`~mrcnet.api.Context` (a listener and the
connections it accepted) goes through one :class:`Hub` and its lock; one waiter at a
time waits on the context's socket, the others on a condition (leader/follower).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import select
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from mrcnet.api.client import (
    Access,
    CompletionQueue,
    Context,
    MemoryRegion,
    PeerInfo,
    QueuePair,
    RemoteRegion,
    WorkCompletion,
    default_socket_path,
)
from mrcnet.api.errors import AccessDenied, ApiError, ConnectError, DaemonNotRunning
from mrcnet.errors import MrcError

__all__ = [
    "BrokenPipe",
    "ConnectionRefused",
    "ConnectionReset",
    "EndOfStream",
    "MrcdAccessDenied",
    "MrcdNotRunning",
    "PeerUnreachable",
    "SocketClosed",
    "SocketError",
    "SocketTimeout",
    "WouldBlock",
]

# --- exceptions ---------------------------------------------------------------------


class SocketError(MrcError, OSError):
    """Base class of the socket API's errors (an :class:`OSError`, as socket errors)."""


class MrcdNotRunning(DaemonNotRunning, SocketError, ConnectionRefusedError):
    """No mrcd at the socket path (or it went away); ``path`` is where it was looked for."""

    def __init__(self, path: str, detail: str = "") -> None:
        self.path = path
        super().__init__(detail or f"mrcd is not running at {path} (start it with "
                         "mrcd --config FILE, or pass mrcd=PATH / set MRCD_SOCKET)")

    def __str__(self) -> str:
        return str(self.args[0])


class MrcdAccessDenied(AccessDenied, SocketError, PermissionError):
    """mrcd's socket exists, but its mode/group do not let this user in (``path``)."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        super().__init__(detail)

    def __str__(self) -> str:
        return str(self.args[0])


class PeerUnreachable(SocketError, ConnectionError):
    """The peer host is unknown to mrcd, or its mrcd cannot be reached."""


class ConnectionRefused(SocketError, ConnectionRefusedError):
    """The peer's mrcd answered, but nothing listens on that service (or it refused)."""


class ConnectionReset(SocketError, ConnectionResetError):
    """The connection's QP failed (``reason``: mrcd's words, e.g. the retry budget ran out
    because the peer's mrcd or QP disappeared)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"connection reset: {reason}")

    def __str__(self) -> str:
        return str(self.args[0])


class BrokenPipe(SocketError, BrokenPipeError):
    """Sending after this side shut down writing, or after the peer closed."""


class SocketClosed(SocketError):
    """The socket (or listener) was closed by this process."""


class EndOfStream(SocketError, EOFError):
    """``recv_message``: the peer closed (orderly); no more messages will come."""


class SocketTimeout(SocketError, TimeoutError):
    """A blocking call did not finish within the socket's timeout."""


class WouldBlock(SocketError, BlockingIOError):
    """A non-blocking socket (timeout 0) cannot do the call right now."""


# --- the immediate --------------------------------------------------------------------

KIND_SHIFT: Final = 29
VALUE_MASK: Final = (1 << KIND_SHIFT) - 1
K_DATA: Final = 0  #: data, the last (or only) fragment of a message
K_DATA_MORE: Final = 1  #: data, more fragments of the same message follow
K_CREDIT: Final = 2  #: value: how far the sender of it consumed its ring, mod 2**29
K_CREDIT_REQ: Final = 3  #: "I am blocked on ring space": return credit when you can
K_FIN: Final = 4  #: no more data from me
K_CLOSE: Final = 5  #: no more data, and my QP is going away

#: Bytes behind the ring for control writes (zero-length immediates, keepalives).
CTRL_AREA: Final = 64
#: Largest ring: offsets and credits travel in 29 bits (mod 2**29 > 2 x ring).
MAX_RING: Final = 1 << 28
MIN_RING: Final = 4096
DEFAULT_RING: Final = 4 << 20
#: Largest single write: several in flight keep the pipe full.
DEFAULT_MAX_CHUNK: Final = 1 << 20
#: Receives kept posted (one per incoming immediate; re-posted when polled).
RECV_DEPTH: Final = 64
#: Private data both ends send, so a verbs peer is not mistaken for a socket.
MAGIC: Final = {"mrcsock": 1}
#: How long close() waits for the data already sent (and the CLOSE) to be acknowledged.
DEFAULT_LINGER = 5.0
#: Pause between two connects refused because the listener is re-arming its service.
REFUSED_PAUSE: Final = 0.05

_DATA_BIT: Final = 1 << 62  # wr_id of a data write: _DATA_BIT | end position
_CTRL_ID: Final = 1
_KA_ID: Final = 2

T = TypeVar("T")
LockT = TypeVar("LockT")
#: What send calls take (anything with the buffer protocol, in bytes).
BytesLike = bytes | bytearray | memoryview


def imm(kind: int, value: int) -> int:
    """The immediate for ``kind`` and ``value`` (value taken mod 2**29)."""
    return (kind << KIND_SHIFT) | (value & VALUE_MASK)


def unwrap(value: int, near: int) -> int:
    """The absolute position congruent to ``value`` mod 2**29 at or after ``near``."""
    return near + ((value - near) & VALUE_MASK)


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


def check_ring(ring_size: int) -> None:
    """ValueError unless ``ring_size`` is usable."""
    if not MIN_RING <= ring_size <= MAX_RING:
        raise ValueError(f"ring_size {ring_size} outside {MIN_RING}..{MAX_RING}")


# --- one mrcd context, shared by the channels on it -------------------------------------


class Hub:
    """One mrcd :class:`Context` with one CQ, shared by every channel on it: completions
    and events are routed by QP number; waiting is coordinated between threads and with
    an asyncio loop."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.path = ctx.path
        self.cond = threading.Condition(threading.Lock())
        self.cq: CompletionQueue = ctx.create_cq()
        self.channels: dict[int, Channel] = {}
        self.acceptors: list[Acceptor] = []
        self.users = 0  # channels and acceptors alive; the context closes with the last
        self.error: SocketError | None = None
        self.closed = False
        self._pumping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: set[asyncio.Future[None]] = set()

    @classmethod
    def open(cls, path: str | None) -> Hub:
        """Open a context on mrcd at ``path`` (default ``$MRCD_SOCKET``)."""
        where = path or default_socket_path()
        try:
            ctx = Context(path)
        except DaemonNotRunning as e:
            raise MrcdNotRunning(where) from e
        except AccessDenied as e:
            raise MrcdAccessDenied(where, str(e)) from e
        try:
            return cls(ctx)
        except ApiError:
            ctx.close()
            raise

    # -- calls into the context (the lock is held) --
    def call(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """Run a context call; an earlier pipelined post's failure that it raises first
        goes to the channel it belongs to, and the call is retried."""
        for _ in range(1000):
            try:
                return fn(*args, **kw)
            except DaemonNotRunning as e:
                raise self._gone(e) from None
            except ApiError as e:
                if not self._route_deferred(e):
                    raise
        raise ApiError("too many failed posts reported at once")

    def _route_deferred(self, e: ApiError) -> bool:
        text = str(e)
        if not text.startswith("an earlier "):
            return False
        m = re.search(r"\bQP (\d+)", text)
        ch = self.channels.get(int(m.group(1))) if m else None
        if ch is not None:
            ch.fail(text)
        return True  # a destroyed channel's late failure: nobody to tell

    def _gone(self, e: Exception) -> SocketError:
        if self.error is None:
            self.error = MrcdNotRunning(self.path, f"mrcd at {self.path} went away ({e})")
        return self.error

    def pump(self) -> None:
        """Take what mrcd pushed: completions to channels, QP errors to channels,
        connected listens to acceptors. Never blocks (lock held)."""
        if self.error is not None or self.closed:
            return
        try:
            # Reading async events reads the context's socket, which may queue more
            # completions on the CQ: go round until both are drained, or a waiter would
            # sleep on an empty socket with a completion already queued (a lost wakeup).
            while True:
                try:
                    wcs = self.cq.poll(256)
                except ApiError as e:
                    if isinstance(e, DaemonNotRunning) or not self._route_deferred(e):
                        raise
                    continue
                for wc in wcs:
                    ch = self.channels.get(wc.qpn)
                    if ch is not None:
                        ch.on_wc(wc)
                if len(wcs) == 256:
                    continue
                while (ev := self.ctx.get_async_event(timeout=0)) is not None:
                    if ev.get("type") == "QPError":
                        ch = self.channels.get(int(ev.get("qpn", -1)))
                        if ch is not None:
                            ch.fail(str(ev.get("reason", "QP error")))
                if not self.cq.pending():
                    break
            for acc in list(self.acceptors):
                acc.check()
        except DaemonNotRunning as e:
            self._gone(e)
        except (OSError, ValueError) as e:  # the context's socket broke under us
            self._gone(e)
        if self.error is not None:
            for ch in list(self.channels.values()):
                ch.fail(str(self.error), error=self.error)

    # -- one round of a wait (lock held), for both kinds of waiting --
    def _wait_round(self, ready: Callable[[], bool], deadline: float | None,
                    idle: Callable[[float], None] | None) -> tuple[bool | None, float]:
        """Pump and judge: ``(result, 0)`` when the wait is over (``ready()``, the
        deadline passed, or the context is dead or closed), else ``(None, left)`` after
        ``idle(now)``: sleep at most ``left`` s and go round again."""
        self.pump()
        if ready():
            return True, 0.0
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return False, 0.0
        if self.error is not None or self.closed:
            return ready(), 0.0
        if idle is not None:
            idle(now)
        # Wake at least every 0.25 s: keepalive clocks, a closed context.
        return None, 0.25 if deadline is None else min(0.25, deadline - now)

    # -- blocking wait (lock held by the caller) --
    def wait(self, ready: Callable[[], bool], deadline: float | None,
             idle: Callable[[float], None] | None = None) -> bool:
        """Pump until ``ready()`` or ``deadline`` (monotonic; None: forever). Returns
        ``ready()``. ``idle(now)`` runs between waits (keepalives)."""
        while True:
            done, left = self._wait_round(ready, deadline, idle)
            if done is not None:
                return done
            if self._pumping:
                self.cond.wait(left)
                continue
            self._pumping = True
            try:
                fd = self.ctx.fileno()
                self.cond.release()
                try:
                    select.select([fd], [], [], max(0.0, left))
                except (OSError, ValueError):
                    pass  # closed meanwhile: the pump below finds out
                finally:
                    self.cond.acquire()
            finally:
                self._pumping = False
            self.pump()
            self.cond.notify_all()

    # -- asyncio wait --
    async def wait_async(self, ready: Callable[[], bool], deadline: float | None,
                         idle: Callable[[float], None] | None = None) -> bool:
        """:meth:`wait` for asyncio: one reader on the loop wakes every waiter."""
        loop = asyncio.get_running_loop()
        self._attach(loop)
        while True:
            with self.cond:
                done, left = self._wait_round(ready, deadline, idle)
            if done is not None:
                return done
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.add(fut)
            try:
                await asyncio.wait({fut}, timeout=max(0.0, left))
            finally:
                self._waiters.discard(fut)

    def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is loop or self.closed:
            return
        self._detach()
        loop.add_reader(self.ctx.fileno(), self._on_readable)
        self._loop = loop

    def _detach(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self.ctx.fileno())
            self._loop = None

    def _on_readable(self) -> None:
        with self.cond:
            self.pump()
            self.cond.notify_all()
        if self.error is not None:
            self._detach()  # a dead socket stays readable: do not spin
        self.wake_async()

    def wake_async(self) -> None:
        """Wake asyncio waiters (after a state change made outside the pump)."""
        for fut in list(self._waiters):
            if not fut.done():
                fut.set_result(None)

    # -- lifetime --
    def acquire(self) -> None:
        self.users += 1

    def release(self) -> None:
        """One user fewer; the last one closes the context (mrcd frees what is left)."""
        self.users -= 1
        if self.users <= 0 and not self.closed:
            self.closed = True
            self._detach()
            with contextlib.suppress(Exception):
                self.ctx.close()
            self.cond.notify_all()


# --- one connection ---------------------------------------------------------------------


class Channel:
    """One connection's ring protocol, non-blocking. The lock of its :class:`Hub` must be
    held for every call. Blocking and asyncio front ends wait with the hub."""

    def __init__(self, hub: Hub, qp: QueuePair, ring: MemoryRegion, ring_size: int, *,
                 max_chunk: int = DEFAULT_MAX_CHUNK, keepalive: float = 1.0) -> None:
        self.hub = hub
        self.qp = qp
        self.ring = ring
        self.size = ring_size
        self.max_chunk = max_chunk
        self.keepalive = keepalive
        self.peer: PeerInfo | None = None
        self.stage: MemoryRegion | None = None
        self.remote: RemoteRegion | None = None
        self.rsize = 0  # the peer's ring size
        # receive side
        self.arrived: collections.deque[list[int]] = collections.deque()  # [off, len, more]
        self.arrived_bytes = 0
        self.recv_pos = 0  # where the next data must land (absolute)
        self.head = 0  # consumed (absolute)
        self.returned = 0  # credit sent to the peer
        self.peer_wants_credit = False
        self.eof = False  # FIN or CLOSE received (after the data before it)
        self.peer_closed = False
        # send side
        self.tail = 0
        self.credit = 0
        self.completed = 0
        self.credit_requested = False
        self.ctrl_outstanding = 0
        self.ka_outstanding = False
        self.shut_wr = False
        # failure and life
        self.error: SocketError | None = None
        self.destroyed = False
        self.last_heard = time.monotonic()
        self.stats: dict[str, int] = collections.Counter()

    @classmethod
    def create(cls, hub: Hub, ring_size: int, **kw: Any) -> Channel:
        """A QP in INIT with its ring, registered with ``hub``."""
        check_ring(ring_size)
        qp = hub.call(hub.ctx.create_qp, hub.cq)
        try:
            ring = hub.call(hub.ctx.alloc_mr, ring_size + CTRL_AREA)
        except BaseException:
            with contextlib.suppress(Exception):
                hub.call(qp.destroy)
            raise
        ch = cls(hub, qp, ring, ring_size, **kw)
        hub.channels[qp.qpn] = ch
        hub.acquire()
        return ch

    @classmethod
    def open(cls, mrcd: str | None, ring_size: int, **kw: Any) -> Channel:
        """A channel on a fresh context on mrcd at ``mrcd`` (for connecting): the hub is
        released again if the channel cannot be made."""
        hub = Hub.open(mrcd)
        with hub.cond:
            try:
                return cls.create(hub, ring_size, **kw)
            except BaseException:
                hub.release()
                raise

    def connected(self, peer: PeerInfo) -> None:
        """The QP is connected to ``peer``: check it speaks this protocol, allocate the
        staging region and post the receives."""
        self.peer = peer
        if peer.private != MAGIC or len(peer.regions) != 1 \
                or not MIN_RING <= peer.regions[0].length - CTRL_AREA <= MAX_RING:
            raise ConnectionRefused(f"{peer.host} QP {peer.qpn} is not a socket-API peer "
                                    f"(private data {peer.private!r})")
        self.remote = peer.regions[0]
        self.rsize = self.remote.length - CTRL_AREA
        self.max_chunk = max(1, min(self.max_chunk, self.rsize // 2))
        self.stage = self.hub.call(self.hub.ctx.alloc_mr, self.rsize, Access.LOCAL_WRITE)
        for i in range(RECV_DEPTH):
            self.hub.call(self.qp.post_recv, wr_id=i)
        self.last_heard = time.monotonic()

    # -- completions --
    def on_wc(self, wc: WorkCompletion) -> None:
        self.last_heard = time.monotonic()
        if not wc.ok:
            self.fail(f"work request failed: {wc.status}", status=True)
            return
        if wc.opcode == "RECV_RDMA_WITH_IMM":
            self.stats["rx_imm"] += 1
            if not self.destroyed and self.error is None:
                self.hub.call(self.qp.post_recv, wr_id=wc.wr_id)
            self._on_imm(wc.imm or 0, wc.byte_len)
        elif wc.wr_id & _DATA_BIT:
            self.completed = max(self.completed, wc.wr_id & ~_DATA_BIT)
        elif wc.wr_id == _KA_ID:
            self.ka_outstanding = False
        else:
            self.ctrl_outstanding -= 1

    def _on_imm(self, value: int, length: int) -> None:
        kind, v = value >> KIND_SHIFT, value & VALUE_MASK
        if kind in (K_DATA, K_DATA_MORE):
            off = self.recv_pos % self.size
            if self.eof or v != off or off + length > self.size:
                self.fail(f"protocol error: data at ring offset {v} (+{length}), expected "
                          f"{off}{' after end of stream' if self.eof else ''}")
                return
            self.arrived.append([off, length, kind == K_DATA_MORE])
            self.arrived_bytes += length
            self.recv_pos += length
        elif kind == K_CREDIT:
            self.credit = max(self.credit, unwrap(v, self.credit))
            self.credit_requested = False
        elif kind == K_CREDIT_REQ:
            self.peer_wants_credit = True
            self._maybe_credit()
        elif kind in (K_FIN, K_CLOSE):
            self.eof = True
            self.peer_closed = self.peer_closed or kind == K_CLOSE
        else:
            self.fail(f"protocol error: unknown immediate kind {kind}")

    def fail(self, reason: str, *, status: bool = False,
             error: SocketError | None = None) -> None:
        """The connection is dead: every later call raises. A QP error's reason (from
        its event) replaces the bare status of a failed completion."""
        if self.error is not None and not (isinstance(self.error, ConnectionReset)
                                           and self.error.reason.startswith("work request")
                                           and not status):
            return
        self.error = error or ConnectionReset(reason)

    # -- receiving --
    def readable(self) -> bool:
        """Data, end of stream or an error to report."""
        return bool(self.arrived) or self.eof or self.error is not None or self.destroyed

    def read_into(self, out: memoryview) -> int:
        """Copy up to ``len(out)`` arrived bytes (ignoring message boundaries)."""
        n = 0
        buf = self.ring.buf
        while self.arrived:
            e = self.arrived[0]
            if not e[1]:  # an empty message: nothing for a byte stream
                self.arrived.popleft()
                continue
            if n >= len(out):
                break
            k = min(e[1], len(out) - n)
            out[n:n + k] = buf[e[0]:e[0] + k]
            n += k
            if k == e[1]:
                self.arrived.popleft()
            else:
                e[0] += k
                e[1] -= k
        self._consumed(n)
        return n

    def read_message_part(self, into: bytearray) -> bool:
        """Move arrived fragments into ``into``; True when the message is complete."""
        buf = self.ring.buf
        n = 0
        done = False
        while self.arrived:
            off, length, more = self.arrived.popleft()
            into += buf[off:off + length]
            n += length
            if not more:
                done = True
                break
        self._consumed(n)
        return done

    def _consumed(self, n: int) -> None:
        if n:
            self.head += n
            self.arrived_bytes -= n
            self._maybe_credit()

    def _maybe_credit(self) -> None:
        owed = self.head - self.returned
        if owed and (owed >= self.size // 4 or self.peer_wants_credit):
            self._ctrl(K_CREDIT, self.head)
            self.returned = self.head
            self.peer_wants_credit = False

    # -- sending --
    def check_send(self) -> None:
        """Raise unless sending is allowed."""
        if self.error is not None:
            raise self.error
        if self.destroyed:
            raise SocketClosed("the socket is closed")
        if self.shut_wr:
            raise BrokenPipe("this side shut down writing")
        if self.peer_closed:
            raise BrokenPipe(f"the peer ({self.peer.host if self.peer else '?'}) closed "
                             "the connection")

    def space(self) -> int:
        """Bytes that may be written now (contiguous, up to the ring's end)."""
        limit = min(self.credit, self.completed) + self.rsize
        return max(0, min(limit - self.tail, self.rsize - self.tail % self.rsize))

    def writable(self) -> bool:
        return self.space() > 0 or self.error is not None or self.destroyed \
            or self.peer_closed

    def write_some(self, data: memoryview, *, message_end: bool) -> int:
        """Post as much of ``data`` as the ring allows now (zero-length: an empty
        message when ``message_end``). The last fragment of a message carries
        ``DATA``, the others ``DATA_MORE``. Returns the bytes posted."""
        self.check_send()
        assert self.stage is not None and self.remote is not None
        if not data:
            if message_end:
                self._data(self.tail % self.rsize, 0, K_DATA)
            return 0
        sent = 0
        while sent < len(data):
            room = min(self.space(), self.max_chunk)
            if room <= 0:
                self._blocked()
                break
            n = min(room, len(data) - sent)
            off = self.tail % self.rsize
            self.stage.buf[off:off + n] = data[sent:sent + n]
            sent += n
            last = sent == len(data)
            self._data(off, n, K_DATA if (last and message_end) or not message_end
                       else K_DATA_MORE)
        return sent

    def _data(self, off: int, n: int, kind: int) -> None:
        assert self.stage is not None and self.remote is not None
        self.tail += n
        self.hub.call(self.qp.post_write, self.stage, off, n, self.remote, off,
                      imm=imm(kind, off), wr_id=_DATA_BIT | self.tail)
        self.stats["tx_data"] += 1

    def _blocked(self) -> None:
        # Out of ring space because of credit (not our own completions): ask once.
        if (not self.credit_requested and self.credit + self.rsize <= self.tail
                and self.credit <= self.completed):
            self._ctrl(K_CREDIT_REQ, 0)
            self.credit_requested = True

    def _ctrl(self, kind: int, value: int) -> None:
        # Nothing goes to a peer that closed: its QP is gone, the write would fail it.
        if self.error is not None or self.destroyed or self.remote is None \
                or self.peer_closed:
            return
        assert self.stage is not None
        self.ctrl_outstanding += 1
        self.hub.call(self.qp.post_write, self.stage, 0, 0, self.remote, self.rsize,
                      imm=imm(kind, value), wr_id=_CTRL_ID)
        self.stats[f"tx_ctrl_{kind}"] += 1

    def idle(self, now: float) -> None:
        """Between waits: probe a silent peer with an RDMA WRITE (no immediate)."""
        if (self.keepalive > 0 and now - self.last_heard >= self.keepalive
                and not self.ka_outstanding and self.error is None and not self.destroyed
                and self.remote is not None and not self.peer_closed):
            self.ka_outstanding = True
            self.last_heard = now
            self.hub.call(self.qp.post_write, self.ring, self.size, 8, self.remote,
                          self.rsize + 8, wr_id=_KA_ID)

    def flushed(self) -> bool:
        """All our writes completed (or nothing more will: error, peer gone)."""
        return (self.completed >= self.tail and self.ctrl_outstanding <= 0) \
            or self.error is not None or self.peer_closed or self.destroyed

    # -- the end --
    def shutdown_write(self) -> None:
        """Send FIN once (later sends raise :class:`BrokenPipe`)."""
        if not self.shut_wr and self.error is None and not self.destroyed:
            self._ctrl(K_FIN, 0)
        self.shut_wr = True

    def begin_close(self) -> None:
        """Send CLOSE unless the peer is gone or closed already."""
        if self.error is None and not self.destroyed and not self.peer_closed \
                and self.remote is not None:
            self._ctrl(K_CLOSE, 0)
        self.shut_wr = True

    def destroy(self) -> None:
        """Destroy the QP and free the regions (once); the last channel of a hub closes
        its context."""
        if self.destroyed:
            return
        self.destroyed = True
        hub = self.hub
        hub.channels.pop(self.qp.qpn, None)
        if hub.users > 1 and hub.error is None and not hub.closed:
            with contextlib.suppress(ApiError, OSError, TimeoutError, BufferError, ValueError):
                hub.call(self.qp.destroy)
                for mr in (self.ring, self.stage):
                    if mr is not None:
                        hub.call(mr.deregister)
        hub.release()


# --- a listening service ----------------------------------------------------------------


class Acceptor:
    """Keeps one QP listening on ``service``; each connection that arrives becomes a
    :class:`Channel` in ``ready`` and (below ``backlog``) a new QP listens at once, so a
    connect right after another finds a listener. Lock of the hub held for every call."""

    def __init__(self, hub: Hub, service: int, *, ring_size: int, backlog: int,
                 max_chunk: int, keepalive: float) -> None:
        check_ring(ring_size)
        self.hub = hub
        self.service = service
        self.ring_size = ring_size
        self.backlog = max(1, backlog)
        self.kw: dict[str, Any] = {"max_chunk": max_chunk, "keepalive": keepalive}
        self.pending: Channel | None = None
        self.ready: collections.deque[Channel] = collections.deque()
        self.closed = False
        self.error: SocketError | None = None
        hub.acquire()
        hub.acceptors.append(self)
        self.arm()

    @classmethod
    def open(cls, mrcd: str | None, service: int, *, ring_size: int, backlog: int,
             max_chunk: int, keepalive: float) -> Acceptor:
        """An acceptor on a fresh context on mrcd at ``mrcd`` (for a listener or a
        server): the context is closed again if the acceptor cannot be made."""
        hub = Hub.open(mrcd)
        with hub.cond:
            try:
                return cls(hub, service, ring_size=ring_size, backlog=backlog,
                           max_chunk=max_chunk, keepalive=keepalive)
            except BaseException:
                hub.users = 0
                hub.release()
                raise

    def arm(self) -> None:
        """Put a fresh QP on the service."""
        if self.pending is not None or self.closed:
            return
        ch = Channel.create(self.hub, self.ring_size, **self.kw)
        try:
            self.hub.call(self.hub.ctx.listen, self.service, ch.qp, expose=[ch.ring],
                          private=MAGIC)
        except BaseException:
            ch.destroy()
            raise
        self.pending = ch

    def check(self) -> None:
        """Called by the hub's pump: did the listening QP get connected?"""
        ch = self.pending
        if ch is None or self.closed:
            return
        try:
            peer = ch.qp.accept(timeout=0)  # never blocks: mrcd's push is queued already
        except TimeoutError:
            return
        self.pending = None
        try:
            ch.connected(peer)
        except (SocketError, ApiError):
            ch.destroy()  # not a socket peer (or no memory for it): its QP fails
        else:
            self.ready.append(ch)
        if len(self.ready) < self.backlog:
            try:
                self.arm()
            except (ApiError, SocketError) as e:
                self.error = e if isinstance(e, SocketError) else SocketError(str(e))

    def take(self) -> Channel | None:
        """An accepted connection, if any (re-arms the listen below the backlog)."""
        if not self.ready:
            return None
        ch = self.ready.popleft()
        if self.pending is None and not self.closed:
            self.arm()
        return ch

    def close(self) -> None:
        """Stop listening; connections not yet accepted are closed."""
        if self.closed:
            return
        self.closed = True
        if self in self.hub.acceptors:
            self.hub.acceptors.remove(self)
        if self.pending is not None:
            self.pending.destroy()
            self.pending = None
        while self.ready:
            ch = self.ready.popleft()
            ch.begin_close()
            ch.destroy()
        self.hub.release()


# --- what the blocking and the asyncio sockets share ------------------------------------


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
