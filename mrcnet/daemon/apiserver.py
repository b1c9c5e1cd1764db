"""mrcd's side of the client API: the Unix socket, one :class:`Session` per client.

The socket is ``SOCK_SEQPACKET`` (one message per datagram, fds attached to the message
they belong to; see :mod:`mrcnet.api.protocol`). Sessions are driven by the event loop
(``add_reader``); requests are handed to a dispatcher, which answers with a dict or raises
an :class:`~mrcnet.api.errors.ApiError` (sent back by class name). Replies and pushes that
do not fit the socket now wait in a per-session outbox.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from mrcnet.api.errors import ApiError, ProtocolError, error_to
from mrcnet.api.protocol import (
    MAX_FDS,
    PROTOCOL_VERSION,
    Message,
    decode,
    encode,
    leading_id,
    nesting_exceeds,
    recv_raw,
)
from mrcnet.api.shmclient import DOORBELL, RING_BACK
from mrcnet.daemon.config import ClientLimits
from mrcnet.daemon.guard import over_limit
from mrcnet.daemon.idlepoll import LookSpan

__all__ = ["ApiServer", "Session", "claim_socket_path"]

log = structlog.get_logger("mrcd.api")

#: Messages waiting for a client before mrcd gives up on it.
MAX_OUTBOX = 1 << 16

#: A request handler: (session, message, fds) -> reply, or an awaitable of one.
Dispatcher = Callable[["Session", Message, list[int]], "Message | Awaitable[Message]"]
#: Protocol versions mrcd speaks (1: posts and completions as JSON on the socket only).
VERSIONS = (1, PROTOCOL_VERSION)


class Session:
    """One connected client: its socket, outbox, and the resources it owns."""

    def __init__(self, server: ApiServer, sock: socket.socket, sid: int) -> None:
        self.server = server
        self.sock = sock
        self.sid = sid
        self.pid = 0
        self.hello = False
        self.closed = False
        self.outbox: collections.deque[bytes] = collections.deque()
        #: Resources, for clean-up when the client goes away (the engine fills them).
        self.mrs: dict[int, Any] = {}
        self.mr_bytes = 0  #: bytes of its registered regions
        #: Receives posted, an upper bound of those still queued (recounted at the limit)
        self.recvs = 0
        self.cqs: set[int] = set()
        self.qps: set[int] = set()
        self.listens: set[int] = set()
        #: Wants PathStateChanged events (many under loss: only on request).
        self.path_events = False
        #: mrcd's end of the queues shared with the client (None: JSON posts only).
        self.queues: Any = None
        #: How long mrcd's looks for this client's answer after waking it last
        #: (Posts.await_answer), from how its recent ones went
        self.answer_look = LookSpan()

    def ring(self) -> None:
        """Ring the client's doorbell (completions wait in its rings). A full socket
        drops it: the client has unread messages then, and reads its rings after them."""
        if self.closed or self.outbox:
            return  # (queued messages wake it as well)
        try:
            self.sock.send(DOORBELL, socket.MSG_DONTWAIT)
            self.server.doorbells += 1
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self.server.drop(self)

    def send(self, msg: Message) -> None:
        """Queue a reply or push; sent now if the socket has room. A client that lets
        :data:`MAX_OUTBOX` messages pile up (it stopped reading) is dropped."""
        if self.closed:
            return
        try:
            data = encode(msg)
        except ValueError as e:  # an answer too big for the client's receive buffer
            if "id" not in msg:
                log.warning("push too big for a message: dropped", session=self.sid,
                            push=msg.get("push"), error=str(e))
                return
            data = encode({"id": msg["id"], "error": {
                "type": "ApiError", "message": f"mrcd's answer does not fit a message "
                f"({e}): ask for less at once"}})
        self.outbox.append(data)
        if len(self.outbox) > MAX_OUTBOX:
            log.warning("client not reading its completions: dropped", session=self.sid,
                        pid=self.pid, queued=len(self.outbox))
            self.server.drop(self)
            return
        self._flush()

    def _flush(self) -> None:
        loop = self.server.loop
        while self.outbox:
            try:
                self.sock.send(self.outbox[0])
            except (BlockingIOError, InterruptedError):
                loop.add_writer(self.sock.fileno(), self._flush)
                return
            except OSError:
                self.server.drop(self)
                return
            self.outbox.popleft()
        with contextlib.suppress(ValueError, OSError):
            loop.remove_writer(self.sock.fileno())


def claim_socket_path(path: str) -> None:
    """Make sure no live mrcd serves ``path``; remove a stale socket file left there.

    Raises OSError(EADDRINUSE) if another mrcd answers on it.
    """
    if not os.path.exists(path):
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)  # stale: its mrcd is gone
    else:
        raise OSError(errno.EADDRINUSE, f"another mrcd already serves {path}")
    finally:
        probe.close()


class ApiServer:
    """Listens on the Unix socket at ``path`` and feeds requests to ``dispatch``."""

    def __init__(self, path: str, mode: int, dispatch: Dispatcher,
                 on_close: Callable[[Session], None], host: str, planes: int,
                 after_burst: Callable[[], None] | None = None,
                 addresses: list[str] | None = None, group: int | None = None,
                 limits: ClientLimits | None = None,
                 attach: Callable[[Session, Message, list[int]], None] | None = None,
                 take_posts: Callable[[Session], None] | None = None,
                 settle: Callable[[Session], None] | None = None,
                 idle: Callable[[bool], object] | None = None) -> None:
        self.path = path
        self.mode = mode
        self.group = group  #: gid of the socket file (None: mrcd's own)
        self.dispatch = dispatch
        #: Called once after a burst of requests (the engine sends what they queued).
        self.after_burst = after_burst
        self.on_close = on_close
        self.host = host
        self.planes = planes
        self.addresses = addresses or []
        self.limits = limits or ClientLimits()
        #: Doorbells rung to clients (each a send that may wake one: a round trip's cost).
        self.doorbells = 0
        #: Doorbells read from clients (each a wake-up of mrcd for their posts).
        self.doorbells_in = 0
        #: A hello with fds: attach the client's shared queues (raises ApiError).
        self.attach = attach
        #: Take what the client posted into its send queue (before any request of its,
        #: and on its doorbell: a request never overtakes a post made before it).
        self.take_posts = take_posts
        #: After a burst's pump: arm the client's doorbell again, taking (and sending)
        #: what it posted meanwhile (without a doorbell: mrcd was awake).
        self.settle = settle
        #: At the very end of a client's pass: mrcd's look before it sleeps, told whether
        #: the burst started a task (the engine skips the look then).
        self.idle = idle
        #: Changes whenever a client comes or goes (the look's fds change with them).
        self.generation = 0
        #: Requests answered by a task (connect, accept, ...): a burst that started one
        #: skips the look, so that the task's first step runs at once.
        self.tasks = 0
        self.sessions: dict[int, Session] = {}
        self._next_sid = 1
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the server runs on."""
        assert self._loop is not None
        return self._loop

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Create the socket file (refusing to replace a live mrcd's) and listen."""
        self._loop = loop
        claim_socket_path(self.path)
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Create the file with no access, then open it up: no window where others could
        # connect under a wider umask.
        old = os.umask(0o777)
        try:
            sock.bind(self.path)
        finally:
            os.umask(old)
        if self.group is not None:
            os.chown(self.path, -1, self.group)
        os.chmod(self.path, self.mode)
        sock.listen(64)
        sock.setblocking(False)
        self._sock = sock
        loop.add_reader(sock.fileno(), self._accept)

    def close(self) -> None:
        """Drop every session, stop listening and remove the socket file."""
        for s in list(self.sessions.values()):
            self.drop(s)
        if self._sock is not None:
            with contextlib.suppress(ValueError, OSError):
                self.loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def fds(self) -> list[int]:
        """The sockets the server reads: its own (new clients) and every client's."""
        own = [self._sock.fileno()] if self._sock is not None else []
        return own + [s.sock.fileno() for s in self.sessions.values() if not s.closed]

    def _accept(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            conn.setblocking(False)
            s = Session(self, conn, self._next_sid)
            self._next_sid += 1
            self.sessions[s.sid] = s
            self.generation += 1
            self.loop.add_reader(conn.fileno(), self._readable, s)

    def drop(self, s: Session) -> None:
        """Forget a client and release what it owned."""
        if s.closed:
            return
        s.closed = True
        self.sessions.pop(s.sid, None)
        self.generation += 1
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(s.sock.fileno())
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_writer(s.sock.fileno())
        try:
            self.on_close(s)
        finally:
            s.sock.close()
            log.info("client gone", session=s.sid, pid=s.pid)

    def _readable(self, s: Session) -> None:
        size = self.limits.max_message
        tasks = self.tasks
        try:
            for _ in range(64):  # a bounded burst, then let the data path run
                try:
                    got = recv_raw(s.sock, size)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    self.drop(s)
                    return
                if got is None:
                    self.drop(s)
                    return
                data, fds, flags = got
                if s.queues is not None and self.take_posts is not None:
                    self.take_posts(s)
                    if s.closed:
                        self._close_fds(fds)
                        return
                if data == DOORBELL and not fds:
                    self.doorbells_in += 1
                    # The posts are taken: the burst ends here. The client rings once
                    # per sleep of mrcd (its send queue's flag), so reading on found
                    # nothing but EAGAIN (a syscall and an exception per post's pass);
                    # anything queued behind it wakes the loop again (level-triggered).
                    return
                if data == RING_BACK and not fds:
                    # The client found completions no doorbell announced (it began to
                    # let something outside the library wait on its socket): ring.
                    s.ring()
                    if s.closed:  # (its socket broke: ring dropped it)
                        return
                    continue
                # From here the fds are mrcd's: closed after the request, whatever it
                # was (a handler that keeps the memory maps it; the mapping holds it).
                try:
                    msg = self._decode(s, data, flags)
                    if msg is not None:
                        self._handle(s, msg, fds)
                finally:
                    self._close_fds(fds)
                if s.closed:
                    return
        finally:
            if self.after_burst is not None:
                self.after_burst()
                if self.settle is not None and s.queues is not None and not s.closed:
                    self.settle(s)
                if self.idle is not None:
                    self.idle(self.tasks != tasks)

    def _decode(self, s: Session, data: bytes, flags: int) -> Message | None:
        """The request in ``data``, or None after answering why it is not one (the
        answer goes to the id the request starts with, if it has one)."""
        lim = self.limits
        try:
            if flags & socket.MSG_TRUNC:
                raise over_limit(f"a request longer than {lim.max_message} bytes",
                                 "limits.max_message", lim.max_message)
            if flags & socket.MSG_CTRUNC:
                raise ProtocolError(f"more than {MAX_FDS} file descriptors with one "
                                    "request (the rest were closed)")
            if nesting_exceeds(data, lim.max_json_depth):
                raise over_limit(f"a request nested deeper than {lim.max_json_depth} "
                                 "levels", "limits.max_json_depth", lim.max_json_depth)
            try:
                return decode(data)
            except ValueError as e:
                raise ProtocolError(f"a request that is not a JSON object: {e}") from None
        except ApiError as e:
            log.debug("bad request", session=s.sid, pid=s.pid, error=str(e))
            s.send({"id": leading_id(data), "error": error_to(e)})
            return None

    def _handle(self, s: Session, msg: Message, fds: list[int]) -> None:
        rid = msg.get("id")
        try:
            if not s.hello:
                self._hello(s, msg, fds)
                return
            result = self.dispatch(s, msg, fds)
        except ApiError as e:
            s.send({"id": rid, "error": error_to(e)})
            return
        except Exception as e:  # a bug in mrcd: answer, log, keep serving
            log.exception("request failed", op=msg.get("op"), session=s.sid)
            s.send({"id": rid, "error": {"type": "ApiError",
                                         "message": f"internal error in mrcd: {e!r}"}})
            return
        if isinstance(result, dict):
            if msg.get("reply") != "errors":  # pipelined requests hear only of failures
                s.send({"id": rid, "ok": result})
        else:
            self.loop.create_task(self._finish(s, rid, result))
            self.tasks += 1

    def _hello(self, s: Session, msg: Message, fds: list[int]) -> None:
        if msg.get("op") != "hello":
            raise ProtocolError("the first request must be hello")
        if msg.get("v") not in VERSIONS:
            raise ProtocolError(f"client protocol version {msg.get('v')!r}; this "
                                f"mrcd speaks {PROTOCOL_VERSION}")
        pid = msg.get("pid", 0)
        if type(pid) is not int:
            raise ProtocolError(f"hello: pid {pid!r} is not an integer")
        if fds:
            if self.attach is None or msg.get("v") == 1:
                raise ProtocolError("hello takes no file descriptor")
            self.attach(s, msg, fds)
        s.hello = True
        s.pid = pid
        s.path_events = bool(msg.get("path_events", False))
        log.info("client connected", session=s.sid, pid=s.pid)
        lim = self.limits
        s.send({"id": msg.get("id"), "ok": {
            "host": self.host, "planes": self.planes, "addresses": self.addresses,
            "queues": s.queues is not None,
            # What the client library checks before sending (a reply to a message mrcd
            # could not read would have no id to go to).
            "limits": {"max_message": lim.max_message,
                       "max_json_depth": lim.max_json_depth}}})

    @staticmethod
    def _close_fds(fds: list[int]) -> None:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    async def _finish(self, s: Session, rid: Any, pending: Awaitable[Message]) -> None:
        try:
            result = await pending
        except ApiError as e:
            s.send({"id": rid, "error": error_to(e)})
        except Exception as e:
            log.exception("request failed", session=s.sid)
            s.send({"id": rid, "error": {"type": "ApiError",
                                         "message": f"internal error in mrcd: {e!r}"}})
        else:
            s.send({"id": rid, "ok": result})
