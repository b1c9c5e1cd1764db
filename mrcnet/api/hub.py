"""The multiplexer of the socket-like API: one mrcd :class:`~mrcnet.api.Context` and its
CQ shared by every connection (:class:`~mrcnet.api.ring.Channel`) and listener
(:class:`~mrcnet.api.acceptor.Acceptor`) on it.

Completions and QP errors are routed by QP number. Threads: everything sharing one
context (a listener and the connections it accepted) goes through one :class:`Hub` and
its lock; one waiter at a time waits on the context's socket, the others on a condition
(leader/follower). An asyncio loop waits with one reader on the socket that wakes every
waiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import select
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from mrcnet.api.client import CompletionQueue, Context, WorkCompletion, default_socket_path
from mrcnet.api.errors import (
    AccessDenied,
    ApiError,
    DaemonNotRunning,
    MrcdAccessDenied,
    MrcdNotRunning,
    SocketError,
)
from mrcnet.core.events import QPError

__all__ = ["Hub", "Route", "Watcher"]

T = TypeVar("T")


class Route(Protocol):
    """Where the hub sends one QP's completions and failure (a connection)."""

    def on_wc(self, wc: WorkCompletion) -> None:
        """A completion of the QP."""

    def fail(self, reason: str, *, status: bool = False,
             error: SocketError | None = None) -> None:
        """The QP failed (``reason``), or the whole context did (``error``)."""


class Watcher(Protocol):
    """What the hub looks at after each pump (a listener)."""

    def check(self) -> None:
        """See whether something arrived for it."""


class Hub:
    """One mrcd :class:`Context` with one CQ, shared by every channel on it: completions
    and events are routed by QP number; waiting is coordinated between threads and with
    an asyncio loop."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.path = ctx.path
        #: The lock of :attr:`cond`: ``with hub.lock`` is ``with hub.cond`` without the
        #: condition's own (Python) enter and exit, for the calls made per message.
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self._followers = 0  # threads in cond.wait (a wait's followers)
        self.cq: CompletionQueue = ctx.create_cq()
        self.channels: dict[int, Route] = {}
        self.acceptors: list[Watcher] = []
        self.users = 0  # channels and acceptors alive; the context closes with the last
        self.error: SocketError | None = None
        self.closed = False
        self._pumping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: set[asyncio.Future[None]] = set()

    @classmethod
    def open(cls, path: str | None) -> Hub:
        """Open a context on mrcd at ``path`` (default ``$MRCD_SOCKET``)."""
        where = path or default_socket_path()
        try:
            ctx = Context(path)
        except DaemonNotRunning as e:
            raise MrcdNotRunning(where) from e
        except AccessDenied as e:
            raise MrcdAccessDenied(where, str(e)) from e
        try:
            return cls(ctx)
        except ApiError:
            ctx.close()
            raise

    # -- calls into the context (the lock is held) --
    def call(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """Run a context call; an earlier pipelined post's failure that it raises first
        goes to the channel it belongs to, and the call is retried."""
        for _ in range(1000):
            try:
                return fn(*args, **kw)
            except DaemonNotRunning as e:
                raise self._gone(e) from None
            except ApiError as e:
                if not self._route_deferred(e):
                    raise
        raise ApiError("too many failed posts reported at once")

    def _route_deferred(self, e: ApiError) -> bool:
        text = str(e)
        if not text.startswith("an earlier "):
            return False
        m = re.search(r"\bQP (\d+)", text)
        ch = self.channels.get(int(m.group(1))) if m else None
        if ch is not None:
            ch.fail(text)
        return True  # a destroyed channel's late failure: nobody to tell

    def _gone(self, e: Exception) -> SocketError:
        if self.error is None:
            self.error = MrcdNotRunning(self.path, f"mrcd at {self.path} went away ({e})")
        return self.error

    def pump(self, sock: bool = True, first_doorbell: bool = False) -> None:
        """Take what mrcd pushed: completions to channels, QP errors to channels,
        connected listens to acceptors. Never blocks (lock held). ``sock`` False: the
        completion rings only, not the socket (a syscall, and an exception when empty):
        for a look that a wait follows, whose sleep wakes for anything on the socket.
        ``first_doorbell``: the socket up to its first doorbell only (after a sleep for
        which mrcd rang once at most: what is behind it wakes the next sleep at once)."""
        if self.error is not None or self.closed:
            return
        ctx = self.ctx
        try:
            # One look at the socket and the rings, then only what it queued here: no
            # more I/O, so nothing can arrive behind it unseen (what comes later wakes
            # the next sleep).
            ctx._look(sock, first_doorbell)
            if first_doorbell:
                # A failed completion: its QP's event may be behind the doorbell. Read
                # the rest, as a whole look would, so the channel fails with its reason.
                for wc in self.cq._wcs:
                    if wc.status != "SUCCESS":
                        ctx._drain_socket()
                        break
            # (Each step below only when its queue holds something: a pump runs several
            # times per message, and most find one queue or none non-empty.)
            while ctx._deferred:
                try:
                    ctx._raise_deferred()
                except ApiError as e:
                    if isinstance(e, DaemonNotRunning) or not self._route_deferred(e):
                        raise
            cq = self.cq
            while cq._wcs:
                wcs = cq._take(256)
                for wc in wcs:
                    ch = self.channels.get(wc.qpn)
                    if ch is not None:
                        ch.on_wc(wc)
                if len(wcs) < 256:
                    break
            while ctx._events:
                ev = ctx._next_event()
                if isinstance(ev, QPError):
                    ch = self.channels.get(ev.qpn)
                    if ch is not None:
                        ch.fail(ev.reason)
            # A listener has something only once mrcd's "connected" push was read (by
            # this look or by any earlier read of the socket, which queues it there).
            if self.acceptors and ctx._connected:
                for acc in list(self.acceptors):
                    acc.check()
        except DaemonNotRunning as e:
            self._gone(e)
        except (OSError, ValueError) as e:  # the context's socket broke under us
            self._gone(e)
        if self.error is not None:
            for ch in list(self.channels.values()):
                ch.fail(str(self.error), error=self.error)

    # -- one round of a wait (lock held), for both kinds of waiting --
    def _wait_round(self, ready: Callable[[], bool], deadline: float | None,
                    idle: Callable[[float], None] | None) -> tuple[bool | None, float]:
        """Pump and judge: ``(result, 0)`` when the wait is over (``ready()``, the
        deadline passed, or the context is dead or closed), else ``(None, left)`` after
        ``idle(now)``: sleep at most ``left`` s and go round again."""
        # The rings only (a sleep below wakes for the socket). Also right after the
        # pump that followed a sleep: this second look costs a C call and catches what
        # came meanwhile (measured: 0.3 fewer sleeps per socket-API round trip).
        self.pump(False)
        if ready():
            return True, 0.0
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            self.pump()  # (no sleep follows: the socket too, for a push waiting there)
            return ready(), 0.0
        if self.error is not None or self.closed:
            return ready(), 0.0
        if idle is not None:
            idle(now)
        # Wake at least every 0.25 s: keepalive clocks, a closed context.
        return None, 0.25 if deadline is None else min(0.25, deadline - now)

    # -- blocking wait (lock held by the caller) --
    def wait(self, ready: Callable[[], bool], deadline: float | None,
             idle: Callable[[float], None] | None = None) -> bool:
        """Pump until ``ready()`` or ``deadline`` (monotonic; None: forever). Returns
        ``ready()``. ``idle(now)`` runs between waits (keepalives)."""
        while True:
            done, left = self._wait_round(ready, deadline, idle)
            if done is not None:
                return done
            if self._pumping:
                self._followers += 1
                try:
                    self.cond.wait(left)
                finally:
                    self._followers -= 1
                continue
            self._pumping = True
            try:
                # (the rings armed under the lock: another thread's pump may look at
                # them meanwhile, and arms them again while this one sleeps)
                readable = not self.ctx._before_sleep()
                fd = self.ctx._fd()
                self.cond.release()
                try:
                    if readable:
                        readable = bool(select.select([fd], [], [], max(0.0, left))[0])
                except (OSError, ValueError):
                    pass  # closed meanwhile: the pump below finds out
                finally:
                    self.cond.acquire()
                    one = self.ctx._after_sleep()
            finally:
                self._pumping = False
            self.pump(readable, readable and one)
            if self._followers:  # (notify_all is three Python calls, even for nobody)
                self.cond.notify_all()
            # Done if that look brought it (the round's second look, below, is for a
            # wake-up that did not: it catches what came meanwhile, before a sleep).
            if ready():
                return True

    # -- asyncio wait --
    async def wait_async(self, ready: Callable[[], bool], deadline: float | None,
                         idle: Callable[[float], None] | None = None) -> bool:
        """:meth:`wait` for asyncio: one reader on the loop wakes every waiter."""
        loop = asyncio.get_running_loop()
        self._attach(loop)
        while True:
            with self.cond:
                done, left = self._wait_round(ready, deadline, idle)
            if done is not None:
                return done
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.add(fut)
            try:
                await asyncio.wait({fut}, timeout=max(0.0, left))
            finally:
                self._waiters.discard(fut)

    def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is loop or self.closed:
            return
        self._detach()
        loop.add_reader(self.ctx.fileno(), self._on_readable)
        self._loop = loop

    def _detach(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self.ctx.fileno())
            self._loop = None

    def _on_readable(self) -> None:
        with self.cond:
            self.pump()
            self.cond.notify_all()
        if self.error is not None:
            self._detach()  # a dead socket stays readable: do not spin
        self.wake_async()

    def wake_async(self) -> None:
        """Wake asyncio waiters (after a state change made outside the pump)."""
        for fut in list(self._waiters):
            if not fut.done():
                fut.set_result(None)

    # -- lifetime --
    def acquire(self) -> None:
        self.users += 1

    def release(self) -> None:
        """One user fewer; the last one closes the context (mrcd frees what is left)."""
        self.users -= 1
        if self.users <= 0 and not self.closed:
            self.closed = True
            self._detach()
            with contextlib.suppress(Exception):
                self.ctx.close()
            self.cond.notify_all()
