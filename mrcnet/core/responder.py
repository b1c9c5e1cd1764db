"""Responding: the receive side of one QP.

Every data packet is checked (PSN window, rkey and bounds), placed at its address in
any order, recorded, and delivered in order as the cumulative point passes it (a
write-with-immediate completes then, exactly once). SACKs (cumulative point, bitmap,
the triggering packet's EV and stamp, CC state; a plain cumulative ACK when that is all
there is to say) and NACKs (trims, access errors, an immediate without a posted receive)
go back on the path the packet came on. The host's receive lane (mrcnet/core/rxlane.py,
in C) does the same for the common case on the same state record (``rx``): every change
here goes there as well (and to the lane's Python oracle, tests/core/pylane.py).
"""

from __future__ import annotations

from typing import Any

from mrcnet.constants import (
    EV_PATH_SHIFT,
    EV_PLANE_MASK,
    EV_PLANE_SHIFT,
    IMM_OPCODES,
    MPR_MAX,
    MPR_UNIT,
    PSN_MASK,
    WINDOW_PENALTY_MAX,
    NackReason,
    Opcode,
)
from mrcnet.core.context import QPView
from mrcnet.core.ctrl import NO_TS, NackTemplate, SackTemplate
from mrcnet.core.events import Completion, ImmediateReceived, WCOpcode, WCStatus
from mrcnet.core.evs import EVManager
from mrcnet.core.laneplane import LanePlane
from mrcnet.core.recvq import CRecvQueue, new_recvq
from mrcnet.core.rxlane import (
    NULL,
    RX_IMM_ALONE,
    RX_IMM_BELL,
    RX_IMM_COUNT_MASK,
    RX_IMM_HELD,
    RX_IMM_INTS,
    RX_IMM_RANG,
    RX_IMM_SACKED,
    RX_IMM_WRITTEN_SHIFT,
    RX_UNREP_MAX,
    lane_class,
    note_rtx,
    ring_size,
    sack_bases,
    sent_before_reported,
)
from mrcnet.core.seqnum import HALF, MSN_MASK, unwrap16
from mrcnet.core.states import RTR, RTS
from mrcnet.wire import Route, build_ack
from mrcnet.wire.aeth import AETH
from mrcnet.wire.parsed import PyParsed

_INF = float("inf")
_WOKE = RX_IMM_RANG | RX_IMM_BELL
_RING_START = 128  # out-of-order ring slots a responder starts with (grows to its window)
_ONLY = (Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM)
_LAST = (Opcode.WRITE_LAST, Opcode.WRITE_LAST_IMM)
_ENDS = frozenset(int(op) for op in _ONLY + _LAST)  # opcodes that end a message
_PENALTY_PER_LASTHOP_TRIM = 8  # receiver window penalty added per last-hop trim
_PENALTY_DECAY = 0.5  # ... and halved at every SACK that carries it


class Responder:
    """The responder of one QP (see the module docstring)."""

    def __init__(self, qp: QPView) -> None:
        self.qp = qp
        self.qpn = qp.qpn
        self.cfg = qp.cfg
        self.attrs = qp.attrs
        self.memory = qp.ctx.memory
        self.rcq = qp.rcq
        # set by the QP whenever it makes new ones (INIT -> RTR, profile changes)
        self.evm: EVManager | None = None
        self._paths: dict[int, list[Route]] = {}  # the peer's routes per plane (ready)
        self._sack_tmpl: dict[int, tuple[Any, int]] = {}  # path -> (SACK template, port)
        # plane -> its SACK routes (the lane's SACKs on the plane's paths without a
        # template: rxlane.h struct mrc_rx_plane), from the first template on the plane
        self._planes: dict[int, LanePlane] = {}
        self._sack_proto: SackTemplate | None = None  # the first of them (for_route's)
        # The NACK template of the last route a NACK took, and the QP's first (for_route's):
        # NACKs come one or two per path, not enough to keep one template per path
        self._nack_tmpl: tuple[NackTemplate, Route] | None = None
        self._nack_proto: NackTemplate | None = None
        # lane_sack_setup's planes: (usable planes, paths, bits) it last gave
        self._lane_planes: tuple[list[int], dict[int, list[Route]], int] | None = None
        self.rx_packets = 0  # hot counters: plain attributes, folded into counters()
        self.tx_sacks = 0
        self.acks_held = 0  # (counter ack_held: a ping-pong's every request holds its ACK)
        #: Posted receives (wr_ids), oldest first: in C with the host's C lane, which
        #: takes them itself when it writes completions into a client's ring
        self.recv_wrs = new_recvq(self.cfg.fast_parse)
        self.recv_posted = 0  # receives ever posted
        #: bumped by every write of what lane_imm_setup gives the lane (recv_posted,
        #: imm_done, pingpong; not lane_completed's, which the lane made itself): the
        #: receive loop calls it only when this moved
        self.imm_ver = 0
        #: The C end of this QP's receive CQ's ring that lane_imm_setup gave the lane to
        #: write into (None: none): held here while the lane may hold its pointer, so
        #: that it outlives the ring's writer (which, closed, lets go of the mapping)
        self.ring_given: Any = None
        self.reset()

    def reset(self) -> None:
        """A fresh receive state (QP reset; posted receives are the QP's business)."""
        # The per-packet state is one record (``struct mrc_rx_qp``, rx.h documents the
        # fields) that the host's receive lane updates in place for the common case of
        # receiving data.
        self._rxk = lane_class(self.cfg.fast_parse)
        # The out-of-order ring starts small and grows to the window on demand (on_data;
        # the lane stops at a frame beyond it): most QPs never hold more than a few
        # packets out of order, and a full-window ring per QP is what kept simulations of
        # thousands of hosts from fitting in memory.
        self.rx = self._rxk.new_state(ring_size(min(self.rx_window, _RING_START)))
        self.rx.rcv_nxt = self.rx.rx_high = self.attrs.rq_psn
        self._unrep_more: list[int] = []  # received since the last SACK, beyond rx.unrep
        #: rx_packets at the host's last frames_to_send: the receive burst is the rest
        #: (a Python attribute: a field of the record above costs a struct read)
        self.burst_from = self.rx_packets
        #: An AckReq whose acknowledgement waits for this QP's next data (ack_with_data).
        self.held = False
        #: ack_with_data's mode: True while this QP answers what it receives (a ping-pong,
        #: requests and responses), so an AckReq waits for the answer; False (the start)
        #: while it does not, so it is acknowledged at once, as a writer that waits for
        #: each completion needs. ``alone_at``: when an AckReq was last answered at once.
        self.pingpong = False
        self.alone_at = -_INF
        self.imm_done = 0  # next RQMSN to complete
        self.imm_ver += 1
        self.msgs_done = 0  # messages completed (the ACK's AETH MSN)
        self.rx.penalty = 0.0

    def start(self, paths: dict[int, list[Route]], evm: EVManager | None) -> None:
        """INIT -> RTR: the peer's paths and the QP's EVs are known."""
        self._paths = paths
        self.evm = evm
        self.rx.rcv_nxt = self.rx.rx_high = self.attrs.rq_psn
        self.qp.changed()  # (the lane's templates and planes)
        self._sack_tmpl.clear()
        self._planes = {}
        self._sack_proto = None
        self._nack_tmpl = self._nack_proto = None

    @property
    def rx_window(self) -> int:
        """PSNs the responder accepts ahead of (and behind) its cumulative point."""
        mpr = self.attrs.mpr_dest
        return mpr * MPR_UNIT if mpr else self.cfg.rx_window

    def on_data(self, f: PyParsed, frame: bytes | bytearray | memoryview, plane: int,
                now: float, out: list[tuple[int, bytes]]) -> None:
        """A data packet (``f``: the parsed ``frame``): check, place, and acknowledge (or
        NACK) it. (The host's receive lane does the same for the common case: every
        change here goes to mrcnet/_csrc/rxlane.c and tests/core/pylane.py as well.)"""
        rx = self.rx
        rcv = rx.rcv_nxt
        d = (f.psn - rcv) & PSN_MASK  # unwrap(psn, rcv) - rcv, inlined (every packet)
        if d >= HALF:
            d -= PSN_MASK + 1
        seq = rcv + d
        cfg = self.cfg
        mpr = self.attrs.mpr_dest  # self.rx_window, inlined
        win = mpr * MPR_UNIT if mpr else cfg.rx_window
        if d >= win or d <= -win:
            self.qp.count("rx_psn_out_of_window")
            return
        ev = f.ev
        ts = f.timestamp if f.has_tseth else NO_TS
        n = f.length
        rkey, va = f.rkey, f.va
        # rkey and bounds (MemoryTable.target, inlined: this runs for every packet)
        mr = self.memory.lookup(rkey)
        off = va - mr.addr if mr is not None else -1
        if mr is None or not mr.remote_write or off < 0 or off + n > mr.length:
            tgt = self.memory.target(rkey, va, n)
            assert isinstance(tgt, str)
            self.qp.count(f"rx_{tgt}")
            if d >= 0:
                self._nack(NackReason.UNEXP_EVENT, ev, seq, ts, plane, out)
            return
        ce = f.ce != 0
        m = rx.ooo_cap - 1  # the out-of-order set: slot seq & m holds seq, or -1
        if d < 0 or (rx.ooo_n and rx.ooo_seq[seq & m] == seq):
            self.qp.count("rx_duplicate")
            if f.rtx and cfg.ack_late:
                note_rtx(rx, ts, now)
            self._note_ack(seq, ev, ts, ce, plane)
            self.send_sack(now, out)
            return
        if f.trimmed:
            self.qp.count("rx_trimmed")
            self._nack(self._trim_reason(f), ev, seq, ts, plane, out)
            return
        op = f.opcode
        if f.has_imm:
            msn = f.rqmsn
            limit = self.recv_posted
            mw = self.attrs.max_wimm_dest
            if mw is not None:
                limit = min(limit, self.imm_done + mw)
            if unwrap16(msn, self.imm_done) >= limit:
                # No receive posted for this immediate: refuse, the sender resends it.
                self.qp.count("rx_no_recv_credit")
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
        # A retransmission is SACKed at once: its echo tells the sender the loss was real.
        ack_req = f.ack_req
        if ack_req and f.has_imm and d == 0 and not rx.ooo_n and cfg.ack_with_data:
            # In order, nothing missing, and it hands the application a message it may
            # answer: while this QP answers, the ACK waits (at most ack_delay) to leave
            # with that answer.
            if self.pingpong:
                ack_req = False
                self.held = True
                self.acks_held += 1
            else:
                self.alone_at = now
        # ack_req_burst: the AckReq is answered at the end of its receive burst.
        defer = ack_req and cfg.ack_req_burst
        now_sack = (ack_req and not defer) or ce or f.rtx or (d != 0 and cfg.sack_on_reorder)
        if cfg.ack_late:
            if f.rtx:
                note_rtx(rx, ts, now)
            elif sent_before_reported(rx, seq, ts, now):
                # Sent before something already reported: the sender's RACK is waiting
                # for this very packet (as TCP acknowledges an out-of-order segment or a
                # gap's filling at once, RFC 5681 section 4.2).
                if cfg.ack_req_burst:
                    defer = True
                else:
                    now_sack = True
        if d == 0:
            if op in _ENDS:
                self._deliver((n, op, msn, imm))
            else:  # _deliver's whole work for a packet inside a message
                rx.rx_msg_bytes += n
            nxt = seq + 1
            if rx.ooo_n:
                late_end = False  # a message whose end came first completes now
                while rx.ooo_seq[nxt & m] == nxt:
                    p = self._ooo_pop(nxt & m)
                    late_end = late_end or p[1] in _ENDS
                    self._deliver(p)
                    nxt += 1
                if late_end and cfg.ack_gap_fill:
                    if cfg.ack_req_burst:
                        defer = True
                    else:
                        now_sack = True
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
                or rx.unrep[0] < seq - cfg.ack_span):
            self.send_sack(now, out)
        elif defer:
            rx.ack_at = min(rx.ack_at, now)  # due: the burst's end sends it
            self.qp.tv += 1
        elif rx.ack_at == _INF:
            rx.ack_at = now + cfg.ack_delay
            self.qp.tv += 1

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
            self.msgs_done += 1
            if op in IMM_OPCODES:
                if msn != self.imm_done & MSN_MASK:
                    self.qp.count("rx_msn_mismatch")
                self.imm_done += 1
                self.imm_ver += 1
                wr_id = self.recv_wrs.popleft() if self.recv_wrs else -1
                self.rcq.push(Completion(
                    WCStatus.SUCCESS, wr_id, WCOpcode.RECV_RDMA_WITH_IMM, total, imm, self.qpn))
                if self.cfg.completion_events:
                    self.qp.ctx.emit(ImmediateReceived(self.qpn, wr_id, imm, total))

    def lane_imm_setup(self, lane: Any, seen: int = -1, verify: bool = False) -> int:
        """Give the host's C receive ``lane`` (this QP's) what on_data's common case of a
        write-with-immediate reads besides the state record: the RQ MSN expected, the
        immediates it may complete (posted receives left; none while max_wimm_dest is 0),
        pingpong and ack_with_data (rxlane.h struct mrc_rx_ctx's imm_* fields).
        ``seen``: the :attr:`imm_ver` this call last returned for ``lane`` (-1: none, the
        state is given): while it has not moved the lane has them and nothing is done,
        unless ``verify`` (receive.VERIFY_SETUP): then raise AssertionError if the lane
        does not hold them. With them go the posted receives and the receive CQ's ring
        when mrcd gave the CQ one (``ring_out``): the lane then writes the completions
        there itself, unless the CQ holds completions yet to go there first (then -1 is
        returned: given again at the next batch). Returns :attr:`imm_ver`, the caller's
        next ``seen``."""
        ver = self.imm_ver
        if ver == seen and not verify:  # (nothing moved: the receive loop's common case)
            return ver
        credit = self.recv_posted - self.imm_done
        mw = self.attrs.max_wimm_dest
        if credit < 0 or (mw is not None and mw <= 0):
            credit = 0
        given = (self.imm_done & MSN_MASK, min(credit, 0xFFFFFFFF), self.pingpong,
                 self.cfg.ack_with_data)
        if ver == seen:  # (verify)
            lane.check_imm(given)
        else:  # (imm_ver moves only with a change of these: the lane's own moves do not)
            # The lane writes the completions into the client's ring itself when mrcd
            # gave the CQ one (its ``ring_out``), nothing the CQ holds waits to go there
            # before them, and no event is owed per completion
            rcq, wrs = self.rcq, self.recv_wrs
            out = rcq.ring_out
            rq = wrs.c if type(wrs) is CRecvQueue else None
            ring = out is not None and rq is not None and not self.cfg.completion_events
            if ring and not rcq.entries:
                lane.imm_set(*given, rq, out)
                self.ring_given = out
            else:
                lane.imm_set(*given, NULL, NULL)
                self.ring_given = None
                if ring:  # not yet (the CQ's completions first): again at the next batch
                    return -1
        return ver

    def lane_completed(self, rec: Any, taken: int, now: float) -> None:
        """The receive lane placed and acknowledged writes-with-immediate (on_data's
        common case, rxlane.h MRC_RX_IMM): ``taken`` is what ``mrc_rx_imm_take`` returned
        (how many, how many of them, the first, the lane completed into the client's
        ring itself, and whether that woke the client: its doorbell rung by the lane, or
        owed still), their records are in
        ``rec`` (the lane's ``imm_rec``, RX_IMM_INTS integers each: the message's bytes,
        the immediate, and the held-ACK decision the lane took, ``RX_IMM_*`` flags): what
        on_data and _deliver do besides, in order: the posted receives' completions."""
        n = taken & RX_IMM_COUNT_MASK
        written = (taken >> RX_IMM_WRITTEN_SHIFT & RX_IMM_COUNT_MASK) * RX_IMM_INTS
        if taken & _WOKE:  # (the doorbell rung by the lane, or owed)
            self.rcq.on_ring(taken & RX_IMM_RANG)
        if written < n * RX_IMM_INTS and self.ring_given is not None:
            # the lane stopped writing them (the ring full, or no wr_id): the ring is
            # given again once what goes first has gone
            self.ring_given = None
            self.imm_ver += 1
        wrs, push, qpn = self.recv_wrs, self.rcq.push_row, self.qpn
        events = self.cfg.completion_events
        ok, op = WCStatus.SUCCESS, WCOpcode.RECV_RDMA_WITH_IMM
        self.msgs_done += n
        self.imm_done += n
        # (imm_ver stays: the lane moved its MSN and credit by n itself, to what imm_done
        # and the receives posted give now; unless the credit it was given had been
        # clamped to 32 bits, when they differ)
        if self.recv_posted - self.imm_done + n > 0xFFFFFFFF:
            self.imm_ver += 1
        for j in range(0, n * RX_IMM_INTS, RX_IMM_INTS):
            total, imm, fl = rec[j], rec[j + 1], rec[j + 2]
            if fl & RX_IMM_HELD:
                self.held = True
                self.acks_held += 1
            elif fl & RX_IMM_ALONE:
                self.alone_at = now
            if j >= written:  # (else in the ring already, its wr_id taken)
                wr_id = wrs.popleft() if wrs else -1
                push((ok, wr_id, op, total, imm, qpn))
                if events:
                    self.qp.ctx.emit(ImmediateReceived(qpn, wr_id, imm, total))
            if fl & RX_IMM_SACKED:  # (send_sack's)
                self.held = False

    def _note_ack(self, seq: int, ev: int, ts: int, ce: bool, plane: int) -> None:
        rx = self.rx
        rx.ack_seq, rx.ack_ev, rx.ack_ts, rx.ack_ce, rx.ack_plane = seq, ev, ts, ce, plane

    def lane_sack_setup(self, lane: Any) -> None:
        """Give the host's receive ``lane`` what it needs to build this QP's usual SACKs
        itself (send_sack's case of a usable triggering path): the planes that are
        usable and have paths, as bits; and the SACK templates by path, unless the lane
        has as many already (its ``sack_setup``)."""
        evm = self.evm
        m = 0
        if evm is not None:
            paths, usable = self._paths, evm.usable_planes
            c = self._lane_planes  # (the last answer: the same paths and usable planes?)
            if c is not None and c[1] is paths and c[0] == usable:
                m = c[2]
            else:
                for pl in usable:
                    if pl < 64 and pl in paths:
                        m |= 1 << pl
                self._lane_planes = (list(usable), paths, m)
        t = self._sack_tmpl
        if m != lane.sack_planes or len(t) != lane.npaths:  # (else the lane has them)
            lane.sack_setup(m, t if len(t) != lane.npaths else None)
        if len(self._planes) != lane.nplanes:
            lane.set_planes(self._planes)

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

    def _trim_reason(self, f: PyParsed) -> NackReason:
        """The NACK reason of a trimmed packet, from its DSCP (the switch says where it
        trimmed): TRIMMED_LASTHOP for a trim at the leaf's port to this host (incast: no
        path is to blame, the sender moves no EV; the window penalty asks the senders to
        back off), TRIMMED elsewhere (the sender skips the EV)."""
        if f.trim_lasthop:
            self.qp.count("rx_trimmed_lasthop")
            self.rx.penalty = min(WINDOW_PENALTY_MAX, self.rx.penalty + _PENALTY_PER_LASTHOP_TRIM)
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
            port, route = self.qp.route(ev)
            return ev, port, route
        rev = evm.reverse_ev(plane) if plane in evm.usable_planes else evm.next_ev().ev
        port, route = self.qp.route(rev)
        return rev, port, route

    def _nack(self, reason: NackReason, ev: int, seq: int, ts: int, plane: int,
              out: list[tuple[int, bytes]]) -> None:
        if self.evm is None:
            return
        rev, port, route = self._reverse(plane, ev)
        dqp = self.attrs.dest_qp_num or 0
        # build_nack's bytes from a template of the route (ctrl.NackTemplate), made from
        # this QP's first one when it is for the same QP numbers
        tr = self._nack_tmpl
        if tr is None or tr[1] is not route or not tr[0].matches(dqp, self.qpn):
            proto = self._nack_proto
            if proto is not None and proto.matches(dqp, self.qpn):
                tmpl = proto.for_route(route)
            else:
                tmpl = self._nack_proto = NackTemplate(route, dest_qp=dqp, src_qp=self.qpn)
            tr = self._nack_tmpl = (tmpl, route)
            if rev == ev:  # (_reverse's first case: the lane's, for the plane's others)
                lp = self._planes.get((ev >> EV_PLANE_SHIFT) & EV_PLANE_MASK)
                if lp is None or lp.nt is None:
                    lp = self._lane_plane(ev, port, route)
                    if lp is not None and lp.nt is None:
                        lp.set_nack(self._rxk.nack_template(tmpl))
        psn = seq & PSN_MASK
        out.append((port, tr[0].build(rev, psn, reason, ev, psn, ts & 0xFFFF)))
        self.qp.count("tx_nack")
        if reason == NackReason.TRIMMED_LASTHOP:
            self.qp.count("tx_nack_lasthop")

    def _lane_plane(self, ev: int, port: int, route: Route) -> LanePlane | None:
        """The plane of ``ev``'s routes for the receive lane (made on first use), if a
        template along ``route`` (``ev``'s) can serve it, else None."""
        pl = (ev >> EV_PLANE_SHIFT) & EV_PLANE_MASK
        lp = self._planes.get(pl)
        if lp is None:
            routes = self._paths.get(pl)
            if not routes:
                return None
            self.qp.changed()  # (a plane for the lane)
            lp = self._planes[pl] = self._rxk.lane_plane(port, route, routes)
        return lp if lp.serves(route) else None

    def note_answer(self, now: float) -> None:
        """ack_with_data: this QP, not holding its ACKs (``pingpong`` false: the caller's
        test, once per data pass), sends data. If an AckReq was answered at once within
        ``ack_delay`` before, the ACK could have ridden this data: hold the next ones."""
        if now - self.alone_at <= self.cfg.ack_delay:
            self.pingpong = True
            self.imm_ver += 1

    def ack_timer(self, now: float, out: list[tuple[int, bytes]]) -> None:
        """The delayed acknowledgement is due. A held AckReq that no answer took: this QP
        does not answer (now), so acknowledge at once again until it does."""
        if self.held:
            self.pingpong = False
            self.imm_ver += 1
            self.qp.count("ack_held_expired")
        self.send_sack(now, out)

    def send_sack(self, now: float, out: list[tuple[int, bytes]], probe: int = -1,
                  plane: int = -1) -> None:
        """SACK now: cumulative PSN, a 64-bit bitmap over what arrived out of order (one
        SACK per 64-PSN window so every packet received since the last SACK is reported),
        the triggering packet's EV and timestamp, and CC state; ``probe`` >= 0: the SACK
        answers the reliability probe with that id (PR). A cumulative ACK instead when
        that is all there is to say: everything arrived in order, the last packet was not
        CE-marked, no window penalty is pending, and it carried no timestamp to echo (or
        there is no such packet)."""
        rx = self.rx
        rx.ack_at = _INF
        self.qp.tv += 1
        rx.since_ack = 0
        self.held = False
        evm = self.evm
        st = self.qp.state
        if evm is None or (st is not RTR and st is not RTS):
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
        # inlined: no side effects), else whatever _reverse picks. ``plane``: on that
        # plane instead (ack_with_data: the answer's, so that one batch carries both; the
        # SACK still reflects the EV it answers, rx.ack_ev).
        ev = rx.ack_ev
        ev_plane = (ev >> EV_PLANE_SHIFT) & EV_PLANE_MASK
        if plane >= 0 and plane != ev_plane and plane in evm.usable_planes \
                and plane in self._paths:
            ev = evm.reverse_ev(plane)
        elif not (ev and ev_plane in evm.usable_planes and ev_plane in self._paths):
            ack_plane = rx.ack_plane
            ev = self._reverse(ack_plane if ack_plane >= 0 else evm.usable_planes[0]
                               if evm.usable_planes else 0, ev)[0]
        if (probe < 0 and not rx.ooo_n and bases is None and not rx.ack_ce and not rx.penalty
                and (rx.ack_ts == NO_TS or not rx.ack_ev)):  # (a cumulative ACK will do)
            rx.unrep_n = 0
            rx.rep_high = rx.rcv_nxt - 1  # (mrc_rx_sack's: everything received so far)
            port, route = self.qp.route(ev)
            out.append((port, build_ack(
                route, ev=ev, dest_qp=self.attrs.dest_qp_num or 0,
                psn=(rx.rcv_nxt - 1) & PSN_MASK, aeth=AETH(msn=self.msgs_done & 0xFFFFFF))))
            self.qp.count("tx_ack")
            return
        path_key = ev >> EV_PATH_SHIFT  # (plane, path): what the route depends on
        tp = self._sack_tmpl.get(path_key)
        if tp is None:
            port, route = self.qp.route(ev)
            mpr = min(MPR_MAX, self.rx_window // MPR_UNIT)
            dest_qp, proto = self.attrs.dest_qp_num or 0, self._sack_proto
            if proto is not None and proto.matches(dest_qp, self.qpn, mpr):
                tmpl_new = proto.for_route(route)  # another path of this QP's: a cheap copy
            else:
                tmpl_new = self._sack_proto = SackTemplate(
                    route, dest_qp=dest_qp, src_qp=self.qpn, mpr=mpr)
            self.qp.changed()  # (a template for the lane)
            tp = self._sack_tmpl[path_key] = (self._rxk.sack_template(tmpl_new), port)
            lp = self._lane_plane(ev, port, route)  # (the lane takes the plane's others)
            if lp is not None and lp.t is None:
                lp.set_sack(tp[0], self.rx_window)
        tmpl, port = tp
        penalty = 0
        pen = rx.penalty
        if pen:  # (mostly 0.0, which the decay keeps)
            penalty = int(pen)
            rx.penalty = pen * _PENALTY_DECAY
        frames = self._rxk.sack(rx, tmpl, ev, penalty, probe, bases)
        if len(frames) == 1:
            out.append((port, frames[0]))
            self.tx_sacks += 1
            return
        for frame in frames:
            out.append((port, frame))
            self.tx_sacks += 1

    def on_probe(self, f: PyParsed, plane: int, now: float,
                 out: list[tuple[int, bytes]]) -> None:
        """A reliability probe: answer with a SACK (PR) reflecting its EV and echoing its
        timestamp, the probe id in ack_psn_offset."""
        self._note_ack(self.rx.rcv_nxt - 1, f.ev, f.probe_timestamp, False, plane)
        self.send_sack(now, out, probe=f.probe_id)

    def post_recv(self, wr_id: int) -> None:
        """A receive for one incoming write-with-immediate (no message: the peer's
        immediates in flight are bounded by the QP's static max_imm_outstanding, set by
        the application from what each side posts; one that finds no receive is NACKed
        NO_RESOURCE and resent)."""
        self.recv_wrs.append(wr_id)
        self.recv_posted += 1
        self.imm_ver += 1
