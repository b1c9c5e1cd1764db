"""Work requests from mrcd's clients into the core: taken from a client's shared send
queue (:mod:`mrcnet.daemon.rings`) or from a JSON ``post_write`` / ``post_recv`` request,
checked the same way (the QP, the region and its bounds are the client's; the client's
receive quota), then posted. A refused post taken from a ring comes back to the client
as a ``post_error`` push on its socket, raised by a later call of its context.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from mrcnet import core
from mrcnet.api.errors import (
    ApiError,
    BadLkey,
    InvalidArgument,
    InvalidQP,
    OutOfBounds,
    error_to,
)
from mrcnet.api.protocol import Message
from mrcnet.api.shmqueues import (
    F_IMM,
    F_UNSIGNALED,
    OP_RECV,
    OP_WRITE,
    SQ_SLOT,
    WORK_REQUEST,
    WORK_REQUEST_SLOT,
)
from mrcnet.api.shmring import PRECISE, RingCorrupt
from mrcnet.daemon.apiserver import ApiServer, Session
from mrcnet.daemon.config import DaemonConfig
from mrcnet.daemon.guard import over_limit
from mrcnet.daemon.rings import TAKE_PER_PASS, SessionQueues, WorkRequest
from mrcnet.daemon.signalling import Signalling
from mrcnet.native import HAVE_C, C, ffi

__all__ = ["Posts", "SlotScan"]

#: Slots in a doorbell from which the C scan pays: its fixed cost (~4 us: the call's
#: arguments, the columns' unpacking and zip) is more than the row loop's for a few
#: slots (measured, a doorbell of 64 B writes: 1 slot 3.1 against 7.4 us, 8 slots 8.2
#: against 9.4-10.0, 16 slots 13.2-14.7 against 12.3, 48 slots 36.0 against 23.1-27.3).
SCAN_MIN: Final = 16
#: answer_poll_us (Posts.await_answer): how many of a look's rounds (each a load of the
#: ring's tail, ~0.2 us) go by between two looks at the ports (a poll(2), ~1 us)
ANSWER_PORTS_EVERY: Final = 8
#: A slot's op, qpn and lkey (the start of :data:`WORK_REQUEST`): which run it begins.
_HEAD = struct.Struct("<B3xI8xI")
_WriteRow = tuple[int, int, int, int, int, "int | None"]


class SlotScan:
    """A doorbell's slots read in C (``mrc_sq_writes``, mrcnet/_csrc/posts.c): the
    writes :meth:`Posts._post_rows` would post together, as their columns, without a
    Python step per slot. C only (:meth:`Posts.take` keeps to the rows without it)."""

    def __init__(self, most: int = TAKE_PER_PASS) -> None:
        new = ffi.new
        self._cols = (new("uint64_t[]", most), new("uint64_t[]", most),
                      new("uint32_t[]", most), new("uint64_t[]", most),
                      new("uint32_t[]", most))
        self._imm, self._has = new("uint32_t[]", most), new("uint8_t[]", most)
        self._nimm = new("unsigned *")
        self.most = most

    def writes(self, slots: Any, n: int, qpn: int, lkey: int, base: int, size: int
               ) -> list[_WriteRow]:
        """The leading writes of the ``n`` slots at ``slots`` (a ``uint8_t *``) that are
        writes on ``qpn`` from region ``lkey`` ([base, base + size)) inside it, as
        ``(wr_id, offset, length, remote_addr, rkey, imm or None)``; [] when the first
        is not one."""
        c = self._cols
        k = C.mrc_sq_writes(slots, min(n, self.most), SQ_SLOT, OP_WRITE, F_IMM, qpn, lkey,
                            base, size, *c, self._imm, self._has, self._nimm)
        if not k:
            return []
        unpack = ffi.unpack
        if self._nimm[0]:
            imms: list[int | None] = [v if h else None for v, h in
                                      zip(unpack(self._imm, k), unpack(self._has, k),
                                          strict=True)]
        else:
            imms = [None] * k
        return list(zip(*[unpack(col, k) for col in c], imms, strict=True))


class Engine(Protocol):
    """What posting needs of mrcd's engine (:class:`mrcnet.daemon.engine.Daemon`)."""

    @property
    def cfg(self) -> DaemonConfig:
        """mrcd's configuration (the client limits)."""

    @property
    def host(self) -> core.Host | None:
        """The core."""

    @property
    def api(self) -> ApiServer | None:
        """The API server (to end a session)."""

    @property
    def log(self) -> Any:
        """mrcd's structured logger."""

    def guarded(self, what: str) -> None:
        """Log an internal error caught in ``what``; mrcd keeps going."""

    def after_requests(self) -> None:
        """The end of a burst of a client's posts: send what they made (one pump)."""


class Posts:
    """Posts of every client into the engine's core; ``owners``: which session owns
    which QP (mrcd's table, kept by :class:`mrcnet.daemon.verbs.Verbs`);
    ``signalling``: the QPs made with ``sq_sig_all`` false, told the flags of every write
    the core accepts on them."""

    def __init__(self, engine: Engine, owners: dict[int, Session],
                 native: bool | None = None, signalling: Signalling | None = None) -> None:
        self.engine = engine
        self.owners = owners
        self.signalling = Signalling() if signalling is None else signalling
        self._unsig = self.signalling.flags  # (qpn -> its writes' flags: one test a run)
        #: The doorbell's slots read in C (None: row by row, :meth:`_post_rows`, the
        #: reference; ``native`` False asks for it)
        self.scan = SlotScan() if (HAVE_C if native is None else native) else None

    def attach(self, s: Session, msg: Message, fds: list[int]) -> None:
        """A hello with the client's send queue: take its posts from there. Without the
        C module (atomic indices) mrcd keeps to JSON posts; its hello says so
        (``queues`` false) and the client drops its rings."""
        if PRECISE:
            s.queues = SessionQueues(fds, msg.get("sq_slots"))

    def take(self, s: Session) -> None:
        """Everything the client posted into its send queue, into the core (a refused
        post is a ``post_error`` push; a corrupt ring ends the session). The doorbell is
        not armed here: the caller sends what the posts made first, then
        :meth:`settle` arms it, so a post the client makes meanwhile needs no doorbell
        (mrcd is awake) and is taken in the same wake-up."""
        q: SessionQueues = s.queues
        sq = q.sq  # (the ring's take straight from here: a call less each)
        full = TAKE_PER_PASS * SQ_SLOT
        try:
            while True:
                if self.scan is not None:
                    # the slots as they lie in the ring (end to end, a copy), not decoded
                    data = sq.take(TAKE_PER_PASS)[0]
                    if len(data) >= SCAN_MIN * SQ_SLOT:
                        self._post_slots(s, data)
                    elif data:  # (a few slots: the row loop costs less than the scan)
                        self._post_rows(s, list(WORK_REQUEST_SLOT.iter_unpack(data)))
                    if len(data) < full or s.closed:
                        break
                else:
                    rows = q.take()
                    if rows:
                        self._post_rows(s, rows)
                    if len(rows) < TAKE_PER_PASS or s.closed:
                        break
        except RingCorrupt as e:
            self.ring_broken(s, f"its send queue is corrupt: {e}")

    def settle(self, s: Session, spin: bool = True) -> None:
        """After a pass that took ``s``'s posts and sent what they made: arm its
        doorbell (its next post rings); a post that came meanwhile is taken and sent
        first. With mrcd's ``busy_poll_us`` (and ``spin``), its send queue is watched
        that long before the doorbell is armed for good."""
        q: SessionQueues | None = s.queues
        if q is None:
            return
        us = self.engine.cfg.busy_poll_us if spin else 0
        try:
            while not s.closed:
                came = q.rest()  # armed; True: a post came before it was
                if not came and us:
                    # (the watch clears the flag: armed again after it, with the check)
                    came = self._spin(q, time.perf_counter() + us / 1e6) or q.rest()
                if not came:
                    return
                self.take(s)
                self.engine.after_requests()
        except RingCorrupt as e:
            self.ring_broken(s, f"its send queue is corrupt: {e}")

    @staticmethod
    def _spin(q: SessionQueues, end: float,
              frames: Callable[[], bool] | None = None) -> bool:
        """Busy-poll ``q``'s send queue until ``end`` (``time.perf_counter()``), telling
        the client meanwhile that mrcd is awake (no doorbell needed), giving way
        between looks: True when a post arrived; False at ``end``, or once ``frames()``
        (asked every :data:`ANSWER_PORTS_EVERY` rounds) says frames wait on a port."""
        q.sq.wake()
        ready, clock, give_way = q.sq.ready, time.perf_counter, os.sched_yield
        rounds = 0
        while clock() < end:
            if ready():
                return True
            give_way()  # (the client may be queued on this CPU: see idlepoll)
            rounds += 1
            if frames is not None and not rounds % ANSWER_PORTS_EVERY and frames():
                return False
        return False

    def _post_rows(self, s: Session, rows: list[WorkRequest]) -> None:
        """Post a doorbell's work requests in order. Writes from one region on one QP
        that pass the checks go to the core together (:meth:`core.Host.post_writes`);
        anything else (a receive, a post to refuse) one at a time, as before, after the
        writes queued ahead of it."""
        host = self.engine.host
        assert host is not None
        owners, mrs = self.owners, s.mrs
        max_recvs = self.engine.cfg.limits.max_recvs
        writes: list[tuple[int, int, int, int, int, int | None]] = []
        wflags: list[int] = []  # (their slots' flags, for selective signalling)
        kq = kl = -1  # the QP and lkey of ``writes``; -1: none (or refused)
        mr: Any = None
        base = size = 0  # mr's
        for row in rows:
            op, flags, qpn, wr_id, lkey, length, addr, raddr, rkey, imm = row
            if op == OP_WRITE:
                if qpn != kq or lkey != kl:
                    if writes:
                        self._post_writes(s, kq, kl, mr, writes, flags=wflags)
                        writes, wflags = [], []
                    kq, kl, mr = qpn, lkey, mrs.get(lkey)
                    if owners.get(qpn) is not s or mr is None:
                        kq = kl = -1  # (refused below, with the reason)
                    else:
                        base, size = mr.addr, mr.length
                if kq >= 0:
                    offset = addr - base
                    if offset >= 0 and offset + length <= size:  # (length: unsigned)
                        writes.append((wr_id, offset, length, raddr, rkey,
                                       imm if flags & F_IMM else None))
                        wflags.append(flags)
                        continue
            if writes:
                self._post_writes(s, kq, kl, mr, writes, flags=wflags)
                writes, wflags = [], []
            if op == OP_RECV and s.recvs < max_recvs and owners.get(qpn) is s:
                # (recv's common case inline: an owned QP, under the quota; a ping-pong
                # posts one per round trip) The core refuses one only for its QP's
                # state, before it changes anything: then recv says why.
                try:
                    host.post_recv(qpn, wr_id)
                    s.recvs += 1
                    continue
                except core.InvalidRequest:
                    pass
            self._post(s, row)
        if writes:
            self._post_writes(s, kq, kl, mr, writes, flags=wflags)

    def _post_slots(self, s: Session, data: bytes | bytearray) -> None:
        """:meth:`_post_rows` of a doorbell's slots as they lie in ``data``: each run of
        writes it would post together read in one C call (:class:`SlotScan`), anything
        else (a receive, a post to refuse) decoded and posted one at a time."""
        scan = self.scan
        assert scan is not None
        owners, mrs = self.owners, s.mrs
        n = len(data) // SQ_SLOT
        ptr = ffi.cast("uint8_t *", ffi.from_buffer(data))
        head, i = _HEAD.unpack_from, 0
        while i < n:
            at = i * SQ_SLOT
            op, qpn, lkey = head(data, at)
            mr = mrs.get(lkey)
            if op == OP_WRITE and mr is not None and owners.get(qpn) is s:
                writes = scan.writes(ptr + at, n - i, qpn, lkey, mr.addr, mr.length)
                if writes:
                    k = len(writes)
                    # (the slots' flags bytes in one slice, for a QP that signals
                    # selectively; the scan does not read that bit)
                    flags = (data[at + 1:at + k * SQ_SLOT:SQ_SLOT] if qpn in self._unsig
                             else None)
                    self._post_writes(s, qpn, lkey, mr, writes, checked=True, flags=flags)
                    i += k
                    continue
            self._post(s, WORK_REQUEST.unpack_from(data, at))
            i += 1

    def _post_writes(self, s: Session, qpn: int, lkey: int, mr: core.MemoryRegion,
                     writes: list[tuple[int, int, int, int, int, int | None]],
                     checked: bool = False, flags: Sequence[int] | None = None) -> None:
        """Checked writes of region ``mr`` (``lkey``) on QP ``qpn`` into the core
        together (``checked``: by :class:`SlotScan`, whose fields are the slot's
        fixed-width ones; ``flags``: their slots' flags, needed for a QP that signals
        selectively); if the core refuses them (the QP's state), each on its own for its
        own error."""
        host = self.engine.host
        assert host is not None
        try:
            host.post_writes(qpn, mr, writes, checked=checked)
        except Exception:  # refused (or a bug) and nothing posted: each for its own error
            for k, (wr_id, offset, length, raddr, rkey, imm) in enumerate(writes):
                f = flags[k] & F_UNSIGNALED if flags is not None else 0
                self._post(s, (OP_WRITE, f if imm is None else f | F_IMM, qpn, wr_id,
                               lkey, length, mr.addr + offset, raddr, rkey, imm or 0))
            return
        if flags is not None and qpn in self._unsig:
            self.signalling.posted(qpn, flags)

    def await_answer(self, s: Session, until: float, frames: Callable[[], bool]) -> bool:
        """``s`` was just woken for a receive (a port pass's lane rang it): look at its
        send queue for the post it is about to make, telling it meanwhile that mrcd is
        awake (no doorbell needed), and take and send what came; True if a post came.

        The look lasts up to mrcd's ``answer_poll_us``, adaptive per client
        (``s.answer_look``: :class:`mrcnet.daemon.idlepoll.LookSpan`); never past
        ``until`` (``time.perf_counter()``: the pass's whole budget), and not once
        ``frames()`` (asked every few rounds) says frames wait on a port: they come
        first (the look, a miss then, ends)."""
        top = self.engine.cfg.answer_poll_us / 1e6
        q: SessionQueues | None = s.queues
        if not top or q is None or s.closed:
            return False
        look = s.answer_look
        try:
            found = self._spin(q, min(time.perf_counter() + look.span(top), until), frames)
            look.found(found)
        except RingCorrupt as e:
            self.ring_broken(s, f"its send queue is corrupt: {e}")
            return False
        if found:  # (taken while the client still sees mrcd awake: see settle)
            self.take(s)
            self.engine.after_requests()
        self.settle(s, spin=False)
        return found

    def ring_broken(self, s: Session, why: str) -> None:
        """A client broke one of its rings: tell it, and end its session."""
        self.engine.log.warning("client broke a shared queue", pid=s.pid, error=why)
        s.send({"push": "post_error", "op": "post", "error": {
            "type": "ProtocolError", "message": f"mrcd ends this context: {why}"}})
        api = self.engine.api
        if api is not None:
            api.drop(s)

    def _post(self, s: Session, wr: WorkRequest) -> None:
        op, flags, qpn, wr_id, lkey, length, addr, raddr, rkey, slot_imm = wr
        imm = slot_imm if flags & F_IMM else None
        what = "post_write" if op == OP_WRITE else "post_recv"
        try:
            try:
                if op == OP_WRITE:
                    self.write(s, qpn, wr_id, lkey, addr, length, raddr, rkey, imm, flags)
                elif op == OP_RECV:
                    self.recv(s, qpn, wr_id)
                else:
                    raise InvalidArgument(f"unknown work request opcode {op}")
            except (core.InvalidRequest, core.InvalidAttribute,
                    core.IllegalTransition) as e:
                raise InvalidQP(str(e)) from None
        except ApiError as e:
            s.send({"push": "post_error", "op": what, "error": error_to(e)})
        except Exception as e:  # a bug in mrcd: tell the client, log, keep serving
            self.engine.guarded(what)
            s.send({"push": "post_error", "op": what, "error": {
                "type": "ApiError", "message": f"internal error in mrcd: {e!r}"}})

    def _owned(self, s: Session, qpn: int) -> None:
        if self.owners.get(qpn) is not s:
            raise InvalidQP(f"no QP {qpn} in this context")

    def write(self, s: Session, qpn: int, wr_id: int, lkey: int, addr: int, length: int,
              raddr: int, rkey: int, imm: int | None, flags: int = 0) -> None:
        """RDMA WRITE (with immediate) of the client's region ``lkey`` at ``addr``
        (``flags``: its slot's, :data:`~mrcnet.api.shmqueues.F_UNSIGNALED` counts)."""
        host = self.engine.host
        assert host is not None
        self._owned(s, qpn)
        mr = s.mrs.get(lkey)
        if mr is None:
            raise BadLkey(f"lkey {lkey:#x} is not a region of this context")
        offset = addr - mr.addr
        if offset < 0 or length < 0 or offset + length > mr.length:
            raise OutOfBounds(f"[{addr:#x}, +{length}) is outside region lkey {lkey:#x}")
        host.post_write(qpn, wr_id, mr, offset, length, raddr, rkey, imm)
        if qpn in self._unsig:
            self.signalling.posted(qpn, (flags,))

    def recv(self, s: Session, qpn: int, wr_id: int) -> None:
        """A receive for one incoming write-with-immediate (within the client's quota)."""
        host = self.engine.host
        assert host is not None
        self._owned(s, qpn)
        lim = self.engine.cfg.limits.max_recvs
        if s.recvs >= lim:
            # s.recvs only grows (consumed receives are not subtracted): recount the
            # receives still queued on the client's QPs once it reaches the limit.
            s.recvs = sum(len(host.qp(q).recv_wrs) for q in s.qps)
            if s.recvs >= lim:
                raise over_limit(f"post_recv: this client has {s.recvs} receives queued",
                                 "limits.max_recvs", lim)
        host.post_recv(qpn, wr_id, time.monotonic())
        s.recvs += 1
