"""The collectives, written once against :class:`~mrcnet.coll.transport.Transport`.

- ``allreduce``: ring all-reduce = reduce-scatter then all-gather, float32 sum. Each
  rank sends ``2(n-1)`` chunks of ``size/n`` bytes to its right neighbour, each in
  slices of about 64 KiB; a slice's arrival (its tag) is the signal to reduce it and
  send it on, so the ring is a pipeline.
- ``allgather``: ring all-gather; ``size`` is the output, each rank gives ``size/n``.
- ``alltoall``: pairwise exchange; at step ``s`` rank ``r`` sends its block for rank
  ``r+s`` and receives the one from ``r-s``; ``size`` bytes per rank in ``n`` blocks.

Messages land in inbox slots that are distinct per step and doubled by the iteration's
parity: a neighbour running one iteration ahead (it cannot run two: the ring's chain of
dependencies passes through this rank) never overwrites a chunk not yet consumed.
Every iteration's output is checked against :mod:`mrcnet.coll.patterns`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mrcnet.coll.errors import CollError
from mrcnet.coll.patterns import allreduce_expected, allreduce_input, block_pattern, check
from mrcnet.coll.transport import BARRIER_TAG, TAG_MASK, Transport

__all__ = ["OPS", "Layout", "barrier", "bus_factor", "layout", "prepare", "run_iteration",
           "verify"]

#: The collectives.
OPS = ("allreduce", "allgather", "alltoall")


def bus_factor(op: str, world: int) -> float:
    """nccl-tests' busbw / algbw: all-reduce 2(n-1)/n, all-gather and all-to-all (n-1)/n."""
    if op == "allreduce":
        return 2 * (world - 1) / world
    return (world - 1) / world


@dataclass(frozen=True)
class Layout:
    """Buffer sizes and chunking of one collective at one size."""

    op: str
    size: int  #: the nccl-tests size (bytes)
    world: int
    bounds: tuple[int, ...]  #: chunk i is [bounds[i], bounds[i+1]) (bytes) of ``data``
    slot: int  #: bytes per inbox slot
    slots: int  #: inbox slots per iteration parity

    @property
    def data_bytes(self) -> int:
        """Bytes of ``data`` the collective uses."""
        return self.bounds[-1]

    @property
    def inbox_bytes(self) -> int:
        """Bytes of inbox the collective uses (both parities)."""
        return 2 * self.slots * self.slot

    def chunk(self, i: int) -> tuple[int, int]:
        """(offset, length) of chunk ``i``."""
        return self.bounds[i], self.bounds[i + 1] - self.bounds[i]

    def slot_at(self, iteration: int, j: int) -> int:
        """Inbox offset of slot ``j`` for ``iteration``."""
        return ((iteration & 1) * self.slots + j) * self.slot


def layout(op: str, size: int, world: int) -> Layout:
    """The layout of ``op`` at ``size`` bytes over ``world`` ranks (a clear error for a
    size the collective cannot split)."""
    if op not in OPS:
        raise CollError(f"unknown collective {op!r}: use {', '.join(OPS)}")
    if world < 2:
        raise CollError("a collective needs at least 2 ranks")
    if op == "allreduce":
        if size % 4 or size < 4 * world:
            raise CollError(f"all-reduce size {size} must be a multiple of 4 bytes (float32)"
                            f" and at least {4 * world} (one float per rank)")
        count = size // 4
        bounds = tuple(4 * (i * count // world) for i in range(world + 1))
        slot = max(b - a for a, b in itertools.pairwise(bounds))
        return Layout(op, size, world, bounds, slot, 2 * (world - 1))
    block = size // world
    if block < 1:
        raise CollError(f"{op} size {size} is smaller than one byte per rank ({world} ranks)")
    bounds = tuple(i * block for i in range(world + 1))
    return Layout(op, size, world, bounds, block, world - 1 if op == "allgather" else world)


def _tag(iteration: int, step: int, part: int = 0) -> int:
    """Iteration (7 bits), step (13), slice (4): unique among the messages a rank can
    have in flight (its neighbours are at most one iteration apart)."""
    return ((iteration & 0x7F) << 17 | step << 4 | part) & TAG_MASK


def _f32(buf: memoryview, off: int, length: int) -> np.ndarray:  # type: ignore[type-arg]
    return np.frombuffer(buf, dtype=np.float32, count=length // 4, offset=off)


def _u8(buf: memoryview, off: int, length: int) -> np.ndarray:  # type: ignore[type-arg]
    return np.frombuffer(buf, dtype=np.uint8, count=length, offset=off)


def prepare(t: Transport, lay: Layout, iteration: int) -> None:
    """Write this rank's known input for ``iteration`` into ``data`` (untimed)."""
    r, n, v = t.rank, t.world, iteration & 1
    if lay.op == "allreduce":
        _f32(t.data, 0, lay.data_bytes)[:] = allreduce_input(r, v, lay.data_bytes // 4)
    elif lay.op == "allgather":
        off, ln = lay.chunk(r)
        _u8(t.data, off, ln)[:] = block_pattern(r, -1, v, ln)
    else:
        for d in range(n):
            off, ln = lay.chunk(d)
            _u8(t.data, off, ln)[:] = block_pattern(r, d, v, ln)


def verify(t: Transport, lay: Layout, iteration: int) -> None:
    """Check this rank's output for ``iteration``; :class:`VerifyFailed` if a byte is off."""
    r, n, v = t.rank, t.world, iteration & 1
    what = f"{lay.op} iteration {iteration} on rank {r} ({t.names[r]})"
    if lay.op == "allreduce":
        check(_f32(t.data, 0, lay.data_bytes),
              allreduce_expected(n, v, lay.data_bytes // 4), what)
    elif lay.op == "allgather":
        for c in range(n):
            off, ln = lay.chunk(c)
            check(_u8(t.data, off, ln), block_pattern(c, -1, v, ln),
                  f"{what}, the chunk of rank {c}")
    else:
        for src in range(n):
            if src == r:
                continue
            _, ln = lay.chunk(r)
            check(_u8(t.inbox, lay.slot_at(iteration, src), ln),
                  block_pattern(src, r, v, ln), f"{what}, the block from rank {src}")


#: Slices per chunk aim at this many bytes: the ring forwards a slice as soon as it
#: arrived, so the links stay busy across steps (a pipeline, as NCCL's slices).
SLICE_BYTES = 64 << 10
MAX_SLICES = 16


def _slices(length: int, count: int) -> list[tuple[int, int]]:
    """``count`` (start, end) ranges covering [0, length), cut at 4-byte boundaries."""
    q = length // 4
    cuts = [4 * (i * q // count) for i in range(count)] + [length]
    return list(itertools.pairwise(cuts))


def _ring(t: Transport, lay: Layout, k: int, first: int,
          plan: list[tuple[int, bool]]) -> None:
    """The ring pipeline: step 0 sends chunk ``first`` to the right; at step s chunk
    ``plan[s][0]`` comes in from the left, is reduced into ``data`` (float32 sum) or
    copied there (``plan[s][1]``), and each of its slices goes on to the right as step
    s+1 as soon as it is in."""
    n = t.world
    left, right = (t.rank - 1) % n, (t.rank + 1) % n
    count = max(1, min(MAX_SLICES, lay.slot // SLICE_BYTES))
    sent_by: dict[int, int] = {}  # chunk -> the last send that reads it

    def send(step: int, chunk: int, a: int, b: int, j: int) -> None:
        off = lay.chunk(chunk)[0]
        sent_by[chunk] = t.send(right, off + a, b - a, lay.slot_at(k, step) + a,
                                _tag(k, step, j))

    for j, (a, b) in enumerate(_slices(lay.chunk(first)[1], count)):
        send(0, first, a, b, j)
    for s, (chunk, reduce) in enumerate(plan):
        off, ln = lay.chunk(chunk)
        slot = lay.slot_at(k, s)
        if not reduce and chunk in sent_by:
            t.wait_sent(sent_by[chunk])  # a send may still read what this overwrites
        for j, (a, b) in enumerate(_slices(ln, count)):
            t.wait_tag(left, _tag(k, s, j))
            if reduce:
                _f32(t.data, off + a, b - a)[:] += _f32(t.inbox, slot + a, b - a)
            else:
                t.data[off + a:off + b] = t.inbox[slot + a:slot + b]
            if s + 1 < len(plan):
                send(s + 1, chunk, a, b, j)
    t.wait_sent()


def _allreduce(t: Transport, lay: Layout, k: int) -> None:
    r, n = t.rank, t.world
    # Reduce-scatter (chunk r-s-1 comes in at step s and is summed), then all-gather
    # (the reduced chunk r-s comes in at step n-1+s and is copied).
    plan = [((r - s - 1) % n, True) for s in range(n - 1)]
    plan += [((r - s) % n, False) for s in range(n - 1)]
    _ring(t, lay, k, r, plan)


def _allgather(t: Transport, lay: Layout, k: int) -> None:
    r, n = t.rank, t.world
    _ring(t, lay, k, r, [((r - s - 1) % n, False) for s in range(n - 1)])


def _alltoall(t: Transport, lay: Layout, k: int) -> None:
    r, n = t.rank, t.world
    for s in range(1, n):
        to, frm = (r + s) % n, (r - s) % n
        off, ln = lay.chunk(to)
        t.send(to, off, ln, lay.slot_at(k, r), _tag(k, s))
        t.wait_tag(frm, _tag(k, s))
    t.wait_sent()


_RUN: dict[str, Callable[[Transport, Layout, int], None]] = {
    "allreduce": _allreduce, "allgather": _allgather, "alltoall": _alltoall}


def run_iteration(t: Transport, lay: Layout, iteration: int) -> None:
    """One collective (the timed part): ``data`` holds the input before, the output after
    (all-to-all: the inbox slots of ``iteration`` hold the blocks received)."""
    _RUN[lay.op](t, lay, iteration)


def barrier(t: Transport, round_: int) -> None:
    """Every rank has arrived: a token goes twice around the ring (arrive, release)."""
    n, r = t.world, t.rank
    left, right = (t.rank - 1) % n, (t.rank + 1) % n
    for lap in range(2):
        tag = BARRIER_TAG | ((round_ & 0xFFF) << 1 | lap)
        if r == 0:
            t.send(right, 0, 0, 0, tag)
            t.wait_tag(left, tag)
        else:
            t.wait_tag(left, tag)
            t.send(right, 0, 0, 0, tag)
    t.wait_sent()
