"""The client's end of the queues it shares with mrcd (:mod:`mrcnet.api.shmqueues`): the
send queue it posts into, the completion rings it drains, the doorbells and the short
busy-poll before sleeping.

Doorbells are one-byte datagrams (:data:`DOORBELL`) on the context's Unix socket, both
ways: whatever waits on the socket (a ``select``, an asyncio reader) wakes for answers,
events and completions alike, and a doorbell never overtakes the control request posted
before it. (Not eventfds: an eventfd passed to mrcd shares its file status flags with
the client, which could make mrcd's read or write of it block; the socket's end mrcd
reads is its own.) A completion ring is *armed* while this end may sleep on the socket
without looking at it: mrcd rings the first pass that writes into an armed ring and
disarms it (one doorbell per arming: a second completion while the client has not yet
read the first doorbell costs no second doorbell and no second wake-up).

When the rings are armed depends on who may wait on the socket:

- *only the library* (the default): the rings are armed just before the library sleeps
  (:meth:`ClientQueues.wait` stores the flag, fences, then looks at each ring's tail
  once more: the producer publishes, fences, then loads the flag, so one of the two
  sees the other: no lost wake-up), and disarmed by the next look
  (:meth:`ClientQueues.drain`). A completion that comes while the application runs
  between two waits costs no doorbell (no ``send`` in mrcd, no ``recvmsg`` here): the
  next wait finds it in the ring before it arms;
- *a waiter outside the library* (anything that sleeps on the context's socket without
  calling :meth:`ClientQueues.wait`: a ``select`` on ``Context.fileno()``, an asyncio
  reader): once :meth:`ClientQueues.outside_waiters` was called (``Context.fileno()``
  calls it), every look at the rings ends by arming each again with a fence and taking
  what came meanwhile, so such a waiter is never left asleep: a disarmed ring always
  has a doorbell on its way or a drain to come. (The rule of every release before this
  one, kept for such waiters.)

A busy-poll spins on the disarmed rings' indices for up to ``busy_poll_us`` (adapted:
halved after a spin that found nothing, doubled back after one that did), then arms
them with a fence before sleeping.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import select
import socket
import time
from collections.abc import Callable
from typing import Any, Final

from mrcnet.api.errors import ProtocolError
from mrcnet.api.protocol import map_region, send_raw_by
from mrcnet.api.shmqueues import (
    COMPLETION_SLOT,
    CQ_SLOT,
    F_IMM,
    OP_RECV,
    OP_WRITE,
    OPCODES,
    SQ_SLOT,
    STATUSES,
    WORK_REQUEST,
    queue_bytes,
    ring_slots,
    sealed_memfd,
)
from mrcnet.api.shmring import Ring, RingCorrupt

__all__ = ["BUSY_POLL_ENV", "DOORBELL", "RING_BACK", "ClientQueues", "CompletionRing"]

#: The datagram that rings the other side (never a JSON message).
DOORBELL: Final = b"!"
#: The client's datagram that asks mrcd to ring it back (mrcd answers with a
#: :data:`DOORBELL`): for completions already in the rings that no doorbell announces
#: (see :meth:`ClientQueues.outside_waiters`).
RING_BACK: Final = b"?"

#: Environment variable: the busy-poll before sleeping, in microseconds (0: none).
BUSY_POLL_ENV: Final = "MRC_BUSY_POLL_US"
#: Default busy-poll (us): about one mrcd pass, so a reply that is on its way is
#: caught without a sleep and a wake-up.
DEFAULT_BUSY_POLL_US: Final = 50
#: How long a post waits for room in a full send queue before giving up (s).
_SQ_WAIT_MAX: Final = 0.001
#: Lazy receives that may wait for one doorbell (ClientQueues.post_recv): mrcd sees all
#: but this many of a socket-API channel's 64 posted receives whatever the application
#: does between its posts.
LAZY_MAX: Final = 16

Row = tuple[str, int, str, int, "int | None", int]

_STATUS_VALUES: Final = tuple(s.value for s in STATUSES)
_OPCODE_VALUES: Final = tuple(o.value for o in OPCODES)


def busy_poll_default() -> int:
    """``$MRC_BUSY_POLL_US``, else :data:`DEFAULT_BUSY_POLL_US`."""
    text = os.environ.get(BUSY_POLL_ENV, "")
    try:
        return max(0, int(text)) if text else DEFAULT_BUSY_POLL_US
    except ValueError:
        return DEFAULT_BUSY_POLL_US


def _shared_ring(name: str, depth: int, slot_size: int,
                 role: str) -> tuple[int, mmap.mmap, Ring]:
    """A new sealed memfd holding a ring of at least ``depth`` slots, mapped here: its fd
    (for mrcd), the mapping and this end of the ring."""
    nslots = ring_slots(depth)
    size = queue_bytes(nslots, slot_size)
    fd = sealed_memfd(name, size)
    try:
        mm = map_region(fd, size, "this process")
    except BaseException:
        os.close(fd)
        raise
    return fd, mm, Ring(mm, 0, nslots, slot_size, role)


class CompletionRing:
    """One CQ's ring, mapped here (the consumer)."""

    def __init__(self, depth: int) -> None:
        self.fd, self.map, self.ring = _shared_ring("mrc-cq", depth, CQ_SLOT, "consumer")
        self.nslots = self.ring.nslots
        self.ring.sleep()  # armed from the start (see the module's docstring)

    def rows(self, data: bytes | bytearray) -> list[Row]:
        """The completions in ``data`` (slots taken from the ring: ``ring.take``) as
        (status, wr_id, opcode, byte_len, imm, qpn) rows."""
        # (decoded in one pass: no call of ours per completion)
        sv, ov = _STATUS_VALUES, _OPCODE_VALUES
        try:  # (an index out of the tables is a malformed slot: unsigned, never < 0)
            rows: list[Row] = [(sv[st], wr_id, ov[op], byte_len,
                                imm if flags & F_IMM else None, qpn)
                               for st, op, flags, qpn, wr_id, byte_len, imm
                               in COMPLETION_SLOT.iter_unpack(data)]
        except IndexError:
            bad = next(x for x in COMPLETION_SLOT.iter_unpack(data)
                       if x[0] >= len(STATUSES) or x[1] >= len(OPCODES))
            raise ProtocolError(f"malformed completion from mrcd (status {bad[0]}, "
                                f"opcode {bad[1]})") from None
        return rows

    def close(self) -> None:
        """Unmap and close (after mrcd forgot the CQ)."""
        self.ring.detach()
        self.map.close()
        os.close(self.fd)


class ClientQueues:
    """A context's send queue, its CQs' rings and the doorbells (see the module)."""

    def __init__(self, sock: socket.socket, busy_poll_us: int | None = None,
                 sq_depth: int = 1024) -> None:
        self.sock = sock
        self.fd, self.map, self.sq = _shared_ring("mrc-sq", sq_depth, SQ_SLOT, "producer")
        self.nslots = self.sq.nslots
        self._room = 0  # send-queue slots known free (see _slot)
        self.cqs: dict[int, CompletionRing] = {}
        self.busy_poll_us = busy_poll_default() if busy_poll_us is None else busy_poll_us
        self._spin = self.busy_poll_us / 1e6
        #: Arm the rings after every look, not only before the library sleeps: something
        #: outside the library may sleep on the socket (see the module).
        self.arm_on_drain = False
        #: The rings may be armed (this end stored the flag since it last cleared it).
        self._armed = False
        #: Waits in progress (:meth:`wait`, or an asyncio reader between :meth:`arm` and
        #: its wake-up): while one sleeps, a look by another thread or task arms again.
        self.sleepers = 0
        #: Armings of the rings so far (:meth:`arm`, and a look's while another waits),
        #: and their count when the last :meth:`arm_to_sleep` armed (see there).
        self.arms = 0
        self._sleep_arms = -1
        #: Lazy receives (``post_recv(lazy=True)``) published since mrcd last asked for a
        #: doorbell and not yet rung for: the next post, or the library's next sleep,
        #: rings (:meth:`pay`), and so does the LAZY_MAX-th.
        self.owed = 0

    def outside_waiters(self) -> None:
        """Something outside the library may sleep on the socket from now on (a
        ``select`` on the context's fd): arm the rings after every look (see the
        module), beginning now. Completions the rings hold already were published while
        they were disarmed (after the library's last look), so no doorbell announces
        them, and a ``select`` that follows would sleep through them: then mrcd is asked
        to ring (:data:`RING_BACK`), and the socket becomes readable."""
        if not self.arm_on_drain:
            self.arm_on_drain = True
            if self.arm():
                self.ring_back()

    def ring_back(self, timeout: float = 5.0) -> None:
        """Ask mrcd for a doorbell (:data:`RING_BACK`). Unlike :meth:`ring_mrcd` it
        waits up to ``timeout`` for room in a full socket: nothing else would wake a
        waiter outside the library (rare: once per context at most)."""
        # (OSError, TimeoutError too: mrcd stopped reading, or is gone; the next read of
        # the socket says which)
        with contextlib.suppress(OSError):
            send_raw_by(self.sock, RING_BACK, time.monotonic() + timeout)

    def arm(self) -> bool:
        """Arm every ring (flag, fence, tail) before sleeping on the socket: True if one
        had completions meanwhile (then do not sleep). A sleeper outside :meth:`wait`
        counts itself in :attr:`sleepers` first (and out after)."""
        self._armed = True
        self.arms += 1
        return any([cq.ring.sleep() for cq in self.cqs.values()])  # (all of them armed)

    def arm_to_sleep(self) -> bool:
        """:meth:`arm`, for a sleeper outside :meth:`wait` (counted in :attr:`sleepers`
        already); :meth:`rang_once_at_most` when it woke."""
        found = self.arm()
        self._sleep_arms = self.arms
        return found

    def rang_once_at_most(self) -> bool:
        """After :meth:`arm_to_sleep`'s sleep: True when mrcd can have rung at most once
        for it (one ring, armed by that call alone: mrcd disarms a ring when it rings),
        so that a read of the socket up to its first doorbell leaves none of this sleep's
        behind. (A doorbell left from an earlier arming only wakes the next sleep.)"""
        return (self.arms == self._sleep_arms and len(self.cqs) == 1
                and not self.arm_on_drain)

    def fds(self) -> list[int]:
        """What goes to mrcd with ``hello``: the send queue's memfd."""
        return [self.fd]

    def close(self) -> None:
        """Release everything (mrcd has let go of its ends, or is gone)."""
        for cq in self.cqs.values():
            cq.close()
        self.cqs.clear()
        self.sq.detach()
        self.map.close()
        os.close(self.fd)

    def ring_mrcd(self) -> None:
        """Wake mrcd. A full socket drops the doorbell: mrcd has unread messages then,
        and it takes the send queue before any of them."""
        self.owed = 0
        try:  # noqa: SIM105 (not contextlib.suppress: three Python calls a post that rings)
            self.sock.send(DOORBELL, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            pass

    # -- posting --
    def _slot(self, timeout: float) -> int:
        """The offset of the next free send-queue slot, waiting (bounded) while mrcd
        catches up (TimeoutError after ``timeout`` s)."""
        sq = self.sq
        if self._room <= 0:
            # (the room seen last is still there: only mrcd's taking adds to it, so the
            # head is read again only once that is used up)
            self._room = sq.room()
            if not self._room:
                deadline = time.monotonic() + timeout
                pause = 20e-6
                while not sq.room():
                    self.ring_mrcd()  # make sure mrcd looks
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"mrcd took no work request in {timeout} s "
                                           "(its send queue is full)")
                    time.sleep(pause)
                    pause = min(pause * 2, _SQ_WAIT_MAX)
                self._room = sq.room()
        self._room -= 1
        return sq.offset_of(sq.tail)

    def post_write(self, qpn: int, wr_id: int, lkey: int, addr: int, length: int,
                   remote_addr: int, rkey: int, imm: int | None, timeout: float,
                   flags: int = 0) -> None:
        """Queue an RDMA WRITE (checked by the caller) and ring mrcd if it sleeps.
        ``flags``: the slot's flags besides :data:`F_IMM` (:data:`F_UNSIGNALED`)."""
        sq = self.sq
        if self._room > 0:  # (_slot's common case inline: once per post)
            self._room -= 1
            off = sq.slots + (sq.tail & sq.mask) * SQ_SLOT
        else:
            off = self._slot(timeout)
        WORK_REQUEST.pack_into(self.map, off, OP_WRITE,
                               flags if imm is None else flags | F_IMM, qpn, wr_id, lkey,
                               length, addr, remote_addr, rkey, 0 if imm is None else imm)
        if sq.publish() or self.owed:
            self.ring_mrcd()

    def post_recv(self, qpn: int, wr_id: int, timeout: float, lazy: bool = False) -> None:
        """Queue a receive and ring mrcd if it sleeps. ``lazy``: a receive that replaces
        one just used while others stay posted (the socket API's): its doorbell is owed
        instead, rung by the next post or before the library sleeps (:meth:`pay`), so
        that an answer posted next wakes mrcd once, not twice (never lazy once something
        outside the library may sleep on the socket)."""
        sq = self.sq
        if self._room > 0:
            self._room -= 1
            off = sq.slots + (sq.tail & sq.mask) * SQ_SLOT
        else:
            off = self._slot(timeout)
        WORK_REQUEST.pack_into(self.map, off, OP_RECV, 0, qpn, wr_id, 0, 0, 0, 0, 0, 0)
        asleep = sq.publish()
        if self.owed:
            if lazy and self.owed < LAZY_MAX:
                self.owed += 1  # (the doorbell owed covers this slot too)
            else:
                self.ring_mrcd()
        elif asleep:
            if lazy and not self.arm_on_drain:
                self.owed = 1
            else:
                self.ring_mrcd()

    def pay(self) -> None:
        """Ring the doorbell lazy receives owe, if any (before sleeping)."""
        if self.owed:
            self.ring_mrcd()

    # -- completions --
    def add_cq(self, handle: int, ring: CompletionRing) -> None:
        """Drain ``ring`` for CQ ``handle`` from now on (it comes armed)."""
        self.cqs[handle] = ring
        self._armed = True

    def drain(self, sink: Callable[[int, list[Row]], None]) -> None:
        """Give every CQ's new completions to ``sink(handle, rows)`` (after the socket
        was read): each ring left disarmed (the next :meth:`wait` arms it), or, with
        :attr:`arm_on_drain`, armed again (a completion published later rings)."""
        ring_mrcd = False
        arm = self.arm_on_drain or self.sleepers > 0
        # (Disarmed before the take: a completion published after it is found by the
        # next wait, which looks at the tail after it arms.)
        if self._armed and not arm:
            self._armed = False
            for cq in self.cqs.values():
                cq.ring.wake()
            # A wait that began meanwhile (another thread) may have armed before the
            # stores above: then arm again (below, with the fence), as it needs.
            arm = self.sleepers > 0
        if arm:
            self._armed = True
            self.arms += 1
        try:
            for handle, cq in self.cqs.items():
                ring = cq.ring
                while True:
                    # The slots copied out and given back at once (one C call), decoded
                    # only when there are some: most looks find none.
                    data, blocked = ring.take(cq.nslots)
                    if data:
                        sink(handle, cq.rows(data))
                    ring_mrcd |= blocked
                    # Armed again (mrcd disarmed it if it rang), with the fence: what it
                    # published before seeing that is taken now (no lost wake-up).
                    if not arm or not ring.sleep():
                        break
        except RingCorrupt as e:
            raise ProtocolError(f"completion ring corrupt: {e}") from None
        if ring_mrcd:
            self.ring_mrcd()

    def _any_ready(self) -> bool:
        return any(cq.ring.ready() for cq in self.cqs.values())

    def wait(self, timeout: float | None) -> bool:
        """Wait until a ring has completions, the socket is readable (mrcd rang or
        answered) or ``timeout`` (None: forever): first a busy-poll of the rings, then
        armed, asleep on the socket. True when it slept and the socket is readable (read
        it), False when it did not sleep (the rings had completions) or timed out."""
        self.sleepers += 1
        try:
            spin = self._spin
            if spin > 0.0 and self.cqs:
                now = t0 = time.perf_counter()
                end = t0 + (spin if timeout is None else min(spin, timeout))
                found = False
                # (armed throughout while another thread or task waits: it relies on
                # mrcd's doorbell)
                keep = self.sleepers > 1
                try:
                    if self._armed and not keep:  # (spinning: mrcd need not ring)
                        self._armed = False
                        for cq in self.cqs.values():
                            cq.ring.wake()
                    while now < end:
                        if self._any_ready():
                            found = True
                            break
                        # (giving way: mrcd, or the peer's application on a
                        # shared host, may be queued on this CPU; none: at once)
                        os.sched_yield()
                        now = time.perf_counter()
                finally:
                    # Armed before sleeping, and whatever happened for waiters outside
                    # the library and the other waits above.
                    armed = self.arm() if not found or keep or self.arm_on_drain else False
                top = self.busy_poll_us / 1e6
                self._spin = min(top, spin * 2) if found else max(top / 16, spin / 2)
                if found or armed:
                    return False
                if timeout is not None:
                    timeout = max(0.0, timeout - (now - t0))
            elif not self._armed and self.arm():
                return False
            if self.owed:  # (pay: mrcd must see the receives before this end sleeps)
                self.ring_mrcd()
            r, _, _ = select.select([self.sock], [], [], timeout)
            return bool(r)
        finally:
            self.sleepers -= 1

    def info(self) -> dict[str, Any]:
        """What ``hello`` tells mrcd about the send queue."""
        return {"sq_slots": self.nslots}
