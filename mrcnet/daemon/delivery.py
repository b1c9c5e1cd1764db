"""What the core has for mrcd's clients, delivered in the loop pass that made it: events
on the client's socket, completions into the CQ's shared ring (or, for a client without
rings, as JSON on the socket), with completion moderation (``modify_cq``).

A CQ ring that is full keeps the rest in the core's CQ (back-pressure, nothing lost): the
client rings mrcd once it made room (the ring's ``blocked`` handshake), and mrcd looks
again at least every :data:`FULL_RETRY` seconds meanwhile.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any, Final

from mrcnet import core
from mrcnet.api.messages import completions_push, event_push
from mrcnet.api.shmqueues import CQ_SLOT, encode_completions
from mrcnet.api.shmring import RingCorrupt
from mrcnet.core.cq import CompletionRow
from mrcnet.daemon.apiserver import Session
from mrcnet.daemon.rings import CompletionWriter

__all__ = ["Delivery"]

#: Completions pushed to a client without rings per message.
WC_PER_PUSH: Final = 256
#: How often mrcd looks again at a full CQ ring (s).
FULL_RETRY: Final = 0.001
_INF: Final = float("inf")


def _writer(handle: int, owner: Session) -> CompletionWriter | None:
    """The writer of CQ ``handle``'s ring in ``owner``'s queues (None: no ring)."""
    q = owner.queues
    w: CompletionWriter | None = q.cqs.get(handle) if q is not None else None
    return w


class Delivery:
    """The CQs of mrcd's clients and how their completions leave (see the module)."""

    def __init__(self, log: Any) -> None:
        self.log = log
        #: Every client CQ: handle -> (the core's CQ, its owner).
        self.cqs: dict[int, tuple[core.CompletionQueue, Session]] = {}
        #: Completion moderation per CQ (modify_cq): push when this many wait, or this
        #: long (s) after the oldest; and since when the oldest has waited.
        self.mod: dict[int, tuple[int, float]] = {}
        self.since: dict[int, float] = {}
        #: The earliest end of a moderated CQ's period or retry of a full ring (the
        #: engine's timer wakes for it).
        self.due = _INF
        #: Every CQ's queue of waiting completions (the core's deques, truthy when not
        #: empty), after the queues given to :meth:`watch`: ``any(queues)`` tells a
        #: pass with nothing to deliver in one C call (most of them: a port pass
        #: delivers before it sends and once more after).
        self.queues: list[Any] = []
        #: Other queues that ``queues`` holds first (:meth:`watch`: the core's events).
        self.watched: list[Any] = []
        #: Sessions owed a doorbell for completions the receive lane wrote into their
        #: rings itself (a CQ's ``on_ring``; in ``queues`` too: a pass rings them)
        self.owed: list[Session] = []
        #: Sessions woken for a receive (by the lane's completions: those of a write
        #: with immediate, not of a client's own writes) since the engine last looked:
        #: an answer from them may follow at once (mrcd's ``answer_poll_us``)
        self.woken: list[Session] = []
        #: Doorbells the lane rang for the rings of CQs now gone (:meth:`lane_bells`)
        self.bells_gone = 0

    def watch(self, queues: Sequence[Any]) -> None:
        """Hold ``queues`` (the core's events, :attr:`core.Host.event_queues`) in
        :attr:`queues` too: then ``not any(queues)`` says a pass has nothing at all to
        deliver, events included, in one C call (mrcd's engine)."""
        self.watched = list(queues)
        self._requeue()

    def add(self, handle: int, cq: core.CompletionQueue, owner: Session,
            writer: CompletionWriter | None = None) -> None:
        """Deliver CQ ``handle``'s completions to ``owner`` from now on (into the ring
        ``writer`` writes, if any: the core's receive lane may write there too)."""
        self.cqs[handle] = (cq, owner)
        if writer is not None and writer.c is not None:
            cq.attach_ring(writer.c, functools.partial(self._woke, owner))
            sock = owner.sock  # (the lane rings it itself: Session.ring's socket)
            writer.set_bell(sock.fileno() if sock is not None else -1)
        self._requeue()

    def _woke(self, owner: Session, owed: int) -> None:
        """The receive lane's write into one of ``owner``'s rings woke it (``owed``: its
        doorbell is still to be rung)."""
        self.woken.append(owner)
        if owed:
            self.owed.append(owner)

    def moderate(self, handle: int, count: int, period: float) -> None:
        """CQ ``handle``'s completions wait for ``count`` of them or ``period`` seconds
        (``count`` 1: each goes at once)."""
        entry = self.cqs.get(handle)
        w = _writer(handle, entry[1]) if entry is not None else None
        if w is not None:  # (the lane writes only the unmoderated's itself)
            w.set_direct(count == 1)
        if count == 1:
            self.mod.pop(handle, None)
        else:
            self.mod[handle] = (count, period)

    def lane_bells(self) -> int:
        """Doorbells the receive lane rang itself, ever (mrcd's ``doorbells`` count
        them with the rest)."""
        live = 0
        for handle, (_cq, owner) in self.cqs.items():
            w = _writer(handle, owner)
            live += w.bells if w is not None else 0
        return self.bells_gone + live

    def forget(self, handle: int) -> None:
        """CQ ``handle`` is gone."""
        entry = self.cqs.pop(handle, None)
        if entry is not None:
            entry[0].detach_ring()
            w = _writer(handle, entry[1])
            if w is not None:
                self.bells_gone += w.bells
                w.set_bell(-1)
        self.mod.pop(handle, None)
        self.since.pop(handle, None)
        self._requeue()

    def _requeue(self) -> None:
        self.queues = self.watched + [self.owed] + [c.entries for c, _ in self.cqs.values()]

    def events(self, host: core.Host, owners: dict[int, Session],
               sessions: dict[int, Session]) -> None:
        """Send the core's events: port changes to every client (``sessions``' values), a
        QP's to its owner. Stamped here, in the loop pass that made them (mrcd's clock is
        time.monotonic(), shared by every process on the machine): a client may read one
        much later, and when an EV changed is what tools measure."""
        while (ev := host.next_event()) is not None:
            if isinstance(ev, core.PortStatusChanged):  # every client's concern
                msg = event_push(ev, time.monotonic())
                for s in list(sessions.values()):  # (a send may drop one)
                    s.send(msg)
                continue
            owner = owners.get(ev.qpn)
            if owner is None:
                continue  # a QP its client destroyed
            if isinstance(ev, core.PathStateChanged) and not owner.path_events:
                continue
            owner.send(event_push(ev, time.monotonic()))
            if isinstance(ev, core.QPError):
                self.log.warning("QP error", qpn=ev.qpn, reason=ev.reason)

    def completions(self, host: core.Host) -> list[Session]:
        """Move every CQ's completions out (moderation permitting); returns the sessions
        that corrupted a ring (for the caller to drop)."""
        self.due = _INF
        mod, since = self.mod, self.since
        now = 0.0  # (read once, when a moderated CQ or a full ring needs it)
        # One doorbell per session, however many of its CQs got completions: the client
        # drains every CQ when woken, and a second doorbell in the same pass (a ping-pong's
        # send and receive CQs complete together) cost a send that woke it again
        # (measured: 2 doorbells per verbs round trip on each mrcd, at 30-80 us each).
        ring: dict[Session, None] | None = None  # (ordered, each session once)
        bad: list[Session] = []
        # (most calls find every CQ empty: a port pass delivers before it sends and once
        # more after; an empty CQ costs one test here)
        for handle, (cq, session) in self.cqs.items():
            if not cq.entries:
                continue
            if mod:
                m = mod.get(handle)
                if m is not None and len(cq.entries) < m[0]:
                    # Moderated: wait for more (an error goes at once), or the period.
                    now = now or time.monotonic()
                    t0 = since.setdefault(handle, now)
                    if now - t0 < m[1] and not cq.has_error():
                        self.due = min(self.due, t0 + m[1])
                        continue
            if since:
                since.pop(handle, None)
            w = _writer(handle, session)  # (a call per CQ that has completions)
            if w is None:
                while len(cq):
                    session.send(completions_push(handle, host.poll_cq(cq, WC_PER_PUSH)))
                continue
            try:
                # As many as the ring takes (one C call, the slots encoded once); a full
                # ring's rest stays in the CQ, first in line (_fill_rest)
                rows = cq.poll_rows(len(cq.entries))
                data = encode_completions(rows)
                n, wake = w.put(data)
                if n < len(rows):
                    wake = self._fill_rest(cq, w, rows, data, n) or wake
                # (the put disarmed the ring when it found it armed: ring then, whatever
                # it wrote, so that a disarmed ring always has a doorbell on its way)
                if wake:
                    if ring is None:
                        ring = {}
                    ring[session] = None
            except RingCorrupt as e:
                self.log.warning("client broke its completion ring", pid=session.pid,
                                 error=str(e))
                bad.append(session)
                continue
            if cq.entries:
                self.due = min(self.due, (now or time.monotonic()) + FULL_RETRY)
        owed = self.owed
        if owed:  # (the lane's own writes: their doorbells with the rest's)
            if ring is None:
                ring = {}
            for s in owed:
                ring[s] = None
            owed.clear()
        if ring is not None:
            for s in ring:
                s.ring()
        return bad

    @staticmethod
    def _fill_rest(cq: core.CompletionQueue, w: CompletionWriter,
                   rows: list[CompletionRow], data: bytes, n: int) -> bool:
        """``rows`` (encoded: ``data``) from the ``n``-th on, those ``w``'s full ring
        did not take: as many as it takes once the client made room meanwhile, the rest
        back in ``cq``, first in line; True if the client must be rung."""
        wake = False
        while True:
            if not w.block():  # full: the client rings when it made room
                cq.entries.extendleft(reversed(rows[n:]))
                return wake
            k, rang = w.put(data[n * CQ_SLOT:])
            wake |= rang
            n += k
            if n == len(rows):
                return wake
