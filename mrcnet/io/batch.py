"""Batched send and receive on packet sockets: sendmmsg/recvmmsg in C, one call per frame
in Python.

- ``BatchIO(fd, max_batch, bufsize)`` per port (:class:`CBatchIO` when the C module is
  built, else :class:`PyBatchIO`): ``send(frames) -> sent``, ``send_slots(lengths) ->
  sent``, ``recv(max_frames=None, wait=False, skip_outgoing=True) -> [(memoryview,
  pkttype, ifindex)]`` (views valid until the next ``recv``), ``slot(i)``/``slot_ptr(i)``,
  ``last_received``. A full queue gives a partial count; other errors raise ``OSError``
  with its errno. :class:`CBatchIO`'s memory is a :class:`mrcnet.buffers.BatchSlots`
  (the core reads received frames in it); :func:`recv_slots` receives into it without
  making views.
- :class:`SendQueue`: mrcd's ports' send queues, a pointer per frame and no Python object:
  the core's run builder puts each run on them (:meth:`mrcnet.wire.template.RunPatcher.queue`)
  and each port's batch drains its own with sendmmsg. C only.
- The stateless ``send_batch(fd, frames)`` / ``recv_batch(fd, ...)``.

The C half is mrcnet/_csrc/batch.c; :mod:`mrcnet.native` decides which twin is bound.
"""

from __future__ import annotations

import errno as _errno
import fcntl
import functools
import os
import socket
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

from mrcnet.buffers import BatchSlots
from mrcnet.native import HAVE_C, C, ffi

__all__ = [
    "PACKET_OUTGOING",
    "SENDQ_CAP",
    "BatchIO",
    "CBatchIO",
    "PyBatchIO",
    "Received",
    "SendQueue",
    "lane_reader",
    "recv_batch",
    "recv_slots",
    "send_batch",
    "send_queue",
]

# Linux <linux/if_packet.h>: sll_pkttype of a frame this host sent (a packet socket sees
# its own host's transmissions too; mrcd must not take them for received frames).
PACKET_OUTGOING: Final = 4

#: One received frame: (frame bytes, sll_pkttype, sll_ifindex). The memoryview points
#: into the batch's reusable buffer and is valid until that batch's next ``recv``.
Received = tuple[memoryview, int, int]

_SIOCGIFINDEX: Final = 0x8933  # <linux/sockios.h>
_IFREQ_INDEX: Final = struct.Struct("16si20x")  # struct ifreq: name, ifindex (40 bytes)


class PyBatchIO:
    """Pure-Python twin of :class:`CBatchIO`: one syscall per frame.

    Same interface and the same zero-copy receive (``recvfrom_into`` reusable slots).
    """

    def __init__(self, fd: int, max_batch: int = 64, bufsize: int = 9216) -> None:
        if max_batch < 1 or bufsize < 1:
            raise ValueError("max_batch and bufsize must be positive")
        self.fd = fd
        self.max_batch = max_batch
        self.bufsize = bufsize
        # A socket object over the caller's fd, for recvfrom_into's sll address (packet
        # type, interface). It is detached, never closed: the fd stays the caller's.
        self._sock = socket.socket(fileno=fd)
        self._buf = bytearray(max_batch * bufsize)
        self._view = memoryview(self._buf)
        self._ifindex: dict[str, int] = {}
        #: Number of frames the last ``recv`` took from the socket, kept or not.
        self.last_received = 0

    def close(self) -> None:
        """Let go of the fd without closing it (it belongs to the caller)."""
        if self._sock.fileno() >= 0:
            self._sock.detach()

    def __del__(self) -> None:
        sock = getattr(self, "_sock", None)
        if sock is not None and sock.fileno() >= 0:
            sock.detach()

    def __enter__(self) -> PyBatchIO:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def slot(self, i: int) -> memoryview:
        """Writable view of send/receive buffer ``i`` (``bufsize`` bytes)."""
        return self._view[i * self.bufsize : (i + 1) * self.bufsize]

    def slot_ptr(self, i: int) -> memoryview:
        """Buffer ``i`` to patch into: the twin of :meth:`CBatchIO.slot_ptr` (a view here)."""
        if not 0 <= i < self.max_batch:
            raise IndexError(i)
        return self.slot(i)

    def send(self, frames: Sequence[bytes | bytearray | memoryview]) -> int:
        """Send up to ``max_batch`` frames; returns how many went (partial when full)."""
        sent = 0
        for f in frames[: self.max_batch]:
            try:
                self._sock.send(f, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                if e.errno == _errno.ENOBUFS:
                    break
                if sent:
                    break  # report the error on the next call, like sendmmsg
                raise
            sent += 1
        return sent

    def _if_index(self, ifname: str) -> int:
        # Ask through the socket itself (SIOCGIFINDEX): it may live in another netns than
        # this thread, where socket.if_nametoindex would look.
        ifr = fcntl.ioctl(self._sock.fileno(), _SIOCGIFINDEX,
                          _IFREQ_INDEX.pack(ifname.encode(), 0))
        return int(_IFREQ_INDEX.unpack(ifr)[1])

    def send_slots(self, lens: Sequence[int]) -> int:
        """Send frames already written into slots 0..len(lens)-1, frame i ``lens[i]`` long."""
        return self.send([self._view[i * self.bufsize : i * self.bufsize + n]
                          for i, n in enumerate(lens)])

    def recv(self, max_frames: int | None = None, *, wait: bool = False,
             skip_outgoing: bool = True) -> list[Received]:
        """Receive what is queued (up to ``max_frames``) without blocking, or with ``wait``
        block for the first frame only. Frames this host sent are dropped unless
        ``skip_outgoing`` is False. Views are valid until the next ``recv``."""
        n = self.max_batch if max_frames is None else min(max_frames, self.max_batch)
        out: list[Received] = []
        got = 0
        flags = 0 if wait else socket.MSG_DONTWAIT
        bs = self.bufsize
        for i in range(n):
            try:
                nbytes, addr = self._sock.recvfrom_into(self._view[i * bs : (i + 1) * bs],
                                                        bs, flags)
            except (BlockingIOError, InterruptedError):
                break
            got += 1
            flags = socket.MSG_DONTWAIT
            ifname, _proto, pkttype = addr[0], addr[1], addr[2]
            if skip_outgoing and pkttype == PACKET_OUTGOING:
                continue
            idx = self._ifindex.get(ifname)
            if idx is None:
                idx = self._ifindex[ifname] = self._if_index(ifname)
            out.append((self._view[i * bs : i * bs + nbytes], pkttype, idx))
        self.last_received = got
        return out

    def recv_views(self, max_frames: int | None = None, *, wait: bool = False) -> list[memoryview]:
        """:meth:`recv`'s views only (outgoing frames skipped)."""
        return [v for v, _pkttype, _ifindex in self.recv(max_frames, wait=wait)]


class CBatchIO(BatchSlots):
    """sendmmsg/recvmmsg on a packet socket with buffers allocated once and reused.

    ``fd`` is a bound AF_PACKET socket (blocking or not: calls never block unless asked).
    Frame i of a receive batch lands in slot i; ``recv`` returns memoryviews of the
    slots (no copy), valid until the next ``recv``.
    """

    def __init__(self, fd: int, max_batch: int = 64, bufsize: int = 9216) -> None:
        super().__init__(max_batch, bufsize)
        self.fd = fd
        #: Number of frames the last ``recv`` took from the socket, kept or not.
        self.last_received = 0

    def close(self) -> None:
        """Nothing to release (the fd belongs to the caller); here for symmetry."""

    def __enter__(self) -> CBatchIO:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, frames: Sequence[bytes | bytearray | memoryview]) -> int:
        """Send up to ``max_batch`` frames in one sendmmsg; returns how many went.

        A full queue (EAGAIN/ENOBUFS) gives a partial count; another error raises OSError
        if nothing was sent, else shows on the next call.
        """
        frames = frames[: self.max_batch]
        n = len(frames)
        if n == 0:
            return 0
        # One join (a C loop) instead of one cdata conversion per frame; sendmmsg then
        # points its iovecs into the joined buffer.
        data = b"".join(frames)
        self._lens[0:n] = [len(f) for f in frames]
        r = int(C.mrc_send_batch(self.fd, self._b, data, n))
        if r < 0:
            raise OSError(-r, os.strerror(-r))
        return r

    def send_slots(self, lens: Sequence[int]) -> int:
        """Send frames already written into slots 0..len(lens)-1 (zero copy)."""
        n = min(len(lens), self.max_batch)
        self._lens[0:n] = list(lens[:n])
        r = int(C.mrc_send_slots(self.fd, self._b, n))
        if r < 0:
            raise OSError(-r, os.strerror(-r))
        return r

    def recv(self, max_frames: int | None = None, *, wait: bool = False,
             skip_outgoing: bool = True) -> list[Received]:
        """Receive what is queued (up to ``max_frames``) in one recvmmsg without blocking,
        or with ``wait`` block for the first frame only. Frames this host sent
        (PACKET_OUTGOING) are dropped unless ``skip_outgoing`` is False."""
        n = self.max_batch if max_frames is None else min(max_frames, self.max_batch)
        k = int(C.mrc_recv_batch(self.fd, self._b, n, int(wait), int(skip_outgoing),
                                  self._nrecv))
        self.last_received = int(self._nrecv[0])
        if k < 0:
            raise OSError(-k, os.strerror(-k))
        if k == 0:
            return []
        bs = self.bufsize
        v, lens, pt, ifx = self._view, self._lens, self._pkttype, self._ifindex
        return [(v[i * bs : i * bs + lens[i]], pt[i], ifx[i])
                for i in ffi.unpack(self._idx, k)]

    def recv_views(self, max_frames: int | None = None, *, wait: bool = False) -> list[memoryview]:
        """:meth:`recv` without the packet type and interface of each frame (outgoing
        frames skipped): only the views, for the per-frame receive path."""
        n = self.max_batch if max_frames is None else min(max_frames, self.max_batch)
        k = int(C.mrc_recv_batch(self.fd, self._b, n, int(wait), 1, self._nrecv))
        self.last_received = int(self._nrecv[0])
        if k < 0:
            raise OSError(-k, os.strerror(-k))
        if k == 0:
            return []
        bs, v, lens = self.bufsize, self._view, self._lens
        return [v[i * bs : i * bs + lens[i]] for i in ffi.unpack(self._idx, k)]


def recv_slots(io: CBatchIO, max_frames: int | None = None) -> int:
    """``io.recv_views()`` without the views: receive what is queued (outgoing frames
    skipped) and return how many frames were kept (:class:`mrcnet.buffers.SlotFrames`
    shows them)."""
    n = io.max_batch if max_frames is None else min(max_frames, io.max_batch)
    k: int = C.mrc_recv_batch(io.fd, io._b, n, 0, 1, io._nrecv)
    io.last_received = io._nrecv[0]
    if k < 0:
        raise OSError(-k, os.strerror(-k))
    return k


def lane_reader(io: CBatchIO, lane: Any) -> Callable[[], int]:
    """:func:`recv_slots` and the receive lane's ``load_slots`` in one C call
    (rxread.c ``mrc_rx_recv``): a callable without arguments that receives what ``io``'s
    socket holds into ``io`` and points ``lane`` (a
    :class:`mrcnet.core.rxlane.CRxLane`, kept alive by the caller) at the frames kept;
    it returns how many (0: none queued) or -errno. ``Host.receive_batch(SlotFrames(io,
    k), port, now, io, lane)`` then runs the lane over them where they lie."""
    return functools.partial(C.mrc_rx_recv, lane.fit(io.max_batch), io.fd, io._b,
                             io.max_batch, io._nrecv)


#: Frames a port's send queue holds (mrcnet.io.packet_port.MAX_BACKLOG's role).
SENDQ_CAP: Final = 4096


class SendQueue:
    """mrcd's data frames on their way to the ports, one queue per port, with no Python
    object per frame (``mrcnet/_csrc/batch.c``):
    :meth:`mrcnet.wire.template.RunPatcher.queue` adds a run's
    frames; :meth:`send` sends a port's queue through its
    :class:`CBatchIO` straight from
    the runs' buffers (this object keeps those until their frames are gone). C only:
    :func:`send_queue` gives None without it."""

    def __init__(self, nports: int, cap: int = SENDQ_CAP) -> None:
        self._q = ffi.new("struct mrc_sendq[]", nports)
        # (up to C.MRC_SENDQ_IOV iovecs a frame: headers, payload where it lies, ICRC)
        self._iov = [(ffi.new("struct iovec[]", cap * C.MRC_SENDQ_IOV),
                      ffi.new("uint8_t[]", cap)) for _ in range(nports)]
        for q, (iov, niov) in zip(self._q, self._iov, strict=True):
            q.iov, q.niov, q.cap = iov, niov, cap
        self._n = self.nports = nports
        #: The queues as C takes them (mrcnet/_csrc/sender.h queues a run itself).
        self.queues = self._q
        self._keep: list[Any] = []  # buffers with frames still queued
        self._err = ffi.new("int *")
        self._calls = ffi.new("unsigned *")
        #: Frames queued and not yet sent or dropped, all ports.
        self.waiting = 0
        #: Frames queued since :meth:`take_added`.
        self.added = 0
        #: Frames not queued because their port's queue was full (the host counts them
        #: as ``tx_sendq_full`` and resets this).
        self.overflow = 0
        #: Each port's socket and batch for :meth:`flush` (:meth:`bind`; -1: none).
        self._fds = ffi.new("int[]", [-1] * nports)
        self._bs = ffi.new("struct mrc_batch *[]", nports)
        #: What :meth:`flush` did on each port it sent: frames sent, sendmmsg calls,
        #: 0 / EAGAIN / the errno of the frame left at the head (as :meth:`send` gives).
        self.flushed_frames = ffi.new("unsigned[]", nports)
        self.flushed_calls = ffi.new("unsigned[]", nports)
        self.flushed_errs = ffi.new("int[]", nports)
        self._total = ffi.new("unsigned *")
        self._marks = ffi.new("uint32_t[]", nports)

    def add_behind(self, frames: list[tuple[int, bytes]]) -> int:
        """Queue each ``(port, frame)`` of ``frames`` behind what waits on its port;
        returns the ports that had frames waiting before, as bits (:meth:`busy`'s)."""
        q, n, keep, add = self._q, self._n, self._keep, C.mrc_sendq_add_one
        busy: int = C.mrc_sendq_busy(q, n)
        k = 0
        for port, frame in frames:
            # (one frame, one C call by scalars: no length and port lists to make and
            # convert per frame, as add_run's would be)
            buf = ffi.from_buffer(frame)
            if add(q, n, buf, len(frame), port):
                keep.append(buf)
                k += 1
        self.waiting += k  # (queued's, inline, once for the frames)
        self.added += k
        self.overflow += len(frames) - k
        return busy

    def mark(self) -> None:
        """Note how many frames wait on each port, for :meth:`grown`. (Off the round
        trip's path: the fused send notes the queues that grew itself, Sender.grew.)"""
        C.mrc_sendq_mark(self._q, self._n, self._marks)

    def grown(self) -> int:
        """The ports with more frames waiting than at the last :meth:`mark`, as bits
        (port i: bit i; at most 32 ports): where what was queued since went."""
        return int(C.mrc_sendq_grown(self._q, self._n, self._marks))

    def bind(self, port: int, io: CBatchIO | None) -> None:
        """:meth:`flush` sends ``port``'s queue through ``io`` (None: it does not: the
        port is closed)."""
        self._fds[port] = -1 if io is None else io.fd
        self._bs[port] = ffi.NULL if io is None else io._b

    def busy(self) -> int:
        """The ports with frames waiting, as bits (port i: bit i; at most 32 ports)."""
        return int(C.mrc_sendq_busy(self._q, self._n))

    def flush(self, first: int = 0) -> int:
        """:meth:`send` of every bound port's queue that has frames, the ports in
        ``first`` (bits) before the others, in one C call; returns the ports sent, as
        bits (each one's figures in :attr:`flushed_frames`, :attr:`flushed_calls`,
        :attr:`flushed_errs`). At most 32 ports."""
        done = int(C.mrc_sendq_flush(self._q, self._n, self._fds, self._bs, first,
                                     self.flushed_frames, self.flushed_calls,
                                     self.flushed_errs, self._total))
        if done:  # (_sent, inline)
            self.waiting -= self._total[0]
            if not self.waiting:
                self._keep.clear()
        return done

    def add_run(self, buf: Any, lens: Any, ports: list[int]) -> None:
        """Queue the frames laid back to back in ``buf`` (``lens``), frame i on port
        ``ports[i]``."""
        n = len(ports)
        self.queued(buf, n, C.mrc_sendq_add_run(self._q, self._n, buf, lens, ports, n))

    def queued(self, buf: Any, n: int, k: int, payload: Any = None) -> None:
        """``k`` of the ``n`` frames in ``buf`` were queued (the rest did not fit): keep
        ``buf`` while they wait, and ``payload`` when their payloads go from there
        (``mrc_send_run``'s gather: it holds the region's mapping)."""
        if k:
            self._keep.append(buf)
            if payload is not None:
                self._keep.append(payload)
        self.waiting += k
        self.added += k
        self.overflow += n - k

    def take_added(self) -> int:
        """Frames queued since the last call."""
        k, self.added = self.added, 0
        return k

    def pending(self, port: int) -> int:
        """Frames waiting on ``port``."""
        q = self._q[port]
        return int(q.n - q.head)

    def send(self, port: int, io: CBatchIO) -> tuple[int, int, int]:
        """Send ``port``'s queue on ``io``'s socket until it is empty or the socket is
        full: (frames sent, sendmmsg calls, 0 / EAGAIN / the errno of the frame at the
        head of the queue, left there)."""
        n = int(C.mrc_sendq_send(io.fd, io._b, ffi.addressof(self._q, port), self._err,
                                 self._calls))
        self._sent(n)
        return n, int(self._calls[0]), int(self._err[0])

    def drop(self, port: int, k: int) -> int:
        """Drop the ``k`` oldest frames of ``port``'s queue; returns how many went."""
        n = int(C.mrc_sendq_drop(ffi.addressof(self._q, port), k))
        self._sent(n)
        return n

    def _sent(self, n: int) -> None:
        self.waiting -= n
        if not self.waiting:
            self._keep.clear()


def send_queue(nports: int) -> SendQueue | None:
    """A :class:`SendQueue` for ``nports`` ports, or None without the C fast path."""
    return SendQueue(nports) if HAVE_C else None


BatchIO: type[CBatchIO] | type[PyBatchIO] = CBatchIO if HAVE_C else PyBatchIO

_batches: dict[tuple[int, int, int], CBatchIO | PyBatchIO] = {}


def _batch_for(fd: int, max_frames: int, bufsize: int) -> CBatchIO | PyBatchIO:
    key = (fd, max_frames, bufsize)
    b = _batches.get(key)
    if b is None:
        b = _batches[key] = BatchIO(fd, max_frames, bufsize)
    return b


def send_batch(fd: int, frames: Sequence[bytes | bytearray | memoryview]) -> int:
    """Send ``frames`` on the bound packet socket ``fd`` in batches; returns how many
    went (fewer when the socket's queue is full). Long-lived callers should keep a
    :data:`BatchIO` instead (no per-call lookup)."""
    b = _batch_for(fd, 64, 1)
    sent = 0
    while sent < len(frames):
        chunk = frames[sent : sent + 64]
        r = b.send(chunk)
        sent += r
        if r < len(chunk):
            break
    return sent


def recv_batch(fd: int, max_frames: int = 64, bufsize: int = 9216, *,
               skip_outgoing: bool = True) -> list[tuple[bytes, int, int]]:
    """Receive up to ``max_frames`` queued frames from ``fd`` without blocking, as
    (bytes, sll_pkttype, sll_ifindex). Copies each frame (the batch buffer is shared);
    use :data:`BatchIO` for zero-copy views."""
    b = _batch_for(fd, max_frames, bufsize)
    return [(bytes(v), pt, ifx) for v, pt, ifx in b.recv(skip_outgoing=skip_outgoing)]

