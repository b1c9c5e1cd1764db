"""One queue pair: the requester (send side) and the responder (receive side) of MRC.

Follow a write: :meth:`QueuePair.post_write` queues a :class:`WorkRequest`;
:meth:`QueuePair.emit` cuts it into MTU-sized packets (each with its own RETH address),
sends each on the next EV, and records which EV each PSN went on. The peer's responder
(:meth:`QueuePair.on_data`) checks rkey and bounds, places the payload, and SACKs;
:meth:`QueuePair.on_sack` retires acknowledged packets, feeds RTT and ECN to the EV
manager and CC, detects losses from the SACK (RACK-style: a packet sent before one that
was acknowledged, still missing after that packet's RTT plus a reorder allowance), and
completes work requests in order. Timers (:meth:`QueuePair.on_timer`) are the backstop.

Internally PSNs are unbounded integers ("sequence numbers", ``seq``): the wire PSN is
``seq & PSN_MASK``, and a received 24-bit PSN is unwrapped against the nearest reference
(:func:`unwrap`), so wraparound needs no special case anywhere else.
"""

from __future__ import annotations

import math
from collections import deque
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any

from mrcnet.constants import (
    EV_PATH_SHIFT,
    EV_PLANE_MASK,
    EV_PLANE_SHIFT,
    IMM_OPCODES,
    LAST_OPCODES,
    MPR_UNIT,
    PSN_MASK,
    SACK_BITMAP_BITS,
    TIMESTAMP_MOD,
    WINDOW_PENALTY_MAX,
    NackReason,
    Opcode,
    SackMode,
)
from mrcnet.core.cc import CongestionControl, create_cc
from mrcnet.core.config import EV_PROFILE_ECMP, HostConfig, QPAttrs
from mrcnet.core.ctrl import SackTemplate
from mrcnet.core.events import (
    Completion,
    ImmediateReceived,
    QPError,
    WCOpcode,
    WCStatus,
    WriteCompleted,
)
from mrcnet.core.evs import EVInfo, EVManager, ev_path
from mrcnet.core.rxlane import RX_UNREP_MAX, lane_class, ring_size, sack_bases
from mrcnet.core.states import EVState, QPState
from mrcnet.core.txtable import PEND, Entry, TxTable, new_tx_table
from mrcnet.fastpath import PyParsed, RunPatcher, make_template, run_patcher
from mrcnet.wire import Route, build_data, build_nack, build_probe
from mrcnet.wire.bth import F_ACKREQ, F_TS
from mrcnet.wire.nack import NETH
from mrcnet.wire.probe import ProbeHeader
from mrcnet.wire.template import DataTemplate

if TYPE_CHECKING:
    from mrcnet.core.host import CompletionQueue, Host

_HALF = 1 << 23
_MSN_MASK = 0xFFFFFF
_CREDIT_MOD = 1 << 32
_INF = float("inf")
_S16_MAX = (1 << 15) - 1
_ONLY = (Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM)
# Opcodes as plain ints for the per-packet path (an enum member lookup costs more)
_OP_FIRST, _OP_MIDDLE = int(Opcode.WRITE_FIRST), int(Opcode.WRITE_MIDDLE)
_OP_LAST, _OP_LAST_IMM = int(Opcode.WRITE_LAST), int(Opcode.WRITE_LAST_IMM)
_OP_ONLY, _OP_ONLY_IMM = int(Opcode.WRITE_ONLY), int(Opcode.WRITE_ONLY_IMM)
_LAST = (Opcode.WRITE_LAST, Opcode.WRITE_LAST_IMM)
_ENDS = frozenset(int(op) for op in _ONLY + _LAST)  # opcodes that end a message
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
_TEMPLATE_CACHE_MAX = 1 << 14  # (EV, rkey) entries before the cache starts over
_PENALTY_PER_LASTHOP_TRIM = 8  # receiver window penalty added per last-hop trim
_PENALTY_DECAY = 0.5  # ... and halved at every SACK that carries it
_EXT_IMM, _EXT_TSETH = 1, 2  # mrcnet/_csrc/fastpath.h MRC_EXT_*: extension headers
_U64 = 1 << 64
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


def unwrap(psn: int, ref: int) -> int:
    """The unbounded sequence number nearest ``ref`` whose low 24 bits are ``psn``."""
    d = (psn - ref) & PSN_MASK
    if d >= _HALF:
        d -= PSN_MASK + 1
    return ref + d


def _unwrap32(v: int, ref: int) -> int:
    d = (v - ref) % _CREDIT_MOD
    if d >= _CREDIT_MOD // 2:
        d -= _CREDIT_MOD
    return ref + d


def _rx_field(name: str, doc: str) -> Any:
    """A QueuePair property that is field ``name`` of its responder record ``rx`` (read
    by attrgetter: no Python frame per read, the host reads some for every batch)."""
    def put(self: QueuePair, value: Any) -> None:
        setattr(self.rx, name, value)

    return property(attrgetter(f"rx.{name}"), put, doc=doc)


def ts16(now: float) -> int:
    """The 16-bit microsecond timestamp carried in TSETH."""
    return int(now * 1e6) % TIMESTAMP_MOD


def retry_schedule(base: float, retry_cnt: int, linear: int) -> list[float]:
    """Timeout before each (re)transmission of a packet nobody acknowledges: ``linear``
    intervals of ``base``, then doubling; ``retry_cnt + 1`` in all. Their sum bounds how
    long an unreachable peer takes to put the QP in ERROR."""
    return [base * (1 if k <= linear else 2 ** (k - linear)) for k in range(retry_cnt + 1)]


class WorkRequest:
    """A posted RDMA WRITE (with or without immediate)."""

    __slots__ = (
        "imm",
        "length",
        "msn",
        "next_pkt",
        "npkts",
        "offset",
        "remote_addr",
        "rkey",
        "slot",
        "view",
        "wr_id",
    )

    def __init__(
        self, wr_id: int, view: memoryview, offset: int, length: int,
        remote_addr: int, rkey: int, imm: int | None, mtu: int,
    ) -> None:
        self.wr_id = wr_id
        self.view = view
        self.offset = offset
        self.length = length
        self.remote_addr = remote_addr
        self.rkey = rkey
        self.imm = imm
        self.msn = -1
        self.npkts = max(1, -(-length // mtu))
        self.next_pkt = 0
        self.slot = -1  # its slot in the QP's table of packets in flight, once started


class QueuePair:
    """An MRC queue pair. Created and driven by :class:`mrcnet.core.host.Host`."""

    def __init__(self, host: Host, qpn: int, cq: CompletionQueue, attrs: QPAttrs,
                 recv_cq: CompletionQueue | None = None) -> None:
        self.host = host
        self.cfg: HostConfig = host.config
        self.qpn = qpn
        self.cq = cq  # send completions (and receive ones without a recv_cq)
        self.rcq = recv_cq if recv_cq is not None else cq  # (an empty CQ is falsy)
        self.attrs = attrs
        self.state = QPState.RESET
        self.error_reason: str | None = None
        self.evm: EVManager | None = None
        self.cc: CongestionControl | None = None
        self.peer_ips: frozenset[bytes] = frozenset()
        self._paths: dict[int, list[Route]] = {}  # the peer's routes per plane (ready)
        self._routes: dict[int, tuple[int, Route]] = {}
        self._tmpl: dict[tuple[object, ...], Any] = {}
        self._tmpl_ev: dict[tuple[int, int], tuple[int, Any, Any]] = {}
        # (path, rkey) -> (port, slot in self._runs): new data frames built a run at a
        # time in C (None without the C fast path: one frame per call then); and the
        # same per rkey and EV, for the per-packet lookup
        self._run_slot: dict[tuple[int, int], tuple[int, int] | None] = {}
        self._run_slot_ev: dict[int, dict[int, tuple[int, int] | None]] = {}
        self._runs: RunPatcher | None = None
        self._sack_tmpl: dict[int, tuple[Any, int]] = {}  # path -> (SACK template, port)
        self.rx_packets = 0  # hot counters: plain attributes, folded into counters()
        self.tx_packets = 0
        self.tx_sacks = 0
        self.recv_wrs: deque[int] = deque()
        self.recv_posted = 0  # receives ever posted (the immediate credit we advertise)
        self._reset_transport()

    # --- life cycle -------------------------------------------------------------------

    def _reset_transport(self) -> None:
        # requester
        self.sq: deque[WorkRequest] = deque()  # not yet fully sent
        self.wrs: deque[WorkRequest] = deque()  # sent, not yet completed (in order)
        self.next_seq = self.snd_una = self.attrs.sq_psn
        # Every packet sent and not yet acknowledged (and which are in flight), with the
        # per-packet bookkeeping of sending and of SACKs (C when built): see txtable.py.
        self._seen0 = self.snd_una  # where the table's SACK window tracking starts
        self._new_table()
        self.wr_ctr = 0  # work requests started (their table slots)
        self.wr_of: dict[int, WorkRequest] = {}  # slot -> started, not completed
        self.rtx_q: deque[int] = deque()  # seqs waiting for a retransmission
        self.rto_at = _INF
        self.retries = 0
        self.rack_at = _INF
        self.reo_scale = 1
        self.reo_clean = 0
        self.reo_learned = 0.0  # allowance (s) learned from how late "lost" packets came
        self.reo_last = -_INF  # time of the last spurious loss
        # seq -> (EV, TSETH stamp, time declared lost, by RACK) of transmissions declared lost
        self.lost_log: dict[int, tuple[int, int, float, bool]] = {}
        # path key (EV >> 12: plane and path) -> (count, window start) of its ambiguous
        # losses (the newest send time acknowledged per path is the table's: path_acked)
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
        self.suspect_at = _INF
        self.srtt = 0.0
        self.rttvar = 0.0
        self.min_rtt = 0.0
        self.next_msn = 0
        self.peer_credit = 0
        self.imm_outstanding = 0
        self.credit_probe_at = _INF
        self.credit_probes = 0
        self.sack_pending = False  # SACKs handled since the host's last frames_to_send
        self.sack_acked = 0  # ... and what they acknowledged
        # responder: its per-packet state is one record (``struct mrc_rx_qp``, rx.h
        # documents the fields) that the host's receive lane (mrcnet/core/rxlane.py: C
        # or its Python twin) updates in place for the common case of receiving data;
        # the properties below give the same names for readers elsewhere.
        self._rxk = lane_class(self.cfg.fast_parse)
        self.rx = self._rxk.new_state(ring_size(self.rx_window))
        self.rx.rcv_nxt = self.rx.rx_high = self.attrs.rq_psn
        self._unrep_more: list[int] = []  # received since the last SACK, beyond rx.unrep
        self.imm_done = 0  # next MSN to complete
        self.penalty = 0.0
        self.lasthop_trims: dict[int, dict[int, float]] = {}
        self.stats: dict[str, int] = {}

    def _new_table(self) -> None:
        # (the paths an EV can name: the peer's routes per plane, once known)
        paths = sum(len(r) for r in self._paths.values())
        self.txt: TxTable = new_tx_table(self.tx_window, self._seen0, max(16, paths))
        self._txcap = self.tx_window  # (the table holds at least this many PSNs)

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
        mpr = self.attrs.mpr
        return mpr * MPR_UNIT if mpr else self.cfg.rx_window

    @property
    def rx_window(self) -> int:
        """PSNs the responder accepts ahead of (and behind) its cumulative point."""
        mpr = self.attrs.mpr_dest
        return mpr * MPR_UNIT if mpr else self.cfg.rx_window

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
        self.host.count(name, n)

    def ready(self, paths: dict[int, list[Route]], peer_ips: frozenset[bytes]) -> None:
        """INIT -> RTR: the peer's paths are known; build the EV set and CC."""
        a, cfg = self.attrs, self.cfg
        self.peer_ips = peer_ips
        self._paths = paths
        profile = a.ev_profile or cfg.ev_profile
        key = None
        if profile == EV_PROFILE_ECMP:
            key = f"{self.host.name}|{a.peer}|{self.qpn}"
        self.evm = EVManager(
            self.qpn,
            {p: len(r) for p, r in paths.items()},
            evs_per_qp=a.evs_per_qp or cfg.evs_per_qp,
            ecmp_key=key,
            min_active=cfg.min_active_evs,
            probe_interval=cfg.probe_interval,
            probe_successes=cfg.probe_successes,
            events=self.host.path_events,
        )
        planes = len(paths) or 1
        self.cc = create_cc(
            a.cc_profile or cfg.cc_profile, cfg.mtu_payload, cfg.link_rate * planes,
            cfg.base_rtt_hint, target_floor=cfg.cc_target_floor, rtt_floor=cfg.cc_rtt_floor,
            delay_filter=cfg.cc_delay_filter,
        )
        self.next_seq = self.snd_una = a.sq_psn
        self.rcv_nxt = self.rx_high = a.rq_psn
        self._routes.clear()
        self._tmpl.clear()
        self._tmpl_ev.clear()
        self._run_slot.clear()
        self._run_slot_ev.clear()
        self._runs = None
        self._sack_tmpl.clear()

    def start_sending(self) -> None:
        """RTR -> RTS."""
        self.next_seq = self.snd_una = self.attrs.sq_psn
        self._new_table()  # (nothing is sent before RTS; the window is final now)

    def _data_path(self, ev: int, rkey: int) -> tuple[int, Any, Any] | None:
        """(port, template, path spec) for data frames on ``ev`` with ``rkey``: the
        headers are built once per (route shape, rkey) and patched per packet (C when
        built); None when the route cannot be templated (then build_data is used)."""
        key = (ev >> EV_PATH_SHIFT, rkey)  # the path (plane, path index), not the instance
        hit = self._tmpl_ev.get(key)
        if hit is not None:
            return hit
        port, route = self.route(ev)
        shape = (route.src_mac, route.dst_mac, route.src_ip, route.dst_ip, route.encap,
                 route.hop_limit, route.usid is None,
                 len(route.segments) if route.segments else 0, rkey)
        try:
            tmpl = self._tmpl.get(shape)
            if tmpl is None:
                tmpl = make_template(DataTemplate.for_route(
                    route, dest_qp=self.attrs.dest_qp_num or 0, rkey=rkey))
                self._tmpl[shape] = tmpl
            if route.usid is not None:
                spec = tmpl.path(usid=route.usid)
            elif route.segments is not None:
                spec = tmpl.path(segments=route.segments)
            else:
                spec = None
        except ValueError:
            return None
        hit = (port, tmpl, spec)
        if len(self._tmpl_ev) > _TEMPLATE_CACHE_MAX:
            self._tmpl_ev.clear()
            self._run_slot.clear()
            self._run_slot_ev.clear()
            self._runs = None
        self._tmpl_ev[key] = hit
        return hit

    def _run_path(self, ev: int, rkey: int) -> tuple[int, int] | None:
        """(port, slot) for building new data frames on ``ev`` with ``rkey`` in a run
        (:class:`mrcnet.fastpath.RunPatcher`); None when they are built one at a time
        (no C fast path, templates off, or a route that cannot be templated)."""
        key = (ev >> EV_PATH_SHIFT, rkey)
        if key in self._run_slot:
            return self._run_slot[key]
        hit = self._data_path(ev, rkey) if self.cfg.use_templates else None
        slot = None
        if hit is not None:
            if self._runs is None:
                self._runs = run_patcher()
            if self._runs is not None:
                port, tmpl, spec = hit
                slot = (port, self._runs.add(tmpl, spec))
        self._run_slot[key] = slot
        return slot

    def route(self, ev: int) -> tuple[int, Route]:
        """(local port index, Route) of an EV, computed once per path."""
        key = ev >> EV_PATH_SHIFT
        r = self._routes.get(key)
        if r is None:
            plane, path, _ = ev_path(ev)
            routes = self._paths.get(plane) or next(iter(self._paths.values()))
            r = (self.host.port_of_plane(plane), routes[path % len(routes)])
            self._routes[key] = r
        return r

    def fail(self, status: WCStatus, reason: str) -> None:
        """Go to ERROR: flush every outstanding work request, tell the application."""
        if self.state is QPState.ERROR:
            return
        self.state = QPState.ERROR
        self.error_reason = reason
        first = True
        for wr in list(self.wrs) + [w for w in self.sq if w not in self.wrs]:
            st = status if first else WCStatus.WR_FLUSH_ERR
            first = False
            self.cq.push(Completion(st, wr.wr_id, WCOpcode.RDMA_WRITE, 0, wr.imm, self.qpn))
        while self.recv_wrs:
            wr_id = self.recv_wrs.popleft()
            self.rcq.push(Completion(
                WCStatus.WR_FLUSH_ERR, wr_id, WCOpcode.RECV_RDMA_WITH_IMM, 0, None, self.qpn))
        self.sq.clear()
        self.wrs.clear()
        self._new_table()
        self.wr_of.clear()
        self.rtx_q.clear()
        self.rto_at = self.rack_at = self.ack_at = self.credit_probe_at = _INF
        self.suspect_at = _INF
        self.suspects.clear()
        self.host.emit(QPError(self.qpn, reason))

    # --- requester: posting and sending ----------------------------------------------

    def post_write(self, wr: WorkRequest) -> None:
        """Queue a write; it is sent from :meth:`emit` once the QP is in RTS."""
        self.sq.append(wr)

    def has_work(self) -> bool:
        """Anything to (re)transmit?"""
        return bool(self.sq or self.rtx_q)

    def emit(self, now: float, out: list[tuple[int, bytes]], sendq: Any = None) -> None:
        """Append data frames the window allows: retransmissions first, then new data
        (into ``sendq``, the caller's send queues, when given and built in C).

        New data goes out a run at a time: as many packets of one work request as the
        window allows (exactly where checking it packet by packet would stop), their EVs
        chosen together (:meth:`EVManager.take`), accounted for in the table of packets
        in flight in one call and, with the C fast path, built in one C call
        (:meth:`_run_frames`)."""
        cc, evm = self.cc, self.evm
        if cc is None or evm is None:
            return
        cwnd = cc.cwnd
        rtx_q, sq, txt = self.rtx_q, self.sq, self.txt
        while rtx_q:
            seq = rtx_q[0]
            e = txt.get(seq)
            if e is None or not e[8] & PEND:  # acknowledged meanwhile
                rtx_q.popleft()
                continue
            if txt.ninfl and txt.infl_bytes + e[4] > cwnd:
                return
            rtx_q.popleft()
            self._resend(seq, e, now, out, evm.next_ev(avoid=e[0]))
        mtu = self.cfg.mtu_payload
        win = min(self.tx_window, self._txcap)
        ts = ts16(now)
        while sq:
            # Packets the window takes: each new one needs inflight + mtu <= cwnd unless
            # nothing is in flight (inside a run every packet but a message's last is a
            # whole mtu, and the last ends the run).
            ninfl = txt.ninfl
            k = int((cwnd - txt.infl_bytes) // mtu) if ninfl else max(1, int(cwnd // mtu))
            seq = self.next_seq
            wr = sq[0]
            idx = wr.next_pkt
            k = min(k, self.snd_una + win - seq, wr.npkts - idx)
            if k <= 0:
                break
            if idx == 0:
                if wr.imm is not None and not self._imm_allowed(now):
                    break
                self._start_wr(wr)
            evs = evm.take(k)
            if not evs:  # the next EV is not the plain round robin's: the full choice
                info = evm.next_ev()
                info.sent += 1
                evs = [info.ev]
            k = len(evs)
            ops = [_OP_MIDDLE] * k
            if idx == 0:
                ops[0] = _OP_FIRST
            end = idx + k
            if end == wr.npkts:
                sq.popleft()
                if wr.imm is None:
                    ops[-1] = _OP_ONLY if end == 1 else _OP_LAST
                else:
                    ops[-1] = _OP_ONLY_IMM if end == 1 else _OP_LAST_IMM
            wr.next_pkt = end
            self.next_seq = seq + k
            self._run_frames(wr, seq, idx, evs, ops, ts, out, sendq)
            txt.send(seq, evs, ops, wr.slot, idx * mtu, mtu, wr.length, now, ts)
            if self.rto_at == _INF:
                self.rto_at = now + self._rto(evs[0]) * self._backoff()
            self.tx_packets += k

    def _run_frames(self, wr: WorkRequest, seq: int, idx: int, evs: list[int], ops: list[int],
                    ts: int, out: list[tuple[int, bytes]], txq: Any) -> None:
        """Append the frames of new packets ``seq ..`` (packets ``idx ..`` of ``wr``, one
        per EV): one C call when every path has a run slot, else one at a time. With the
        send queues ``txq`` a run built in C goes into them instead of ``out``."""
        mtu = self.cfg.mtu_payload
        rkey = wr.rkey
        by_ev = self._run_slot_ev.get(rkey)
        if by_ev is None:
            by_ev = self._run_slot_ev[rkey] = {}
        # (map and itemgetter: per packet no Python bytecode, only C)
        try:
            at = list(map(by_ev.__getitem__, evs))
        except KeyError:
            for ev in evs:
                if ev not in by_ev:
                    by_ev[ev] = self._run_path(ev, rkey)
            at = list(map(by_ev.__getitem__, evs))
        n = len(evs)
        off0 = idx * mtu
        va = wr.remote_addr + off0
        runs = self._runs
        if runs is None or None in at or va + (n - 1) * mtu >= _U64:
            for i in range(n):  # raises as one at a time did
                off = off0 + i * mtu
                out.append(self._frame(seq + i, wr, off, min(mtu, wr.length - off), ops[i],
                                       evs[i], ts, False))
            return
        # Inside a run of one work request every packet but the first and the last is a
        # WRITE_MIDDLE, which carries no AckReq and no immediate.
        flags, exts = [F_TS] * n, [_EXT_TSETH] * n
        for i in (0, n - 1):
            op = ops[i]
            if op in LAST_OPCODES:
                flags[i] = F_TS | F_ACKREQ
            if op in IMM_OPCODES:
                exts[i] = _EXT_TSETH | _EXT_IMM
        start = wr.offset + off0
        end = wr.offset + min(wr.length, off0 + n * mtu)
        if txq is not None:  # mrcd: straight to the ports' queues, no object per frame
            runs.queue(txq, list(map(_FIRST, at)), list(map(_SECOND, at)),  # type: ignore[arg-type]
                       evs, ops, flags, exts, seq & PSN_MASK, va, wr.view[start:end], mtu,
                       wr.msn & _MSN_MASK, wr.imm if wr.imm is not None else 0, ts)
            return
        frames = runs.frames(
            list(map(_SECOND, at)), evs, ops, flags, exts,  # type: ignore[arg-type]
            seq & PSN_MASK, va,
            wr.view[start:end], mtu, wr.msn & _MSN_MASK,
            wr.imm if wr.imm is not None else 0, ts)
        # (read-only views, not bytes: every taker of frames_to_send's frames, the
        # ports' batch send and the simulator, takes any buffer)
        out.extend(zip(map(_FIRST, at), frames, strict=True))  # type: ignore[arg-type,misc]

    def _imm_allowed(self, now: float) -> bool:
        if (self.next_msn < self.peer_credit
                and self.imm_outstanding < self.attrs.max_imm_outstanding):
            return True
        if (self.next_msn >= self.peer_credit and not self.txt.ninfl
                and self.credit_probe_at == _INF):
            # Blocked on the peer's receive credit with nothing in flight: ask for a SACK
            # (which carries the credit) now and then, counted against the retry budget.
            self.credit_probe_at = now + self._base_timeout()
        return False

    def probe_timeout(self) -> float:
        """How long an EV probe may take to be answered: the QP's RTT plus four
        variances (endpoint scheduling delay included); 0 before any sample."""
        return self.srtt + 4 * self.rttvar

    def _base_timeout(self) -> float:
        base = self.srtt + 4 * self.rttvar if self.srtt else self.attrs.ack_timeout_s
        return max(self.cfg.timeout_floor, base)

    def _start_wr(self, wr: WorkRequest) -> None:
        self.wrs.append(wr)
        wr.slot = self.wr_ctr & 0xFFFFFFFF
        self.wr_ctr += 1
        self.wr_of[wr.slot] = wr
        if wr.imm is not None:
            wr.msn = self.next_msn
            self.next_msn += 1
            self.imm_outstanding += 1

    def _resend(self, seq: int, e: Entry, now: float, out: list[tuple[int, bytes]],
                info: EVInfo) -> None:
        """Retransmit ``seq`` (its table entry ``e``) on ``info``."""
        ts = ts16(now)
        off = e[5]
        out.append(self._frame(seq, self.wr_of[e[7]], off, e[4], e[6], info.ev, ts, True))
        self.txt.resend(seq, info.ev, now, ts)
        info.sent += 1
        if self.rto_at == _INF:
            self.rto_at = now + self._rto(info.ev) * self._backoff()
        self.tx_packets += 1
        self.count("tx_retransmit")

    def _frame(self, seq: int, wr: WorkRequest, off: int, length: int, opcode: int, ev: int,
               ts: int, rtx: bool) -> tuple[int, bytes]:
        """(local port, data frame) of packet ``seq`` (bytes ``off ..`` of ``wr``) on
        ``ev``."""
        start = wr.offset + off
        imm = opcode in IMM_OPCODES
        payload = wr.view[start : start + length]
        tp = self._data_path(ev, wr.rkey) if self.cfg.use_templates else None
        if tp is not None:
            port, tmpl, spec = tp
            frame = tmpl.frame(
                opcode, seq & PSN_MASK, ev, wr.remote_addr + off, payload, spec,
                (wr.msn & _MSN_MASK) if imm else None, wr.imm if imm else None, ts, rtx,
                opcode in LAST_OPCODES)
        else:
            port, route = self.route(ev)
            frame = build_data(
                route,
                ev=ev,
                opcode=opcode,
                dest_qp=self.attrs.dest_qp_num or 0,
                psn=seq & PSN_MASK,
                va=wr.remote_addr + off,
                rkey=wr.rkey,
                payload=payload,
                msn=(wr.msn & _MSN_MASK) if imm else None,
                imm=wr.imm if imm else None,
                timestamp=ts,
                rtx=rtx,
                ack_req=opcode in LAST_OPCODES,
            )
        return port, frame

    # --- requester: timers and loss -------------------------------------------------

    def _rto(self, ev: int) -> float:
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

    def _backoff(self) -> float:
        """Retry phase: ``retry_linear`` rounds at the base timeout, then doubling."""
        k = self.retries - self.retry_linear
        return 1.0 if k <= 0 else float(1 << min(k, 30))

    def _arm_rto(self) -> None:
        """The retransmission timer follows the oldest packet in flight (per-path RTO)."""
        seq = self.txt.oldest()
        e = self.txt.get(seq) if seq is not None else None
        self.rto_at = _INF if e is None else e[1] + self._rto(e[0]) * self._backoff()

    def _mark_lost(self, seq: int, now: float, cause: str) -> None:
        """Take packet ``seq`` out of flight and queue it for retransmission on another
        EV."""
        txt = self.txt
        e = txt.get(seq)
        if e is None:
            return
        ev, sent = e[0], e[1]
        txt.lose(seq)
        evm, cc = self.evm, self.cc
        assert evm is not None and cc is not None
        info = evm.evs.get(ev)
        if cause == "trim":
            if info is not None:
                info.trimmed += 1
            self.rtx_q.appendleft(seq)
        else:
            if info is not None:
                info.lost += 1
            if cause in ("loss", "timeout"):
                log = self.lost_log
                if len(log) >= _LOST_LOG_MAX:
                    for k in list(log)[: _LOST_LOG_MAX // 2]:
                        del log[k]
                log[seq] = (ev, e[2], now, cause == "loss")
                txt.log(seq, True)
                if self._path_failed(ev, sent, now, cause):
                    if cause == "timeout":
                        evm.assume_bad(ev, now, cause)
                    else:
                        self._suspect(ev, sent, now)
                cc.on_loss(now)
            self.rtx_q.append(seq)
        self.count(f"lost_{cause}")

    def _suspect(self, ev: int, sent: float, now: float) -> None:
        """A SACK-detected loss with nothing newer through on its path: that is what a
        dead path looks like, and also what a late batch looks like when the endpoints
        add scheduling jitter. Give the path a short grace (half a smoothed RTT, within
        the allowance already waited): a newer packet acknowledged on it clears it,
        otherwise its EVs retire. (After a real failure more packets on the path go
        missing meanwhile; they join the same suspicion.)"""
        key = ev >> 12
        sus = self.suspects.get(key)
        if sus is not None:
            if ev not in sus[2]:
                sus[2].append(ev)
            return
        self.count("loss_suspect")
        grace = SUSPECT_GRACE_RTTS * (self.srtt or self.cfg.base_rtt_hint)
        self.suspects[key] = (now + grace, sent, [ev], self.rack_sent)
        self.suspect_at = min(self.suspect_at, now + grace)

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
                self.count("loss_suspect_extended")
            if due <= now:
                del self.suspects[key]
                self._retire_path(evs, now)
            else:
                nxt = min(nxt, due)
        self.suspect_at = nxt

    def _retire_path(self, evs: list[int], now: float) -> None:
        """EVs of one path share its fate: retire the path's other EVs with these (or
        each would have to lose a packet of its own first)."""
        evm = self.evm
        assert evm is not None
        plane, path, _ = ev_path(evs[0])
        # Spares (revived EVs waiting for a slot) share the path's fate too: left GOOD,
        # a refill could put one straight back onto the dead path.
        evs = evs + [i.ev for i in (*evm.active.get(plane, ()), *evm.spares.get(plane, ()))
                     if i.path == path]
        for ev in evs:
            evm.assume_bad(ev, now, "loss")

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
        so random loss on one link is still caught within a few RTTs."""
        self.count("loss_confirmed")
        key = ev >> 12
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
        npaths = len({i.ev >> 12 for lst in evm.active.values() for i in lst} | conf.keys())
        expected = others / (npaths - 1) if npaths > 1 else 0.0
        if mine >= CONFIRMED_MIN and mine > expected + CONFIRMED_SIGMAS * math.sqrt(expected) + 1:
            del conf[key]
            self.count("loss_confirmed_retired")
            self._retire_path([ev], now)

    def _path_failed(self, ev: int, sent: float, now: float, cause: str) -> bool:
        """Does the loss of a packet on ``ev`` sent at ``sent`` condemn its path? At once
        if nothing sent on the path after it has been acknowledged (a dead path delivers
        nothing newer). If a later packet got through, the loss is ambiguous (reordering,
        endpoint jitter, a random drop): only ``retire_ambiguous`` of them within a few
        RTTs retire the EV."""
        key = ev >> 12
        if cause == "timeout" and self.rack_sent <= sent:
            # Nothing sent after it got through on *any* path: the peer (or this host's
            # own scheduling) stalled, or everything is down. No path to blame; the
            # retry budget decides.
            self.count("timeout_unblamed")
            return False
        if self.txt.path_acked(key) <= sent:
            return True
        self.count("loss_ambiguous")
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

    def _learn_reorder(self, late: float) -> None:
        """A packet declared lost arrived ``late`` seconds after that: widen the allowance
        to cover it (with a margin), never beyond the retransmission timeout."""
        cap = max(self.cfg.timeout_floor, self.srtt + 4 * self.rttvar)
        self.reo_learned = min(cap, max(
            self.reo_learned, REO_LEARN_MARGIN * (self._reorder_allowance() + late)))

    def _reorder_allowance(self) -> float:
        floor = max(self.cfg.reorder_floor, self.min_rtt / 4)
        base = floor * self.reo_scale
        if self.reo_scale > 1 and self.srtt:
            # Doubling after spurious losses widens it, but not beyond a couple of RTTs
            # (unless measured lateness says more: reo_learned): a dead path must still
            # be noticed within a few RTTs.
            base = min(base, max(floor, REO_SCALED_CAP_RTTS * self.srtt))
        return max(base, self.reo_learned) + self.cfg.ack_delay

    def _detect_losses(self, now: float) -> None:
        """RACK over sprayed paths: a packet sent before the most recently sent packet
        that was acknowledged is lost once that packet's RTT plus a reorder allowance has
        passed since it was sent; otherwise a timer is set for that moment."""
        txt = self.txt
        limit = txt.rack_sent
        if limit < 0:
            return
        # The allowance covers path skew and the peer's ACK coalescing delay.
        lost, self.rack_at = txt.rack(limit, txt.rack_rtt + self._reorder_allowance(), now)
        for seq in lost:
            self._mark_lost(seq, now, "loss")

    def _on_rto(self, now: float) -> None:
        """Timer backstop: every packet past its per-path RTO is lost (its EV retires);
        one retry round is counted, and the next round waits the backed-off timeout.
        Rounds without any acknowledgement in between exhaust the retry budget."""
        expired = []
        backoff = self._backoff()
        txt = self.txt
        for seq in txt.inflight():
            e = txt.get(seq)
            if e is not None and e[1] + self._rto(e[0]) * backoff <= now:
                expired.append(seq)
        if not expired:
            self._arm_rto()
            return
        self.retries += 1
        budget = self.retry_budget
        if self.retries > budget:
            self._retry_exhausted(expired[0], now)
            return
        for seq in expired:
            self._mark_lost(seq, now, "timeout")
        self.count("rto_rounds")
        self.rto_at = now + self._base_timeout() * self._backoff()

    def _retry_exhausted(self, seq: int, now: float) -> None:
        budget = self.retry_budget
        self.fail(
            WCStatus.RETRY_EXC_ERR,
            f"peer unreachable: no acknowledgement from {self.attrs.peer} QP "
            f"{self.attrs.dest_qp_num} for PSN {seq & PSN_MASK} after {budget} "
            f"retransmissions on {len(self.evm.evs) if self.evm else 0} EVs "
            f"(retry budget exhausted; check the peer host, its QP and the fabric)",
        )

    def deadline(self) -> float:
        """Earliest time this QP needs ``on_timer``."""
        t = min(self.rto_at, self.rack_at, self.ack_at, self.credit_probe_at, self.suspect_at)
        if self.evm is not None and self.state is QPState.RTS:
            t = min(t, self.evm.next_probe)
        return t

    def on_timer(self, now: float, out: list[tuple[int, bytes]]) -> None:
        """Run whatever timers are due."""
        if self.ack_at <= now:
            self.send_sack(now, out)
        if self.state is not QPState.RTS:
            return
        if self.rack_at <= now:
            self._detect_losses(now)
        if self.suspect_at <= now:
            self._retire_suspects(now)
        if self.rto_at <= now:
            self._on_rto(now)
        if self.credit_probe_at <= now and self.state is QPState.RTS:
            self._credit_probe(now, out)

    def _credit_probe(self, now: float, out: list[tuple[int, bytes]]) -> None:
        self.credit_probes += 1
        budget = self.retry_budget
        if self.credit_probes > budget + 1:
            self.fail(
                WCStatus.RETRY_EXC_ERR,
                f"peer unreachable: {self.attrs.peer} QP {self.attrs.dest_qp_num} did not "
                f"answer {budget + 1} credit probes (retry budget exhausted)",
            )
            return
        assert self.evm is not None
        info = self.evm.next_ev()
        port, route = self.route(info.ev)
        out.append((port, build_probe(
            route, ev=info.ev, dest_qp=self.attrs.dest_qp_num or 0,
            probe=ProbeHeader(self.credit_probes, info.ev, self.next_seq & PSN_MASK, ts16(now)),
        )))
        base = self._base_timeout()
        k = self.credit_probes - self.retry_linear
        self.credit_probe_at = now + (base if k <= 0 else base * (1 << min(k, 30)))

    # --- requester: acknowledgements -----------------------------------------------

    def on_sack(self, s: PyParsed, now: float) -> None:
        """A SACK (or ACK) from the peer's responder (``s``: the parsed frame)."""
        una = self.snd_una
        cack = unwrap(s.cack_psn, una)
        if cack > self.next_seq or cack <= una - self._txcap:
            self.count("rx_sack_out_of_window")
            return
        if cack < una:
            # An older SACK overtaken by a newer one: its bitmap may still be news.
            self.count("rx_sack_stale")
        credit = _unwrap32(s.imm_credit, self.peer_credit)
        if credit > self.peer_credit:
            self.peer_credit = credit
        self.credit_probe_at = _INF
        self.credit_probes = 0
        evm, cc = self.evm, self.cc
        if evm is None or cc is None or self.state is not QPState.RTS:
            return
        # The table acknowledges what the SACK reports (the per-packet work) and says
        # whether the SACK is about the latest transmission of the packet that
        # triggered it (same EV and timestamp): then that packet gives an RTT sample.
        txt = self.txt
        trig = cack + s.ack_offset
        sack_ev, sack_off, ts_echo = s.sack_ev, s.sack_offset, s.ts_echo
        acked = txt.sack(now, una, cack, self.next_seq, cack + sack_off, s.bitmap,
                         sack_off == 1, trig, sack_ev, ts_echo)
        if cack > una:
            self.snd_una = cack
        self._sack_news(acked, txt.trig_tx, txt.trig_sent, trig, sack_ev, ts_echo, s.ece,
                        s.mode, s.window_penalty, now)

    def on_sack_records(self, ints: list[int], sents: list[float], now: float) -> None:
        """SACKs whose table work the receive lane did (:class:`mrcnet.core.rxlane.PyRxLane`
        ``take_acks``; rx.h ``struct mrc_rx_ack``): the rest of :meth:`on_sack` for each,
        in order. ``ints`` holds ``RX_ACK_INTS`` integers per SACK, ``sents`` the
        triggering packet's send time."""
        it = iter(ints)  # (ten at a time: zip of one iterator with itself)
        recs = zip(it, it, it, it, it, it, it, it, it, it, strict=False)
        # (what on_sack sets per SACK, set once: no decision below reads or sets them)
        self.credit_probe_at = _INF
        self.credit_probes = 0
        for (cack, acked, tx, sack_ev, ts_echo, trig, ece, mode, penalty, credit), sent in zip(
                recs, sents, strict=True):
            una = self.snd_una
            if cack < una:
                self.count("rx_sack_stale")
            if (credit - self.peer_credit) % _CREDIT_MOD:  # (the same credit: no news)
                credit = _unwrap32(credit, self.peer_credit)
                if credit > self.peer_credit:
                    self.peer_credit = credit
            if cack > una:
                self.snd_una = cack
            self._sack_news(acked, tx, sent, trig, sack_ev, ts_echo, ece, mode, penalty, now)

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
                self._learn_reorder(now - rec[2])
                spurious = True
        info = evm.evs.get(sack_ev)
        if tx:
            if tx > 1 and self.lost_log:
                rec = self.lost_log.pop(trig, None)
                if rec is not None and rec[3] and rec[0] != sack_ev:
                    # The retransmission triggered this SACK and the PSN was still
                    # missing: the original (declared lost by RACK, not by a timeout,
                    # which a stalled peer also causes) never arrived.
                    self._confirmed_loss(rec[0], now)
            rtt = now - trig_sent
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
            self._spurious_loss()
        if ece:
            evm.skip(sack_ev, "ecn")
        if mode:
            if mode == SackMode.SKIP_ONCE:
                evm.skip(sack_ev, "receiver")
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
            self.retries = 0
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
        if self.evm is None or self.cc is None or self.state is not QPState.RTS:
            return
        self._detect_losses(now)
        if acked:
            self._arm_rto()
            self._complete_wrs()
        elif not self.txt.ninfl:
            self.rto_at = _INF

    def _reo_quiet(self, now: float) -> bool:
        """Long enough without a spurious loss for the allowance to narrow (slowly: a
        fast link moves REO_DECAY_BYTES in a fraction of one jittery RTT)."""
        return now - self.reo_last >= REO_DECAY_RTTS * self.srtt

    def _spurious_loss(self) -> None:
        """RACK-style adaptation: a loss that was not one widens the reorder allowance
        (doubling, up to x16); it narrows again after REO_DECAY_BYTES clean bytes."""
        self.count("loss_spurious")
        self.reo_last = self.host._last_now
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
                    self.count("loss_suspect_cleared")
        if self.lost_log:
            for seq, sent, pending in txt.specials():
                rec = self.lost_log.pop(seq, None)
                if rec is not None and (pending or now - sent < self.min_rtt):
                    if self.suspects and self.suspects.pop(rec[0] >> 12, None) is not None:
                        self.count("loss_suspect_cleared")  # the "lost" packet itself came
                    # Acknowledged before its retransmission was sent, or sooner than any
                    # RTT ever measured: the transmission declared lost arrived after all.
                    self._learn_reorder(now - rec[2])
                    self._spurious_loss()

    def _complete_wrs(self) -> None:
        wrs, unacked = self.wrs, self.txt.wr_unacked
        while wrs:
            wr = wrs[0]
            if wr.next_pkt < wr.npkts or unacked(wr.slot):
                return
            wrs.popleft()
            del self.wr_of[wr.slot]
            if wr.imm is not None:
                self.imm_outstanding -= 1
            self.cq.push(Completion(
                WCStatus.SUCCESS, wr.wr_id, WCOpcode.RDMA_WRITE, wr.length, wr.imm, self.qpn))
            if self.cfg.completion_events:
                self.host.emit(WriteCompleted(self.qpn, wr.wr_id, wr.length))

    def on_nack(self, n: PyParsed, now: float) -> None:
        """A NACK: trimmed packets are retransmitted at once; an access error is fatal."""
        if self.state is not QPState.RTS or self.evm is None or self.cc is None:
            return
        seq = unwrap(n.nack_psn, self.snd_una)
        e = self.txt.get(seq)
        if e is None or e[0] != n.nack_ev:
            # Not about the latest transmission of an outstanding packet: stale or forged.
            self.count("rx_nack_stale")
            return
        reason = n.nack_reason
        if reason in (NackReason.TRIMMED, NackReason.TRIMMED_LASTHOP):
            lasthop = reason == NackReason.TRIMMED_LASTHOP
            # A trim proves the path and the peer alive: the timeout retry budget is for
            # silence, not congestion (the resend waits for the window like new data).
            self.retries = 0
            if not lasthop:
                self.evm.skip(e[0], "trim")
            self.cc.on_trim(now, lasthop)
            if not e[8] & PEND:
                self._mark_lost(seq, now, "trim")
        elif reason == NackReason.UNEXP_EVENT:
            wr = self.wr_of[e[7]]
            self.fail(
                WCStatus.REM_ACCESS_ERR,
                f"remote access error: {self.attrs.peer} refused the write of wr_id "
                f"{wr.wr_id} (rkey {wr.rkey:#x}, address {wr.remote_addr + e[5]:#x}): "
                "check the rkey and that the range lies inside the peer's memory region",
            )
        else:
            # Resource shortage or window: let the timer resend it later (no path blame).
            self.count("rx_nack_other")

    # --- responder --------------------------------------------------------------------

    def on_data(self, f: PyParsed, frame: bytes | bytearray | memoryview, plane: int,
                now: float, out: list[tuple[int, bytes]]) -> None:
        """A data packet (``f``: the parsed ``frame``): check, place, and acknowledge (or
        NACK) it. (The host's receive lane does the same for the common case: every
        change here goes to mrcnet/_csrc/rx.c and mrcnet/core/rxlane.py as well.)"""
        rx = self.rx
        rcv = rx.rcv_nxt
        d = (f.psn - rcv) & PSN_MASK  # unwrap(psn, rcv) - rcv, inlined (every packet)
        if d >= _HALF:
            d -= PSN_MASK + 1
        seq = rcv + d
        cfg = self.cfg
        mpr = self.attrs.mpr_dest  # self.rx_window, inlined
        win = mpr * MPR_UNIT if mpr else cfg.rx_window
        if d >= win or d <= -win:
            self.count("rx_psn_out_of_window")
            return
        ev = f.ev
        ts = f.timestamp  # 0 without a TSETH
        n = f.length
        rkey, va = f.rkey, f.va
        # rkey and bounds (MemoryTable.target, inlined: this runs for every packet)
        mr = self.host.memory.lookup(rkey)
        off = va - mr.addr if mr is not None else -1
        if mr is None or not mr.remote_write or off < 0 or off + n > mr.length:
            tgt = self.host.memory.target(rkey, va, n)
            assert isinstance(tgt, str)
            self.count(f"rx_{tgt}")
            if d >= 0:
                self._nack(NackReason.UNEXP_EVENT, ev, seq, ts, plane, out)
            return
        ce = f.ce != 0
        m = rx.ooo_cap - 1  # the out-of-order set: slot seq & m holds seq, or -1
        if d < 0 or (rx.ooo_n and rx.ooo_seq[seq & m] == seq):
            self.count("rx_duplicate")
            self._note_ack(seq, ev, ts, ce, plane)
            self.send_sack(now, out)
            return
        if f.trimmed:
            self.count("rx_trimmed")
            self._nack(self._trim_reason(ev, plane, now), ev, seq, ts, plane, out)
            return
        op = f.opcode
        if f.has_imm:
            msn = f.msn
            if unwrap(msn, self.imm_done) >= self.recv_posted:
                # The sender ran past our receive credit: refuse, it will resend.
                self.count("rx_no_recv_credit")
                self._nack(NackReason.NO_RESOURCE, ev, seq, ts, plane, out)
                return
            imm = f.imm
        else:
            msn = imm = 0
        if n:  # untrimmed: the payload is all there, RETH length bytes at payload_off
            po = f.payload_off
            mr.view[off : off + n] = memoryview(frame)[po : po + n]
        rx.rcvd_bytes += n
        self.rx_packets += 1
        rx.rx_burst += 1
        # A retransmission is SACKed at once: its echo tells the sender the loss was real.
        now_sack = f.ack_req or ce or f.rtx or (d != 0 and cfg.sack_on_reorder)
        if d == 0:
            if op in _ENDS:
                self._deliver((n, op, msn, imm))
            else:  # _deliver's whole work for a packet inside a message
                rx.rx_msg_bytes += n
            nxt = seq + 1
            if rx.ooo_n:
                while rx.ooo_seq[nxt & m] == nxt:
                    self._deliver(self._ooo_pop(nxt & m))
                    nxt += 1
                if rx.hole_old:
                    # A hole older than the reorder allowance closed: the sender has
                    # probably declared it lost; tell it now (it learns the reordering).
                    now_sack = True
                    rx.hole_old = 0
                rx.hole_at = now if rx.ooo_n else _INF  # the next hole, if any
            rx.rcv_nxt = nxt
        else:
            if d >= rx.ooo_cap:  # a window wider than the ring (mpr_dest grew)
                self._rxk.grow(rx, ring_size(d + 1))
                m = rx.ooo_cap - 1
            j = seq & m
            rx.ooo_seq[j] = seq
            rx.ooo_len[j], rx.ooo_op[j], rx.ooo_msn[j], rx.ooo_imm[j] = n, op, msn, imm
            rx.ooo_n += 1
            if op in IMM_OPCODES:
                rx.ooo_nimm += 1
            if seq > rx.rx_high:
                rx.rx_high = seq
            if rx.hole_at == _INF:
                rx.hole_at = now
            elif (not rx.hole_old and now - rx.hole_at >= cfg.reorder_floor
                  and not cfg.sack_on_reorder):
                # The hole at the cumulative point outlived the reorder allowance: a
                # real gap, SACK at once. Mere reordering (most arrivals are out of
                # order when packets are sprayed) is coalesced like in-order data.
                rx.hole_old = 1
                now_sack = True
        k = rx.unrep_n  # PSNs received since the last SACK: the first ones in the record
        if k < RX_UNREP_MAX:
            rx.unrep[k] = seq
        else:
            self._unrep_more.append(seq)
        rx.unrep_n = k + 1
        since = rx.since_ack = rx.since_ack + 1
        rx.ack_seq = seq
        rx.ack_ev = ev
        rx.ack_ts = ts
        rx.ack_ce = ce
        rx.ack_plane = plane
        if (now_sack or since >= cfg.ack_every
                or rx.unrep[0] < seq - SACK_BITMAP_BITS // 2):
            self.send_sack(now, out)
        elif rx.ack_at == _INF:
            rx.ack_at = now + cfg.ack_delay

    def _ooo_pop(self, j: int) -> tuple[int, int, int, int]:
        """Take slot ``j``'s packet out of the out-of-order set: (len, opcode, msn, imm)."""
        rx = self.rx
        rx.ooo_seq[j] = -1
        rx.ooo_n -= 1
        op = rx.ooo_op[j]
        if op in IMM_OPCODES:
            rx.ooo_nimm -= 1
        return rx.ooo_len[j], op, rx.ooo_msn[j], rx.ooo_imm[j]

    def _deliver(self, entry: tuple[int, int, int, int]) -> None:
        """The cumulative point moved over one packet: account for message boundaries
        and complete a write-with-immediate (in order, exactly once)."""
        length, op, msn, imm = entry
        rx = self.rx
        rx.rx_msg_bytes += length
        if op in _LAST or op in _ONLY:
            total = rx.rx_msg_bytes
            rx.rx_msg_bytes = 0
            if op in IMM_OPCODES:
                if msn != self.imm_done & _MSN_MASK:
                    self.count("rx_msn_mismatch")
                self.imm_done += 1
                wr_id = self.recv_wrs.popleft() if self.recv_wrs else -1
                self.rcq.push(Completion(
                    WCStatus.SUCCESS, wr_id, WCOpcode.RECV_RDMA_WITH_IMM, total, imm, self.qpn))
                if self.cfg.completion_events:
                    self.host.emit(ImmediateReceived(self.qpn, wr_id, imm, total))

    def _note_ack(self, seq: int, ev: int, ts: int, ce: bool, plane: int) -> None:
        rx = self.rx
        rx.ack_seq, rx.ack_ev, rx.ack_ts, rx.ack_ce, rx.ack_plane = seq, ev, ts, ce, plane

    # The responder's state by its former attribute names (mrcctl, the simulator, the
    # host's end-of-burst SACK, the timers and tests read them; the receive path itself
    # uses self.rx).
    rcv_nxt = _rx_field("rcv_nxt", "Cumulative point: the next sequence number expected.")
    rx_high = _rx_field("rx_high", "Highest sequence number received out of order.")
    rx_msg_bytes = _rx_field("rx_msg_bytes", "Bytes of the message being received.")
    rcvd_bytes = _rx_field("rcvd_bytes", "Payload bytes accepted.")
    rx_burst = _rx_field("rx_burst", "Data packets since the host's last frames_to_send.")
    since_ack = _rx_field("since_ack", "Data packets since the last SACK.")
    hole_at = _rx_field("hole_at", "Since when a hole is at the cumulative point (inf: none).")
    hole_old = _rx_field("hole_old", "That hole outlived the reorder allowance.")

    @property
    def ack_at(self) -> float:
        """Delayed-SACK deadline (inf: none)."""
        return float(self.rx.ack_at)

    @ack_at.setter
    def ack_at(self, value: float) -> None:
        self.rx.ack_at = value

    ack_seq = _rx_field("ack_seq", "Sequence number of the packet the next SACK echoes.")
    ack_ev = _rx_field("ack_ev", "... its EV.")
    ack_ts = _rx_field("ack_ts", "... its TSETH stamp.")
    ack_ce = _rx_field("ack_ce", "... its CE mark.")
    ack_plane = _rx_field("ack_plane", "... the plane it came in on (-1: none yet).")
    penalty = _rx_field("penalty", "Receiver window penalty (last-hop trims), halved per SACK.")

    def lane_sack_state(self, npaths: int) -> tuple[int, int, dict[int, Any] | None]:
        """What the host's receive lane needs to build this QP's usual SACKs itself
        (send_sack's case of a usable triggering path): the planes that are usable and
        have paths, as bits; the receive credit to advertise; and the SACK templates by
        path, unless the lane has ``npaths`` of them already (None)."""
        evm = self.evm
        m = 0
        if evm is not None:
            paths = self._paths
            for pl in evm.usable_planes:
                if pl < 64 and pl in paths:
                    m |= 1 << pl
        t = self._sack_tmpl
        return m, self._credit(), (t if len(t) != npaths else None)

    def _credit(self) -> int:
        """The receive credit a SACK advertises (mod 2^32): receives posted, capped by
        the responder's own limit on immediates in flight."""
        posted = self.recv_posted
        mw = self.attrs.max_wimm_dest
        if mw is not None:
            posted = min(posted, self.imm_done + mw)
        return posted % _CREDIT_MOD

    @property
    def ooo(self) -> dict[int, tuple[int, int, int, int]]:
        """The out-of-order set as a dict: seq -> (len, opcode, msn, imm) (a copy)."""
        rx = self.rx
        return {int(s): (int(rx.ooo_len[i]), int(rx.ooo_op[i]), int(rx.ooo_msn[i]),
                         int(rx.ooo_imm[i]))
                for i in range(rx.ooo_cap) if (s := rx.ooo_seq[i]) >= 0}

    @property
    def unreported(self) -> list[int]:
        """Sequence numbers received since the last SACK (a copy)."""
        rx = self.rx
        return [int(rx.unrep[i]) for i in range(min(rx.unrep_n, RX_UNREP_MAX))] + \
            self._unrep_more

    def _trim_reason(self, ev: int, plane: int, now: float) -> NackReason:
        """Last hop or not? Trims arriving close together on different paths of one plane
        share only the last hop (the receiver's downlink): call that an incast."""
        _, path, _ = ev_path(ev)
        recent = self.lasthop_trims.setdefault(plane, {})
        window = max(self.cfg.reorder_floor, self.srtt or self.cfg.base_rtt_hint)
        lasthop = any(p != path and now - t <= window for p, t in recent.items())
        recent[path] = now
        if lasthop:
            self.penalty = min(WINDOW_PENALTY_MAX, self.penalty + _PENALTY_PER_LASTHOP_TRIM)
            return NackReason.TRIMMED_LASTHOP
        return NackReason.TRIMMED

    def _reverse(self, plane: int, ev: int = 0) -> tuple[int, int, Route]:
        """EV, port and route for a SACK/NACK. It goes back on the path the triggering
        packet came on: that path just worked, and the sender steers it (a path the sender
        retired carries no data, hence no SACKs either). Without a usable triggering EV,
        the QP's own live EVs in the plane are the reverse set."""
        evm = self.evm
        assert evm is not None
        ev_plane = (ev >> EV_PLANE_SHIFT) & EV_PLANE_MASK  # ev_path(ev)[0], inlined
        if ev and ev_plane in evm.usable_planes and ev_plane in self._paths:
            port, route = self.route(ev)
            return ev, port, route
        rev = evm.reverse_ev(plane) if plane in evm.usable_planes else evm.next_ev().ev
        port, route = self.route(rev)
        return rev, port, route

    def _nack(self, reason: NackReason, ev: int, seq: int, ts: int, plane: int,
              out: list[tuple[int, bytes]]) -> None:
        if self.evm is None:
            return
        rev, port, route = self._reverse(plane, ev)
        out.append((port, build_nack(route, ev=rev, dest_qp=self.attrs.dest_qp_num or 0,
                                     neth=NETH(reason, ev, seq & PSN_MASK,
                                               self.rx.rcv_nxt & PSN_MASK, ts))))
        self.count("tx_nack")

    def send_sack(self, now: float, out: list[tuple[int, bytes]]) -> None:
        """SACK now: cumulative PSN, a 64-bit bitmap over what arrived out of order (one
        SACK per 64-PSN window so every packet received since the last SACK is reported),
        the triggering packet's EV and timestamp, receive credit and CC state."""
        rx = self.rx
        rx.ack_at = _INF
        rx.since_ack = 0
        evm = self.evm
        st = self.state
        if evm is None or (st is not QPState.RTR and st is not QPState.RTS):
            return
        # One SACK per window: the first always starts right after the cumulative point,
        # so every SACK repeats what is still missing before it (a lost SACK costs
        # nothing); extra windows only for packets further out that no SACK has reported
        # yet (rxlane.sack_bases). The frames themselves: self._rxk.sack (C or Python).
        more = self._unrep_more
        bases = None
        if more:  # more arrived than the record holds (ack_every above RX_UNREP_MAX)
            bases = sack_bases(rx, more)
            more.clear()
        # Back on the triggering packet's path when it is usable (_reverse's first case,
        # inlined: no side effects), else whatever _reverse picks.
        ev = rx.ack_ev
        ev_plane = (ev >> EV_PLANE_SHIFT) & EV_PLANE_MASK
        if not (ev and ev_plane in evm.usable_planes and ev_plane in self._paths):
            ack_plane = rx.ack_plane
            ev = self._reverse(ack_plane if ack_plane >= 0 else evm.usable_planes[0]
                               if evm.usable_planes else 0, ev)[0]
        path_key = ev >> EV_PATH_SHIFT  # (plane, path): what the route depends on
        tp = self._sack_tmpl.get(path_key)
        if tp is None:
            port, route = self.route(ev)
            tp = self._sack_tmpl[path_key] = (self._rxk.sack_template(SackTemplate(
                route, dest_qp=self.attrs.dest_qp_num or 0)), port)
        tmpl, port = tp
        penalty = 0
        pen = rx.penalty
        if pen:  # (mostly 0.0, which the decay keeps)
            penalty = int(pen)
            rx.penalty = pen * _PENALTY_DECAY
        frames = self._rxk.sack(rx, tmpl, ev, penalty, self._credit(), bases)
        if len(frames) == 1:
            out.append((port, frames[0]))
            self.tx_sacks += 1
            return
        for frame in frames:
            out.append((port, frame))
            self.tx_sacks += 1

    def on_probe(self, f: PyParsed, plane: int, now: float,
                 out: list[tuple[int, bytes]]) -> None:
        """A reliability probe: answer with a SACK reflecting its EV (and our credit)."""
        self._note_ack(self.rx.rcv_nxt - 1, f.ev, f.probe_timestamp, False, plane)
        self.send_sack(now, out)

    def post_recv(self, wr_id: int, now: float, out: list[tuple[int, bytes]]) -> None:
        """A receive for one immediate: more credit; tell the peer if it may be waiting."""
        self.recv_wrs.append(wr_id)
        self.recv_posted += 1
        self.credit_update(now, out)

    def credit_update(self, now: float, out: list[tuple[int, bytes]]) -> None:
        """Send a SACK carrying our receive credit (no RTT echo: ack_offset -1)."""
        if self.state in (QPState.RTR, QPState.RTS) and self.evm is not None:
            rx = self.rx
            self._note_ack(rx.rcv_nxt - 1, 0, 0, False, rx.ack_plane)
            self.send_sack(now, out)

    # --- planes -----------------------------------------------------------------------

    def set_planes(self, planes: list[int], now: float) -> None:
        """Only ``planes`` may be used now: resend at once what is in flight elsewhere."""
        evm = self.evm
        if evm is None:
            return
        evm.set_planes(planes)
        live = set(evm.usable_planes)
        txt = self.txt
        for seq in txt.inflight():
            e = txt.get(seq)
            if e is not None and ev_path(e[0])[0] not in live:
                self._mark_lost(seq, now, "port")

    # --- stats ------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """QP state and counters, for mrcctl."""
        return {
            "qpn": self.qpn,
            "state": self.state.value,
            "peer": self.attrs.peer,
            "dest_qp_num": self.attrs.dest_qp_num,
            "error": self.error_reason,
            "cwnd": self.cc.cwnd if self.cc else 0,
            "srtt": self.srtt,
            "inflight": self.txt.ninfl,
            "inflight_bytes": self.txt.infl_bytes,
            "counters": self.counters(),
        }

    def counters(self) -> dict[str, int]:
        """Per-QP counters, hot ones included."""
        c = dict(self.stats)
        c["rx_data"] = self.rx_packets
        c["tx_data"] = self.tx_packets
        c["tx_sack"] = self.tx_sacks
        return c
