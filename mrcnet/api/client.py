"""Verbs-like client library (after the public ``mrc.h``) talking to the local mrcd.

::

    ctx = Context("/run/mrcd/h1.sock")
    mr = ctx.alloc_mr(1 << 20)                 # shared with mrcd: writes land here
    cq = ctx.create_cq()
    qp = ctx.create_qp(cq)
    peer = qp.connect("h0", service=1, expose=[mr])   # or ctx.listen(...) + qp.accept()
    qp.post_write(mr, 0, 4096, peer.regions[0], imm=7, wr_id=1)
    wc = cq.wait()                              # blocking; `await cq.wait_async()` too

Memory regions are memfd files mapped by both this process and mrcd (the fd travels with
SCM_RIGHTS), so mrcd places incoming writes directly in the application's memory and
reads outgoing ones from it: payload bytes never cross the Unix socket.

A :class:`Context` is not thread-safe: use one per thread (or guard it).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import errno
import mmap
import os
import select
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mrcnet.api.errors import (
    AccessDenied,
    ApiError,
    BadLkey,
    DaemonNotRunning,
    InvalidArgument,
    LimitExceeded,
    OutOfBounds,
    ProtocolError,
    QueueFull,
    error_from,
)
from mrcnet.api.messages import (
    WC_FIELDS,
    PeerInfo,
    RemoteRegion,
    StampedEvent,
    WorkCompletion,
    decode_completions,
    peer_info,
    stamped_event,
)
from mrcnet.api.protocol import (
    MAX_MESSAGE,
    PROTOCOL_VERSION,
    Message,
    decode,
    encode,
    map_region,
    moderation_error,
    nesting_exceeds,
    recv_raw,
    send_raw_by,
)
from mrcnet.api.shmclient import DOORBELL, ClientQueues, CompletionRing, Row
from mrcnet.api.shmqueues import F_UNSIGNALED, ring_slots, sealed_memfd
from mrcnet.api.shmring import PRECISE as SHARED_QUEUES
from mrcnet.core.events import Event

__all__ = [
    "Access",
    "CompletionQueue",
    "Context",
    "MemoryRegion",
    "PeerInfo",
    "QueuePair",
    "RemoteRegion",
    "WorkCompletion",
    "default_socket_path",
]

#: Environment variable naming mrcd's socket (else /run/mrcd/<hostname>.sock).
SOCKET_ENV = "MRCD_SOCKET"


def default_socket_path() -> str:
    """``$MRCD_SOCKET``, else ``/run/mrcd/<short hostname>.sock``."""
    return os.environ.get(SOCKET_ENV) or f"/run/mrcd/{socket.gethostname().split('.')[0]}.sock"


class Access(enum.IntFlag):
    """Memory-region access rights (verbs names; same values as mrcd's core)."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 2


@dataclass
class MemoryRegion:
    """Registered memory shared with mrcd. ``buf`` is the application's view of it."""

    ctx: Context = field(repr=False)
    addr: int
    length: int
    lkey: int
    rkey: int
    buf: memoryview = field(repr=False)
    _map: mmap.mmap = field(repr=False)

    def remote(self) -> RemoteRegion:
        """What a peer needs to write here (send it with ``expose=[mr]``)."""
        return RemoteRegion(self.addr, self.length, self.rkey)

    def check(self, offset: int, length: int) -> None:
        """Raise :class:`OutOfBounds` unless [offset, offset+length) fits the region."""
        if offset < 0 or length < 0 or offset + length > self.length:
            raise OutOfBounds(f"[{offset}, {offset + length}) is outside the memory region "
                              f"of {self.length} bytes (lkey {self.lkey:#x})")

    def deregister(self) -> None:
        """Unregister (mrcd stops using it) and unmap it here."""
        self.ctx._call("dereg_mr", lkey=self.lkey)
        self.ctx._mrs.pop(self.lkey, None)
        self.buf.release()
        self._map.close()



class CompletionQueue:
    """Completions pushed by mrcd, polled here (no round trip per poll)."""

    def __init__(self, ctx: Context, handle: int, depth: int) -> None:
        self.ctx = ctx
        self.handle = handle
        self.depth = depth
        self._wcs: collections.deque[WorkCompletion] = collections.deque()

    def _add(self, rows: list[Row]) -> None:
        # (Each WorkCompletion made with its fields in one update of its __dict__: the
        # frozen dataclass's __init__ sets them one object.__setattr__ at a time, twice
        # the time, and this is every completion's path. Equal to one made by __init__.)
        new, wc, keys, append = object.__new__, WorkCompletion, WC_FIELDS, self._wcs.append
        for r in rows:
            o = new(wc)
            o.__dict__.update(zip(keys, r, strict=True))
            append(o)

    def poll(self, max_entries: int = 16) -> list[WorkCompletion]:
        """Completions available now (never blocks)."""
        self.ctx._pump(block=False)
        self.ctx._raise_deferred()
        return self._take(max_entries)

    def _take(self, n: int) -> list[WorkCompletion]:
        wcs = self._wcs
        if len(wcs) <= n:  # (all of them: the common case, one copy)
            out = list(wcs)
            wcs.clear()
            return out
        return [wcs.popleft() for _ in range(n)]

    def pending(self) -> int:
        """Completions already received from mrcd and not yet polled (no I/O)."""
        return len(self._wcs)

    def moderate(self, count: int = 1, period_us: int = 0) -> None:
        """Completion moderation (ibv_modify_cq's ``cq_count`` / ``cq_period``): mrcd
        sends this CQ's completions once ``count`` are waiting, or ``period_us``
        microseconds after the oldest of them, whichever comes first; an error completion
        goes at once. Fewer, larger pushes cost the application (and mrcd) fewer wake-ups
        in bulk transfers, at up to ``period_us`` of added latency. ``count=1`` (the
        default) sends each pass's completions right away."""
        why = moderation_error(count, period_us)
        if why is not None:
            raise InvalidArgument(why)
        self.ctx._call("modify_cq", cq=self.handle, count=count, period_us=period_us)

    def wait(self, timeout: float | None = None, max_entries: int = 16) -> list[WorkCompletion]:
        """Block until at least one completion (or ``timeout``: then ``[]``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._wcs:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return []
            self.ctx._pump(block=True, timeout=left, completions=True)
            self.ctx._raise_deferred()
        return self._take(max_entries)

    async def wait_async(self, max_entries: int = 16) -> list[WorkCompletion]:
        """Await at least one completion (asyncio)."""
        while not self._wcs:
            await self.ctx._readable()
            self.ctx._pump(block=False)
        self.ctx._raise_deferred()
        return self._take(max_entries)


class QueuePair:
    """A reliable connection to one peer QP (RDMA WRITE and WRITE-with-immediate);
    ``sq_sig_all``: as given to :meth:`Context.create_qp`."""

    def __init__(self, ctx: Context, qpn: int, cq: CompletionQueue,
                 sq_sig_all: bool = True) -> None:
        self.ctx = ctx
        self.qpn = qpn
        self.cq = cq
        self.peer: PeerInfo | None = None
        self.sq_sig_all = sq_sig_all
        #: Writes posted unsignalled since the last signalled one (sq_sig_all False).
        self.unsignaled_run = 0

    def connect(self, peer: str, service: int, *, expose: Sequence[MemoryRegion] = (),
                private: Any = None, timeout: float = 10.0) -> PeerInfo:
        """Connect to the QP that ``peer`` listens with on ``service``; mrcd exchanges the
        QP attributes with the peer's mrcd. ``expose``: regions the peer may write."""
        r = self.ctx._call("connect", timeout=timeout, qpn=self.qpn, peer=peer,
                           service=service, mrs=[m.lkey for m in expose], private=private)
        self.peer = peer_info(r)
        return self.peer

    async def connect_async(self, peer: str, service: int, *,
                            expose: Sequence[MemoryRegion] = (), private: Any = None,
                            timeout: float = 10.0) -> PeerInfo:
        """:meth:`connect` for asyncio (the loop keeps running while mrcd connects)."""
        r = await self.ctx._call_async("connect", timeout=timeout, qpn=self.qpn, peer=peer,
                                       service=service, mrs=[m.lkey for m in expose],
                                       private=private)
        self.peer = peer_info(r)
        return self.peer

    def accept(self, timeout: float | None = None) -> PeerInfo:
        """Wait until a peer connected to the service this QP listens on (see
        :meth:`Context.listen`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.qpn not in self.ctx._connected:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"no peer connected to QP {self.qpn} in {timeout} s")
            self.ctx._pump(block=True, timeout=left)
        self.peer = self.ctx._connected.pop(self.qpn)
        return self.peer

    async def accept_async(self) -> PeerInfo:
        """:meth:`accept` for asyncio."""
        while self.qpn not in self.ctx._connected:
            await self.ctx._readable()
            self.ctx._pump(block=False)
        self.peer = self.ctx._connected.pop(self.qpn)
        return self.peer

    def post_write(self, mr: MemoryRegion, offset: int, length: int, remote: RemoteRegion,
                   remote_offset: int = 0, *, imm: int | None = None, wr_id: int = 0,
                   signaled: bool = False) -> None:
        """RDMA WRITE ``mr[offset:offset+length]`` to ``remote`` at ``remote_offset``;
        with ``imm`` a WRITE-with-immediate (the peer consumes a posted receive).

        ``signaled`` (``IBV_SEND_SIGNALED``) counts on a QP made with ``sq_sig_all=False``
        only: there a write posted without it completes only if it fails, and retires in
        post order all the same (docs/MRCD.md: when; and when it raises QueueFull)."""
        ctx = self.ctx
        if mr.ctx is not ctx or mr.lkey not in ctx._mrs:
            raise BadLkey(f"lkey {mr.lkey:#x} is not a registered region of this context")
        if offset < 0 or length < 0 or offset + length > mr.length:
            mr.check(offset, length)  # (its error)
        if remote_offset < 0 or remote_offset + length > remote.length:
            raise OutOfBounds(f"[{remote_offset}, {remote_offset + length}) is outside the "
                              f"remote region of {remote.length} bytes")
        if imm is not None and not 0 <= imm < 1 << 32:
            raise InvalidArgument(f"immediate {imm} is not a 32-bit value")
        if length >= 1 << 32:
            raise InvalidArgument(f"a write of {length} bytes: at most 4 GiB - 1 at once")
        if not 0 <= wr_id < 1 << 64:
            _wr_id(wr_id)  # (its error)
        if self.sq_sig_all or signaled:
            flags = run = 0
        else:
            run = self.unsignaled_run + 1
            if run >= ctx._sq_slots:
                self._too_many_unsignaled()
            flags = F_UNSIGNALED
        if ctx._deferred:
            ctx._raise_deferred()
        q = ctx._q
        if q is None:  # no shared queues (see Context): a JSON request
            extra: dict[str, Any] = {"signaled": False} if flags else {}
            ctx._post("post_write", qpn=self.qpn, wr_id=wr_id, lkey=mr.lkey,
                      addr=mr.addr + offset, length=length,
                      remote_addr=remote.addr + remote_offset, rkey=remote.rkey, imm=imm,
                      **extra)
            self.unsignaled_run = run
            return
        try:
            q.post_write(self.qpn, wr_id, mr.lkey, mr.addr + offset, length,
                         remote.addr + remote_offset, remote.rkey, imm, ctx.timeout, flags)
        except OSError as e:
            raise DaemonNotRunning(f"mrcd at {ctx.path}: {e}") from None
        self.unsignaled_run = run

    def _too_many_unsignaled(self) -> None:
        n = self.ctx._sq_slots
        raise QueueFull(
            f"QP {self.qpn} (sq_sig_all=False): the last {n - 1} writes were posted "
            f"unsignalled, and one more would make a run as long as the send queue ({n} "
            "work requests, Context(sq_depth=)). A verbs QP stalls there: its send queue "
            "full of requests none of which completes, so none is ever freed. Post at "
            f"least one write in every {n} with signaled=True (and wait for its "
            "completion before reusing the earlier writes' source bytes).")

    def post_recv(self, wr_id: int = 0) -> None:
        """Post a receive: one incoming write-with-immediate completes it."""
        ctx = self.ctx
        if not 0 <= wr_id < 1 << 64:
            _wr_id(wr_id)  # (its error)
        if ctx._deferred:
            ctx._raise_deferred()
        q = ctx._q
        if q is None:
            ctx._post("post_recv", qpn=self.qpn, wr_id=wr_id)
            return
        try:
            q.post_recv(self.qpn, wr_id, ctx.timeout)
        except OSError as e:
            raise DaemonNotRunning(f"mrcd at {ctx.path}: {e}") from None

    def destroy(self) -> None:
        """Tear the QP down (outstanding requests are flushed)."""
        self.ctx._call("destroy_qp", qpn=self.qpn)


def _wr_id(wr_id: int) -> int:
    if not 0 <= wr_id < 1 << 64:
        raise InvalidArgument(f"work request id {wr_id} is not a 64-bit unsigned value")
    return wr_id


class Context:
    """A connection to the local mrcd (verbs: an opened device context).

    ``path_events``: also deliver ``PathStateChanged`` events (EV state changes) through
    :meth:`get_async_event`; QP errors and port changes always come.

    Posts and completions travel in queues shared with mrcd (:mod:`mrcnet.api.shmqueues`),
    not on the socket. ``busy_poll_us``: how long a wait spins on the completion queues
    before it sleeps (default ``$MRC_BUSY_POLL_US``, else 50; 0: never spin).
    ``sq_depth``: work requests the send queue holds (rounded up to a power of two from
    16 to 65536); a post waits while mrcd has not taken that many.
    """

    def __init__(self, path: str | None = None, *, timeout: float = 10.0,
                 path_events: bool = False, busy_poll_us: int | None = None,
                 sq_depth: int = 1024) -> None:
        self.path = path or default_socket_path()
        self.timeout = timeout
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(self.path)
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            raise DaemonNotRunning(f"mrcd is not running at {self.path} (start it with "
                                   "mrcd --config FILE, or set MRCD_SOCKET)") from None
        except PermissionError:
            sock.close()
            raise AccessDenied(f"no permission to use mrcd at {self.path}: ask for a "
                               "group in its socket_mode") from None
        sock.setblocking(False)
        self._sock = sock
        # The shared queues need the C module's atomic indices (Python's own stores and
        # loads of an 8-byte index can tear); without it posts and completions go as
        # JSON on the socket (protocol v1's way), as with an mrcd that has no C either.
        self._q: ClientQueues | None = None
        #: The send queue's work requests (a run of unsignalled writes stays shorter).
        self._sq_slots = ring_slots(sq_depth)
        if SHARED_QUEUES:
            try:
                self._q = ClientQueues(sock, busy_poll_us, sq_depth)
            except OSError as e:
                sock.close()
                raise ApiError(f"cannot make the queues shared with mrcd: {e.strerror}") \
                    from None
        self._next_id = 1
        self._responses: dict[int, Message] = {}
        self._cqs: dict[int, CompletionQueue] = {}
        self._mrs: dict[int, MemoryRegion] = {}
        self._connected: dict[int, PeerInfo] = {}
        self._events: collections.deque[StampedEvent] = collections.deque()
        self._unanswered: dict[int, str] = {}  # pipelined requests: id -> op
        self._deferred: collections.deque[Message] = collections.deque()
        # What mrcd takes (its hello says; these until then).
        self._max_message = MAX_MESSAGE
        self._max_depth = 32
        # Path (EV) state changes are many under loss: only sent when asked for.
        try:
            q = self._q
            hello = self._call("hello", fds=q.fds() if q else None, v=PROTOCOL_VERSION,
                               pid=os.getpid(), path_events=path_events,
                               **(q.info() if q else {}))
        except BaseException:
            self.close()
            raise
        if self._q is not None and not hello.get("queues"):
            self._q.close()  # an mrcd without them: JSON posts and completions
            self._q = None
        self.host: str = hello["host"]
        self.planes: int = hello["planes"]
        #: This host's plain IPv6 address per plane (for out-of-band traffic of its own).
        self.addresses: list[str] = list(hello.get("addresses", []))
        limits = hello.get("limits", {})
        self._max_message = int(limits.get("max_message", MAX_MESSAGE))
        self._max_depth = int(limits.get("max_json_depth", self._max_depth))

    # --- plumbing -----------------------------------------------------------------------
    def fileno(self) -> int:
        """The socket's fd (readable when mrcd answered, pushed an event or rang for
        completions). A context whose fd was asked for keeps its completion rings armed
        after every look (mrcnet.api.shmclient), so that a ``select`` on it never
        sleeps through a completion; one waited on only through this library arms them
        just before it sleeps, and mrcd rings less."""
        if self._q is not None:
            self._q.outside_waiters()
        return self._sock.fileno()

    def close(self) -> None:
        """Disconnect; mrcd destroys this context's QPs, CQs and regions."""
        for mr in list(self._mrs.values()):
            with contextlib.suppress(BufferError, ValueError):
                mr.buf.release()
                mr._map.close()
        self._mrs.clear()
        self._sock.close()
        if self._q is not None:
            with contextlib.suppress(OSError, ValueError, BufferError):
                self._q.close()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, msg: Message, fds: list[int] | None = None) -> None:
        self._raise_deferred()
        data = self._encode(msg)
        # The socket is non-blocking (the doorbells and the drain must never wait): a
        # full mrcd queue waits here, bounded.
        try:
            send_raw_by(self._sock, data, time.monotonic() + self.timeout, fds)
        except (BrokenPipeError, ConnectionResetError):
            raise DaemonNotRunning(f"mrcd at {self.path} went away") from None
        except TimeoutError:
            raise TimeoutError(f"mrcd did not take a request in {self.timeout} s") from None

    def _encode(self, msg: Message) -> bytes:
        """``msg`` as bytes, checked against the limits mrcd announced (it could not
        answer a request it cannot read to the call that waits for it)."""
        op = msg.get("op", "request")
        try:
            data = encode(msg, self._max_message)
        except ValueError as e:
            raise LimitExceeded(f"{op}: {e} (mrcd's per-client limit limits.max_message "
                                f"is {self._max_message}; an administrator can raise it "
                                "in mrcd's configuration)", "limits.max_message",
                                self._max_message) from None
        if nesting_exceeds(data, self._max_depth):
            raise LimitExceeded(f"{op}: the request nests deeper than {self._max_depth} "
                                f"levels (mrcd's per-client limit limits.max_json_depth; "
                                "an administrator can raise it in mrcd's configuration)",
                                "limits.max_json_depth", self._max_depth)
        return data

    def _raise_deferred(self) -> None:
        if self._deferred:
            err = self._deferred.popleft()
            raise error_from(err, "an earlier " + str(err.get("op", "request")) + " failed: ")

    def _post(self, op: str, **args: Any) -> None:
        """Send a request without waiting: mrcd answers only if it fails, and that error
        is raised by a later call of this context (as verbs report a failed work request
        in a later completion)."""
        rid = self._next_id
        self._next_id += 1
        self._unanswered[rid] = op
        self._send({"id": rid, "op": op, "reply": "errors", **args})

    def _call(self, op: str, *, timeout: float | None = None, fds: list[int] | None = None,
              **args: Any) -> Message:
        rid = self._next_id
        self._next_id += 1
        self._send({"id": rid, "op": op, **args}, fds)
        deadline = time.monotonic() + (timeout or self.timeout)
        while rid not in self._responses:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"mrcd did not answer {op} in {timeout or self.timeout} s")
            self._pump(block=True, timeout=left)
        return self._result(self._responses.pop(rid))

    async def _call_async(self, op: str, *, timeout: float | None = None,
                          **args: Any) -> Message:
        """:meth:`_call` without blocking the event loop while mrcd works on it."""
        rid = self._next_id
        self._next_id += 1
        self._send({"id": rid, "op": op, **args})
        limit = timeout or self.timeout
        try:
            async with asyncio.timeout(limit):
                while rid not in self._responses:
                    await self._readable()
                    self._pump(block=False)
        except TimeoutError:
            raise TimeoutError(f"mrcd did not answer {op} in {limit} s") from None
        return self._result(self._responses.pop(rid))

    def _result(self, resp: Message) -> Message:
        self._raise_deferred()  # a pipelined post that failed before this request ran
        if "error" in resp:
            raise error_from(resp["error"])
        ok: Message = resp.get("ok", {})
        return ok

    def _pump(self, *, block: bool, timeout: float | None = None,
              completions: bool = False) -> None:
        """Read what mrcd sent: responses, events, completions (at most one wait).
        ``completions``: the caller waits for completions only: the socket is read only
        when the wait slept and it became readable, and then up to its first doorbell
        (the rings armed once per sleep: one doorbell per CQ at most)."""
        if self._sock.fileno() < 0:
            raise DaemonNotRunning(f"the context on mrcd at {self.path} is closed")
        q = self._q
        if block:
            if q is not None:
                if not q.wait(timeout) and completions:
                    # (the rings had completions, or the wait timed out: no doorbell
                    # to read; a push waits for the next read of the socket)
                    q.drain(self._on_rows)
                    return
            else:
                select.select([self._sock], [], [], timeout)
        self._drain_socket(completions and q is not None and len(q.cqs) == 1
                           and not q.arm_on_drain)
        if q is not None:
            q.drain(self._on_rows)

    def _look(self, sock: bool = True, first_doorbell: bool = False) -> None:
        """Take what came, without waiting: the socket (``sock``; always without the
        rings; up to its first doorbell: :meth:`_drain_socket`), then the rings (for the
        socket API's hub, which sleeps by itself)."""
        if self._sock.fileno() < 0:
            raise DaemonNotRunning(f"the context on mrcd at {self.path} is closed")
        q = self._q
        if sock or q is None:
            self._drain_socket(first_doorbell)
        if q is not None:
            q.drain(self._on_rows)

    def _next_event(self) -> Event | None:
        """The next asynchronous event already read, or None (no I/O)."""
        return self._events.popleft().event if self._events else None

    def _before_sleep(self) -> bool:
        """For a waiter of the library that sleeps on the socket itself (the socket
        API's hub, whose lock this is called under: another thread may look at the
        rings while it sleeps): count it as a sleeper and arm the rings; True if one had
        completions already (then do not sleep). :meth:`_after_sleep` when it woke."""
        q = self._q
        if q is None:
            return False
        q.pay()  # (lazy receives' doorbell: mrcd must see them before this end sleeps)
        q.sleepers += 1
        return q.arm_to_sleep()

    def _after_sleep(self) -> bool:
        """The sleeper of :meth:`_before_sleep` woke (under the same lock). True when the
        socket may be read up to its first doorbell (``rang_once_at_most``)."""
        q = self._q
        if q is None:
            return False
        q.sleepers -= 1
        return q.rang_once_at_most()

    def _fd(self) -> int:
        """The socket's fd, for the library's own waits (see :meth:`fileno`)."""
        return self._sock.fileno()

    def _on_rows(self, handle: int, rows: list[Row]) -> None:
        cq = self._cqs.get(handle)
        if cq is not None:
            cq._add(rows)

    def _drain_socket(self, first_doorbell: bool = False) -> None:
        """Read the socket up to EAGAIN (``first_doorbell``: or up to and with the
        first doorbell)."""
        while True:
            try:
                got = recv_raw(self._sock, MAX_MESSAGE, socket.MSG_DONTWAIT)
            except (BlockingIOError, TimeoutError):
                return
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    return
                raise DaemonNotRunning(f"mrcd at {self.path}: {e}") from None
            if got is None:
                raise DaemonNotRunning(f"mrcd at {self.path} closed the connection")
            data, fds, _flags = got
            for fd in fds:  # mrcd never sends fds; do not leak any
                os.close(fd)
            if data == DOORBELL:
                # Completions: the rings are read after the socket. (Every doorbell
                # queued is read here, up to the EAGAIN, unless the rings are armed only
                # before the library sleeps, one ring: then there is at most one per
                # sleep. Rings armed after every look, as for waiters outside the
                # library, could pile doorbells up under a stream of completions, each
                # waking the client for nothing, if a look stopped at the first.)
                if first_doorbell:
                    return
                continue
            try:
                msg = decode(data)
            except ValueError as e:
                raise ProtocolError(f"unreadable message from mrcd: {e}") from None
            self._dispatch(msg)

    def _dispatch(self, msg: Message) -> None:
        push = msg.get("push")
        if push is None:
            if msg.get("id") is None:  # mrcd could not read a request to find its id
                self._deferred.append({**msg.get("error", {}), "op": "request"})
                return
            rid = int(msg["id"])
            op = self._unanswered.pop(rid, None)
            if op is not None:
                if "error" in msg:
                    self._deferred.append({**msg["error"], "op": op})
            else:
                self._responses[rid] = msg
        elif push == "wc":
            cq = self._cqs.get(msg["cq"])
            if cq is not None:
                cq._wcs.extend(decode_completions(msg["wcs"], WorkCompletion.of))
        elif push == "post_error":
            self._deferred.append({**msg.get("error", {}), "op": msg.get("op", "post")})
        elif push == "connected":
            self._connected[msg["qpn"]] = peer_info(msg)
        elif push == "event":
            self._events.append(stamped_event(msg))
        else:
            raise ProtocolError(f"unknown push {push!r} from mrcd")

    async def _readable(self) -> None:
        """Wait (asyncio) until the socket is readable, or return at once if a
        completion ring has something (the rings armed first: see ``_sleep``)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        fd = self._fd()
        q = self._q

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        if q is not None:
            q.pay()
            q.sleepers += 1  # (a look by another task meanwhile arms again)
        try:
            if q is not None and q.arm():
                return
            loop.add_reader(fd, wake)
            try:
                await fut
            finally:
                loop.remove_reader(fd)
        finally:
            if q is not None:
                q.sleepers -= 1

    # --- verbs --------------------------------------------------------------------------
    def alloc_mr(self, length: int,
                 access: Access = Access.LOCAL_WRITE | Access.REMOTE_WRITE) -> MemoryRegion:
        """Allocate ``length`` bytes of memory shared with mrcd and register them.

        The memory is a memfd sealed at its size (``F_SEAL_SHRINK``, ``F_SEAL_GROW``,
        then ``F_SEAL_SEAL``): mrcd maps only sealed memory, since a file that shrank
        under its mapping would make mrcd fault (docs/SECURITY.md)."""
        if length <= 0:
            raise InvalidArgument(f"a memory region needs a positive length, got {length}")
        try:
            fd = sealed_memfd("mrc-mr", length)
        except OSError as e:
            raise InvalidArgument(f"cannot allocate {length} bytes of shared memory: "
                                  f"{e.strerror}") from None
        try:
            mp = map_region(fd, length, "this process")
            try:
                r = self._call("reg_mr", fds=[fd], length=length, access=int(access))
            except BaseException:
                mp.close()
                raise
        finally:
            os.close(fd)  # both mappings keep the memory alive
        mr = MemoryRegion(self, r["addr"], length, r["lkey"], r["rkey"], memoryview(mp), mp)
        self._mrs[mr.lkey] = mr
        return mr

    def create_cq(self, depth: int = 1024) -> CompletionQueue:
        """A completion queue."""
        if self._q is None:
            r = self._call("create_cq", depth=depth)
            cq = self._cqs[r["cq"]] = CompletionQueue(self, r["cq"], depth)
            return cq
        try:
            ring = CompletionRing(depth)
        except OSError as e:
            raise ApiError(f"cannot make a completion ring: {e.strerror}") from None
        try:
            r = self._call("create_cq", fds=[ring.fd], depth=depth, slots=ring.nslots)
        except BaseException:
            ring.close()
            raise
        cq = self._cqs[r["cq"]] = CompletionQueue(self, r["cq"], depth)
        self._q.add_cq(cq.handle, ring)
        return cq

    def create_qp(self, cq: CompletionQueue, *, ev_profile: str | None = None,
                  cc_profile: str | None = None,
                  max_imm_outstanding: int | None = None,
                  sq_sig_all: bool = True) -> QueuePair:
        """A QP in INIT, ready to :meth:`QueuePair.connect` or be given to :meth:`listen`.

        One CQ takes both its send completions and its receive (immediate) completions.
        ``sq_sig_all`` False (verbs' selective signalling): a write completes only when
        posted with ``signaled=True`` or when it fails; receives always complete.
        """
        extra: dict[str, Any] = {} if sq_sig_all else {"sq_sig_all": False}
        r = self._call("create_qp", cq=cq.handle, ev_profile=ev_profile,
                       cc_profile=cc_profile, max_imm=max_imm_outstanding, **extra)
        if not sq_sig_all and r.get("sq_sig_all") is not False:
            # (an mrcd without selective signalling would complete every write)
            self._call("destroy_qp", qpn=r["qpn"])
            raise ApiError(f"mrcd at {self.path} does not support sq_sig_all=False "
                           "(selective signalling): upgrade it")
        return QueuePair(self, r["qpn"], cq, sq_sig_all)

    def listen(self, service: int, qp: QueuePair, *, expose: Sequence[MemoryRegion] = (),
               private: Any = None, backlog: int = 0) -> None:
        """Let the next peer that connects to ``service`` connect to ``qp`` (mrcd answers
        for the application; :meth:`QueuePair.accept` then returns the peer).

        ``backlog`` > 0: until :meth:`unlisten`, up to that many connects that arrive
        while no QP listens (the last one connected, the next not armed yet) wait in
        mrcd for the next ``listen`` on the service instead of being refused."""
        self._call("listen", service=service, qpn=qp.qpn, mrs=[m.lkey for m in expose],
                   private=private, backlog=backlog)

    def unlisten(self, service: int) -> None:
        """Stop listening on ``service``: connects waiting in its backlog are refused and
        the QP armed on it (if any) listens no more."""
        self._call("unlisten", service=service)

    def stats(self, qp: QueuePair | None = None, *, evs: bool = False) -> Message:
        """mrcd's counters (host, ports; with ``qp`` also that QP's state and counters;
        with ``evs=True`` also ``"evs"``: one dict per EV of the QP with its ``plane``,
        ``path`` (the spine index in a leaf-spine fabric), ``state`` and counters
        ``sent``, ``acked``, ``lost``, ``trimmed``, ``ecn``, ``probes_sent``)."""
        if qp is None:
            return self._call("stats")
        if evs:
            return self._call("stats", qpn=qp.qpn, evs=True)
        return self._call("stats", qpn=qp.qpn)

    def admin(self, op: str, **args: Any) -> Message:
        """An operator request (what ``mrcctl`` sends): ``qps``, ``evs`` (qpn=),
        ``ports``, ``deny_ev`` / ``allow_ev`` (qpn=, ev=). Sees every client's QPs."""
        return self._call(f"admin_{op}", **args)

    def get_async_event(self, timeout: float | None = 0.0) -> Event | None:
        """The next asynchronous event, or None: the core's dataclass
        (:class:`~mrcnet.core.events.QPError`, ``PathStateChanged``,
        ``PortStatusChanged``), to match on its type."""
        got = self.get_stamped_event(timeout)
        return None if got is None else got.event

    def get_stamped_event(self, timeout: float | None = 0.0) -> StampedEvent | None:
        """:meth:`get_async_event` with the time mrcd made the event (``clock``, its
        ``time.monotonic()``: the same clock as this process's)."""
        if not self._events:
            self._pump(block=bool(timeout), timeout=timeout)
        return self._events.popleft() if self._events else None
