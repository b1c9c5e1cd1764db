"""A single-producer single-consumer ring of fixed-size slots in memory shared by a client
and mrcd (a sealed memfd both map), with the doorbell handshake that says when the other
side must be woken. The client's work requests and mrcd's completions travel in such rings
(:mod:`mrcnet.api.shmqueues`); the Unix socket only carries control.

Layout, from the ring's offset in its mapping (each word 64 bits, on its own cache line)::

    +0    head      consumer's index: slots taken (written by the consumer only)
    +64   tail      producer's index: slots published (written by the producer only)
    +128  asleep    1: the consumer will sleep until its doorbell rings
    +192  blocked   1: the producer waits for room
    +256  slots     ``nslots`` (a power of two) slots of ``slot_size`` bytes

Indices run freely (64 bits); slot ``i`` is at ``i & (nslots - 1)``. Each side keeps its
own index privately and only *reads* the other's from shared memory, so a side never
trusts the shared copy of what it wrote: mrcd checks every index it reads from a client
(``tail - head`` beyond ``nslots`` is :class:`RingCorrupt`) and decodes every slot once,
into values it then validates.

Ordering: a producer writes a slot, then publishes the tail with release ordering; the
consumer loads the tail with acquire ordering, then reads the slots. Doorbells: the
producer publishes, fences, then loads ``asleep``; a consumer about to sleep stores
``asleep = 1``, fences, then loads the tail again. With a full fence on both sides one of
them sees the other (no lost wake-up), and a producer rings only a consumer that sleeps:
many posts per doorbell. The ``blocked`` word is the same handshake the other way round
(a producer waiting for room; the consumer rings it after taking slots). The loads,
stores and fence are C (``_csrc/shmring.c``). Python can neither fence nor store an
index in one piece: ``struct`` moved 8 bytes in parts (measured: 8,568 of 2 million
reads of a counter another process wrote with "<Q" went backwards, 2 with "Q"), and a
torn tail reads as a corrupt ring. So without the C module :data:`PRECISE` is False
and the client library and mrcd do not use the shared queues at all (posts and
completions go as JSON on the socket); the Python paths here serve the unit tests.
"""

from __future__ import annotations

import mmap
import struct
from typing import Any, Final

from mrcnet.native import HAVE_C, C, ffi

__all__ = ["HEADER", "PRECISE", "Ring", "RingCorrupt", "ring_bytes"]

OFF_HEAD: Final = 0
OFF_TAIL: Final = 64
OFF_ASLEEP: Final = 128
OFF_BLOCKED: Final = 192
#: Bytes of a ring's header (its slots start here).
HEADER: Final = 256
#: Whether the rings may be used between processes (the C module's atomic indices and
#: fence): without it the library and mrcd keep posts and completions on the socket.
PRECISE: Final = HAVE_C

#: Native (not "<Q"): CPython packs a native integer with one memcpy, an aligned 8-byte
#: store, where the standard sizes go byte by byte, and a reader could see half of a
#: new index (found by the full-ring test without C: a torn tail read as corrupt).
_U64 = struct.Struct("Q")


class RingCorrupt(ValueError):
    """The other side wrote an index no well-behaved peer writes."""


def ring_bytes(nslots: int, slot_size: int) -> int:
    """Bytes a ring of ``nslots`` slots of ``slot_size`` bytes takes."""
    return HEADER + nslots * slot_size


class Ring:
    """One side's view of a ring at ``offset`` of the mapping ``mm``.

    ``role`` is ``"producer"`` or ``"consumer"``: the index this side owns is kept here
    (starting at 0: the kernel zeroes a new memfd) and only ever written.
    ``once``: a producer's ring clears ``asleep`` when it rings (one doorbell per sleep:
    for a consumer that re-arms before every sleep); else it rings after every publish
    while ``asleep`` is set (for a consumer that stays armed, see
    :mod:`mrcnet.api.shmclient`).
    """

    def __init__(self, mm: mmap.mmap, offset: int, nslots: int, slot_size: int,
                 role: str, *, once: bool = True) -> None:
        if nslots <= 0 or nslots & (nslots - 1):
            raise ValueError(f"a ring needs a power-of-two number of slots, got {nslots}")
        if offset % 64 or offset + ring_bytes(nslots, slot_size) > len(mm):
            raise ValueError(f"a ring of {nslots} x {slot_size} bytes does not fit at "
                             f"{offset} of a {len(mm)}-byte mapping")
        self.mm = mm
        self.base = offset
        self.nslots = nslots
        self.mask = nslots - 1
        self.slot_size = slot_size
        self.slots = offset + HEADER
        self._ptr: Any = ffi.from_buffer(mm) if HAVE_C else None
        self._out: bytearray | None = None  # (take's buffer for the C copy, and its view)
        self._out_ptr: Any = None
        self.producer = role == "producer"
        self.once = once
        # Both start at 0: a new ring's memory is zeroed by the kernel.
        self.head = 0  # consumer: slots taken
        self.tail = 0  # producer: slots published

    def detach(self) -> None:
        """Let go of the mapping (before it is closed: the C view pins it)."""
        if self._ptr is not None:
            ffi.release(self._ptr)
            self._ptr = None

    # -- words --
    def load(self, off: int) -> int:
        """The header word at ``off`` (acquire)."""
        if self._ptr is not None:
            return int(C.mrc_shmring_load(self._ptr, self.base + off))
        return int(_U64.unpack_from(self.mm, self.base + off)[0])

    def store(self, off: int, value: int) -> None:
        """Set the header word at ``off`` (release)."""
        if self._ptr is not None:
            C.mrc_shmring_store(self._ptr, self.base + off, value)
        else:
            _U64.pack_into(self.mm, self.base + off, value)

    def store_load(self, store_off: int, value: int, load_off: int) -> int:
        """Store, full fence, load: one half of a doorbell handshake."""
        if self._ptr is not None:
            return int(C.mrc_shmring_store_load(self._ptr, self.base + store_off, value,
                                                self.base + load_off))
        _U64.pack_into(self.mm, self.base + store_off, value)
        return int(_U64.unpack_from(self.mm, self.base + load_off)[0])

    def offset_of(self, index: int) -> int:
        """Byte offset in the mapping of the slot of ``index``."""
        return self.slots + (index & self.mask) * self.slot_size

    def spans(self, index: int, count: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """The byte ranges in the mapping of ``count`` slots from ``index``: up to the
        ring's end, then (across the wrap) from its start; the second is empty when
        they do not wrap. For reading or writing many slots with one copy each."""
        first = min(count, self.nslots - (index & self.mask))
        a = self.offset_of(index)
        return ((a, a + first * self.slot_size),
                (self.slots, self.slots + (count - first) * self.slot_size))

    def read(self, index: int, count: int) -> bytes:
        """A copy of ``count`` slots from ``index``, end to end."""
        i = index & self.mask
        if i + count <= self.nslots:  # (no wrap, the common case: one slice)
            a = self.slots + i * self.slot_size
            return self.mm[a:a + count * self.slot_size]
        (a, b), (c, d) = self.spans(index, count)
        return self.mm[a:b] + self.mm[c:d]

    def write(self, index: int, data: bytes) -> None:
        """Write ``data`` (whole slots, end to end) into the slots from ``index``."""
        size = self.slot_size
        i = index & self.mask
        if i + len(data) // size <= self.nslots:  # (no wrap: one copy)
            a = self.slots + i * size
            self.mm[a:a + len(data)] = data
            return
        (a, b), (c, d) = self.spans(index, len(data) // size)
        self.mm[a:b] = data[:b - a]
        self.mm[c:d] = data[b - a:]

    # -- producer --
    def room(self) -> int:
        """Slots free for the producer now (:class:`RingCorrupt` on a bad head)."""
        used = (self.tail - self.load(OFF_HEAD)) & 0xFFFF_FFFF_FFFF_FFFF
        if used > self.nslots:
            raise RingCorrupt(f"ring head is {used} slots behind its tail "
                              f"({self.nslots} slots)")
        return self.nslots - used

    def publish(self, count: int = 1) -> bool:
        """Make ``count`` more written slots visible; True when the consumer sleeps and
        its doorbell must be rung (with ``once``, the flag is then cleared)."""
        self.tail += count
        ptr = self._ptr
        if ptr is None:  # (not PRECISE, or detached: then the Python path's words)
            if not PRECISE:
                self.store(OFF_TAIL, self.tail)
                return True
            asleep = self.store_load(OFF_TAIL, self.tail, OFF_ASLEEP)
        else:  # (store_load's C call, without a call of ours: once per publish)
            base = self.base
            asleep = C.mrc_shmring_store_load(ptr, base + OFF_TAIL, self.tail,
                                              base + OFF_ASLEEP)
        if asleep:
            if self.once:
                if ptr is not None:  # (store's C call without a call of ours)
                    C.mrc_shmring_store(ptr, self.base + OFF_ASLEEP, 0)
                else:
                    self.store(OFF_ASLEEP, 0)
            return True
        return False

    def put(self, data: bytes) -> tuple[int, bool]:
        """The producer's whole put: as many of ``data``'s slots (whole slots, end to
        end) as there is room for, written and published; returns how many, and True
        when the consumer sleeps and must be rung (:class:`RingCorrupt` on a bad head).
        One C call (``mrc_shmring_put``) when the mapping is C's; else this twin, the
        same room, write and publish in Python."""
        count = len(data) // self.slot_size
        ptr = self._ptr
        if ptr is not None:
            r = C.mrc_shmring_put(ptr, self.base, self.nslots, self.slot_size, self.tail,
                                  data, count, self.once)
            if r < 0:
                raise RingCorrupt(f"ring head is more than {self.nslots} slots behind "
                                  f"its tail ({self.nslots} slots)")
            n = r >> 1
            self.tail += n
            return n, bool(r & 1)
        n = min(self.room(), count)
        self.write(self.tail, data[:n * self.slot_size])
        return n, self.publish(n)

    def block(self) -> bool:
        """The producer found no room and will wait for the consumer's doorbell: True if
        room appeared meanwhile (then do not wait)."""
        self.store_load(OFF_BLOCKED, 1, OFF_HEAD)
        return self.room() > 0

    # -- consumer --
    def ready(self) -> int:
        """Slots published and not yet taken (:class:`RingCorrupt` on a bad tail)."""
        n = (self.load(OFF_TAIL) - self.head) & 0xFFFF_FFFF_FFFF_FFFF
        if n > self.nslots:
            raise RingCorrupt(f"ring tail is {n} slots ahead of its head "
                              f"({self.nslots} slots)")
        return n

    def release(self, count: int) -> bool:
        """Give ``count`` taken slots back; True when the producer waits for room and
        must be rung."""
        self.head += count
        if self.store_load(OFF_HEAD, self.head, OFF_BLOCKED):
            self.store(OFF_BLOCKED, 0)
            return True
        return False

    def take(self, most: int) -> tuple[bytes | bytearray, bool]:
        """The consumer's whole take: a copy of up to ``most`` published slots (end to
        end; empty if none), given back at once; and True when the producer waits for
        room and must be rung (:class:`RingCorrupt` on a bad tail). One C call
        (``mrc_shmring_take``) when the mapping is C's; else this twin, the same ready,
        read and release in Python."""
        ptr = self._ptr
        if ptr is not None:
            size = self.slot_size
            want = min(most, self.nslots) * size
            if self._out is None or len(self._out) < want:
                self._out = bytearray(want)
                self._out_ptr = ffi.from_buffer(self._out)
            r = C.mrc_shmring_take(ptr, self.base, self.nslots, size, self.head,
                                   most, self._out_ptr)
            if r < 0:
                raise RingCorrupt(f"ring tail is more than {self.nslots} slots ahead of "
                                  f"its head ({self.nslots} slots)")
            n = r >> 1
            self.head += n
            return self._out[:n * size], bool(r & 1)  # (a copy: the buffer is reused)
        n = min(self.ready(), most)
        if not n:
            return b"", False
        data = self.read(self.head, n)
        return data, self.release(n)

    def sleep(self) -> bool:
        """The consumer is about to sleep on its doorbell: True if slots were published
        meanwhile (then do not sleep)."""
        ptr = self._ptr
        tail: int
        if ptr is not None:  # (store_load's C call without a call of ours: every sleep)
            base = self.base
            tail = C.mrc_shmring_store_load(ptr, base + OFF_ASLEEP, 1, base + OFF_TAIL)
        else:
            tail = self.store_load(OFF_ASLEEP, 1, OFF_TAIL)
        n = (tail - self.head) & 0xFFFF_FFFF_FFFF_FFFF
        if n > self.nslots:  # (the tail loaded after the fence: as ready() checks it)
            raise RingCorrupt(f"ring tail is {n} slots ahead of its head "
                              f"({self.nslots} slots)")
        return n > 0

    def wake(self) -> None:
        """The consumer is awake (busy-polling, or looking at the ring): producers need
        not ring."""
        ptr = self._ptr
        if ptr is not None:  # (store's C call without a call of ours: every look)
            C.mrc_shmring_store(ptr, self.base + OFF_ASLEEP, 0)
        elif PRECISE:
            self.store(OFF_ASLEEP, 0)
