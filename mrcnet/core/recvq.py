"""A QP's posted receives: the wr_ids of the receives posted and not yet completed,
oldest first.

A write-with-immediate completes the oldest posted receive. In mrcd the host's C receive
lane takes that wr_id itself when it writes the completion straight into the client's
ring (mrcnet/_csrc/rxlane.h ``imm_cq``, docs/C-PASS.md), so the queue lives in C there
(:class:`CRecvQueue`, mrcnet/_csrc/recvq.c); without the C module it is a plain deque
(:class:`RecvQueue`). Both are deques to their users: ``append``, ``popleft``,
``clear``, ``len``, truth and iteration.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from mrcnet.native import HAVE_C, NOT_BUILT, C, ffi

__all__ = ["WR_ID_MAX", "CRecvQueue", "RecvQueue", "new_recvq"]

#: A wr_id is verbs' ``uint64_t``.
WR_ID_MAX = (1 << 64) - 1


class RecvQueue(deque[int]):
    """The Python twin: a deque of wr_ids."""


class CRecvQueue:
    """The posted receives in C (``struct mrc_recvq``), for the receive lane to take."""

    __slots__ = ("c",)

    def __init__(self) -> None:
        if not HAVE_C:
            raise RuntimeError(NOT_BUILT)
        q = C.mrc_recvq_new()
        if q == ffi.NULL:
            raise MemoryError("no memory for a queue of posted receives")
        #: The C queue (``struct mrc_recvq *``), freed with this object.
        self.c: Any = ffi.gc(q, C.mrc_recvq_free)

    def append(self, wr_id: int) -> None:
        """Post ``wr_id`` (0 to :data:`WR_ID_MAX`, which the host checks:
        :meth:`mrcnet.core.host.Host.post_recv`)."""
        if C.mrc_recvq_push(self.c, wr_id):
            raise MemoryError("no memory for another posted receive")

    def popleft(self) -> int:
        """Take the oldest wr_id out (IndexError when empty, as a deque's)."""
        if not self.c.n:
            raise IndexError("pop from an empty queue of posted receives")
        return int(C.mrc_recvq_pop(self.c))

    def clear(self) -> None:
        """Drop every posted receive."""
        c = self.c
        c.head = c.n = 0

    def __len__(self) -> int:
        return int(self.c.n)

    def __bool__(self) -> bool:
        return bool(self.c.n)

    def __iter__(self) -> Iterator[int]:
        c = self.c
        return (int(C.mrc_recvq_at(c, i)) for i in range(c.n))

    def __repr__(self) -> str:
        return f"CRecvQueue({list(self)})"


def new_recvq(use_c: bool) -> RecvQueue | CRecvQueue:
    """A QP's queue of posted receives: in C when asked for and built (the host's lane is
    C's, ``HostConfig.fast_parse``), else the deque."""
    return CRecvQueue() if use_c and HAVE_C else RecvQueue()
