"""The receive-ring protocol under :mod:`mrcnet.api.socket` (blocking) and
:mod:`mrcnet.api.stream` (asyncio): one connection's :class:`Channel`. Its QP shares an
mrcd context with others through a :class:`~mrcnet.api.hub.Hub`; listening is in
:mod:`mrcnet.api.acceptor`, what both front ends share in :mod:`mrcnet.api.socket_base`,
the errors in :mod:`mrcnet.api.errors`.

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

Selective signalling (the QP is made with ``sq_sig_all=False``): a data write completes
here only when posted signalled, once a quarter of the peer's ring or
:data:`SIGNAL_EVERY` writes went unsignalled; the others retire in post order with the
next signalled write, whose completion moves ``completed`` past them (a failed write
completes all the same). Control writes are signalled and carry the send position too;
before a flush waits, :meth:`Channel.settle` posts a signalled 8-byte write (as a
keepalive's) behind unsignalled ones. So a round trip's own write wakes nobody.

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
"""

from __future__ import annotations

import collections
import contextlib
import time
from typing import Any, Final

from mrcnet.api.client import (
    Access,
    MemoryRegion,
    PeerInfo,
    QueuePair,
    RemoteRegion,
    WorkCompletion,
)
from mrcnet.api.errors import (
    ApiError,
    BrokenPipe,
    ConnectionRefused,
    ConnectionReset,
    DaemonNotRunning,
    SocketClosed,
    SocketError,
)
from mrcnet.api.hub import Hub

__all__ = ["CTRL_AREA", "DEFAULT_MAX_CHUNK", "DEFAULT_RING", "MAGIC", "MAX_RING", "MIN_RING",
           "SIGNAL_EVERY", "Channel", "check_ring", "imm", "unwrap"]

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
#: At least one data write in this many is posted signalled (fewer if the context's send
#: queue is shorter: a verbs QP stalls on a run of unsignalled writes as long as it).
SIGNAL_EVERY: Final = 64
#: Private data both ends send, so a verbs peer is not mistaken for a socket.
MAGIC: Final = {"mrcsock": 1}

_DATA_BIT: Final = 1 << 62  # wr_id of a data write: _DATA_BIT | end position
_CTRL_BIT: Final = 1 << 61  # wr_id of a control write: _CTRL_BIT | the send position
_POS_MASK: Final = _CTRL_BIT - 1
_KA_ID: Final = 2


def imm(kind: int, value: int) -> int:
    """The immediate for ``kind`` and ``value`` (value taken mod 2**29)."""
    return (kind << KIND_SHIFT) | (value & VALUE_MASK)


def unwrap(value: int, near: int) -> int:
    """The absolute position congruent to ``value`` mod 2**29 at or after ``near``."""
    return near + ((value - near) & VALUE_MASK)



def check_ring(ring_size: int) -> None:
    """ValueError unless ``ring_size`` is usable."""
    if not MIN_RING <= ring_size <= MAX_RING:
        raise ValueError(f"ring_size {ring_size} outside {MIN_RING}..{MAX_RING}")



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
        self.signaled_to = 0  # the send position the last signalled write completes
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
        qp = hub.call(hub.ctx.create_qp, hub.cq, sq_sig_all=False)
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
                self._repost(wc.wr_id)
            self._on_imm(wc.imm or 0, wc.byte_len)
        elif wc.wr_id & _DATA_BIT:
            self.completed = max(self.completed, wc.wr_id & _POS_MASK)
        elif wc.wr_id == _KA_ID:
            self.ka_outstanding = False
        else:
            # (its writes before it retired in post order: the unsignalled ones too)
            self.completed = max(self.completed, wc.wr_id & _POS_MASK)
            self.ctrl_outstanding -= 1

    def _repost(self, wr_id: int) -> None:
        """Post the receive ``wr_id`` again, lazily: its doorbell waits for the answer
        this end posts next (one wake-up of mrcd for both) or the library's next sleep
        (``ClientQueues.post_recv``'s ``lazy``); eagerly without the shared queues. (The
        hub's rules for a context call's errors: through :meth:`Hub.call` where an
        earlier post's failure can come first; the shared queues' post raises only
        for a lost mrcd.)"""
        qp = self.qp
        ctx = qp.ctx
        q = ctx._q
        if q is None or ctx._deferred:
            self.hub.call(qp.post_recv, wr_id)
            return
        try:
            q.post_recv(qp.qpn, wr_id, ctx.timeout, lazy=True)
        except OSError as e:
            raise self.hub._gone(DaemonNotRunning(f"mrcd at {ctx.path}: {e}")) from None

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
        self.tail = tail = self.tail + n
        qp = self.qp
        # Signalled once a quarter of the peer's ring went unsignalled (so ``completed``
        # always comes within a quarter of the tail: a sender never waits for a
        # completion that will not come), or the run is as long as allowed.
        signaled = (tail - self.signaled_to >= self.rsize // 4
                    or qp.unsignaled_run + 1 >= min(SIGNAL_EVERY, qp.ctx._sq_slots))
        if signaled:
            self.signaled_to = tail
        self.hub.call(qp.post_write, self.stage, off, n, self.remote, off,
                      imm=imm(kind, off), wr_id=_DATA_BIT | tail, signaled=signaled)
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
        self.signaled_to = self.tail
        self.hub.call(self.qp.post_write, self.stage, 0, 0, self.remote, self.rsize,
                      imm=imm(kind, value), wr_id=_CTRL_BIT | self.tail, signaled=True)
        self.stats[f"tx_ctrl_{kind}"] += 1

    def _can_probe(self) -> bool:
        return (self.error is None and not self.destroyed and self.remote is not None
                and not self.peer_closed)

    def _probe(self, wr_id: int) -> None:
        # An 8-byte RDMA WRITE (no immediate) into the peer's control area, signalled.
        assert self.remote is not None
        self.hub.call(self.qp.post_write, self.ring, self.size, 8, self.remote,
                      self.rsize + 8, wr_id=wr_id, signaled=True)

    def idle(self, now: float) -> None:
        """Between waits: probe a silent peer with an RDMA WRITE (no immediate)."""
        if (self.keepalive > 0 and now - self.last_heard >= self.keepalive
                and not self.ka_outstanding and self._can_probe()):
            self.ka_outstanding = True
            self.last_heard = now
            self._probe(_KA_ID)

    def settle(self) -> None:
        """Before waiting for :meth:`flushed`: when the last data writes went
        unsignalled, post a signalled probe behind them (its completion is theirs)."""
        if self.signaled_to < self.tail and self._can_probe():
            self.signaled_to = self.tail
            self._probe(_DATA_BIT | self.tail)

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
