"""The bytes mrc-perf writes and checks, and how far they reach (:mod:`mrcnet.perf`).

The client fills its region with a pattern drawn from a seed that travels in the
connection's private data; after each size one more write carries, as its immediate,
how far the pattern reaches, and the server checks that prefix of its region. Both work
a block at a time, so a region of any size the machine can map needs neither its
pattern whole in memory nor all of its pages touched.

Checking costs next to nothing: the blocks are made once and kept (a few, the last
used), and a block of the region is compared as one ``memcmp`` (``bytes ==``: 0.14 ms per
MiB here, where comparing the ``memoryview`` itself went byte by byte, 12 ms).
"""

from __future__ import annotations

import functools
import random
from typing import Final

__all__ = ["PATTERN_BLOCK", "PREFIX_KIB", "fill_pattern", "pattern_block",
           "pattern_matches", "prefix_imm", "prefix_of"]

#: The pattern is made and checked this much at a time.
PATTERN_BLOCK: Final = 1 << 20
#: A size's last write (client -> server, bit 31 clear) carries how far the pattern
#: reaches: bytes, or with this bit KiB (regions of 1 GiB and more).
PREFIX_KIB: Final = 0x40000000


@functools.lru_cache(maxsize=8)
def pattern_block(seed: int, index: int) -> bytes:
    """Block ``index`` (:data:`PATTERN_BLOCK` bytes) of the bytes the client writes and
    the server checks: pseudo-random from ``seed`` (sent in the connection's private
    data) and the block's index, so no two blocks repeat. Made a block at a time: a
    region of any size never needs its pattern whole in memory (one call for 256 MiB
    or more overflowed ``randbytes``)."""
    return random.Random((seed << 40) | index).randbytes(PATTERN_BLOCK)


def fill_pattern(buf: memoryview, seed: int, start: int, end: int) -> None:
    """Write the pattern into ``buf[start:end]`` (``start`` a multiple of the block)."""
    for index in range(start // PATTERN_BLOCK, -(-end // PATTERN_BLOCK)):
        lo = index * PATTERN_BLOCK
        hi = min(lo + PATTERN_BLOCK, end)
        buf[lo:hi] = pattern_block(seed, index)[:hi - lo]


def pattern_matches(buf: memoryview, seed: int, n: int) -> bool:
    """Whether ``buf[:n]`` holds the pattern (compared a block at a time)."""
    for index in range(-(-n // PATTERN_BLOCK)):
        lo = index * PATTERN_BLOCK
        hi = min(lo + PATTERN_BLOCK, n)
        want = pattern_block(seed, index)
        if buf[lo:hi].tobytes() != (want if hi - lo == PATTERN_BLOCK else want[:hi - lo]):
            return False
    return True


def prefix_imm(n: int) -> int:
    """The immediate saying "the pattern reaches ``n`` bytes" (a size's last write): the
    byte count below 1 GiB, else :data:`PREFIX_KIB` | KiB (rounded down: the last part
    KiB is not checked; up to 1 TiB)."""
    return n if n < PREFIX_KIB else PREFIX_KIB | min(n >> 10, PREFIX_KIB - 1)


def prefix_of(imm: int) -> int:
    """The byte count :func:`prefix_imm` encoded."""
    return (imm & ~PREFIX_KIB) << 10 if imm & PREFIX_KIB else imm
