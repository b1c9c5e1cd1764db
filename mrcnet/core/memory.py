"""Memory regions: registration, virtual addresses, and the responder's rkey/bounds check.

Addresses are virtual: the host hands out non-overlapping ranges (page aligned) in a
64-bit space, so a remote address names (region, offset) without exposing Python object
identities. Keys are derived from a per-host counter and a salt, so a stale or guessed key
from another host is unlikely to match.
"""

from __future__ import annotations

import mmap
import zlib
from dataclasses import dataclass, field

from mrcnet.core.config import Access

_VA_BASE = 0x10_0000_0000  # first virtual address handed out
_VA_ALIGN = 4096
_KEY_MASK = 0xFFFFFFFF

Buffer = bytearray | memoryview | mmap.mmap


@dataclass(slots=True, eq=False)
class MemoryRegion:
    """A registered buffer: ``addr`` .. ``addr + length`` in this host's address space."""

    addr: int
    length: int
    lkey: int
    rkey: int
    access: Access
    view: memoryview = field(repr=False)
    remote_write: bool = field(default=False, repr=False)  # access flag, precomputed

    def __post_init__(self) -> None:
        self.remote_write = bool(self.access & Access.REMOTE_WRITE)


class MemoryTable:
    """All memory regions of one host, found by rkey (responder) or by identity."""

    def __init__(self, salt: str) -> None:
        self._salt = zlib.crc32(salt.encode()) & 0xFFFFFF
        self._next_va = _VA_BASE
        self._next_index = 1
        self._by_rkey: dict[int, MemoryRegion] = {}
        #: Bumped by every deregistration (the receive lane forgets its regions then).
        self.generation = 0

    def register(self, buffer: Buffer, access: Access) -> MemoryRegion:
        """Register ``buffer`` (writable) and give it an address range and keys."""
        view = memoryview(buffer)
        if view.readonly:
            raise ValueError("a memory region needs a writable buffer (bytearray, mmap)")
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        idx = self._next_index
        self._next_index += 1
        # Key = index in the low byte-and-up, salted: unique per host, unlikely across hosts.
        rkey = ((idx << 8) ^ (self._salt << 8) ^ (idx * 0x9E37)) & _KEY_MASK
        while rkey in self._by_rkey or rkey == 0:
            rkey = (rkey + 0x101) & _KEY_MASK
        mr = MemoryRegion(self._next_va, len(view), rkey ^ 0x5A5A5A5A, rkey, access, view)
        self._next_va += (len(view) + _VA_ALIGN) // _VA_ALIGN * _VA_ALIGN + _VA_ALIGN
        self._by_rkey[rkey] = mr
        return mr

    def deregister(self, mr: MemoryRegion) -> None:
        """Forget ``mr``: later packets with its rkey are refused."""
        self._by_rkey.pop(mr.rkey, None)
        self.generation += 1

    def lookup(self, rkey: int) -> MemoryRegion | None:
        """The region with this rkey, if any."""
        return self._by_rkey.get(rkey)

    def target(self, rkey: int, va: int, length: int) -> tuple[MemoryRegion, int] | str:
        """Check a remote write: (region, offset) or the reason it is refused."""
        mr = self._by_rkey.get(rkey)
        if mr is None:
            return "bad_rkey"
        if not mr.remote_write:
            return "no_remote_write"
        off = va - mr.addr
        if off < 0 or off + length > mr.length:
            return "out_of_bounds"
        return mr, off
