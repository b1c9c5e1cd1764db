"""Tail losses: what a lost packet that nothing sent after it reveals costs, made short.

Two additions to the requester's RACK (:class:`mrcnet.core.recovery.Recovery` holds
them through :class:`TailLoss`; docs/CORE.md "Tail losses and shared verdicts"):

- RACK's tie-break (RFC 8985: of two packets sent at the same time the higher sequence is
  the more recent): a burst leaves at one instant, so a packet of it lost behind its
  acknowledged siblings is found once RACK's wait has passed, not at the timeout;
- the tail-loss probe (RFC 8985 section 7): ``pto`` without news while packets are in
  flight, the newest is resent on another path; its answer judges the original's path;
- the tail's path (``HostConfig.tail_path``): a QP's last packet before it goes idle
  goes on a path that has just delivered, so that a dead path (which only the probe
  would find under a tail) takes no tail.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from mrcnet.constants import EV_PATH_SHIFT, LAST_OPCODES, Opcode
from mrcnet.core.cc import CongestionControl
from mrcnet.core.config import HostConfig
from mrcnet.core.context import QPView
from mrcnet.core.evs import EVManager, ev_path
from mrcnet.core.sender import Sender
from mrcnet.core.states import EVState, QPState
from mrcnet.core.txtable import E_EV, E_OP, E_SENT, E_TX, E_WR, TxTable

_INF = float("inf")
# a message's last packet without an immediate: its AckReq is answered at once
_PLAIN_ENDS = frozenset({Opcode.WRITE_LAST, Opcode.WRITE_ONLY})


def _ends_mask(ops: set[int]) -> bytes:
    """A 256-entry opcode mask (``TxTable.prompt_scan``'s ``ends``)."""
    return bytes(op in ops for op in range(256))


# _prompt_end's message ends, by ``ack_with_data``
_ENDS = {False: _ends_mask({*_PLAIN_ENDS, *LAST_OPCODES}), True: _ends_mask(set(_PLAIN_ENDS))}


class TailLoss:
    """The tie-break and the tail-loss probe, mixed into ``Recovery``: its state
    (``rack_tie``, ``tlp_at``, ``tlp_sent``, ``tlp_log``, set by ``Recovery.reset``) and
    the parts of ``Recovery`` they use, declared here."""

    qp: QPView
    cfg: HostConfig
    txt: TxTable
    cc: CongestionControl | None
    evm: EVManager | None
    srtt: float
    retries: int
    rack_at: float
    rto_at: float
    rack_tie: tuple[float, int]
    tlp_at: float
    tlp_sent: bool
    tlp_log: dict[int, tuple[float, bool]]
    snd: Sender
    snd_una: int
    reo_scale: int
    reo_learned: float
    rttvar: float
    min_rtt: float

    def _mark_lost(self, seq: int, now: float, cause: str) -> None:
        raise NotImplementedError

    def _retire_path(self, evs: list[int], now: float, cause: str = "loss",
                     dead: bool = False) -> None:
        raise NotImplementedError

    def _silent_path(self, ev: int, key: int, sent: float, now: float) -> bool:
        raise NotImplementedError

    def _confirmed_loss(self, ev: int, now: float) -> None:
        raise NotImplementedError

    def _learn_reorder(self, late: float, allowance: float) -> None:
        raise NotImplementedError

    def rto(self, ev: int) -> float:
        raise NotImplementedError

    def backoff(self) -> float:
        raise NotImplementedError

    def pto(self, newest: Any = None, now: float = 0.0) -> float:
        """Tail-loss probe timeout (RFC 8985 section 7.2): ``tlp_srtts`` (2) smoothed RTTs
        (``tlp_srtts_queued`` while the QP's samples show queueing: :meth:`_queued`;
        the hint before a sample) plus the peer's ACK hold (``tlp_hold``, else
        ``ack_delay``), none with ``tlp_prompt`` if the newest packet in flight
        (``newest``: its entry, else looked up) is reported at once (a retransmission or
        a message's end: :meth:`_prompt_end`; RFC 8985 adds the delayed-ACK time only
        where an ACK may be delayed)."""
        cfg = self.cfg
        hold = cfg.ack_delay if cfg.tlp_hold is None else cfg.tlp_hold
        if cfg.tlp_prompt:
            if newest is None and self.txt.ninfl:
                newest = self.txt.get(self.txt.inflight()[-1])
            if newest is not None and self._prompt_end(newest):
                hold = 0.0
        rtt = self.srtt or cfg.base_rtt_hint
        if cfg.tlp_fail_rtt:
            last = self.txt.rack_rtt
            if 0.0 < last < rtt and self._fail_rtt_on(now):
                rtt = last
        mult = cfg.tlp_srtts
        if cfg.tlp_srtts_queued and self._queued():
            mult = cfg.tlp_srtts_queued
        return mult * rtt + hold

    def _queued(self) -> bool:
        """``HostConfig.tlp_srtts_queued``: whether the QP's RTT samples show queueing
        (4 rttvar or srtt - min_RTT at least ``tlp_queue``, else ``rack_prompt_queue``:
        :meth:`_prompt_losses`'s measure, so that a QP under an incast takes the shorter
        probe and a ring's queue-free hop keeps ``rack_prompt``'s RACK rule)."""
        cfg = self.cfg
        return self._queueing() >= (cfg.tlp_queue or cfg.rack_prompt_queue)

    def _queueing(self) -> float:
        """The queueing the QP's RTT samples show: 4 rttvar or srtt - min_RTT, the larger
        (``rack_prompt_queue``'s and ``tlp_srtts_queued``'s measure)."""
        return max(4 * self.rttvar, self.srtt - self.min_rtt)

    def _failing_since(self, now: float) -> float:
        """When the host last learnt of a route failing among those it holds failing
        (its shared verdicts); -1 when it holds none or shares none, or (with
        ``tlp_fail_window``) learnt it longer ago than that before ``now``."""
        evm = self.evm
        v = evm.verdicts if evm is not None else None
        since = v.failing_since() if v is not None else -1.0
        win = self.cfg.tlp_fail_window
        return since if not win or now - since <= win else -1.0

    def _fail_rtt_on(self, now: float) -> bool:
        """Whether ``tlp_fail_rtt`` acts now: while the host holds a route failing
        (:meth:`_failing_since`), or always without ``tlp_fail_gate``."""
        return not self.cfg.tlp_fail_gate or self._failing_since(now) >= 0

    def probe_ev(self, info: Any, avoid: int, now: float) -> Any:
        """``HostConfig.tlp_fail_path``: the EV for a probe's resend, sprayed onto
        ``info`` (an :class:`~mrcnet.core.evs.EVInfo` on another path than ``avoid``, the
        original's EV). While the host holds a route failing it keeps ``info`` only if
        its path has delivered a packet sent since the host learnt of the failure; else
        the usable EV of the path most recently so proven, if any (not ``avoid``'s
        path). A probe's resend that lands on the dead link too waits for the next
        probe (docs/COLLECTIVES.md, "session 12": the all-to-all's failure steps)."""
        since = self._failing_since(now)
        if since < 0:
            return info
        acked = self.txt.path_acked
        if acked(info.ev >> EV_PATH_SHIFT) >= since:
            return info
        evm = self.evm
        assert evm is not None
        usable, skip = evm.usable_planes, avoid >> EV_PATH_SHIFT
        best, newest = info, since
        for cand in evm.evs.values():
            key = cand.ev >> EV_PATH_SHIFT
            if key == skip or cand.state is not EVState.GOOD or cand.plane not in usable:
                continue
            t = acked(key)
            if t >= newest and (best is info or t > newest):
                best, newest = cand, t
        if best is not info:
            self.qp.count("tlp_path_moved")
        return best

    def arm_tlp(self, now: float) -> None:
        """Packets are in flight and new ones went or acknowledgements moved on: the
        probe fires ``pto`` from now (RFC 8985 re-arms it on each), unless the
        retransmission timer comes first, and at most once until acknowledgements move
        again. With ``tlp_fail_rtt`` while the host holds a route failing: ``pto`` from
        the newest packet in flight's send time, at least half of it from now (a
        step's tail leaves when a window opens, and its siblings' acknowledgements keep
        re-arming the probe from later instants for as long as they come: 20 us of
        the 64-host all-to-all's 100, docs/COLLECTIVES.md "session 13"; half a ``pto``,
        a newest RTT, after the latest news lets a long flight's queue drain). (The rule
        lives in :meth:`arm_sent`, which new packets call.)"""
        self.arm_sent(now)

    def arm_sent(self, now: float, ev: int = -1) -> None:
        """New packets went at ``now``, the first of them on ``ev``: the retransmission
        timer from them unless one is armed (``rto(ev)``, backed off), then the
        tail-loss probe (:meth:`arm_tlp`'s rule); ``ev`` -1: the probe only. One call
        per run sent instead of three (``rto`` stays a call: the EV's numbers may be
        C's)."""
        if ev >= 0 and self.rto_at == _INF:
            # (backoff is 1.0 with no retry round: no call then)
            self.rto_at = now + self.rto(ev) * (self.backoff() if self.retries else 1.0)
            self.qp.tv += 1
        if self.tlp_sent or not self.cfg.tail_probe:
            return
        pto = self.pto(None, now)
        at = now + pto
        txt = self.txt
        if self.cfg.tlp_fail_rtt and txt.ninfl and self._fail_rtt_on(now):
            e = txt.get(txt.inflight()[-1])
            if e is not None:
                at = max(e[E_SENT] + pto, now + pto / 2)
        self.tlp_at = at if at < self.rto_at else _INF
        self.qp.tv += 1

    def tail_ev(self, ev: int, runs: deque[tuple[list[int], float]], now: float) -> int:
        """``HostConfig.tail_path``: the EV for the QP's last packet before it goes idle,
        sprayed onto ``ev``. Nothing sent after a tail lets RACK see it lost: on a dead
        path it waits for the probe (2 srtt + the hold; under an incast's queues, 100 us
        on the 64-host all-to-all, docs/COLLECTIVES.md "session 12"). While the host
        holds a route failing (its shared verdicts: a link is down somewhere near), it
        keeps ``ev`` only if ``ev``'s path has delivered a packet sent since the host
        last learnt of a failure; else it takes the newest EV of ``runs`` (the QP's last
        runs: their EVs and send times) whose path has (alive since the failure), if
        one is usable; else ``ev``. (Without a failing route known it keeps ``ev``:
        moving every tail off the spray's order made the 64-host all-to-all's first
        timed step 8 % slower; proven only since the run left, a path could have died
        after, and tails went onto the dead link.)"""
        v = self.evm.verdicts  # type: ignore[union-attr]
        since = v.failing_since() if v is not None and runs else -1.0
        if since < 0:  # (no failing route known)
            return ev
        acked = self.txt.path_acked
        if acked(ev >> EV_PATH_SHIFT) >= since:
            return ev
        evs = self.evm.evs  # type: ignore[union-attr]
        usable = self.evm.usable_planes  # type: ignore[union-attr]
        for run, _sent in reversed(runs):
            for cand in reversed(run):
                if cand != ev and acked(cand >> EV_PATH_SHIFT) >= since:
                    info = evs.get(cand)
                    if (info is not None and info.state is EVState.GOOD
                            and info.plane in usable):
                        self.qp.count("tail_path_moved")
                        return cand
        return ev

    def _lose_path(self, key: int, now: float) -> None:
        """``HostConfig.retire_inflight``: path ``key`` (EV >> EV_PATH_SHIFT) was retired
        as dead; its packets still in flight went the way of the packet that condemned
        it. Lost at once (cause ``path``: no path blame, nothing learnt) instead of each
        waiting for RACK (whose allowance spurious losses may have widened to the
        timeout's), the probe or the timer: docs/COLLECTIVES.md, "session 12"."""
        txt = self.txt
        for seq in txt.inflight():
            e = txt.get(seq)
            if e is not None and e[E_EV] >> EV_PATH_SHIFT == key:
                self._mark_lost(seq, now, "path")

    def _shared_retired(self, plane: int, path: int, now: float) -> None:
        """``HostConfig.verdict_inflight``: another QP of the host retired a route this
        QP's (``plane``, ``path``) shares (its shared verdicts). This QP's packets still
        in flight on the path are lost at once (cause ``path``: no blame, nothing
        learnt, no congestion signal) and resent on another. A step's tail that left on
        a link just before it died has nothing sent after it for RACK, and without this
        waits for the tail-loss probe, 70-100 us after it left in the 64-host
        all-to-all, though another QP's RACK may name its route dead well before
        (docs/COLLECTIVES.md, "session 14")."""
        txt = self.txt
        if not txt.ninfl or self.qp.state is not QPState.RTS:
            return  # (only a QP that sends resends)
        lost = [seq for seq in txt.inflight()
                if (e := txt.get(seq)) is not None and ev_path(e[E_EV])[:2] == (plane, path)]
        if not lost:
            return
        for seq in lost:
            self._mark_lost(seq, now, "path")
        self.qp.count("verdict_inflight", len(lost))
        wake = self.qp.ctx.wake
        if wake is not None:
            wake(self.qp.qpn)

    def _on_tlp(self, now: float) -> None:
        """Tail-loss probe (RFC 8985 section 7, for sprayed paths): ``pto`` without news,
        packets in flight. A lost packet that nothing sent after it reveals (the tail of
        a message, or a burst's packet on a dead path) would wait for the retransmission
        timeout; instead the newest packet in flight is resent at once, on another path
        (a retransmission avoids its last EV). No path is blamed yet: when the probe's
        answer comes and the original never did, its path is (:meth:`_tlp_answered`),
        provided a packet sent no earlier than the original was acknowledged before the
        probe (a burst's sibling: the peer was answering; a stalled or late peer
        acknowledges nothing then, and blames nothing); if the original arrives after
        all, nothing is."""
        self.tlp_at = _INF
        self.qp.tv += 1
        txt = self.txt
        if self.tlp_sent or self.retries or not txt.ninfl:
            return
        seq = txt.inflight()[-1]
        e = txt.get(seq)
        if e is None:
            return
        due = e[E_SENT] + self.pto(e, now)
        if due > now:  # sent since the timer was armed: wait for its own turn
            self.tlp_at = due if due < self.rto_at else _INF
            self.qp.tv += 1
            return
        self.tlp_sent = True
        self._mark_lost(seq, now, "tlp")

    def _tlp_answered(self, ev: int, probe: tuple[float, bool], now: float) -> None:
        """The probe resent on another path got through while the original (on ``ev``,
        sent at ``probe[0]``) never did: the peer answers, the original's path failed
        it. If the peer was answering when the original left (``probe[1]``): retired at
        once when nothing sent on it after the original has been acknowledged (what a
        dead path shows; the host's other QPs learn it too), else a confirmed loss of
        a lossy path. Otherwise (a lone packet: a stall looks the same) the path is
        judged by its history as after a timeout (:meth:`_silent_path`)."""
        sent, blame = probe
        key = ev >> EV_PATH_SHIFT
        if not blame:
            if self._silent_path(ev, key, sent, now):
                self.qp.count("tlp_silent_path")
                self._retire_path([ev], now, "timeout", dead=True)
        elif self.txt.path_acked(key) <= sent:
            self.qp.count("tlp_path_retired")
            self._retire_path([ev], now, dead=True)
        else:
            self.cc.on_loss(now)  # type: ignore[union-attr]
            self._confirmed_loss(ev, now)

    def _detect_tied(self, limit: float, tie_seq: int, wait: float, now: float) -> None:
        """The packets in flight sent at ``limit`` (the newest acknowledged send time) with
        a lower sequence than the one acknowledged: sent in the same burst before it, so
        lost by RACK's rule once ``wait`` has passed (RFC 8985's tie-break), or, on a path
        slower than the one acknowledged (spines of unequal length), once that path's own
        smoothed RTT and the same allowance have: what separates packets sent together is
        the paths' skew, not reordering. A packet on a path with no RTT sample is bounded
        by the QP's slowest measured path if the path has delivered before (acknowledged
        in a SACK's bitmap: SACKs triggered by the same packet positions, write after
        write, leave such paths unsampled), else left to the probe and the timer (a
        first burst over spines of unequal length). They lead the flight order
        (everything sent earlier is already reported)."""
        txt = self.txt
        first = txt.oldest()
        e = txt.get(first) if first is not None else None
        if e is None or first is None or first >= tie_seq or e[E_SENT] != limit:
            return
        allowance = wait - txt.rack_rtt
        srtts: dict[int, float] = {}  # _path_srtt's answers for this pass
        for seq in txt.inflight():
            e = txt.get(seq)
            if e is None or e[E_SENT] != limit or seq >= tie_seq:
                return
            rtt = self._path_srtt(e[E_EV], srtts)
            if not rtt:
                if txt.path_acked(e[E_EV] >> EV_PATH_SHIFT) < 0:
                    continue  # a path never heard from: how slow it is nobody knows
                rtt = max(srtts.values(), default=0.0)
                if not rtt:
                    continue
            due = limit + max(wait, rtt + allowance)
            if due > now:
                self.rack_at = min(self.rack_at, due)
                self.qp.tv += 1
                continue
            self.qp.count("loss_rack_tie")
            self._mark_lost(seq, now, "loss")
            srtts.clear()  # (what a loss changes, the next answers see)

    def _rack_hold(self) -> float:
        """How long RACK lets the peer hold a packet's report (``rack_hold``, else the
        responder's ``ack_delay``)."""
        cfg = self.cfg
        return cfg.ack_delay if cfg.rack_hold is None else cfg.rack_hold

    def _prompt_losses(self, limit: float, wait: float, now: float,
                       declare: bool = True) -> float:
        """``HostConfig.rack_prompt``: RACK's rule for the packets in flight whose arrival
        the peer reports at once (:meth:`_prompt`), without the allowance for a held
        report (``rack_hold``). Those whose time has passed are declared lost (with
        ``declare``; else the answer is 0.0 if any has); returns when the next one will
        be (inf: none). With ``rack_prompt_queue`` only while the QP's RTT samples show
        less queueing than that (4 rttvar and srtt - min_RTT): under an incast the
        shorter wait declared reordering lost (the 64-host all-to-all: 436 RACK losses
        against 253, its steps without failure up to 211 us against 192), while a ring's
        hops, queue-free, gain the most from it (docs/COLLECTIVES.md, "session 14")."""
        cfg = self.cfg
        if not cfg.rack_prompt:
            return _INF
        quiet = cfg.rack_prompt_queue
        if quiet and self._queueing() >= quiet:
            return _INF
        txt = self.txt
        tie_sent, tie_seq = self.rack_tie
        tied = tie_sent == limit and self.cfg.rack_tie_break
        # Their report is not held: the window need only cover the paths' reordering,
        # which queues make: the RTT samples' variation (4 rttvar, as an RTO allows for
        # it) and the queueing the smoothed RTT shows (srtt - min_RTT: one packet may
        # meet it, the next not), at least half the minimum RTT by default
        # (``rack_prompt_floor``; a quarter, RFC 8985's, blamed a queue on
        # tests/sim/test_coll_detection.py's ring after the failure),
        # up to RACK's whole allowance, the hold included (under an incast the queues
        # reorder past the floor, and the hold covered that: capped at the floor, the
        # 64-host all-to-all declared 1,767 spurious losses against 247; docs/
        # COLLECTIVES.md, "session 12"); after a spurious loss, RACK's window as widened.
        window = wait - txt.rack_rtt
        if self.reo_scale == 1 and not self.reo_learned:
            window = min(window, max(self.min_rtt * self.cfg.rack_prompt_floor,
                                     4 * self.rttvar, self.srtt - self.min_rtt))
        else:
            window -= self._rack_hold()
        srtts: dict[int, float] = {}  # _path_srtt's answers for this pass
        # The table walks the flight (in C for the C table) and times the common case
        # itself, a retransmission or a message's end sent before the bound; it leaves
        # the tie-break's bound and the gap fill to the loop below. One already due:
        # the loop walks the whole flight, declaring in the walk's order.
        seqs, at = txt.prompt_scan(limit, tied, tie_seq if tied else 0, self.snd_una,
                                   _ENDS[bool(self.cfg.ack_with_data)], txt.rack_rtt,
                                   window, now)
        if at < 0:
            if not declare:
                return 0.0
            seqs, at = txt.inflight(), _INF
        for seq in seqs:
            e = txt.get(seq)
            if e is None:
                continue
            sent = e[E_SENT]
            if sent > limit or (sent == limit and (not tied or seq >= tie_seq)):
                break
            if not self._prompt(seq, e):
                continue
            rtt = txt.rack_rtt
            if sent == limit:  # (the tie-break's bound: a slower path's own RTT, else
                # the slowest measured one if the path has delivered before)
                prtt = self._path_srtt(e[E_EV], srtts)
                if not prtt:
                    if txt.path_acked(e[E_EV] >> EV_PATH_SHIFT) < 0:
                        continue  # a path never heard from is left alone
                    prtt = max(srtts.values(), default=0.0)
                    if not prtt:
                        continue
                rtt = max(rtt, prtt)
            due = sent + rtt + window
            if due > now:
                at = min(at, due)
            elif not declare:
                return 0.0
            else:
                if sent == limit:
                    self.qp.count("loss_rack_tie")
                self._mark_lost(seq, now, "loss")
                srtts.clear()
        return at

    def _prompt_end(self, e: Any) -> bool:
        """:meth:`_prompt`'s first two cases: a retransmission, or a message's end."""
        op = e[E_OP]
        return bool(e[E_TX] > 1 or op in _PLAIN_ENDS
                    or (op in LAST_OPCODES and not self.cfg.ack_with_data))

    def _prompt(self, seq: int, e: Any) -> bool:
        """Whether the peer reports this packet's arrival at once: a retransmission; a
        message's last packet (it asks for an ACK; with an immediate, unless the peer
        may hold the ACK for an answer, ``ack_with_data``); a packet at the cumulative
        point whose work request's later packets are all sent and acknowledged (its
        arrival completes a message whose end came first: the peer's ``ack_gap_fill``).
        The peer is taken to run this host's configuration."""
        if self._prompt_end(e):
            return True
        if seq != self.snd_una or not self.cfg.ack_gap_fill:
            return False
        wr = self.snd.wr_of.get(e[E_WR])
        return (wr is not None and wr.next_pkt == wr.npkts
                and self.txt.wr_unacked(e[E_WR]) == 1)

    def _path_srtt(self, ev: int, paths: dict[int, float] | None = None) -> float:
        """The smoothed RTT of ``ev``'s path: the EV's own, else the largest of the
        path's other EVs (EVs of one path share its links); 0 if none is measured.
        ``paths``: an empty dict the caller keeps while the EVs' RTTs stay as they are,
        filled on first need with every path's largest in one pass over the EVs (a
        burst's tied packets spread over many paths: one pass instead of one each)."""
        evm = self.evm
        if evm is None:
            return 0.0
        info = evm.evs.get(ev)
        if info is not None and info.srtt:
            return info.srtt
        key = ev >> EV_PATH_SHIFT
        if paths is None:
            return max((i.srtt for i in evm.evs.values() if i.ev >> EV_PATH_SHIFT == key),
                       default=0.0)
        if not paths:
            for i in evm.evs.values():
                r = i.srtt
                if r:  # (a path none of whose EVs is measured answers 0)
                    k = i.ev >> EV_PATH_SHIFT
                    if r > paths.get(k, 0.0):
                        paths[k] = r
        return paths.get(key, 0.0)

    def _late_arrival(self, seq: int, late: float, allowance: float) -> bool:
        """A transmission declared lost (with RACK's ``allowance`` then) arrived
        ``late`` s after that: learn the reordering (True), unless a tail-loss probe
        declared it (False): the probe fires on silence, not on reordering, and a late
        tail says nothing about the skew between paths."""
        if self.tlp_log.pop(seq, None) is not None:
            self.qp.count("tlp_spurious")
            return False
        self._learn_reorder(late, allowance)
        return True
