"""Completion queues: QPs push :class:`~mrcnet.core.events.Completion` records, the
application polls them."""

from __future__ import annotations

from collections import deque

from mrcnet.core.events import Completion, WCStatus


class CompletionQueue:
    """A completion queue: QPs push, the application polls."""

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self._q: deque[Completion] = deque()

    def push(self, c: Completion) -> None:
        """Add one completion."""
        self._q.append(c)

    def poll(self, max_entries: int) -> list[Completion]:
        """Take up to ``max_entries`` completions, oldest first."""
        q = self._q
        n = min(max_entries, len(q))
        return [q.popleft() for _ in range(n)]

    def __len__(self) -> int:
        return len(self._q)

    def has_error(self) -> bool:
        """Does a waiting completion carry an error status?"""
        return any(c.status is not WCStatus.SUCCESS for c in self._q)
