"""Recovery: what the requester learns from SACKs and NACKs, and what it does about loss.

:meth:`Recovery.on_sack` retires acknowledged packets (the table's work, C when built),
feeds RTT and ECN to the EV manager and CC, and, once per receive burst
(:meth:`Recovery.after_sacks`), detects losses RACK-style (a packet sent before one that
was acknowledged, still missing after that packet's RTT plus a reorder allowance) and
completes work requests in order. A loss with nothing newer through on its path makes
the path a suspect; confirmed losses concentrated on one path retire it. The per-path
retransmission timer is the backstop, with a retry budget that ends in ERROR.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from mrcnet.constants import EV_PATH_SHIFT, PSN_MASK, SackMode
from mrcnet.core import forged
from mrcnet.core.cc import CongestionControl
from mrcnet.core.context import QPView
from mrcnet.core.events import WCOpcode, WCStatus, WriteCompleted
from mrcnet.core.evs import EVManager, ev_path
from mrcnet.core.forged import AccessRefusals, sack_verdict
from mrcnet.core.nackrec import NackRecovery
from mrcnet.core.rxlane import RX_ACK_INTS
from mrcnet.core.sender import Sender
from mrcnet.core.seqnum import unwrap
from mrcnet.core.states import RTS, EVState
from mrcnet.core.tailloss import TailLoss
from mrcnet.core.txtable import E_EV, E_SENT, E_TS, TxTable
from mrcnet.wire.parsed import PyParsed

_INF = float("inf")
REO_SCALE_MAX = 16  # reorder allowance grows to at most 16x after spurious losses
REO_DECAY_BYTES = 4 << 20  # ... and halves after this many bytes without one
REO_LEARN_MARGIN = 1.25  # a spurious loss sets the allowance to 1.25x what it needed
_LOST_LOG_MAX = 4096  # packets declared lost remembered (to recognise late arrivals)
SUSPECT_GRACE_RTTS = 1.0  # a suspected path retires this many srtts after the loss
AMBIGUOUS_WINDOW_RTTS = 8  # ambiguous losses of one path count within 8 smoothed RTTs
CONFIRMED_WINDOW_RTTS = 192  # confirmed losses count with this time constant (srtts)
CONFIRMED_MIN = 1.5  # decayed confirmed losses a path needs to retire: two within ~133 srtts
CONFIRMED_SIGMAS = 3.0  # ... and this many standard deviations above its fair share
REO_SCALED_CAP_RTTS = 2  # the scaled reorder floor stays within 2 smoothed RTTs
REO_DECAY_RTTS = 32  # the allowance narrows only 32 smoothed RTTs after a spurious loss


def retry_schedule(base: float, retry_cnt: int, linear: int) -> list[float]:
    """Timeout before each (re)transmission of a packet nobody acknowledges: ``linear``
    intervals of ``base``, then doubling; ``retry_cnt + 1`` in all. Their sum bounds how
    long an unreachable peer takes to put the QP in ERROR."""
    return [base * (1 if k <= linear else 2 ** (k - linear)) for k in range(retry_cnt + 1)]


def retry_cnt_for(base: float, linear: int, stall: float) -> int:
    """The smallest ``retry_cnt`` whose last retransmission leaves at least ``stall`` s
    after the packet's first transmission (:func:`retry_schedule`): a peer that takes
    nothing in for up to ``stall`` s then answers it, so the QP lives; one silent for good
    fails the QP after the whole schedule, ``sum(retry_schedule(base, n, linear))``."""
    n = 0
    while sum(retry_schedule(base, n, linear)[:-1]) < stall:
        n += 1
    return n


class Recovery(NackRecovery, TailLoss):
    """The requester's acknowledgement and loss side of one QP (see the module
    docstring). Its sender ``snd`` (set by the QP that composes both) holds the work
    requests and the send sequence space."""

    def __init__(self, qp: QPView) -> None:
        self.qp = qp
        self.cfg = qp.cfg
        self.attrs = qp.attrs
        self.snd: Sender
        # shared with the sender, set by the QP whenever it makes new ones
        self.evm: EVManager | None = None
        self.cc: CongestionControl | None = None
        self.txt: TxTable
        self._txcap = 0
        self.reset()

    def reset(self) -> None:
        """Forget everything about packets in flight and the paths (QP reset)."""
        self.snd_una = self.attrs.sq_psn
        self.rtx_q: deque[int] = deque()  # seqs waiting for a retransmission
        self.rnr_q: list[int] = []  # seqs refused for want of a posted receive (RNR) ...
        self.rnr_at = _INF  # ... resent then
        self.rto_at = _INF
        self.qp.tv += 1
        self.retries = 0
        self.retries_peak = 0  # the deepest retry round reached (counter retries_peak)
        self.silent_since = 0.0  # send time of the oldest packet of the first round ...
        self.silence_peak_ms = 0  # ... and the longest silence ended by an acknowledgement
        self.rack_at = _INF
        # RACK's tie-break (RFC 8985: of two packets sent at the same time the higher
        # sequence is the more recent): (send time, sequence) of the newest packet that
        # triggered a SACK. A burst leaves at one instant; without it a packet of the
        # burst lost behind its acknowledged siblings waited for the timeout.
        self.rack_tie = (-1.0, -1)
        self.tlp_at = _INF  # tail-loss probe timer (inf: none armed)
        self.tlp_sent = False  # a probe went since the last acknowledgement progress
        # seq -> (send time of the original, whether its loss may blame its path at
        # once) for packets a tail-loss probe resent
        self.tlp_log: dict[int, tuple[float, bool]] = {}
        self.reo_scale = 1
        self.reo_clean = 0
        self.reo_learned = 0.0  # allowance (s) learned from how late "lost" packets came
        self.reo_last = -_INF  # time of the last spurious loss
        # seq -> (EV, TSETH stamp, time declared lost, by RACK) of transmissions declared lost
        # (and RACK's allowance then)
        self.lost_log: dict[int, tuple[int, int, float, bool, float]] = {}
        # path key (EV >> EV_PATH_SHIFT: plane and path) -> (count, window start) of its
        # ambiguous losses (the newest send time acknowledged per path is the table's:
        # path_acked)
        self.path_amb: dict[int, tuple[int, float]] = {}
        # path key -> (deadline, send time of the lost packet, its EVs) of a path under
        # suspicion: retired at the deadline unless something newer gets through first
        # (and the newest acknowledged send time then: with no news from the peer since,
        # the deadline moves on instead; a stalled peer or host is not a dead path)
        self.suspects: dict[int, tuple[float, float, list[int], float]] = {}
        # path key -> its confirmed losses (a retransmission got through and the original
        # never did), decaying with time constant CONFIRMED_WINDOW_RTTS, as of conf_t
        self.path_conf: dict[int, float] = {}
        self.conf_t = 0.0
        # path key -> (send time, time declared lost, SACKs triggered on the path and on
        # the plane's other paths then) of the oldest packet on the path that a timeout
        # took while nothing newer was acknowledged anywhere, until the path shows life
        # (_silent_path)
        self.path_tmo: dict[int, tuple[float, float, int, int]] = {}
        self.suspect_at = _INF
        self.srtt = 0.0
        self.rttvar = 0.0
        self.min_rtt = 0.0
        self.sack_pending = False  # SACKs handled since the host's last frames_to_send
        self.sack_acked = 0  # ... and what they acknowledged
        self.refusals = AccessRefusals()  # remote access error NACKs, per PSN

    def set_evm(self, evm: EVManager | None) -> None:
        """Use ``evm``, the QP's EV manager (shared with the sender; None: none yet).
        With ``verdict_inflight`` it tells this QP when another QP's verdict retires one
        of its paths (:meth:`TailLoss._shared_retired`)."""
        self.evm = evm
        if evm is not None and self.cfg.verdict_inflight:
            evm.on_shared = self._shared_retired

    @property
    def rack_sent(self) -> float:
        """Newest send time of any packet acknowledged (RACK; -1 before the first)."""
        return self.txt.rack_sent

    def on_timer(self, now: float) -> None:
        """Run the requester's timers that are due (the QP is in RTS)."""
        if self.rnr_at <= now:
            self.rnr_at = _INF
            self.qp.tv += 1
            self.rtx_q.extend(self.rnr_q)
            self.rnr_q.clear()
        if self.rack_at <= now:
            self._detect_losses(now)
        if self.suspect_at <= now:
            self._retire_suspects(now)
        if self.tlp_at <= now:
            self._on_tlp(now)
        if self.rto_at <= now:
            self._on_rto(now)

    def lose_off_planes(self, live: set[int], now: float) -> None:
        """Packets in flight on planes no longer in ``live`` are lost: resend them."""
        txt = self.txt
        for seq in txt.inflight():
            e = txt.get(seq)
            if e is not None and ev_path(e[E_EV])[0] not in live:
                self._mark_lost(seq, now, "port")

    def probe_timeout(self) -> float:
        """How long an EV probe may take to be answered: the QP's RTT plus four
        variances (endpoint scheduling delay included); 0 before any sample."""
        return self.srtt + 4 * self.rttvar

    def base_timeout(self) -> float:
        base = self.srtt + 4 * self.rttvar if self.srtt else self.attrs.ack_timeout_s
        return max(self.cfg.timeout_floor, base)

    def rto(self, ev: int) -> float:
        """Per-path timeout of a packet on ``ev``: its EV's own RTT estimate, else the
        QP's, else the QP's ack timeout attribute; never below the floor."""
        evm = self.evm
        info = evm.evs.get(ev) if evm is not None else None
        if info is not None and info.srtt:
            # An EV sees few samples; the QP's variance (endpoint jitter is common to
            # every path) keeps a quiet EV's estimate from being too tight.
            base = info.srtt + 4 * max(info.rttvar, self.rttvar)
        elif self.srtt:
            base = self.srtt + 4 * self.rttvar
        else:
            base = self.attrs.ack_timeout_s
        return max(self.cfg.timeout_floor, base)

    def backoff(self) -> float:
        """Retry phase: ``retry_linear`` rounds at the base timeout, then doubling."""
        # (no retry round: 1.0 without reading retry_linear, never negative: HostConfig)
        k = self.retries and self.retries - self.qp.retry_linear
        return 1.0 if k <= 0 else float(1 << min(k, 30))

    def _arm_rto(self) -> None:
        """The retransmission timer follows the oldest packet in flight (per-path RTO)."""
        seq = self.txt.oldest()
        e = self.txt.get(seq) if seq is not None else None
        self.rto_at = _INF if e is None else e[E_SENT] + self.rto(e[E_EV]) * self.backoff()
        self.qp.tv += 1

    def _mark_lost(self, seq: int, now: float, cause: str) -> None:
        """Take packet ``seq`` out of flight and queue it for retransmission on another
        EV."""
        txt = self.txt
        e = txt.get(seq)
        if e is None:
            return
        ev, sent = e[E_EV], e[E_SENT]
        txt.lose(seq)
        evm, cc = self.evm, self.cc
        assert evm is not None and cc is not None
        info = evm.evs.get(ev)
        if cause == "trim":
            if info is not None:
                info.trimmed += 1
            self.rtx_q.appendleft(seq)
        elif cause == "access":
            # Refused by the peer (or a forger): resend, on another EV; no path blame.
            self.rtx_q.appendleft(seq)
        elif cause == "rnr":
            # The peer had no receive posted: resend after a while, not at once.
            self.rnr_q.append(seq)
            if self.rnr_at == _INF:
                self.rnr_at = now + self.base_timeout()
                self.qp.tv += 1
        else:
            if info is not None:
                info.lost += 1
            if cause in ("loss", "timeout", "tlp"):
                log = self.lost_log
                if len(log) >= _LOST_LOG_MAX:
                    for k in list(log)[: _LOST_LOG_MAX // 2]:
                        del log[k]
                # A probe is evidence against the path only if a packet sent no earlier
                # than this one got through (the peer was answering then): otherwise a
                # stalled or late peer looks the same, and the probe only recovers.
                blame = cause == "loss" or (cause == "tlp" and self.rack_sent >= sent)
                log[seq] = (ev, e[E_TS], now, blame, self._reorder_allowance())
                txt.log(seq, True)
                if cause == "tlp":
                    # No verdict yet: the probe's own answer decides (_tlp_answered).
                    tlp = self.tlp_log
                    if len(tlp) >= _LOST_LOG_MAX:
                        for k in [k for k in tlp if k not in log]:
                            del tlp[k]
                    tlp[seq] = (sent, blame)
                    self.rtx_q.append(seq)
                    self.qp.count("lost_tlp")
                    return
                self.tlp_log.pop(seq, None)
                if self._path_failed(ev, sent, now, cause):
                    if cause == "timeout":
                        evm.assume_bad(ev, now, cause)
                    else:
                        self._suspect(ev, sent, now)
                    if self.cfg.path_loss_cc:
                        cc.on_loss(now)
                else:
                    cc.on_loss(now)
            self.rtx_q.append(seq)
        self.qp.count(f"lost_{cause}")

    def _suspect(self, ev: int, sent: float, now: float) -> None:
        """A SACK-detected loss with nothing newer through on its path: that is what a
        dead path looks like, and also what a late batch looks like when the endpoints
        add scheduling jitter. Give the path a short grace (half a smoothed RTT, within
        the allowance already waited): a newer packet acknowledged on it clears it,
        otherwise its EVs retire. (After a real failure more packets on the path go
        missing meanwhile; they join the same suspicion.)"""
        key = ev >> EV_PATH_SHIFT
        sus = self.suspects.get(key)
        if sus is not None:
            if ev not in sus[2]:
                sus[2].append(ev)
            return
        self.qp.count("loss_suspect")
        grace = SUSPECT_GRACE_RTTS * (self.srtt or self.cfg.base_rtt_hint)
        self.suspects[key] = (now + grace, sent, [ev], self.rack_sent)
        self.suspect_at = min(self.suspect_at, now + grace)
        self.qp.tv += 1

    def _retire_suspects(self, now: float) -> None:
        evm = self.evm
        assert evm is not None
        nxt = _INF
        for key, (due, sent, evs, rack) in list(self.suspects.items()):
            if due <= now and self.rack_sent <= rack:
                # Nothing newer acknowledged anywhere since the suspicion: the peer (or
                # this host) is stalled, which says nothing about this path. Wait on.
                due = now + SUSPECT_GRACE_RTTS * (self.srtt or self.cfg.base_rtt_hint)
                self.suspects[key] = (due, sent, evs, rack)
                self.qp.count("loss_suspect_extended")
            if due <= now:
                del self.suspects[key]
                self._retire_path(evs, now, dead=True)
            else:
                nxt = min(nxt, due)
        self.suspect_at = nxt
        self.qp.tv += 1

    def _retire_path(self, evs: list[int], now: float, cause: str = "loss",
                     dead: bool = False) -> None:
        """EVs of one path share its fate: retire the path's other EVs with these (or
        each would have to lose a packet of its own first). ``dead``: retired as a dead
        path (nothing sent on it after a loss got through), not a lossy one: with
        ``retire_inflight`` its packets in flight are lost with it
        (:meth:`TailLoss._lose_path`)."""
        evm = self.evm
        assert evm is not None
        plane, path, _ = ev_path(evs[0])
        evm.retire_path(plane, path, now, cause, evs)
        if dead and self.cfg.retire_inflight:
            self._lose_path(evs[0] >> EV_PATH_SHIFT, now)

    def _confirmed_loss(self, ev: int, now: float) -> None:
        """The retransmission of a packet lost on ``ev`` got through while the original
        never did: a real loss (reordering and endpoint lateness never get here).

        A path is retired for losses concentrated on it (a lossy link), not for loss that
        every path sees alike (drops at a congested host or in a shared queue: retiring
        paths for that only moves the load around, and with all of them retired in turn
        the QP loses its spread). So its recent confirmed losses are compared with what
        the other paths' count predicts for its share: it retires once it has at least
        CONFIRMED_MIN and exceeds that prediction by CONFIRMED_SIGMAS (Poisson) plus one.
        With no loss elsewhere that is its second loss (within about 133 smoothed RTTs),
        so random loss on one link is still caught within a few RTTs.

        Only paths of usable planes count (a plane whose port is down keeps its EVs in
        the set but carries nothing), and the last live path is never retired for loss:
        there is nowhere better to go, and with every path of its plane retired the
        refill must put EVs back on one that is, for all it knows, dead (README tour: one
        live path of four, its trims' NACKs lost at 1 %; retired, the QP sat on a dead
        path until probes revived it, retry rounds piling up to the budget)."""
        self.qp.count("loss_confirmed")
        key = ev >> EV_PATH_SHIFT
        conf = self.path_conf
        tau = CONFIRMED_WINDOW_RTTS * max(self.srtt, self.cfg.reorder_floor)
        if conf and now > self.conf_t:
            f = math.exp(-(now - self.conf_t) / tau)
            for k in list(conf):
                v = conf[k] * f
                if v < 0.05:
                    del conf[k]
                else:
                    conf[k] = v
        self.conf_t = now
        mine = conf.get(key, 0.0) + 1.0
        conf[key] = mine
        others = sum(conf.values()) - mine
        evm = self.evm
        assert evm is not None
        usable = evm.usable_planes
        active = {i.ev >> EV_PATH_SHIFT for pl in usable for i in evm.active.get(pl, ())}
        npaths = len(active | {k for k in conf if ev_path(k << EV_PATH_SHIFT)[0] in usable})
        expected = others / (npaths - 1) if npaths > 1 else 0.0
        if mine >= CONFIRMED_MIN and mine > expected + CONFIRMED_SIGMAS * math.sqrt(expected) + 1:
            if not active - {key}:
                self.qp.count("loss_confirmed_last_path")
                return
            del conf[key]
            self.qp.count("loss_confirmed_retired")
            self._retire_path([ev], now)

    def _path_failed(self, ev: int, sent: float, now: float, cause: str) -> bool:
        """Does the loss of a packet on ``ev`` sent at ``sent`` condemn its path? At once
        if nothing sent on the path after it has been acknowledged (a dead path delivers
        nothing newer). If a later packet got through, the loss is ambiguous (reordering,
        endpoint jitter, a random drop): only ``retire_ambiguous`` of them within a few
        RTTs retire the EV."""
        key = ev >> EV_PATH_SHIFT
        if cause == "timeout" and self.rack_sent <= sent:
            if self._silent_path(ev, key, sent, now):
                self.qp.count("timeout_silent_path")
                self._retire_path([ev], now, "timeout", dead=True)
                return True
            # Nothing sent after it got through on *any* path: the peer (or this host's
            # own scheduling) stalled, or everything is down. No path to blame; the
            # retry budget decides.
            self.qp.count("timeout_unblamed")
            return False
        if self.txt.path_acked(key) <= sent:
            return True
        self.qp.count("loss_ambiguous")
        need = self.cfg.retire_ambiguous
        if need <= 1:
            return True
        window = AMBIGUOUS_WINDOW_RTTS * max(self.srtt, self.cfg.reorder_floor)
        n, start = self.path_amb.get(key, (0, now))
        if now - start > window:
            n, start = 0, now
        n += 1
        if n >= need:
            self.path_amb.pop(key, None)
            return True
        self.path_amb[key] = (n, start)
        return False

    def _silent_path(self, ev: int, key: int, sent: float, now: float) -> bool:
        """A timeout on ``ev`` (path ``key``) sent at ``sent`` with nothing newer through
        anywhere: alone that says nothing about the path (a stalled peer looks the same).
        With a window of a packet or two it is also all a dead path ever shows: nothing
        newer is in flight to get through. So the path is condemned by its history: an
        earlier timeout on it, then no sign of life from it (no packet of it acknowledged,
        no SACK triggered by one of its packets), while SACKs triggered by packets on
        another path of the same plane came in (the peer is alive and reachable on this
        plane; this path alone is silent), and no late arrival anywhere (endpoint
        lateness resets the evidence). A stalled peer sends nothing in between, so it
        never condemns a path; nor does a plane that fails as a whole (the peer's port:
        PORT_STATUS and the retry budget). The SACKs' echoed EV names the transmission
        that arrived, so a late original is not mistaken for its retransmission's path
        (the acknowledged send times are: the table credits the latest transmission)."""
        evm = self.evm
        assert evm is not None
        plane, path, _ = ev_path(ev)
        mine = others = 0
        for info in evm.evs.values():
            if info.plane == plane:
                if info.path == path:
                    mine += info.acked
                else:
                    others += info.acked
        rec = self.path_tmo.get(key)
        if (rec is None or self.txt.path_acked(key) >= rec[0] or mine != rec[2]
                or self.reo_last >= rec[1]):
            # No timeout on the path since it last showed life: this one starts the record.
            self.path_tmo[key] = (sent, now, mine, others)
            return False
        if others == rec[3]:
            return False  # nothing heard on the plane since: a stall, not this path
        del self.path_tmo[key]
        return True

    def _learn_reorder(self, late: float, allowance: float) -> None:
        """A packet declared lost arrived ``late`` seconds after that: widen the allowance
        to cover it (with a margin), never beyond the retransmission timeout. With
        ``learn_at_declare`` the allowance it needed is ``allowance`` (what it was
        declared lost with) + ``late``; else the allowance now + ``late``, which each
        late packet of one burst widens again (four of them took it from 40 to 220 us
        in sim_digest's perm-linkdown-loss: docs/COLLECTIVES.md, "session 12")."""
        cap = max(self.cfg.timeout_floor, self.srtt + 4 * self.rttvar)
        if not self.cfg.learn_at_declare:
            allowance = self._reorder_allowance()
        self.reo_learned = min(cap, max(
            self.reo_learned, REO_LEARN_MARGIN * (allowance + late)))

    def _reorder_allowance(self) -> float:
        """RACK's reorder window (RFC 8985 6.2: min_RTT / 4, with a floor ``rack_floor``),
        widened after spurious losses, + the peer's ACK hold (CORE.md, "Session 9")."""
        cfg = self.cfg
        floor = max(cfg.reorder_floor if cfg.rack_floor is None else cfg.rack_floor,
                    self.min_rtt / 4)
        base = floor * self.reo_scale
        if self.reo_scale > 1 and self.srtt:
            # Doubling after spurious losses widens it, but not beyond a couple of RTTs
            # (unless measured lateness says more: reo_learned): a dead path must still
            # be noticed within a few RTTs.
            base = min(base, max(floor, REO_SCALED_CAP_RTTS * self.srtt))
        return max(base, self.reo_learned) + self._rack_hold()

    def _detect_losses(self, now: float) -> None:
        """RACK over sprayed paths: a packet sent before the most recently sent packet
        that was acknowledged is lost once that packet's RTT plus a reorder allowance has
        passed since it was sent; otherwise a timer is set for that moment."""
        txt = self.txt
        limit = txt.rack_sent
        if limit < 0:
            return
        # The allowance covers path skew and the peer's ACK coalescing delay.
        wait = txt.rack_rtt + self._reorder_allowance()
        head_at = self._prompt_losses(limit, wait, now)  # (rack_prompt)
        lost, self.rack_at = txt.rack(limit, wait, now)
        self.qp.tv += 1
        for seq in lost:
            self._mark_lost(seq, now, "loss")
        tie_sent, tie_seq = self.rack_tie
        if self.rack_at == _INF and tie_sent == limit and txt.ninfl and self.cfg.rack_tie_break:
            self._detect_tied(limit, tie_seq, wait, now)
        self.rack_at = min(self.rack_at, head_at)
        self.qp.tv += 1

    def _on_rto(self, now: float) -> None:
        """Timer backstop: every packet past its per-path RTO is lost (its EV retires);
        one retry round is counted, and the next round waits the backed-off timeout.
        Rounds without any acknowledgement in between exhaust the retry budget."""
        expired = []
        backoff = self.backoff()
        txt = self.txt
        oldest = now
        for seq in txt.inflight():
            e = txt.get(seq)
            if e is not None and e[E_SENT] + self.rto(e[E_EV]) * backoff <= now:
                expired.append(seq)
                oldest = min(oldest, e[E_SENT])
        if not expired:
            self._arm_rto()
            return
        if self.retries == 0:
            self.silent_since = oldest
        self.retries += 1
        if self.retries > self.retries_peak:
            self.qp.count("retries_peak", self.retries - self.retries_peak)
            self.retries_peak = self.retries
        budget = self.qp.retry_budget
        if self.retries > budget:
            self._retry_exhausted(expired[0], now)
            return
        for seq in expired:
            self._mark_lost(seq, now, "timeout")
        self.qp.count("rto_rounds")
        self.rto_at = now + self.base_timeout() * self.backoff()
        self.qp.tv += 1

    def _silence_over(self, now: float) -> None:
        """News from the peer after retry rounds: the count starts again. Counter
        ``rto_silence_peak_ms`` is the longest such silence (from the send time of the
        oldest packet that timed out): how close a stall came to the budget's total."""
        self.retries = 0
        ms = int((now - self.silent_since) * 1e3)
        if ms > self.silence_peak_ms:
            self.qp.count("rto_silence_peak_ms", ms - self.silence_peak_ms)
            self.silence_peak_ms = ms

    def _retry_exhausted(self, seq: int, now: float) -> None:
        budget = self.qp.retry_budget
        self.qp.fail(
            WCStatus.RETRY_EXC_ERR,
            f"peer unreachable: no acknowledgement from {self.attrs.peer} QP "
            f"{self.attrs.dest_qp_num} for PSN {seq & PSN_MASK} after {budget} "
            f"retransmissions on {len(self.evm.evs) if self.evm else 0} EVs "
            f"(retry budget exhausted; check the peer host, its QP and the fabric)",
        )

    def on_sack(self, s: PyParsed, now: float) -> None:
        """A SACK from the peer's responder (``s``: the parsed frame). SETH's CACK is the
        last PSN received in order; the table's cumulative point is the one after."""
        una = self.snd_una
        cack = unwrap((s.cack_psn + 1) & PSN_MASK, una)
        why = sack_verdict(self.txt, una, self.snd.next_seq, self._txcap, cack,
                           cack - 1 + s.sack_offset, s.bitmap,
                           None if s.pr else cack - 1 + s.ack_offset, now,
                           forged.early_floor(self.cfg.ack_rtt_floor))
        if why is not None:
            self.qp.count(why)
            return
        if cack < una:
            # An older SACK overtaken by a newer one: its bitmap may still be news.
            self.qp.count("rx_sack_stale")
        evm, cc = self.evm, self.cc
        if evm is None or cc is None or self.qp.state is not RTS:
            return
        # The table acknowledges what the SACK reports (the per-packet work) and says
        # whether the SACK is about the latest transmission of the packet that
        # triggered it (same EV and timestamp): then that packet gives an RTT sample.
        # A probe response (PR) carries the probe id, not a PSN: it triggers nothing.
        txt = self.txt
        trig = -1 if s.pr else cack - 1 + s.ack_offset
        sack_ev, sack_off, ts_echo = s.sack_ev, s.sack_offset, s.ts_echo
        acked = txt.sack(now, una, cack, self.snd.next_seq, cack - 1 + sack_off, s.bitmap,
                         sack_off == 2, trig, sack_ev, ts_echo)
        if cack > una:
            self.snd_una = cack
        mode = s.mode
        self._sack_news(acked, txt.trig_tx, txt.trig_sent, trig, sack_ev, ts_echo,
                        int(mode == SackMode.SKIP_ONCE), mode, s.window_penalty, now)

    def on_ack(self, a: PyParsed, now: float) -> None:
        """A cumulative ACK (AETH): BTH.PSN is the last PSN the peer received in order.
        It names no packet and no EV: no RTT sample, no path news."""
        una = self.snd_una
        cack = unwrap((a.psn + 1) & PSN_MASK, una)
        why = sack_verdict(self.txt, una, self.snd.next_seq, self._txcap, cack, 0, 0, None,
                           now, forged.early_floor(self.cfg.ack_rtt_floor))
        if why is not None:
            self.qp.count(why.replace("rx_sack_", "rx_ack_"))
            return
        if self.evm is None or self.cc is None or self.qp.state is not RTS:
            return
        acked = self.txt.sack(now, una, cack, self.snd.next_seq, cack + 1, 0, False, -1, 0, 0)
        if cack > una:
            self.snd_una = cack
        self._sack_news(acked, 0, 0.0, -1, 0, 0, 0, 0, 0, now)

    def on_sack_records(self, ints: list[int], sents: list[float], now: float) -> None:
        """SACKs whose table work the receive lane did (:class:`mrcnet.core.rxlane.CRxLane`
        ``take_acks``; rxlane.h ``struct mrc_rx_ack``): the rest of :meth:`on_sack` for each,
        in order. ``ints`` holds ``RX_ACK_INTS`` integers per SACK, ``sents`` the
        triggering packet's send time."""
        it = iter(ints)  # (ten at a time: zip of one iterator with itself)
        recs = zip(it, it, it, it, it, it, it, it, it, it, strict=False)
        for (cack, acked, tx, sack_ev, ts_echo, trig, ece, mode, penalty, _rcvd), sent in zip(
                recs, sents, strict=True):
            una = self.snd_una
            if cack < una:
                self.qp.count("rx_sack_stale")
            if cack > una:
                self.snd_una = cack
            self._sack_news(acked, tx, sent, trig, sack_ev, ts_echo, ece, mode, penalty, now)

    def on_lane_records(self, recs: Any, sents: Any, n: int, now: float) -> None:
        """:meth:`on_sack_records` over the receive lane's own arrays (``n`` records:
        :attr:`mrcnet.core.rxlane.CRxLane.take_ack_n`)."""
        self.on_sack_records(list(recs[0 : n * RX_ACK_INTS]), list(sents[0:n]), now)

    def _sack_news(self, acked: int, tx: int, trig_sent: float, trig: int, sack_ev: int,
                   ts_echo: int, ece: int, mode: int, penalty: int, now: float) -> None:
        """:meth:`on_sack`'s decisions after the table's work: ``acked`` bytes newly
        acknowledged; ``tx``: the triggering packet's transmissions if the SACK is about
        its latest one (then sent at ``trig_sent``), else 0."""
        evm, cc = self.evm, self.cc
        assert evm is not None and cc is not None
        rtt = None
        spurious = False
        if self.lost_log:
            rec = self.lost_log.get(trig)
            if rec is not None and rec[0] == sack_ev and rec[1] == ts_echo:
                # The transmission we declared lost has arrived after all: learn how
                # late it was, so the allowance covers it next time.
                del self.lost_log[trig]
                spurious = self._late_arrival(trig, now - rec[2], rec[4])
        info = evm.evs.get(sack_ev)
        if tx:
            if tx > 1 and self.lost_log:
                rec = self.lost_log.pop(trig, None)
                probe = self.tlp_log.pop(trig, None)
                if rec is not None and probe is not None and rec[0] != sack_ev:
                    self._tlp_answered(rec[0], probe, now)
                elif rec is not None and rec[3] and rec[0] != sack_ev:
                    # The retransmission triggered this SACK and the PSN was still
                    # missing: the original (declared lost by RACK, not by a timeout,
                    # which a stalled peer also causes) never arrived.
                    self._confirmed_loss(rec[0], now)
            rtt = now - trig_sent
            tie = self.rack_tie
            if trig_sent > tie[0] or (trig_sent == tie[0] and trig > tie[1]):
                self.rack_tie = (trig_sent, trig)
            if info is not None:
                info.rtt_sample(rtt)
            self._rtt_sample(rtt)
        if info is not None:
            info.acked += 1
            if ece:
                info.ecn += 1
            if info.state is EVState.ASSUMED_BAD:
                # A packet on a retired EV got through: the path works (as good as a
                # probe answer), and the loss that retired it was probably reordering.
                evm.probe_result(sack_ev, True)
                spurious = True
        if spurious:
            self._spurious_loss(now)
        if ece:  # (M = SKIP_ONCE: the ECN echo)
            evm.skip(sack_ev, "ecn")
        elif mode == SackMode.ALWAYS_SKIP:
            evm.assume_bad(sack_ev, now, "receiver")
        if acked and (self.suspects or self.lost_log):  # (_acked has nothing to do else)
            self._acked(self.txt, now)
        cc.on_ack(acked, rtt, ece != 0, now)
        if penalty:
            cc.on_penalty(penalty, now)
        self.sack_acked += acked
        if not self.sack_pending:
            # Loss detection, the timer and completions run once per receive burst
            # (Host.frames_to_send -> after_sacks): a batch of SACKs handled at one
            # instant is one piece of news (a SACK early in the batch must not make
            # packets that a later one acknowledges look lost), and one RACK scan per
            # burst instead of per SACK.
            self.sack_pending = True
        if acked:
            self.tlp_sent = False
            if self.retries:
                self._silence_over(now)
            if self.reo_scale > 1:
                self.reo_clean += acked
                if self.reo_clean >= REO_DECAY_BYTES and self._reo_quiet(now):
                    self.reo_scale = max(1, self.reo_scale // 2)
                    self.reo_learned /= 2
                    self.reo_clean = 0
            elif self.reo_learned:
                self.reo_clean += acked
                if self.reo_clean >= REO_DECAY_BYTES and self._reo_quiet(now):
                    self.reo_learned /= 2
                    self.reo_clean = 0

    def after_sacks(self, now: float) -> None:
        """The end of a burst that brought SACKs: detect losses, re-arm the timer,
        complete work requests."""
        self.sack_pending = False
        acked, self.sack_acked = self.sack_acked, 0
        if self.evm is None or self.cc is None or self.qp.state is not RTS:
            return
        self._detect_losses(now)
        if acked:
            self._arm_rto()
            # (a retransmission queued is in flight for the probe: it leaves in this
            # pass, and nothing may be acknowledged after it to arm the probe again)
            if self.txt.ninfl or self.rtx_q:
                self.arm_tlp(now)
            else:
                self.tlp_at = _INF
                self.qp.tv += 1
            self._complete_wrs()
        elif not self.txt.ninfl and not self.rtx_q:
            self.rto_at = self.tlp_at = _INF
            self.qp.tv += 1

    def _reo_quiet(self, now: float) -> bool:
        """Long enough without a spurious loss for the allowance to narrow (slowly: a
        fast link moves REO_DECAY_BYTES in a fraction of one jittery RTT)."""
        return now - self.reo_last >= REO_DECAY_RTTS * self.srtt

    def _spurious_loss(self, now: float) -> None:
        """RACK-style adaptation: a loss that was not one widens the reorder allowance
        (doubling, up to x16); it narrows again after REO_DECAY_BYTES clean bytes."""
        self.qp.count("loss_spurious")
        self.reo_last = now
        self.reo_scale = min(REO_SCALE_MAX, self.reo_scale * 2)
        self.reo_clean = 0

    def _rtt_sample(self, rtt: float) -> None:
        if self.srtt == 0.0:
            self.srtt, self.rttvar, self.min_rtt = rtt, rtt / 2, rtt
            return
        self.rttvar += 0.25 * (abs(self.srtt - rtt) - self.rttvar)
        self.srtt += 0.125 * (rtt - self.srtt)
        self.min_rtt = min(self.min_rtt, rtt)

    def _acked(self, txt: TxTable, now: float) -> None:
        """What the table's last SACK acknowledged, for the decisions: the newest send
        time acknowledged per path (a suspected path that delivered something sent after
        its loss is cleared), and packets declared lost that were not (learn the
        reordering)."""
        suspects = self.suspects
        if suspects:
            for key, sent in txt.paths():
                sus = suspects.get(key)
                if sus is not None and sent >= sus[1]:
                    del suspects[key]  # something newer got through: the path works
                    self.qp.count("loss_suspect_cleared")
                    if not self.cfg.path_loss_cc:
                        # A real loss on a live path after all: the quick adapt held
                        # back for a dead one is owed now.
                        self.cc.on_loss(now)  # type: ignore[union-attr]
        if self.lost_log:
            for seq, sent, pending in txt.specials():
                rec = self.lost_log.pop(seq, None)
                if rec is not None and (pending or now - sent < self.min_rtt):
                    pkey = rec[0] >> EV_PATH_SHIFT
                    if self.suspects and self.suspects.pop(pkey, None) is not None:
                        self.qp.count("loss_suspect_cleared")  # the "lost" packet came
                    # Acknowledged before its retransmission was sent, or sooner than any
                    # RTT ever measured: the transmission declared lost arrived after all.
                    if self._late_arrival(seq, now - rec[2], rec[4]):
                        self._spurious_loss(now)

    def _complete_wrs(self) -> None:
        snd = self.snd
        wrs, unacked, wr_of = snd.wrs, self.txt.wr_unacked, snd.wr_of
        if not wrs:
            return
        push, qpn, events = self.qp.cq.push_row, self.qp.qpn, self.cfg.completion_events
        ok, op = WCStatus.SUCCESS, WCOpcode.RDMA_WRITE
        while wrs:
            wr = wrs[0]
            if wr.next_pkt < wr.npkts or unacked(wr.slot):
                return
            wrs.popleft()
            del wr_of[wr.slot]
            if wr.imm is not None:
                snd.imm_outstanding -= 1
            push((ok, wr.wr_id, op, wr.length, wr.imm, qpn))  # (a Completion's fields)
            if events:
                self.qp.ctx.emit(WriteCompleted(qpn, wr.wr_id, wr.length))
