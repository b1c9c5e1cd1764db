"""Completion queues: QPs push :class:`~mrcnet.core.events.Completion` records, the
application polls them."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from mrcnet.core.events import Completion, WCOpcode, WCStatus

#: A completion as a plain tuple: (status, wr_id, opcode, byte_len, imm, qpn), the
#: fields of :class:`~mrcnet.core.events.Completion` in order.
CompletionRow = tuple[WCStatus, int, WCOpcode, int, "int | None", int]


def _nothing(owed: int) -> None:
    """(A CQ without a ring: nobody to ring.)"""


class CompletionQueue:
    """A completion queue: QPs push, the application polls.

    A write's completion is pushed as a row (:meth:`push_row`): a tuple costs a tenth of
    a frozen dataclass to make, and mrcd, which writes completions straight into its
    clients' rings, never needs the object (:meth:`poll_rows`); :meth:`poll` makes the
    objects for those who do."""

    def __init__(self, handle: int) -> None:
        self.handle = handle
        #: The waiting completions, oldest first (Completion or CompletionRow): push
        #: and poll through the methods; ``len(cq.entries)`` is ``len(cq)`` without a
        #: call of ours (mrcd looks at every CQ in every loop pass).
        self.entries: deque[Any] = deque()
        # push and push_row are the deque's own append (no call of ours per completion:
        # a write's completion is pushed once per write); the methods below document them.
        self.push = self.entries.append  # type: ignore[method-assign,assignment]
        self.push_row = self.entries.append  # type: ignore[method-assign,assignment]
        #: mrcd's C end of the client's ring this CQ's completions go to
        #: (``struct mrc_shmring_tx *``, mrcnet/daemon/rings.py), None without one: the
        #: host's receive lane may write a receive's completion there itself
        #: (:meth:`mrcnet.core.responder.Responder.lane_imm_setup` says when), and then
        #: calls :attr:`on_ring` when the write found the client asleep.
        self.ring_out: Any = None
        #: What to do when the lane's write woke the ring's reader (its argument
        #: nonzero when the doorbell is owed still: mrcd rings it at the pass's end).
        self.on_ring: Callable[[int], Any] = _nothing

    def attach_ring(self, out: Any, on_ring: Callable[[int], Any]) -> None:
        """Completions of this CQ go to a client's ring whose C end is ``out``; ``on_ring``
        is called when the receive lane's write there woke the client (see
        :attr:`ring_out`, :attr:`on_ring`)."""
        self.ring_out, self.on_ring = out, on_ring

    def detach_ring(self) -> None:
        """No ring any more (the client or its CQ went)."""
        self.ring_out, self.on_ring = None, _nothing

    def push(self, c: Completion) -> None:
        """Add one completion."""
        self.entries.append(c)

    def push_row(self, row: CompletionRow) -> None:
        """Add one completion given as its fields, in :class:`Completion`'s order."""
        self.entries.append(row)

    def keep_rows(self, pusher: Callable[[Callable[[CompletionRow], Any]],
                                         Callable[[CompletionRow], None]]) -> None:
        """From now on :meth:`push_row` is ``pusher(append)``: a function that adds with
        ``append`` (the queue's own) only the rows it keeps. mrcd drops a write's
        successful completion there when the write was posted unsignalled
        (mrcnet/daemon/signalling.py), before it counts for moderation or wakes anyone;
        the filter is the push itself, one call per completion. :meth:`push` (what a QP's
        failure flushes) is unaffected. Once per CQ (a second call with the same
        ``pusher`` changes nothing)."""
        if getattr(self, "_keep", None) == pusher:  # (a bound method: equal, not the same)
            return
        self._keep = pusher
        self.push_row = pusher(self.entries.append)  # type: ignore[method-assign,assignment]

    def _take(self, max_entries: int) -> list[Any]:
        """Up to ``max_entries`` entries, oldest first, out of the queue (all of them,
        the common case, without a step of ours per entry)."""
        q = self.entries
        if max_entries >= len(q):
            out = list(q)
            q.clear()
            return out
        return [q.popleft() for _ in range(max_entries)]

    def poll(self, max_entries: int) -> list[Completion]:
        """Take up to ``max_entries`` completions, oldest first."""
        out = self._take(max_entries)
        return [c if type(c) is Completion else Completion(*c) for c in out]

    def poll_rows(self, max_entries: int) -> list[CompletionRow]:
        """:meth:`poll`, each completion as a :data:`CompletionRow`."""
        out = self._take(max_entries)
        if Completion not in set(map(type, out)):  # (all rows: mrcd's writes)
            return out
        return [(c.status, c.wr_id, c.opcode, c.byte_len, c.imm, c.qpn)
                if type(c) is Completion else c for c in out]

    def peek(self) -> list[Completion]:
        """Every waiting completion, oldest first, left in the queue (tests, tools)."""
        return [c if type(c) is Completion else Completion(*c) for c in self.entries]

    def __len__(self) -> int:
        return len(self.entries)

    def has_error(self) -> bool:
        """Does a waiting completion carry an error status?"""
        ok = WCStatus.SUCCESS
        return any((c.status if type(c) is Completion else c[0]) is not ok for c in self.entries)
