"""mrcd's end of the queues a client shares with it (:mod:`mrcnet.api.shmqueues`): the
client's send queue of work requests and its CQs' completion rings. The doorbells are
datagrams on the client's socket (:data:`~mrcnet.api.shmclient.DOORBELL`).

Everything in shared memory is the client's to scribble on, so it is read as hostile:
the memfds must be sealed shmem of the announced size (as a region's,
:func:`~mrcnet.daemon.guard.check_region_fd`), every
index mrcd reads is checked against the ring's size
(:class:`~mrcnet.api.shmring.RingCorrupt`), and every slot is decoded once, into values
that are then validated like a JSON request's. A bad slot is an error to that client;
a corrupt ring ends that client's session; neither reaches another client or mrcd.
"""

from __future__ import annotations

import contextlib
import mmap
from typing import Any, Final

from mrcnet.api.errors import InvalidArgument
from mrcnet.api.protocol import map_region
from mrcnet.api.shmqueues import (
    CQ_SLOT,
    MAX_SLOTS,
    SQ_SLOT,
    WORK_REQUEST_SLOT,
    queue_bytes,
)
from mrcnet.api.shmring import Ring, RingCorrupt
from mrcnet.daemon.guard import check_region_fd
from mrcnet.native import HAVE_C, C, ffi

__all__ = ["CompletionWriter", "SessionQueues", "WorkRequest"]

#: Work requests taken from one client's send queue per pass (then the loop moves on:
#: the ports and the other clients get their turn).
TAKE_PER_PASS: Final = 1024

#: A work request as its slot holds it (:data:`~mrcnet.api.shmqueues.WORK_REQUEST`):
#: (op, flags, qpn, wr_id, lkey, length, addr, remote_addr, rkey, imm); imm counts only
#: with F_IMM in flags.
WorkRequest = tuple[int, int, int, int, int, int, int, int, int, int]


def _slots(value: object) -> int:
    if type(value) is not int or not 16 <= value <= MAX_SLOTS or value & (value - 1):
        raise InvalidArgument(f"a queue of {value!r} slots: give a power of two from 16 "
                              f"to {MAX_SLOTS}")
    return value


def _map_queue(fd: int, nslots: int, slot_size: int) -> mmap.mmap:
    size = queue_bytes(nslots, slot_size)
    check_region_fd(fd, size)  # sealed: it can never shrink under the mapping
    return map_region(fd, size, "mrcd")


class CompletionWriter:
    """mrcd's end (the producer) of one CQ's completion ring: completions go in as
    :func:`~mrcnet.api.shmqueues.encode_completions` gives them, through :meth:`put`.

    With the C module the producer's index lives in C (:attr:`c`, ``struct
    mrc_shmring_tx``), where the host's receive lane writes a receive's completion
    itself (the core's CQ's ``ring_out``); :meth:`put` and :meth:`block` go through it.
    Without it they are the Python :class:`~mrcnet.api.shmring.Ring`'s."""

    def __init__(self, fd: int, nslots: object) -> None:
        n = _slots(nslots)
        self.map = _map_queue(fd, n, CQ_SLOT)
        # One doorbell per arming: the client arms the ring again after every look at
        # it (mrcnet.api.shmclient), so a pass that finds it disarmed has a doorbell on
        # its way or a drain to come, and a second ring would only wake the client twice.
        self.ring = Ring(self.map, 0, n, CQ_SLOT, "producer")
        #: The producer's end in C (None without the C module). With it, the index is
        #: C's alone: ``ring``'s own ``tail`` is not kept (write through :meth:`put`).
        self.c: Any = None
        if HAVE_C:
            c = ffi.new("struct mrc_shmring_tx *")
            c.base = ffi.cast("uint8_t *", self.ring._ptr)  # (the ring's view pins it)
            c.ring, c.nslots, c.tail, c.slot_size = 0, n, 0, CQ_SLOT
            c.once, c.direct, c.bell_fd = int(self.ring.once), 1, -1
            self.c = c

    def put(self, data: bytes) -> tuple[int, bool]:
        """As many of ``data``'s slots as there is room for, written and published in
        one C call: how many, and True when the client sleeps and must be rung
        (RingCorrupt if the client broke the head)."""
        c = self.c
        if c is None:
            return self.ring.put(data)
        r = C.mrc_shmring_tx_put(c, data, len(data) // CQ_SLOT)
        if r < 0:
            raise RingCorrupt(f"ring head is more than {c.nslots} slots behind its tail")
        return r >> 1, bool(r & 1)

    def block(self) -> bool:
        """The ring is full and mrcd will wait for the client's doorbell: True if room
        appeared meanwhile (then do not wait; RingCorrupt if the client broke the
        head)."""
        c = self.c
        if c is None:
            return self.ring.block()
        r = C.mrc_shmring_tx_block(c)
        if r < 0:
            raise RingCorrupt(f"ring head is more than {c.nslots} slots behind its tail")
        return bool(r)

    def set_bell(self, fd: int) -> None:
        """The lane rings the client's doorbell on socket ``fd`` itself when a
        completion it writes finds the client asleep (-1: it leaves that to mrcd's
        delivery). The socket must outlive this (it does: :meth:`close` comes first)."""
        if self.c is not None:
            self.c.bell_fd = fd

    @property
    def bells(self) -> int:
        """Doorbells the lane rang for this ring itself."""
        return int(self.c.bells) if self.c is not None else 0

    def set_direct(self, on: bool) -> None:
        """May the receive lane write completions here itself (not while the CQ is
        moderated: those wait for their count or period)."""
        if self.c is not None:
            self.c.direct = int(on)

    def close(self) -> None:
        """Unmap (the client may keep its own mapping); nothing is written after."""
        if self.c is not None:
            self.c.base, self.c.direct, self.c.bell_fd = ffi.NULL, 0, -1
        self.ring.detach()
        with contextlib.suppress(BufferError, ValueError):
            self.map.close()


class SessionQueues:
    """mrcd's end of one client's send queue (and its CQs' rings)."""

    def __init__(self, fds: list[int], sq_slots: object) -> None:
        if len(fds) != 1:
            raise InvalidArgument("hello takes the send queue's memfd, or no fd at all")
        n = _slots(sq_slots)
        self.map = _map_queue(fds[0], n, SQ_SLOT)  # (the API server closes the fd)
        self.sq = Ring(self.map, 0, n, SQ_SLOT, "consumer")
        self.cqs: dict[int, CompletionWriter] = {}
        self.closed = False

    def take(self) -> list[WorkRequest]:
        """The work requests posted since the last call (at most :data:`TAKE_PER_PASS`),
        as their slots hold them (copied out before the slots are given back; every
        value still to be checked); RingCorrupt if the client broke the tail."""
        data, _ = self.sq.take(TAKE_PER_PASS)  # (one C call: see Ring.take)
        return list(WORK_REQUEST_SLOT.iter_unpack(data)) if data else []

    def rest(self) -> bool:
        """Tell the client mrcd will sleep (its next post rings): True if a post
        arrived meanwhile (take it first)."""
        return self.sq.sleep()

    def close(self) -> None:
        """Let go of everything (the session ended)."""
        if self.closed:
            return
        self.closed = True
        for w in self.cqs.values():
            w.close()
        self.cqs.clear()
        self.sq.detach()
        with contextlib.suppress(BufferError, ValueError):
            self.map.close()
