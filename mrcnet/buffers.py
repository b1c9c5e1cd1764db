"""Frame memory shared by the core and the ports, with no system call.

Both sides of a port's batch see the same memory: the socket side
(:class:`mrcnet.io.batch.CBatchIO`) fills and drains it with recvmmsg/sendmmsg, the core
reads received frames where they lie and queues the frames it builds. Everything here is
memory only (the C half is mrcnet/_csrc/buffers.c): nothing imports socket, fcntl,
select or asyncio, so the sans-I/O core may import it.

- :class:`BatchSlots`: a batch's ``max_batch`` slots of ``bufsize`` bytes and the
  message headers a batch system call uses (``struct mrc_batch``); ``CBatchIO`` is one.
- :class:`SlotFrames`: the frames a batch's last receive kept, as a sequence of views.
- :class:`SendQueue`: mrcd's ports' send queues (a pointer per frame, no Python object),
  filled by :meth:`mrcnet.wire.template.RunPatcher.queue`, drained by the port's batch.

C only: without the C module (:mod:`mrcnet.native`) the ports use per-frame Python I/O
and none of these exist (:func:`send_queue` gives None).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Protocol, overload

from mrcnet.native import HAVE_C, NOT_BUILT, C, ffi

__all__ = ["SENDQ_CAP", "BatchSlots", "QueueSender", "SendQueue", "SlotFrames", "send_queue"]


class BatchSlots:
    """A batch's memory, allocated once and reused: ``max_batch`` slots of ``bufsize``
    bytes (slot i at ``bufs + i * bufsize``), each frame's length, packet type and
    interface, the kept frames' slots, and the message headers of a batch system call
    (``struct mrc_batch``, mrcnet/_csrc/buffers.h)."""

    def __init__(self, max_batch: int = 64, bufsize: int = 9216) -> None:
        if C is None:
            raise RuntimeError(NOT_BUILT)
        if max_batch < 1 or bufsize < 1:
            raise ValueError("max_batch and bufsize must be positive")
        self.max_batch = max_batch
        self.bufsize = bufsize
        # Everything is owned by this object (ffi.new frees with it); the struct only
        # holds pointers, so keep the arrays referenced here.
        self._msgs = ffi.new("struct mmsghdr[]", max_batch)
        self._iov = ffi.new("struct iovec[]", max_batch)
        self._addrs = ffi.new("struct sockaddr_ll[]", max_batch)
        self._bufs = ffi.new("uint8_t[]", max_batch * bufsize)
        self._lens = ffi.new("uint32_t[]", max_batch)
        self._pkttype = ffi.new("uint8_t[]", max_batch)
        self._ifindex = ffi.new("int32_t[]", max_batch)
        self._idx = ffi.new("uint32_t[]", max_batch)
        self._nrecv = ffi.new("unsigned *")
        b = self._b = ffi.new("struct mrc_batch *")
        b.max = max_batch
        b.bufsize = bufsize
        b.msgs, b.iov, b.addrs, b.bufs = self._msgs, self._iov, self._addrs, self._bufs
        b.lens, b.pkttype, b.ifindex, b.idx = self._lens, self._pkttype, self._ifindex, self._idx
        C.mrc_batch_init(b)
        self._view = memoryview(ffi.buffer(self._bufs))  # type: ignore[arg-type]

    def slot(self, i: int) -> memoryview:
        """Writable view of send/receive buffer ``i`` (``bufsize`` bytes)."""
        return self._view[i * self.bufsize : (i + 1) * self.bufsize]

    def slot_ptr(self, i: int) -> Any:
        """cdata pointer to buffer ``i``, for :meth:`mrcnet.wire.template.CTemplate.patch`
        (``cap=bufsize``)."""
        if not 0 <= i < self.max_batch:
            raise IndexError(i)
        return self._bufs + i * self.bufsize


class SlotFrames(Sequence[memoryview]):
    """The frames a :class:`BatchSlots`' last receive kept
    (:func:`mrcnet.io.batch.recv_slots`), as a sequence whose views are made only when
    asked for (the receive lane reads the frames in C and asks for the few it hands
    back); valid until the batch's next receive."""

    __slots__ = ("_io", "_n")

    def __init__(self, io: BatchSlots, n: int) -> None:
        self._io, self._n = io, n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, j: int) -> memoryview: ...
    @overload
    def __getitem__(self, j: slice) -> list[memoryview]: ...

    def __getitem__(self, j: int | slice) -> memoryview | list[memoryview]:
        if isinstance(j, slice):
            return [self[i] for i in range(*j.indices(self._n))]
        if j < 0:
            j += self._n
        if not 0 <= j < self._n:
            raise IndexError(j)
        io = self._io
        s, bs = io._idx[j], io.bufsize
        return io._view[s * bs : s * bs + io._lens[s]]


class QueueSender(Protocol):
    """What :meth:`SendQueue.send` sends through: a port's batch with a socket
    (:class:`mrcnet.io.batch.CBatchIO`), which makes the system calls."""

    def send_queued(self, q: Any, err: Any, calls: Any) -> int:
        """Send the ``struct mrc_sendq`` at ``q`` (see ``mrc_sendq_send``)."""
        ...


#: Frames a port's send queue holds (mrcnet.io.packet_port.MAX_BACKLOG's role).
SENDQ_CAP: Final = 4096


class SendQueue:
    """mrcd's data frames on their way to the ports, one queue per port, with no Python
    object per frame (``mrcnet/_csrc/buffers.c``):
    :meth:`mrcnet.wire.template.RunPatcher.queue` adds a run's
    frames; :meth:`send` sends a port's queue through its
    :class:`mrcnet.io.batch.CBatchIO` straight from
    the runs' buffers (this object keeps those until their frames are gone). C only:
    :func:`send_queue` gives None without it."""

    def __init__(self, nports: int, cap: int = SENDQ_CAP) -> None:
        self._q = ffi.new("struct mrc_sendq[]", nports)
        self._iov = [ffi.new("struct iovec[]", cap) for _ in range(nports)]
        for q, iov in zip(self._q, self._iov, strict=True):
            q.iov, q.cap = iov, cap
        self._n = nports
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

    def add_run(self, buf: Any, lens: Any, ports: list[int]) -> None:
        """Queue the frames laid back to back in ``buf`` (``lens``), frame i on port
        ``ports[i]``."""
        n = len(ports)
        k = C.mrc_sendq_add_run(self._q, self._n, buf, lens, ports, n)
        if k:
            self._keep.append(buf)
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

    def send(self, port: int, io: QueueSender) -> tuple[int, int, int]:
        """Send ``port``'s queue on ``io``'s socket until it is empty or the socket is
        full: (frames sent, sendmmsg calls, 0 / EAGAIN / the errno of the frame at the
        head of the queue, left there)."""
        n = io.send_queued(ffi.addressof(self._q, port), self._err, self._calls)
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

