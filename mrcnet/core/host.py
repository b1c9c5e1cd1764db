"""One MRC endpoint for a whole host: all its NIC ports (one per plane), MRs, CQs and QPs.

Sans-I/O, like aioquic's QuicConnection: the caller feeds frames in with
:meth:`Host.receive`, drains :meth:`Host.frames_to_send`, calls :meth:`Host.handle_timer`
at :meth:`Host.next_timer`, and pulls events with :meth:`Host.next_event`. Time is always
the argument ``now`` (float seconds). Nothing that arrives from the network raises: every
bad frame is counted (``counters()``) and dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import fields
from typing import Any

from mrcnet.constants import (
    ENDPOINT_QPN,
    FIRST_QPN,
    RETRY_EXP_INFINITE,
    EndpointOp,
)
from mrcnet.core import endpoint
from mrcnet.core import receive as _receive
from mrcnet.core.answer import emit_with_ack
from mrcnet.core.cc import CC_REGISTRY, create_cc
from mrcnet.core.config import (
    EV_PROFILE_ECMP,
    EV_PROFILES,
    MAX_QPN,
    MRC_H_ALIASES,
    Access,
    HostConfig,
    PathProvider,
    Port,
    QPAttrs,
    apply_dscp,
    check_qp_attrs,
    ev_order_code,
)
from mrcnet.core.context import HostContext
from mrcnet.core.cq import CompletionQueue, CompletionRow
from mrcnet.core.endpoint import PathProbe
from mrcnet.core.events import (
    Completion,
    Event,
    PathStateChanged,
    PortStatusChanged,
    WCStatus,
)
from mrcnet.core.evs import EVInfo, EVManager, ev_path, make_ev
from mrcnet.core.memory import Buffer, MemoryRegion, MemoryTable
from mrcnet.core.qp import QueuePair
from mrcnet.core.qptimers import QPTimers
from mrcnet.core.receive import Receiver
from mrcnet.core.recvq import WR_ID_MAX
from mrcnet.core.seqnum import ts16
from mrcnet.core.states import QP_TRANSITIONS, RTS, QPState
from mrcnet.core.verdicts import PathVerdicts
from mrcnet.core.workrequest import IMM_MAX, refused_write, work_requests
from mrcnet.errors import IllegalTransition, InvalidAttribute, InvalidRequest
from mrcnet.wire import Route, build_endpoint, set_ev_order
from mrcnet.wire.erth import TokenERTH
from mrcnet.wire.parsed import FrameParser, PyParsed

_INF = float("inf")
#: Host counters kept per QP as plain attributes (hot: per packet): (counter, attribute)
_QP_COUNTERS = (("rx_data", "rx_packets"), ("tx_data", "tx_packets"),
                ("tx_sack", "tx_sacks"), ("ack_held", "acks_held"))
_ID_MASK = 0xFFFF  # endpoint request ids: mrc.h req_id, carried in BTH.PSN


class Host:
    """An MRC host (see module docstring).

    ``ports``: one :class:`Port` per NIC port (each one plane); ``paths``: a
    :class:`~mrcnet.core.config.PathProvider` that knows the routes to every peer.
    """

    def __init__(
        self,
        name: str,
        ports: Sequence[Port],
        paths: PathProvider,
        config: HostConfig | None = None,
    ) -> None:
        self.name = name
        self.config = config or HostConfig()
        if self.config.ev_profile not in EV_PROFILES:
            raise InvalidAttribute(
                f"ev_profile {self.config.ev_profile!r}: use one of {sorted(EV_PROFILES)}")
        set_ev_order(ev_order_code(self.config.ev_order))  # (process-wide, as the fabric's)
        apply_dscp(self.config.dscp)
        self.ports = {p.index: p for p in ports}
        self._plane_port = {p.plane: p.index for p in ports}
        if len(self._plane_port) != len(ports):
            raise InvalidAttribute("one port per plane: two ports share a plane")
        self.port_up = {p.index: True for p in ports}
        self._all_up = True  # every port up (set_port_state keeps it: read once a pass)
        self.paths = paths
        self.memory = MemoryTable(name)
        self._cqs: dict[int, CompletionQueue] = {}
        self._qps: dict[int, QueuePair] = {}
        self._next_qpn = FIRST_QPN
        self._events: deque[Event] = deque()
        self.path_events: list[PathStateChanged] = []
        self._ctrl: list[tuple[int, bytes]] = []
        self._counters: dict[str, int] = {}
        self._peer_routes: dict[str, dict[int, list[Route]]] = {}
        self._ip_peer: dict[bytes, str] = {}
        self._peer_live: dict[str, set[int]] = {}  # planes each peer reported alive
        self._probe_id = 0
        self._probes: dict[int, tuple[int, int, float]] = {}  # id -> (qpn, ev, sent)
        self._probe_of_path: dict[tuple[int, int, int], int] = {}  # (qpn, plane, path)
        # (peer, plane, path) -> id of the newest probe on that path by any QP: QPs to one
        # peer share a path's fate, so they share its probes too
        self._peer_path_probe: dict[tuple[str, int, int], int] = {}
        self._port_status: dict[str, tuple[int, int, float]] = {}  # peer -> (id, tries, due)
        self._path_probes: dict[int, PathProbe] = {}  # standalone probes awaiting answers
        self._ep_tokens: dict[str, frozenset[int] | None] = {}  # endpoint.peer_tokens
        # one QP's dead route is every QP's (verdicts.py)
        self.verdicts = PathVerdicts(self.config.verdict_uplink)
        # peer -> (planes it claims live, when to decide, probes of the planes in use)
        self._ps_confirm: dict[str, tuple[set[int], float, list[PathProbe]]] = {}
        self._last_now = 0.0
        self.last_internal_error: BaseException | None = None
        # Timers: QPs touched by a call are "dirty", their deadlines re-read at the next
        # next_timer() (qptimers.py)
        self._timers = QPTimers()
        self._dirty: set[int] = set()
        self._sendq: set[int] = set()  # QPs to look at in the next frames_to_send
        # One parser per host; with C its record is reused, so a frame's fields are read
        # before the next frame is parsed (receive() is not re-entered).
        self._parser = FrameParser(use_c=None if self.config.fast_parse else False)
        self.rx_frames = 0  # hot counter: a plain attribute, folded into counters()
        # what every QP here may see of this host
        self._qp_ctx = HostContext(self.name, self.config, self.memory, self.count, self.emit,
                                   self.path_events, self.port_of_plane, self._counters,
                                   self._wake)
        self._rx = Receiver(self)  # frames in (and the receive lane kept in step)
        #: ``receive_batch(frames, port, now, slots=None)``: frames from the network on
        #: local ``port``, all at ``now``: the same as :meth:`receive` of each in turn,
        #: with less Python per frame (mrcd hands over each batch its socket gives).
        #: ``slots``: the C batch (:class:`mrcnet.buffers.BatchSlots`) whose last receive
        #: gave ``frames`` (its ``recv_views``, or a :class:`mrcnet.buffers.SlotFrames` of
        #: it): the C lane then reads them where they are. Never raises. The receiver's
        #: methods (mrcnet/core/receive.py), bound here: no hop per call.
        self.receive_batch = self._rx.receive_batch
        #: ``receive_one(frame, port, now)``: ``receive_batch((frame,), port, now)`` with
        #: less Python (mrc-sim's hosts); ``receive_at``: a frame left where it arrived
        self.receive_one, self.receive_at = self._rx.receive_one, self._rx.receive_at
        #: The C receive lane (None without one), for mrcd's port readers
        #: (:func:`mrcnet.io.batch.lane_reader`: a read points it at its frames).
        self.rx_lane = self._rx.c_lane

    # --- counters and events ------------------------------------------------------------

    def count(self, name: str, n: int = 1) -> None:
        """Bump a host counter."""
        self._counters[name] = self._counters.get(name, 0) + n

    def counters(self) -> dict[str, int]:
        """Every host counter (frames, drops by reason, retransmissions ...)."""
        c = dict(self._counters)
        if self.rx_frames:
            c["rx_frames"] = c.get("rx_frames", 0) + self.rx_frames
        # hot per-packet counters live on the QPs (plain attributes); add them up here
        for name, attr in _QP_COUNTERS:
            total = c.get(name, 0) + sum(getattr(q, attr) for q in self._qps.values())
            if total:
                c[name] = total
        return c

    def emit(self, event: Event) -> None:
        """Queue an event for :meth:`next_event`."""
        self._flush_path_events()
        self._events.append(event)

    def _flush_path_events(self) -> None:
        if self.path_events:
            self._events.extend(self.path_events)
            self.path_events.clear()

    def has_events(self) -> bool:
        """Is an event waiting (:meth:`next_event` would give one)?"""
        return bool(self._events or self.path_events)

    @property
    def event_queues(self) -> tuple[deque[Event], list[PathStateChanged]]:
        """Where events wait (either truthy: one does), for a caller that tests them
        with other queues in one ``any`` (mrcd's delivery)."""
        return self._events, self.path_events

    def take_events(self) -> list[Event]:
        """Every pending event, oldest first (:meth:`next_event` until None, in one
        call), the queue emptied."""
        self._flush_path_events()
        evs = list(self._events)
        self._events.clear()
        return evs

    def next_event(self) -> Event | None:
        """The oldest pending event, or None."""
        self._flush_path_events()
        return self._events.popleft() if self._events else None

    # --- memory, CQs, QPs -------------------------------------------------------------

    def register_mr(
        self, buffer: Buffer, access: Access = Access.LOCAL_WRITE | Access.REMOTE_WRITE
    ) -> MemoryRegion:
        """Register a writable buffer; the returned region's ``addr``/``rkey`` go to peers."""
        return self.memory.register(buffer, access)

    def deregister_mr(self, mr: MemoryRegion) -> None:
        """Unregister: later writes to it are refused."""
        self.memory.deregister(mr)
        if self._lane is not None:  # (and its buffer is no longer held by the lane)
            self._lane.drop_mr(mr.rkey)

    def create_cq(self) -> CompletionQueue:
        """A new completion queue."""
        cq = CompletionQueue(len(self._cqs) + 1)
        self._cqs[cq.handle] = cq
        return cq

    def create_qp(self, cq: CompletionQueue, attrs: QPAttrs | None = None,
                  recv_cq: CompletionQueue | None = None) -> int:
        """A new QP in RESET; returns its QP number. Send completions go to ``cq``,
        receive (immediate) completions to ``recv_cq`` if given, else also to ``cq``
        (mrc.h has a send and a receive CQ per QP)."""
        qpn = self._next_qpn + (self._next_qpn == ENDPOINT_QPN)  # (reserved: skipped)
        if qpn > MAX_QPN:
            raise InvalidRequest("out of QP numbers")
        self._next_qpn = qpn + 1
        self._qps[qpn] = QueuePair(self._qp_ctx, qpn, cq, attrs or QPAttrs(), recv_cq)
        self._dirty.add(qpn)
        self._sendq.add(qpn)
        return qpn

    def qp(self, qpn: int) -> QueuePair:
        """The QP object (for inspection and tests)."""
        try:
            return self._qps[qpn]
        except KeyError:
            raise InvalidRequest(f"no QP {qpn} on host {self.name}") from None

    def destroy_qp(self, qpn: int) -> None:
        """Forget a QP (its outstanding work is flushed first)."""
        qp = self.qp(qpn)
        if qp.since_ack and self.config.ack_with_data:
            # A held AckReq (the answer will not come now) leaves before its QP: the
            # data was placed and completed here, and the requester must hear so.
            qp.send_sack(self._last_now, self._ctrl)
        qp.fail(WCStatus.WR_FLUSH_ERR, "QP destroyed")
        qp.changed()  # (it leaves the host)
        del self._qps[qpn]
        for name, attr in _QP_COUNTERS:  # (a host counter outlives its QP: never goes back)
            if n := getattr(qp, attr):
                self.count(name, n)
        self.verdicts.detach(qpn)
        self._ep_tokens.clear()
        self._timers.forget(qpn)
        self._dirty.discard(qpn)

    def modify_qp(self, qpn: int, to_state: QPState, *, now: float = 0.0, **attrs: Any) -> None:
        """Move a QP through RESET -> INIT -> RTR -> RTS (or to ERROR/RESET), setting the
        attributes that transition takes (see :data:`mrcnet.core.states.QP_TRANSITIONS`).

        Connect = INIT -> RTR with ``peer``, ``dest_qp_num``, ``rq_psn``; then RTS with
        ``sq_psn``. Raises :class:`IllegalTransition` or :class:`InvalidAttribute`.
        """
        qp = self.qp(qpn)
        qp.changed()  # (its state and attributes; nothing reads them before we return)
        self._dirty.add(qpn)
        self._sendq.add(qpn)
        attrs = {MRC_H_ALIASES.get(k, k): v for k, v in attrs.items()}
        key = (qp.state, to_state)
        rule = QP_TRANSITIONS.get(key)
        if rule is None:
            raise IllegalTransition(qpn, qp.state.value, to_state.value)
        required, optional = rule
        missing = required - attrs.keys()
        if missing:
            raise InvalidAttribute(
                f"QP {qpn} {qp.state.value}->{to_state.value} needs {sorted(missing)}")
        unknown = attrs.keys() - required - optional
        if unknown:
            raise InvalidAttribute(
                f"QP {qpn} {qp.state.value}->{to_state.value} does not take {sorted(unknown)}"
                f" (allowed: {sorted(required | optional)})")
        check_qp_attrs(attrs)
        self._ep_tokens.clear()
        if to_state is QPState.ERROR:
            qp.fail(WCStatus.WR_FLUSH_ERR, "moved to ERROR by modify_qp")
            return
        names = {f.name for f in fields(QPAttrs)}
        for k, v in attrs.items():
            if k in names:
                setattr(qp.attrs, k, v)
        if "retry_exp_cnt" in attrs:
            # mrc.h counts the two phases separately; 25 exponential retries = forever
            exp = int(attrs["retry_exp_cnt"])
            lin = qp.retry_linear
            qp.attrs.retry_cnt = (1 << 30) if exp >= RETRY_EXP_INFINITE else lin + exp
        if to_state is QPState.RESET:
            qp.state = QPState.RESET
            qp.error_reason = None
            qp.evm = None
            self.verdicts.detach(qpn)
            qp.cc = None
            qp.recv_wrs.clear()  # RESET discards posted receives, as in verbs
            qp.recv_posted = 0
            qp.resp.imm_ver += 1
            qp._reset_transport()
            return
        if to_state is QPState.RTR:
            peer = str(attrs["peer"])
            paths = self._paths_to(peer)
            if not paths:
                raise InvalidAttribute(f"no path from {self.name} to {peer} in any plane")
            ips = frozenset(r.dst_ip for rs in paths.values() for r in rs)
            qp.ready(paths, ips)
            self._share_verdicts(qp, peer, paths, now)
            qp.state = QPState.RTR
            qp.set_planes(self._planes_for(peer), now)
            return
        if to_state is QPState.RTS and qp.state is QPState.RTR:
            qp.start_sending()
        qp.state = to_state

    def post_write(
        self,
        qpn: int,
        wr_id: int,
        local_mr: MemoryRegion,
        offset: int,
        length: int,
        remote_addr: int,
        rkey: int,
        imm: int | None = None,
    ) -> None:
        """Post an RDMA WRITE (with immediate if ``imm`` is given) of ``length`` bytes
        from ``local_mr[offset:]`` to (``remote_addr``, ``rkey``) on the peer."""
        qp = self._postable(qpn)
        why = refused_write(offset, length, local_mr.length, remote_addr, rkey, imm)
        if why:
            raise InvalidRequest(why)
        self._dirty.add(qpn)
        self._sendq.add(qpn)
        (wr,) = work_requests(local_mr.view, self.config.mtu_payload,
                              ((wr_id, offset, length, remote_addr, rkey, imm),))
        qp.post_write(wr)

    def post_writes(self, qpn: int, local_mr: MemoryRegion,
                    writes: Sequence[tuple[int, int, int, int, int, int | None]],
                    checked: bool = False) -> None:
        """:meth:`post_write` of each ``(wr_id, offset, length, remote_addr, rkey, imm)``
        in order, all from ``local_mr``: all or none (InvalidRequest, naming the first
        that would be refused, and nothing is posted). ``checked``: the caller already
        checked each against the region, and its other fields cannot be refused (mrcd's
        send-queue slots: unsigned 32- and 64-bit fields)."""
        qp = self._postable(qpn)
        size = local_mr.length
        for i, (_, offset, length, remote_addr, rkey, imm) in enumerate(
                () if checked else writes):
            if not (offset >= 0 and length >= 0 and offset + length <= size
                    and 0 <= remote_addr < 1 << 64 and 0 <= rkey <= IMM_MAX
                    and (imm is None or 0 <= imm <= IMM_MAX)):  # (refused_write, inline)
                why = refused_write(offset, length, size, remote_addr, rkey, imm)
                raise InvalidRequest(f"write {i} of {len(writes)}: {why}")
        self._dirty.add(qpn)
        self._sendq.add(qpn)
        qp.snd.post_writes(work_requests(local_mr.view, self.config.mtu_payload, writes))

    def _postable(self, qpn: int) -> QueuePair:
        qp = self._qps.get(qpn) or self.qp(qpn)  # (the call only for its error)
        if qp.state not in (QPState.INIT, QPState.RTR, QPState.RTS):
            raise InvalidRequest(f"QP {qpn} is {qp.state.value}: post in INIT, RTR or RTS")
        return qp

    def post_recv(self, qpn: int, wr_id: int, now: float = 0.0) -> None:
        """Post a receive for one incoming write-with-immediate (``wr_id``: verbs'
        ``uint64_t``)."""
        qp = self._qps.get(qpn) or self.qp(qpn)  # (the call only for its error)
        if qp.state is QPState.ERROR:
            raise InvalidRequest(f"QP {qpn} is in ERROR")
        if not 0 <= wr_id <= WR_ID_MAX:
            raise InvalidRequest(f"wr_id {wr_id} is not a 64-bit unsigned integer")
        qp.post_recv(wr_id)

    def poll_cq(self, cq: CompletionQueue, max_entries: int = 16) -> list[Completion]:
        """Take up to ``max_entries`` completions from ``cq``."""
        return cq.poll(max_entries)

    def poll_cq_rows(self, cq: CompletionQueue, max_entries: int = 16) -> list[CompletionRow]:
        """:meth:`poll_cq`, each completion as a tuple of its fields (no object made)."""
        return cq.poll_rows(max_entries)

    # --- paths and planes -------------------------------------------------------------

    def _share_verdicts(self, qp: QueuePair, peer: str, paths: dict[int, list[Route]],
                        now: float) -> None:
        if qp.evm is not None and self.config.share_verdicts:
            self.verdicts.attach(qp.qpn, qp.evm, peer, paths, now)

    def port_of_plane(self, plane: int) -> int:
        """The local port index of ``plane`` (the first port if none matches)."""
        idx = self._plane_port.get(plane)
        return idx if idx is not None else next(iter(self.ports))

    def _paths_to(self, peer: str) -> dict[int, list[Route]]:
        paths = self._peer_routes.get(peer)
        if paths is None:
            paths = {}
            for plane in self.paths.planes(peer):
                if plane not in self._plane_port:
                    continue
                routes = list(self.paths.routes(peer, plane))
                if routes:
                    paths[plane] = routes
                    for r in routes:
                        self._ip_peer[r.dst_ip] = peer
            self._peer_routes[peer] = paths
        return paths

    def refresh_paths(self, peer: str) -> None:
        """Forget cached routes to ``peer`` (new QPs will ask the PathProvider again)."""
        self._peer_routes.pop(peer, None)

    def _planes_for(self, peer: str) -> list[int]:
        local = {self.ports[i].plane for i, up in self.port_up.items() if up}
        live = self._peer_live.get(peer)
        planes = set(self._paths_to(peer)) & local
        if live is not None:
            planes &= live
        return sorted(planes)

    def _live_mask(self) -> int:
        mask = 0
        for i, up in self.port_up.items():
            if up:
                mask |= 1 << self.ports[i].plane
        return mask

    def set_port_state(self, port: int, up: bool, now: float) -> None:
        """A local NIC port went down (or came back): stop (or resume) using its plane and
        tell every peer with a QP here (PORT_STATUS endpoint request, retried)."""
        if port not in self.ports:
            raise InvalidRequest(f"no port {port} on host {self.name}")
        if self.port_up[port] == up:
            return
        self.port_up[port] = up
        self._all_up = all(self.port_up.values())
        self.emit(PortStatusChanged(port, self.ports[port].plane, up, None))
        self._replan(now)
        for peer in {qp.attrs.peer for qp in self._qps.values() if qp.attrs.peer}:
            self._probe_id = (self._probe_id + 1) & _ID_MASK
            self._port_status[peer] = (self._probe_id, 0, now)

    def _replan(self, now: float) -> None:
        self._dirty.update(self._qps)
        self._sendq.update(self._qps)
        for qp in self._qps.values():
            if qp.attrs.peer and qp.state in (QPState.RTR, QPState.RTS):
                qp.set_planes(self._planes_for(qp.attrs.peer), now)

    def deny_ev(self, qpn: int, ev: int) -> bool:
        """Operator: stop using ``ev`` on QP ``qpn``; True if the QP has that EV."""
        evm = self.qp(qpn).evm
        self._dirty.add(qpn)
        self._sendq.add(qpn)
        return evm.deny(ev) if evm is not None else False

    def allow_ev(self, qpn: int, ev: int) -> bool:
        """Operator: allow a DENIED EV again."""
        evm = self.qp(qpn).evm
        self._dirty.add(qpn)
        self._sendq.add(qpn)
        return evm.allow(ev) if evm is not None else False

    def ev_stats(self, qpn: int) -> dict[int, dict[str, Any]]:
        """Per-EV state and counters of a QP."""
        evm = self.qp(qpn).evm
        return evm.stats() if evm is not None else {}

    def qp_stats(self, qpn: int) -> dict[str, Any]:
        """State, window and counters of a QP."""
        return self.qp(qpn).info()

    def set_qp_profiles(self, qpn: int, *, ev_profile: str | None = None,
                        cc_profile: str | None = None, now: float = 0.0) -> None:
        """Operator: give a QP another EV and/or CC profile, also while it carries data.

        A connected QP (RTR/RTS) switches at once: a new CC instance of the profile (its
        initial window, as at connect) and, for a new EV profile, a new EV set (spray: the
        configured EVs per plane; ecmp: one EV). Packets in flight on EVs the new set lacks
        are acknowledged or resent as usual. Before connect the profile is only recorded
        and used at RTR. Raises :class:`InvalidAttribute` for an unknown profile and
        :class:`InvalidRequest` for a QP in ERROR.
        """
        qp = self.qp(qpn)
        if ev_profile is not None and ev_profile not in EV_PROFILES:
            raise InvalidAttribute(
                f"EV profile {ev_profile!r} unknown: use one of {sorted(EV_PROFILES)}")
        if cc_profile is not None and cc_profile not in CC_REGISTRY:
            raise InvalidAttribute(
                f"CC profile {cc_profile!r} unknown: use one of {sorted(CC_REGISTRY)}")
        if qp.state is QPState.ERROR:
            raise InvalidRequest(f"QP {qpn} is in ERROR: its profiles cannot change")
        a, cfg = qp.attrs, qp.cfg
        if ev_profile is not None:
            a.ev_profile = ev_profile
        if cc_profile is not None:
            a.cc_profile = cc_profile
        self._dirty.add(qpn)
        self._sendq.add(qpn)
        if qp.evm is None or qp.cc is None or not a.peer:
            return  # not connected yet: QueuePair.ready builds both from the attributes
        paths = self._paths_to(a.peer)
        if cc_profile is not None:
            qp.cc = create_cc(
                cc_profile, cfg.mtu_payload, cfg.link_rate * (len(paths) or 1),
                cfg.base_rtt_hint, target_floor=cfg.cc_target_floor,
                rtt_floor=cfg.cc_rtt_floor, delay_filter=cfg.cc_delay_filter)
        if ev_profile is not None:
            qp.evm = EVManager(
                qpn, {p: len(r) for p, r in paths.items()},
                evs_per_qp=a.evs_per_qp or cfg.evs_per_qp,
                ecmp_key=(f"{self.name}|{a.peer}|{qpn}" if ev_profile == EV_PROFILE_ECMP
                          else None),
                min_active=cfg.min_active_evs, probe_interval=cfg.probe_interval,
                probe_successes=cfg.probe_successes, events=self.path_events)
            self._share_verdicts(qp, a.peer, paths, now)
            # The new set starts on the planes in use now (what is in flight on a plane
            # that is out of use is resent elsewhere, as on any plane change).
            qp.set_planes(self._planes_for(a.peer), now)

    # --- standalone probes (no QP needed: mrcctl probe) --------------------------------

    def learn_peer(self, peer: str) -> bool:
        """Look up the routes to ``peer`` now, so that endpoint requests from it (EV
        probes) are answered before any QP to it exists. False if no plane reaches it;
        whatever the PathProvider raises for a peer it does not know propagates."""
        return bool(self._paths_to(peer))

    def probe_paths(self, peer: str, now: float,
                    planes: Iterable[int] | None = None) -> list[PathProbe]:
        """Send one EV probe (an EV_PROBE endpoint request) down every path to ``peer``
        (only ``planes`` if given), with no QP involved. Each probe travels on EV
        (plane, path, instance 0); the peer echoes it back along the same path. The
        answer sets the returned probe's ``rtt``; call :meth:`forget_probes` when done
        waiting (a later answer is then counted ``rx_probe_stale``). The peer answers
        only if it knows this host (:meth:`learn_peer` on its side, or a QP to it)."""
        paths = self._paths_to(peer)
        wanted = None if planes is None else set(planes)
        token = endpoint.peer_token(self, peer)
        out: list[PathProbe] = []
        for plane, routes in sorted(paths.items()):
            if wanted is not None and plane not in wanted:
                continue
            port = self._plane_port[plane]
            for path, route in enumerate(routes):
                self._probe_id = (self._probe_id + 1) & _ID_MASK
                ev = make_ev(plane, path, 0)
                probe = PathProbe(self._probe_id, peer, plane, path, ev, now)
                erth = TokenERTH(EndpointOp.EV_PROBE, timestamp=ts16(now), token=token)
                self._ctrl.append((port, build_endpoint(route, ev=ev, request_id=probe.request_id,
                                                        erth=erth)))
                self._path_probes[probe.request_id] = probe
                out.append(probe)
        self.count("tx_path_probe", len(out))
        return out

    def forget_probes(self, probes: Iterable[PathProbe]) -> None:
        """Stop waiting for the answers to these probes (see :meth:`probe_paths`)."""
        for p in probes:
            self._path_probes.pop(p.request_id, None)

    def _path_probe_answer(self, rid: int, ev: int, peer: str, now: float) -> bool:
        """An EV probe answer (request ``rid``, travelled on ``ev``) for a standalone
        probe? (Then it is handled.)"""
        probe = self._path_probes.get(rid)
        if probe is None:
            return False
        if probe.ev != ev or probe.peer != peer:
            # Not from the probed peer's path: ignore it, keep waiting for the real one.
            self.count("rx_path_probe_mismatch")
            return True
        del self._path_probes[rid]
        probe.rtt = now - probe.sent
        self.count("rx_path_probe_answer")
        return True

    # --- network side -----------------------------------------------------------------

    def receive(self, frame: bytes | bytearray | memoryview, port: int, now: float) -> None:
        """One frame from the network on local ``port``. Never raises."""
        self.receive_batch((frame,), port, now)

    @property
    def _lane(self) -> Any:
        """The receive lane (None: frame by frame)."""
        return self._rx._lane

    @_lane.setter
    def _lane(self, lane: Any) -> None:
        self._rx.set_lane(lane)

    def _dispatch(self, f: PyParsed, frame: bytes | bytearray | memoryview, port: int,
                  now: float) -> None:
        p = self.ports.get(port)
        if p is None or not self.port_up[port]:
            self.count("rx_port_down")
            return
        dest_qp = f.dest_qp
        if dest_qp == ENDPOINT_QPN:
            endpoint.on_endpoint(self, f, frame, p, now)
            return
        qp = self._rx._ready_qp(f, frame)
        if qp is None:
            return
        if f.is_data:
            qp.on_data(f, frame, p.plane, now, self._ctrl)
        elif f.has_seth:
            qp.on_sack(f, now)
        elif f.has_aeth:
            qp.on_ack(f, now)
        elif f.has_neth:
            qp.on_nack(f, now)
        elif f.has_probe:
            qp.on_probe(f, p.plane, now, self._ctrl)
        else:
            self.count("rx_unexpected_opcode")

    def _replan_peer(self, peer: str, now: float) -> None:
        self._dirty.update(self._qps)
        self._sendq.update(self._qps)
        for qp in self._qps.values():
            if qp.attrs.peer == peer and qp.state in (QPState.RTR, QPState.RTS):
                qp.set_planes(self._planes_for(peer), now)

    def _route_for_ev(self, peer: str, ev: int) -> tuple[int, Route] | None:
        plane, path, _ = ev_path(ev)
        routes = self._paths_to(peer).get(plane)
        idx = self._plane_port.get(plane)
        if not routes or idx is None or path >= len(routes):
            return None
        return idx, routes[path]

    def _send_probes(self, qp: QueuePair, due: list[EVInfo], now: float) -> None:
        for info in due:
            key = (qp.qpn, info.plane, info.path)
            old = self._probe_of_path.pop(key, None)
            if old is not None:
                rec = self._probes.pop(old, None)
                if rec is not None and qp.evm:  # unanswered until the next one: failed
                    qp.evm.probe_result(rec[1], False)
            ppk = (qp.attrs.peer or "", info.plane, info.path)
            shared = self._probes.get(self._peer_path_probe.get(ppk, -1))
            if shared is not None and now - shared[2] < max(qp.cfg.probe_interval,
                                                            qp.probe_timeout()):
                # Another QP to the same peer has a probe of this path out: its answer
                # counts for this QP too (one probe per path, not per QP).
                self.count("tx_ev_probe_shared")
                continue
            self._probe_id = (self._probe_id + 1) & _ID_MASK
            rid = self._probe_id
            port, route = qp.route(info.ev)
            erth = TokenERTH(EndpointOp.EV_PROBE, timestamp=ts16(now), token=qp.attrs.ep_token or 0)
            self._ctrl.append((port, build_endpoint(route, ev=info.ev, request_id=rid,
                                                    erth=erth)))
            self._probes[rid] = (qp.qpn, info.ev, now)
            self._probe_of_path[key] = rid
            self._peer_path_probe[ppk] = rid
            self.count("tx_ev_probe")

    def settle_acks(self, now: float) -> None:
        """Finish what the acknowledgements received since the last :meth:`frames_to_send`
        did (losses, timers, completed work requests), as that call does first: a caller
        that delivers completions before it sends gets them all in one go.

        (mrcd: a port pass rang a client for the receive completion, then a second time
        for the send completion its ACK brought, settled in frames_to_send: two wake-ups
        of a ping-pong client per round trip where one does.)"""
        qps = self._qps
        for qpn in self._sendq:
            qp = qps.get(qpn)
            if qp is not None and qp.sack_pending:
                qp.after_sacks(now)

    def _wake(self, qpn: int) -> None:
        """QP ``qpn`` changed outside its own frames and timers (HostContext.wake)."""
        self._dirty.add(qpn)
        self._sendq.add(qpn)

    def frames_to_send(self, now: float, sendq: Any = None) -> list[tuple[int, bytes]]:
        """Every frame ready to go now: (local port index, frame bytes).

        ``sendq``: the caller's per-port send queues (:class:`mrcnet.io.batch.SendQueue`,
        mrcd's): new data frames built a run at a time in C then go straight into them
        (no Python object per frame) instead of into the list; single frames and control
        frames still come in the list."""
        self._last_now = now
        out = self._ctrl
        self._ctrl = []
        # Only QPs touched since the last call can have something new to send: a QP
        # blocked by its window or credit is unblocked only by a frame, a timer or an API
        # call, each of which marks it.
        qps, cfg = self._qps, self.config
        for qpn in self._sendq:
            qp = qps.get(qpn)
            if qp is None:
                continue
            try:  # (free when nothing raises)
                # (the QP's parts read directly: its properties of them cost a call each)
                rec, resp = qp.rec, qp.resp
                if rec.sack_pending:
                    qp.after_sacks(now)
                # data packets accepted since the last call (the receive burst), counted
                # in a Python attribute: the C lane's record's fields cost a struct read
                n = resp.rx_packets
                burst = n - resp.burst_from
                if burst:
                    resp.burst_from = n
                    # End of a receive burst: data that came with others is SACKed now,
                    # not at the ACK-delay timer (a host that handles frames in batches
                    # would hold a batch's tail for a timer tick, which the peer's reorder
                    # allowance does not cover). A lone packet per call (a NIC-like host)
                    # keeps coalescing to ack_every / ack_delay. (The record's fields
                    # last: each is a struct read, and a lone packet needs none.)
                    if not cfg.sack_on_reorder and (
                            burst > 1 or (cfg.ack_lone and not resp.held)
                            or (cfg.ack_req_burst and resp.rx.ack_at <= now)
                    ) and resp.rx.since_ack:
                        qp.send_sack(now, out)
                if qp.state is RTS and (qp.snd.sq or rec.rtx_q):
                    self._dirty.add(qpn)
                    if cfg.ack_with_data and not resp.pingpong:  # (holding: no news)
                        resp.note_answer(now)
                    if cfg.ack_with_data and resp.rx.since_ack:
                        emit_with_ack(self.ports, qp, now, out, sendq)
                    else:
                        qp.emit(now, out, sendq)
            except Exception as e:  # a bug: this QP fails alone, the others still send
                # (raised, it stopped every pass here: the QPs after it never sent again)
                self.last_internal_error = e
                self.count("tx_internal_error")
                qp.fail(WCStatus.GENERAL_ERR, f"internal error while sending: {e!r}")
        self._sendq.clear()
        sq = sendq
        queued = 0
        if sq is not None:
            if sq.added:  # (most calls queued nothing: no call then)
                queued = sq.take_added()
            if sq.overflow:  # a port's queue was full (a socket stuck for a long while)
                self.count("tx_sendq_full", sq.overflow)
                sq.overflow = 0
        if not self._all_up:
            # A port that is down sends nothing (a QP with no live plane at all keeps
            # "sending" into it, so its retry budget, not a hang, ends it).
            kept = [(p, f) for p, f in out if self.port_up.get(p, False)]
            self.count("tx_port_down", len(out) - len(kept))
            out = kept
            if queued:
                for p, up in self.port_up.items():
                    if not up and sq.pending(p):
                        k = sq.drop(p, sq.pending(p))
                        self.count("tx_port_down", k)
                        queued -= min(queued, k)
        c = self._counters  # (count(), inlined: once per call)
        c["tx_frames"] = c.get("tx_frames", 0) + len(out) + queued
        return out

    def next_timer(self) -> float | None:
        """When :meth:`handle_timer` must next run (None: no timer armed)."""
        t = self._timers.refresh(self._dirty, self._qps, _receive.VERIFY_SETUP)
        if self._port_status or self._ps_confirm:  # (else no endpoint timer)
            t = min(t, endpoint.next_due(self))
        return None if t == _INF else t

    def handle_timer(self, now: float) -> None:
        """Run every timer that is due at ``now``."""
        self._last_now = now
        self._timers.refresh(self._dirty, self._qps, _receive.VERIFY_SETUP)
        for qpn in self._timers.take_due(now):
            qp = self._qps.get(qpn)
            if qp is None:
                continue
            self._dirty.add(qpn)
            self._sendq.add(qpn)
            qp.on_timer(now, self._ctrl)
            if qp.evm is not None and qp.state is RTS:
                due = qp.evm.probes_due(now, qp.probe_timeout())
                if due:
                    self._send_probes(qp, due, now)
        if self._port_status or self._ps_confirm:
            endpoint.on_timer(self, now)

