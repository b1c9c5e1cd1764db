"""Frame memory shared by the core and the ports, with no system call.

Both sides of a port's batch see the same memory: the socket side
(:class:`mrcnet.io.batch.CBatchIO`) fills and drains it with recvmmsg/sendmmsg, the core
reads received frames where they lie. Everything here is
memory only (the C half is mrcnet/_csrc/buffers.c): nothing imports socket, fcntl,
select or asyncio, so the sans-I/O core may import it.

- :class:`BatchSlots`: a batch's ``max_batch`` slots of ``bufsize`` bytes and the
  message headers a batch system call uses (``struct mrc_batch``); ``CBatchIO`` is one.
- :class:`SlotFrames`: the frames a batch's last receive kept, as a sequence of views.

C only: without the C module (:mod:`mrcnet.native`) the ports use per-frame Python I/O
and none of these exist. (mrcd's send queues are :class:`mrcnet.io.batch.SendQueue`: the
core only ever puts a run on one through ``add_run``, :class:`mrcnet.wire.template.RunQueue`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

from mrcnet.native import NOT_BUILT, C, ffi

__all__ = ["BatchSlots", "SlotFrames"]


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
