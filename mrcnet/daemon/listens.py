"""Which QP listens on which service, and the connects that wait for one (the backlog).

A listen is one QP for one connection (as ``accept()`` returns one socket): the first
peer that connects takes it, and the application arms the next QP. Between the two a
connect found nothing and was refused ("no QP listens"): a burst of 40-50 simultaneous
socket-API connects lost 1 to 27 that way, 63 of 64 without the library's retries. So a
listen may carry a *backlog*: while the service has one, a connect that finds no QP
armed waits (at most ``backlog`` of them, at most :data:`ACCEPT_WAIT` s each, in
arrival order) for the application's next listen on it, like a connect in the kernel's
accept queue, instead of being refused. ``unlisten`` (or the client going away) ends
the service: waiting connects are refused at once.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from typing import Any, Final

from mrcnet.api.errors import InvalidArgument
from mrcnet.daemon.apiserver import Session
from mrcnet.daemon.control import ControlError

__all__ = ["ACCEPT_WAIT", "Listen", "Listens"]

#: Seconds a connect may wait for the listener to arm a QP (the connecting mrcd waits
#: :data:`~mrcnet.daemon.control.ACCEPT_TIMEOUT` for the answer, a little longer).
ACCEPT_WAIT: Final = 8.0


@dataclass(frozen=True)
class Listen:
    """One QP armed on a service: who, which QP, the regions it exposes, private data."""

    session: Session
    qpn: int
    lkeys: list[int]
    private: Any


@dataclass
class _Queue:
    """A service with a backlog: its owner and the connects waiting for a QP."""

    owner: Session
    backlog: int
    waiting: collections.deque[asyncio.Future[Listen]] = field(
        default_factory=collections.deque)


class Listens:
    """The services of one mrcd: armed QPs and backlogs."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._armed: dict[int, Listen] = {}
        self._queues: dict[int, _Queue] = {}

    def owner(self, service: int) -> Session | None:
        """The client that holds ``service`` (armed or with a backlog), if any."""
        held = self._armed.get(service)
        if held is not None:
            return held.session
        q = self._queues.get(service)
        return q.owner if q is not None else None

    def listen(self, listen: Listen, service: int, backlog: int) -> None:
        """Arm ``listen`` on ``service``; ``backlog`` > 0 also lets that many connects
        wait for the next listen (InvalidArgument if another client holds it)."""
        s = listen.session
        held = self.owner(service)
        if held is not None and held is not s and not held.closed:
            raise InvalidArgument(f"service {service} is already listened on by another "
                                  "client")
        if backlog > 0:
            q = self._queues.get(service)
            if q is None or q.owner is not s:
                self._queues[service] = q = _Queue(s, backlog)
            q.backlog = backlog
        else:
            self._drop_queue(service, "the listener has no backlog now")
        s.listens.add(service)
        self.offer(service, listen)

    def offer(self, service: int, listen: Listen) -> None:
        """Give an armed QP to the oldest waiting connect, else keep it armed."""
        q = self._queues.get(service)
        while q is not None and q.waiting:
            fut = q.waiting.popleft()
            if not fut.done():
                fut.set_result(listen)
                return
        self._armed[service] = listen

    async def take(self, service: int) -> Listen:
        """The QP armed on ``service`` for one connect (reserved for it; give it back
        with :meth:`offer` if the exchange breaks off), waiting for the next listen if
        the service has room in its backlog (ControlError otherwise)."""
        held = self._armed.pop(service, None)
        if held is not None:
            return held
        nobody = f"no QP listens on service {service} at {self.host}"
        q = self._queues.get(service)
        if q is None or q.owner.closed:
            raise ControlError(nobody)
        if len(q.waiting) >= q.backlog:
            raise ControlError(f"{nobody} (its backlog of {q.backlog} is full)")
        fut: asyncio.Future[Listen] = asyncio.get_running_loop().create_future()
        q.waiting.append(fut)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), ACCEPT_WAIT)
        except TimeoutError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.offer(service, fut.result())  # came as time ran out: pass it on
            fut.cancel()
            raise ControlError(f"{nobody}: the listener did not arm a QP within "
                               f"{ACCEPT_WAIT:g} s") from None
        finally:
            if fut in q.waiting:
                q.waiting.remove(fut)

    def give_back(self, service: int, listen: Listen) -> None:
        """A connect that took ``listen`` broke off: the QP listens again, unless its
        client went, gave the service up, or armed another QP on it meanwhile."""
        s = listen.session
        if s.closed or service in self._armed or self.owner(service) not in (None, s):
            return
        s.listens.add(service)
        self.offer(service, listen)

    def drop_qp(self, qpn: int) -> None:
        """A QP is gone: it no longer listens (a backlog stays, for the next listen)."""
        for service, held in list(self._armed.items()):
            if held.qpn == qpn:
                del self._armed[service]

    def unlisten(self, s: Session, service: int) -> None:
        """The client stops listening on ``service``: waiting connects are refused."""
        if self.owner(service) is not s:
            return
        self._armed.pop(service, None)
        self._drop_queue(service, "the listener closed")
        s.listens.discard(service)

    def consumed(self, s: Session, service: int) -> None:
        """A connect took the service's armed QP: it stays the client's only while the
        service has a backlog."""
        if service not in self._queues and service not in self._armed:
            s.listens.discard(service)

    def drop_session(self, s: Session) -> None:
        """The client went away: every service it held ends."""
        for service in list(s.listens):
            self.unlisten(s, service)
        s.listens.clear()

    def _drop_queue(self, service: int, why: str) -> None:
        q = self._queues.pop(service, None)
        if q is None:
            return
        while q.waiting:
            fut = q.waiting.popleft()
            if not fut.done():
                fut.set_exception(ControlError(f"no QP listens on service {service} at "
                                               f"{self.host}: {why}"))
