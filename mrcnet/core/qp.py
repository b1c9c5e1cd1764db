"""One queue pair: its life cycle, composed of a sender, a recovery and a responder.

Follow a write: :meth:`QueuePair.post_write` queues a :class:`~mrcnet.core.workrequest.WorkRequest`;
the sender (:mod:`mrcnet.core.sender`) cuts it into MTU-sized packets and sends each on
the next EV. The peer's responder (:mod:`mrcnet.core.responder`) checks, places and
SACKs; recovery (:mod:`mrcnet.core.recovery`) retires what the SACKs acknowledge,
detects losses and completes work requests in order. Timers (:meth:`QueuePair.on_timer`)
are the backstop.

The QP sees its host only through a :class:`~mrcnet.core.context.HostContext`; its parts
see it only through :class:`~mrcnet.core.context.QPView`.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter
from typing import Any

from mrcnet.constants import EV_PATH_SHIFT
from mrcnet.core.cc import CongestionControl, create_cc
from mrcnet.core.config import EV_PROFILE_ECMP, QPAttrs
from mrcnet.core.context import HostContext
from mrcnet.core.cq import CompletionQueue
from mrcnet.core.events import Completion, QPError, WCOpcode, WCStatus
from mrcnet.core.evs import EVManager, ev_path
from mrcnet.core.recovery import retry_schedule
from mrcnet.core.responder import Responder
from mrcnet.core.sackrec import new_recovery
from mrcnet.core.sender import Sender
from mrcnet.core.seqnum import ts16, unwrap
from mrcnet.core.states import RTS, QPState
from mrcnet.core.txtable import new_tx_table
from mrcnet.core.workrequest import WorkRequest
from mrcnet.wire import Route

__all__ = ["QueuePair", "WorkRequest", "retry_schedule", "ts16", "unwrap"]

_INF = float("inf")


def _part_field(path: str, doc: str, settable: bool = True) -> Any:
    """A QueuePair property that is attribute ``path`` of one of its parts (read by
    attrgetter: no Python frame per read)."""
    obj, _, name = path.rpartition(".")
    get_obj = attrgetter(obj)

    def put(self: QueuePair, value: Any) -> None:
        setattr(get_obj(self), name, value)
        self.tv += 1  # (a timer among them: QPTimers.refresh re-reads the deadline)

    return property(attrgetter(path), put if settable else None, doc=doc)


class QueuePair:
    """An MRC queue pair. Created and driven by :class:`mrcnet.core.host.Host`."""

    def __init__(self, ctx: HostContext, qpn: int, cq: CompletionQueue, attrs: QPAttrs,
                 recv_cq: CompletionQueue | None = None) -> None:
        self.ctx = ctx
        self.cfg = ctx.config
        self.qpn = qpn
        self.cq = cq  # send completions (and receive ones without a recv_cq)
        self.rcq = recv_cq if recv_cq is not None else cq  # (an empty CQ is falsy)
        self.attrs = attrs
        #: Bumped by every change of what the host's receive lane was set up with for
        #: this QP (its state, attributes, peers, EV manager, CC, table of packets,
        #: responder state record; and its leaving the host): the receive loop checks
        #: its copy only when this moved (mrcnet/core/receive.py). Every writer of those
        #: calls :meth:`changed`; tests/core/test_setup_ver.py catches one that does not.
        self.setup_ver = 0
        #: The timer version: bumped by every write of what :meth:`deadline` reads (the
        #: parts' timers, the responder record's ``ack_at``, the state, the EV manager;
        #: its ``next_probe`` has its own ``tv``), so that the host re-reads the deadline
        #: only when it moved (QPTimers.refresh); under receive.VERIFY_SETUP a writer that
        #: does not bump it is caught there.
        self.tv = 0
        #: ``ack_at`` as :meth:`deadline` last read it: the receive loop bumps ``tv`` when
        #: the C lane moved it since (the lane's own writes cannot bump it)
        self.ack_seen = _INF
        self.state = QPState.RESET
        self.error_reason: str | None = None
        self.peer_ips: frozenset[bytes] = frozenset()
        self._paths: dict[int, list[Route]] = {}  # the peer's routes per plane (ready)
        self._routes: dict[int, tuple[int, Route]] = {}
        self._evm: EVManager | None = None
        self._cc: CongestionControl | None = None
        self.rec = new_recovery(self)
        self.snd = self.rec.snd = Sender(self, self.rec)
        self.resp = Responder(self)
        # The host calls these per frame or per burst: the parts' own bound methods
        snd, rec, resp = self.snd, self.rec, self.resp
        self.post_write = snd.post_write
        self.emit = snd.emit
        self.has_work = snd.has_work
        self.on_sack = rec.on_sack
        self.on_sack_records = rec.on_sack_records
        self.after_sacks = rec.after_sacks
        self.on_nack = rec.on_nack
        self.on_ack = rec.on_ack
        self.probe_timeout = rec.probe_timeout
        self.on_data = resp.on_data
        self.on_probe = resp.on_probe
        self.send_sack = resp.send_sack
        self.post_recv = resp.post_recv
        self.lane_sack_setup = resp.lane_sack_setup
        self._reset_transport()

    # --- life cycle -------------------------------------------------------------------

    def changed(self) -> None:
        """What the receive lane was set up with for this QP changed (``setup_ver``);
        the state, EV manager or responder record among them: the deadline too (``tv``)."""
        self.setup_ver += 1
        self.tv += 1

    def _reset_transport(self) -> None:
        self.changed()  # (a new responder state record and table)
        self.snd.reset()
        self.rec.reset()
        # Every packet sent and not yet acknowledged (and which are in flight), with the
        # per-packet bookkeeping of sending and of SACKs (C when built): see txtable.py.
        self._seen0 = self.attrs.sq_psn  # where the table's SACK window tracking starts
        self._new_table()
        self.resp.reset()
        self.stats: dict[str, int] = {}

    def _new_table(self) -> None:
        self.changed()
        # (the paths an EV can name: the peer's routes per plane, once known)
        paths = sum(len(r) for r in self._paths.values())
        self.txt = self.rec.txt = new_tx_table(self.tx_window, self._seen0, max(16, paths))
        # (the table holds at least this many PSNs)
        self._txcap = self.rec._txcap = self.tx_window
        self.snd.use_table(self.txt, self._txcap)

    @property
    def evm(self) -> EVManager | None:
        """The QP's EVs (None before RTR)."""
        return self._evm

    @evm.setter
    def evm(self, evm: EVManager | None) -> None:
        self.changed()
        if self._evm is not None:  # (tv + evm.tv must still grow with another EVM's tv)
            self.tv += self._evm.tv
        self._evm = self.snd.evm = self.resp.evm = evm
        self.rec.set_evm(evm)

    @property
    def cc(self) -> CongestionControl | None:
        """The QP's congestion control (None before RTR)."""
        return self._cc

    @cc.setter
    def cc(self, cc: CongestionControl | None) -> None:
        self.changed()
        self._cc = self.snd.cc = self.rec.cc = cc

    @property
    def inflight(self) -> list[int]:
        """The packets in flight, oldest first (seqs)."""
        return self.txt.inflight()

    @property
    def rack_sent(self) -> float:
        """Newest send time of any packet acknowledged (RACK; -1 before the first)."""
        return self.txt.rack_sent

    @property
    def tx_window(self) -> int:
        """PSNs the requester may have outstanding (mrc.h MPR x 128, else the host's)."""
        return self.snd.tx_window

    @property
    def rx_window(self) -> int:
        """PSNs the responder accepts ahead of (and behind) its cumulative point."""
        return self.resp.rx_window

    @property
    def retry_linear(self) -> int:
        """Retry rounds at the base timeout before exponential backoff."""
        v = self.attrs.retry_linear
        return v if v is not None else self.cfg.retry_linear

    @property
    def retry_budget(self) -> int:
        """Retry rounds without progress before the QP fails."""
        v = self.attrs.retry_cnt
        return v if v is not None else self.cfg.retry_cnt

    def count(self, name: str, n: int = 1) -> None:
        """Bump a per-QP counter (and the host's)."""
        self.stats[name] = self.stats.get(name, 0) + n
        c = self.ctx.counters  # (ctx.count's dict: Host.count, inlined)
        c[name] = c.get(name, 0) + n

    def count_each(self, counts: Iterable[tuple[str, int]]) -> None:
        """:meth:`count` of each (name, n) in turn, in one call."""
        stats, c = self.stats, self.ctx.counters
        for name, n in counts:
            stats[name] = stats.get(name, 0) + n
            c[name] = c.get(name, 0) + n

    def ready(self, paths: dict[int, list[Route]], peer_ips: frozenset[bytes]) -> None:
        """INIT -> RTR: the peer's paths are known; build the EV set and CC."""
        a, cfg = self.attrs, self.cfg
        self.changed()
        self.peer_ips = peer_ips
        self._paths = paths
        profile = a.ev_profile or cfg.ev_profile
        key = None
        if profile == EV_PROFILE_ECMP:
            key = f"{self.ctx.name}|{a.peer}|{self.qpn}"
        self.evm = EVManager(
            self.qpn,
            {p: len(r) for p, r in paths.items()},
            evs_per_qp=a.evs_per_qp or cfg.evs_per_qp,
            ecmp_key=key,
            min_active=cfg.min_active_evs,
            probe_interval=cfg.probe_interval,
            probe_successes=cfg.probe_successes,
            events=self.ctx.path_events,
        )
        planes = len(paths) or 1
        self.cc = create_cc(
            a.cc_profile or cfg.cc_profile, cfg.mtu_payload, cfg.link_rate * planes,
            cfg.base_rtt_hint, target_floor=cfg.cc_target_floor, rtt_floor=cfg.cc_rtt_floor,
            delay_filter=cfg.cc_delay_filter,
        )
        self.snd.next_seq = self.rec.snd_una = a.sq_psn
        self.resp.start(paths, self.evm)
        self._routes.clear()
        self.snd.clear_templates()

    def start_sending(self) -> None:
        """RTR -> RTS."""
        self.snd.next_seq = self.rec.snd_una = self.attrs.sq_psn
        self._new_table()  # (nothing is sent before RTS; the window is final now)

    def route(self, ev: int) -> tuple[int, Route]:
        """(local port index, Route) of an EV, computed once per path."""
        key = ev >> EV_PATH_SHIFT
        r = self._routes.get(key)
        if r is None:
            plane, path, _ = ev_path(ev)
            routes = self._paths.get(plane) or next(iter(self._paths.values()))
            r = (self.ctx.port_of_plane(plane), routes[path % len(routes)])
            self._routes[key] = r
        return r

    def fail(self, status: WCStatus, reason: str) -> None:
        """Go to ERROR: flush every outstanding work request, tell the application."""
        if self.state is QPState.ERROR:
            return
        self.changed()
        self.state = QPState.ERROR
        self.error_reason = reason
        snd, rec, resp = self.snd, self.rec, self.resp
        first = True
        for wr in list(snd.wrs) + [w for w in snd.sq if w not in snd.wrs]:
            st = status if first else WCStatus.WR_FLUSH_ERR
            first = False
            self.cq.push(Completion(st, wr.wr_id, WCOpcode.RDMA_WRITE, 0, wr.imm, self.qpn))
        while resp.recv_wrs:
            wr_id = resp.recv_wrs.popleft()
            self.rcq.push(Completion(
                WCStatus.WR_FLUSH_ERR, wr_id, WCOpcode.RECV_RDMA_WITH_IMM, 0, None, self.qpn))
        snd.sq.clear()
        snd.wrs.clear()
        self._new_table()
        snd.wr_of.clear()
        rec.rtx_q.clear()
        rec.rnr_q.clear()
        rec.rto_at = rec.rack_at = resp.rx.ack_at = rec.rnr_at = _INF
        rec.suspect_at = rec.tlp_at = _INF
        self.tv += 1
        rec.suspects.clear()
        self.ctx.emit(QPError(self.qpn, reason))

    # --- timers -----------------------------------------------------------------------

    def deadline(self) -> float:
        """Earliest time this QP needs ``on_timer``."""
        rec = self.rec
        self.ack_seen = a = float(self.resp.rx.ack_at)
        t = min(rec.rto_at, rec.rack_at, a, rec.suspect_at, rec.rnr_at, rec.tlp_at)
        evm = self._evm
        if evm is not None and self.state is RTS:
            p = evm.next_probe  # (min(t, p) without the call: once per QP per frame)
            if p < t:
                t = p
        return t

    def on_timer(self, now: float, out: list[tuple[int, bytes]]) -> None:
        """Run whatever timers are due."""
        if self.resp.rx.ack_at <= now:
            self.resp.ack_timer(now, out)
        if self.state is not RTS:
            return
        self.rec.on_timer(now)

    # --- planes -----------------------------------------------------------------------

    def set_planes(self, planes: list[int], now: float) -> None:
        """Only ``planes`` may be used now: resend at once what is in flight elsewhere."""
        evm = self._evm
        if evm is None:
            return
        evm.set_planes(planes)
        self.rec.lose_off_planes(set(evm.usable_planes), now)

    # --- the parts' state by the names readers use (mrcctl, the host, tests) ---------

    sq = _part_field("snd.sq", "Work requests not yet fully sent.")
    wrs = _part_field("snd.wrs", "Work requests sent, not yet completed (in order).")
    next_seq = _part_field("snd.next_seq", "The next sequence number to send.")
    next_msn = _part_field("snd.next_msn", "The next message sequence number (immediates).")
    imm_outstanding = _part_field("snd.imm_outstanding", "Immediates sent, not completed.")
    tx_packets = _part_field("snd.tx_packets", "Data packets sent.")
    snd_una = _part_field("rec.snd_una", "The oldest sequence number not acknowledged.")
    rtx_q = _part_field("rec.rtx_q", "Sequence numbers waiting for a retransmission.")
    lost_log = _part_field("rec.lost_log", "Transmissions declared lost (seq -> record).")
    suspects = _part_field("rec.suspects", "Paths under suspicion (path key -> record).")
    sack_pending = _part_field("rec.sack_pending", "SACKs handled since frames_to_send.")
    srtt = _part_field("rec.srtt", "Smoothed RTT (0 before any sample).")
    rttvar = _part_field("rec.rttvar", "RTT variance.")
    min_rtt = _part_field("rec.min_rtt", "Smallest RTT seen.")
    reo_scale = _part_field("rec.reo_scale", "Reorder allowance multiplier.")
    retries = _part_field("rec.retries", "Retry rounds since the last acknowledgement.")
    rto_at = _part_field("rec.rto_at", "Retransmission timer (inf: none).")
    rx = _part_field("resp.rx", "The responder's state record (shared with the lane).")
    rx_packets = _part_field("resp.rx_packets", "Data packets accepted.")
    tx_sacks = _part_field("resp.tx_sacks", "SACKs sent.")
    acks_held = _part_field("resp.acks_held", "ACKs held to leave with an answer.")
    recv_wrs = _part_field("resp.recv_wrs", "Posted receives (wr_ids), oldest first.")
    recv_posted = _part_field("resp.recv_posted", "Receives ever posted.")
    imm_done = _part_field("resp.imm_done", "The next MSN to complete.")
    ooo = _part_field("resp.ooo", "The out-of-order set: seq -> (len, opcode, msn, imm).",
                      False)
    unreported = _part_field("resp.unreported", "Sequence numbers received since the "
                             "last SACK.", False)
    rcv_nxt = _part_field("resp.rx.rcv_nxt", "Cumulative point: the next sequence number "
                          "expected.")
    rx_high = _part_field("resp.rx.rx_high", "Highest sequence number received out of "
                          "order.")
    rx_msg_bytes = _part_field("resp.rx.rx_msg_bytes", "Bytes of the message being "
                               "received.")
    rcvd_bytes = _part_field("resp.rx.rcvd_bytes", "Payload bytes accepted.")
    since_ack = _part_field("resp.rx.since_ack", "Data packets since the last SACK.")
    hole_at = _part_field("resp.rx.hole_at", "Since when a hole is at the cumulative point "
                          "(inf: none).")
    hole_old = _part_field("resp.rx.hole_old", "That hole outlived the reorder allowance.")
    ack_seq = _part_field("resp.rx.ack_seq", "Sequence number of the packet the next SACK "
                          "echoes.")
    ack_ev = _part_field("resp.rx.ack_ev", "... its EV.")
    ack_ts = _part_field("resp.rx.ack_ts", "... its TSETH stamp.")
    ack_ce = _part_field("resp.rx.ack_ce", "... its CE mark.")
    ack_plane = _part_field("resp.rx.ack_plane", "... the plane it came in on (-1: none "
                            "yet).")
    penalty = _part_field("resp.rx.penalty", "Receiver window penalty (last-hop trims), "
                          "halved per SACK.")

    @property
    def ack_at(self) -> float:
        """Delayed-SACK deadline (inf: none)."""
        return float(self.resp.rx.ack_at)

    @ack_at.setter
    def ack_at(self, value: float) -> None:
        self.resp.rx.ack_at = value
        self.tv += 1

    # --- stats ------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """QP state and counters, for mrcctl."""
        return {
            "qpn": self.qpn,
            "state": self.state.value,
            "peer": self.attrs.peer,
            "dest_qp_num": self.attrs.dest_qp_num,
            "error": self.error_reason,
            "cwnd": self._cc.cwnd if self._cc else 0,
            "srtt": self.rec.srtt,
            "inflight": self.txt.ninfl,
            "inflight_bytes": self.txt.infl_bytes,
            "counters": self.counters(),
        }

    def counters(self) -> dict[str, int]:
        """Per-QP counters, hot ones included."""
        c = dict(self.stats)
        c["rx_data"] = self.resp.rx_packets
        c["tx_data"] = self.snd.tx_packets
        c["tx_sack"] = self.resp.tx_sacks
        if self.resp.acks_held:  # (absent until one, as count()'s were)
            c["ack_held"] = self.resp.acks_held
        return c
