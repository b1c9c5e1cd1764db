"""Known per-rank inputs and the exact outputs they must give.

Every value is small and integral, so a float32 sum over up to 4096 ranks is exact in
any order: a result is checked with ``array_equal``, and one wrong byte fails the run.
The iteration's parity is mixed in, so a stale buffer from the previous iteration fails
too; the arrays are cached (two per size), so the checks between timed steps cost a copy
and a compare, not a recomputation.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from mrcnet.coll.errors import VerifyFailed

__all__ = ["allreduce_expected", "allreduce_input", "block_pattern", "check"]

_MOD = 251  # values 0..250: 4096 ranks sum to at most 1,028,096 < 2**24 (exact float32)


def _frozen(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    a.setflags(write=False)  # cached: shared by every caller
    return a


def _index(count: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    return np.arange(count, dtype=np.int64)


@lru_cache(maxsize=16)
def allreduce_input(rank: int, iteration: int, count: int) -> np.ndarray[Any, Any]:
    """Rank ``rank``'s all-reduce input of ``count`` float32 at ``iteration``."""
    return _frozen(((_index(count) * 31 + rank * 17 + iteration * 5) % _MOD).astype(np.float32))


@lru_cache(maxsize=16)
def allreduce_expected(world: int, iteration: int, count: int) -> np.ndarray[Any, Any]:
    """The sum of every rank's input (float32, exact)."""
    base = _index(count) * 31 + iteration * 5
    total = np.zeros(count, dtype=np.int64)
    for r in range(world):
        total += (base + r * 17) % _MOD
    return _frozen(total.astype(np.float32))


@lru_cache(maxsize=16)
def block_pattern(src: int, dst: int, iteration: int, length: int) -> np.ndarray[Any, Any]:
    """The bytes rank ``src`` contributes for rank ``dst`` (all-gather: ``dst`` = -1,
    the same block for everyone) at ``iteration``."""
    return _frozen(((_index(length) * 7 + src * 13 + (dst + 1) * 29 + iteration * 3 + 1)
                    % 256).astype(np.uint8))


def check(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any], what: str) -> None:
    """Raise :class:`VerifyFailed` naming the first differing element."""
    if np.array_equal(got, want):
        return
    bad = np.flatnonzero(got != want)
    i = int(bad[0])
    raise VerifyFailed(f"{what}: {bad.size} of {want.size} elements wrong, the first at "
                       f"index {i}: got {got[i]!r}, expected {want[i]!r}")
