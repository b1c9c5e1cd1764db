"""A listening service of the socket-like API: :class:`Acceptor` keeps a QP listening and
turns each connection that arrives into a :class:`~mrcnet.api.ring.Channel`."""

from __future__ import annotations

import collections
import contextlib
from typing import Any

from mrcnet.api.errors import ApiError, SocketError
from mrcnet.api.hub import Hub
from mrcnet.api.ring import MAGIC, Channel, check_ring

__all__ = ["Acceptor"]


class Acceptor:
    """Keeps one QP listening on ``service``; each connection that arrives becomes a
    :class:`Channel` in ``ready`` and (below ``backlog``) a new QP listens at once, so a
    connect right after another finds a listener. Lock of the hub held for every call."""

    def __init__(self, hub: Hub, service: int, *, ring_size: int, backlog: int,
                 max_chunk: int, keepalive: float) -> None:
        check_ring(ring_size)
        self.hub = hub
        self.service = service
        self.ring_size = ring_size
        self.backlog = max(1, backlog)
        self.kw: dict[str, Any] = {"max_chunk": max_chunk, "keepalive": keepalive}
        self.pending: Channel | None = None
        self.ready: collections.deque[Channel] = collections.deque()
        self.closed = False
        self.error: SocketError | None = None
        hub.acquire()
        hub.acceptors.append(self)
        self.arm()

    @classmethod
    def open(cls, mrcd: str | None, service: int, *, ring_size: int, backlog: int,
             max_chunk: int, keepalive: float) -> Acceptor:
        """An acceptor on a fresh context on mrcd at ``mrcd`` (for a listener or a
        server): the context is closed again if the acceptor cannot be made."""
        hub = Hub.open(mrcd)
        with hub.cond:
            try:
                return cls(hub, service, ring_size=ring_size, backlog=backlog,
                           max_chunk=max_chunk, keepalive=keepalive)
            except BaseException:
                hub.users = 0
                hub.release()
                raise

    def arm(self) -> None:
        """Put a fresh QP on the service."""
        if self.pending is not None or self.closed:
            return
        ch = Channel.create(self.hub, self.ring_size, **self.kw)
        try:
            # The backlog: connects that arrive before the next arm() wait in mrcd.
            self.hub.call(self.hub.ctx.listen, self.service, ch.qp, expose=[ch.ring],
                          private=MAGIC, backlog=self.backlog)
        except BaseException:
            ch.destroy()
            raise
        self.pending = ch

    def check(self) -> None:
        """Called by the hub's pump: did the listening QP get connected?"""
        ch = self.pending
        if ch is None or self.closed or ch.qp.qpn not in self.hub.ctx._connected:
            return  # (the common case without accept's TimeoutError)
        try:
            peer = ch.qp.accept(timeout=0)  # never blocks: mrcd's push is queued already
        except TimeoutError:
            return
        self.pending = None
        try:
            ch.connected(peer)
        except (SocketError, ApiError):
            ch.destroy()  # not a socket peer (or no memory for it): its QP fails
        else:
            self.ready.append(ch)
        if len(self.ready) < self.backlog:
            try:
                self.arm()
            except (ApiError, SocketError) as e:
                self.error = e if isinstance(e, SocketError) else SocketError(str(e))

    def take(self) -> Channel | None:
        """An accepted connection, if any (re-arms the listen below the backlog)."""
        if not self.ready:
            return None
        ch = self.ready.popleft()
        if self.pending is None and not self.closed:
            self.arm()
        return ch

    def close(self) -> None:
        """Stop listening; connections not yet accepted are closed."""
        if self.closed:
            return
        self.closed = True
        if self in self.hub.acceptors:
            self.hub.acceptors.remove(self)
        with contextlib.suppress(ApiError, SocketError):  # connects waiting: refused now
            self.hub.call(self.hub.ctx.unlisten, self.service)
        if self.pending is not None:
            self.pending.destroy()
            self.pending = None
        while self.ready:
            ch = self.ready.popleft()
            ch.begin_close()
            ch.destroy()
        self.hub.release()
