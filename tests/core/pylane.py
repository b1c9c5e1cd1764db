"""The receive lane in Python: the tests' oracle for the C lane (mrcnet/_csrc/rxlane.c).

Production has one lane, :class:`mrcnet.core.rxlane.CRxLane`, and without the C module
no lane at all: every frame takes the per-frame path (``Responder.on_data``,
``Recovery.on_sack``), which is the reference. :class:`PyRxLane` here is ``mrc_rx_run``
line for line (its data side and its SACK side), on the Python state record
(:class:`mrcnet.core.rxlane.PyRxQP`): the lane tests run it against the C lane and both
against the per-frame path, frame for frame. :func:`install` plants it in a host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mrcnet.constants import (
    ENDPOINT_QPN,
    EV_PATH_MASK,
    EV_PATH_SHIFT,
    EV_PLANE_MASK,
    EV_PLANE_SHIFT,
    PSN_MASK,
    SACK_BITMAP_BITS,
    WINDOW_PENALTY_MAX,
    NackReason,
    Opcode,
    SackMode,
)
from mrcnet.core import Host
from mrcnet.core.ctrl import NO_TS
from mrcnet.core.forged import sack_verdict
from mrcnet.core.memory import MemoryRegion
from mrcnet.core.responder import _PENALTY_PER_LASTHOP_TRIM
from mrcnet.core.rxlane import (
    RX_ACK_MAX,
    RX_ACKAT,
    RX_ACKS,
    RX_END,
    RX_MRS_MAX,
    RX_PATHS_MAX,
    RX_PEERS_MAX,
    RX_POS_SHIFT,
    RX_SACK,
    RX_SACKS,
    RX_SOUT_BYTES,
    RX_SOUT_MAX,
    RX_STOP,
    RX_UNREP_MAX,
    WHY_ACK,
    WHY_DELIVER,
    WHY_DUP,
    WHY_FULL,
    WHY_IMM,
    WHY_MR_BAD,
    WHY_MR_MISS,
    WHY_NONE,
    WHY_OTHER,
    WHY_PARSE,
    WHY_PEER,
    WHY_SHORT,
    WHY_TRIMMED,
    WHY_WINDOW,
    PyRxQP,
    PyRxState,
    note_rtx,
    sack_bases,
    sent_before_reported,
)
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire.parsed import py_parse

_HALF = 1 << 23
_INF = float("inf")
_OP_FIRST, _OP_MIDDLE = int(Opcode.WRITE_FIRST), int(Opcode.WRITE_MIDDLE)
_OP_LAST, _OP_ONLY = int(Opcode.WRITE_LAST), int(Opcode.WRITE_ONLY)
_PLAIN = frozenset((_OP_FIRST, _OP_MIDDLE, _OP_LAST, _OP_ONLY))
_EV_PLANE_SHIFT, _EV_PLANE_MASK, _EV_PATH_SHIFT = EV_PLANE_SHIFT, EV_PLANE_MASK, EV_PATH_SHIFT


class PyRxLane(PyRxState):
    """The receive lane in Python: :class:`mrcnet.core.rxlane.CRxLane`'s interface,
    decisions and state (the responder state record's operations are
    :class:`PyRxState`'s)."""

    def __init__(self) -> None:
        self.frames: Sequence[Any] = ()
        self.qp: PyRxQP | None = None
        self.qpn = -1
        self.peers: frozenset[bytes] = frozenset()
        self.win = 0
        self.ack_every = 1
        self.ack_span = SACK_BITMAP_BITS // 2
        self.ack_req_burst = self.ack_gap_fill = self.ack_late = False
        self.sack_on_reorder = False
        self.ack_delay = self.reorder_floor = 0.0
        self.plane = -1
        self.ack_moved = False  # the last run moved its QP's ack_at (RX_ACKAT)
        self.verify = True
        self.mrs: dict[int, MemoryRegion] = {}
        self.pos = 0
        self.why = WHY_NONE
        self.placed = 0  # data frames the lane handled, ever
        self.parsed: Any = None  # the frame the lane stopped at (RX_STOP), parsed
        self.error: Exception | None = None  # ... or why it could not be
        # SACKs the lane builds itself (rxlane.h struct mrc_rx_ctx says when)
        self.sack_ok = False
        self.plane_ok = 0
        self.paths: dict[int, tuple[Any, int]] = {}
        self.planes: dict[int, Any] = {}  # plane -> LanePlane
        self.nplanes = 0
        self.nacks = self.nacks_last = self._nacks = self._nacks_last = 0
        self.sout: list[tuple[int, bytes]] = []
        self.sout_len = 0
        # The QP whose SACKs the lane takes (rxlane.h struct mrc_rx_ack says when)
        self.ack_on = False
        self.ack_qpn = -1
        self.ack_txt: Any = None
        self.ack_peers: frozenset[bytes] = frozenset()
        self.ack_una = self.ack_next = self.ack_cap = 0
        self.ack_ints: list[int] = []
        self.ack_sent: list[float] = []

    # --- set up --------------------------------------------------------------------

    def load(self, frames: Sequence[bytes | bytearray | memoryview]) -> Sequence[Any] | None:
        """Take a batch's frames; returns them as the lane reads them (memoryviews cast
        to bytes): the caller's full path must read those."""
        if any(type(f) is memoryview and (f.itemsize != 1 or f.ndim != 1) for f in frames):
            frames = [f.cast("B") if type(f) is memoryview and (f.itemsize != 1 or f.ndim != 1)
                      else f for f in frames]
        self.frames = frames
        return frames

    def release(self) -> None:
        """Let go of the loaded frames."""
        self.frames = ()

    def set_qp(self, qpn: int, rx: Any, peers: frozenset[bytes], win: int, ack_every: int,
               ack_delay: float, reorder_floor: float, sack_on_reorder: bool,
               ack_req_burst: bool = False, ack_gap_fill: bool = False,
               ack_late: bool = False, ack_span: int = SACK_BITMAP_BITS // 2) -> bool:
        """Serve QP ``qpn`` (a ready one) with state ``rx`` from now on; False (and no
        QP) if the lane cannot check its peers."""
        if len(peers) > RX_PEERS_MAX:
            self.clear_qp()
            return False
        self.qp, self.qpn, self.peers = rx, qpn, peers
        self.win, self.ack_every, self.ack_delay = win, ack_every, ack_delay
        self.reorder_floor, self.sack_on_reorder = reorder_floor, sack_on_reorder
        self.ack_req_burst, self.ack_gap_fill = ack_req_burst, ack_gap_fill
        self.ack_late, self.ack_span = ack_late, ack_span
        self.paths, self.sack_ok = {}, False
        self.set_planes({})
        return True

    def clear_qp(self) -> None:
        """Serve no QP: every data frame stops."""
        self.qp, self.qpn = None, -1
        self.paths, self.sack_ok = {}, False
        self.set_planes({})

    def set_planes(self, planes: dict[int, Any]) -> None:
        """The QP's SACK routes by plane, for due SACKs on paths without a template."""
        self.planes = dict(planes)
        self.nplanes = len(planes)

    def sack_setup(self, plane_ok: int,
                   tmpls: dict[int, tuple[Any, int]] | None) -> None:
        """Let the lane build the QP's due SACKs itself when the triggering packet's
        plane is in ``plane_ok`` (bits: usable planes with paths) and the QP has a
        template for its path; ``tmpls``: the QP's templates (path key -> (template,
        port)) if they changed."""
        self.plane_ok, self.sack_ok = plane_ok, True
        if tmpls is not None:
            self.set_paths(tmpls)

    def set_paths(self, tmpls: dict[int, tuple[Any, int]]) -> None:
        """The QP's SACK templates: path key -> (template, port)."""
        self.paths = dict(list(tmpls.items())[:RX_PATHS_MAX])

    @property
    def npaths(self) -> int:
        """SACK templates the lane knows."""
        return len(self.paths)

    @property
    def sack_planes(self) -> int:
        """The usable planes' bits given by :meth:`sack_setup` (-1: none since the QP
        was set)."""
        return self.plane_ok if self.sack_ok else -1

    def set_ack(self, qpn: int, txt: Any, peers: frozenset[bytes], txcap: int) -> bool:
        """Take the SACKs of QP ``qpn`` (its table ``txt``, its peers, the PSNs its table
        holds) once :meth:`ack_sync` says where its window is; False (and none taken) if
        the lane cannot (too many peers, or a table of the other kind)."""
        self.ack_on = False
        if len(peers) > RX_PEERS_MAX or not hasattr(txt, "sack"):
            self.ack_qpn, self.ack_txt = -1, None
            return False
        self.ack_qpn, self.ack_txt, self.ack_peers, self.ack_cap = qpn, txt, peers, txcap
        return True

    def ack_sync(self, una: int, next_seq: int, early: float = 0.0) -> None:
        """The ack QP's send window now (its snd_una and next_seq): take its SACKs."""
        self.ack_una, self.ack_next, self.ack_early = una, next_seq, early
        self.ack_on = self.ack_txt is not None

    def ack_pause(self) -> None:
        """Take no SACKs until the next :meth:`ack_sync` (every SACK stops)."""
        self.ack_on = False

    def take_acks(self) -> tuple[list[int], list[float]]:
        """The records of the SACKs taken since the last call: ``RX_ACK_INTS`` integers
        each (rxlane.h MRC_RX_ACK_INTS says which), and each one's triggering send time."""
        ints, sent = self.ack_ints, self.ack_sent
        self.ack_ints, self.ack_sent = [], []
        return ints, sent

    def _ack_take(self, f: Any, buf: Any, now: float) -> bool:
        """rxlane.c ack_take: a SACK of the ack QP to its table, a record left (True), or
        False for Python to see it."""
        if len(self.ack_sent) >= RX_ACK_MAX:
            return False
        o = f.src_off
        if bytes(buf[o : o + 16]) not in self.ack_peers:
            return False
        if f.pr:
            return False  # (a probe response answers no packet: Python's)
        una = self.ack_una
        d = (f.cack_psn + 1 - una) & PSN_MASK  # SETH's CACK is the last PSN in order
        if d >= _HALF:
            d -= PSN_MASK + 1
        cack = una + d
        if cack > self.ack_next or cack <= una - self.ack_cap:
            return False
        trig = cack - 1 + f.ack_offset
        txt = self.ack_txt
        off = f.sack_offset
        if sack_verdict(txt, una, self.ack_next, self.ack_cap, cack, cack - 1 + off, f.bitmap,
                        trig, now, self.ack_early) is not None:
            return False
        acked = txt.sack(now, una, cack, self.ack_next, cack - 1 + off, f.bitmap, off == 2,
                         trig, f.sack_ev, f.ts_echo)
        if cack > una:
            self.ack_una = cack
        tx = txt.trig_tx
        mode = f.mode
        self.ack_ints += (cack, acked, tx, f.sack_ev, f.ts_echo, trig,
                          int(mode == SackMode.SKIP_ONCE), mode, f.window_penalty,
                          f.rcvd_bytes)
        self.ack_sent.append(txt.trig_sent if tx else 0.0)
        return True

    def _flags(self) -> int:
        return ((RX_SACKS if self.sout else 0) | (RX_ACKS if self.ack_sent else 0)
                | (RX_ACKAT if self.ack_moved else 0))

    def take_sacks(self) -> list[tuple[int, bytes]]:
        """The SACK (and NACK) frames the lane built since the last call: (port, frame),
        in order; ``nacks`` and ``nacks_last`` count the NACKs among them."""
        out, self.sout, self.sout_len = self.sout, [], 0
        self.nacks, self.nacks_last = self._nacks, self._nacks_last
        self._nacks = self._nacks_last = 0
        return out

    def _lane_nack(self, q: Any, f: Any, seq: int) -> bool:
        """rxlane.c lane_nack: on_data's NACK of a trimmed packet, or False (nothing
        changed)."""
        ev = f.ev
        plane = (ev >> _EV_PLANE_SHIFT) & _EV_PLANE_MASK
        if not self.sack_ok or not ev or plane >= 64 or not (self.plane_ok >> plane) & 1:
            return False
        pl = self.planes.get(plane)
        if pl is None or pl.nt is None or not pl.n:
            return False
        r = ((ev >> _EV_PATH_SHIFT) & EV_PATH_MASK) % pl.n
        if r >= len(pl.routes) or pl.routes[r] is None or len(self.sout) >= RX_SOUT_MAX:
            return False
        last = bool(f.trim_lasthop)
        if last:
            q.penalty = min(WINDOW_PENALTY_MAX, q.penalty + _PENALTY_PER_LASTHOP_TRIM)
        reason = NackReason.TRIMMED_LASTHOP if last else NackReason.TRIMMED
        psn = seq & PSN_MASK
        frame = pl.nt.for_route(pl.routes[r]).build(
            ev, psn, reason, ev, psn, (f.timestamp if f.has_tseth else NO_TS) & 0xFFFF)
        self.sout.append((pl.port, frame))
        self.sout_len += len(frame)
        self._nacks += 1
        self._nacks_last += last
        return True

    def _lane_sack(self, q: Any) -> bool:
        """rxlane.c lane_sack: send_sack's common case, or False (nothing changed)."""
        ev = q.ack_ev
        plane = (ev >> _EV_PLANE_SHIFT) & _EV_PLANE_MASK
        if not ev or plane >= 64 or not (self.plane_ok >> plane) & 1:
            return False
        key = ev >> _EV_PATH_SHIFT
        tp = self.paths.get(key)
        if tp is None:  # the plane's template along the path's route, if it serves it
            pl = self.planes.get(plane)
            if pl is None:
                return False
            r = (key & EV_PATH_MASK) % pl.n if pl.n else 0
            if (pl.t is None or pl.win != self.win or r >= len(pl.routes)
                    or pl.routes[r] is None):
                return False
            tp = (pl.t.for_route(pl.routes[r]), pl.port)
        if len(self.sout) >= RX_SOUT_MAX:
            return False
        tmpl, port = tp
        ln = len(tmpl.layout()[0])
        room = min((RX_SOUT_MAX - len(self.sout)) * ln, RX_SOUT_BYTES - self.sout_len)
        bases = sack_bases(q, [])
        if len(bases) * ln > room:
            return False
        pen = q.penalty
        frames = PyRxState.sack(q, tmpl, ev, int(pen) if pen else 0, -1, bases)
        if pen:
            q.penalty = pen * 0.5
        if q.ack_at != _INF:
            self.ack_moved = True
        q.ack_at = _INF
        q.since_ack = 0
        self.sout += [(port, f) for f in frames]
        self.sout_len += len(frames) * ln
        return True

    def add_mr(self, mr: MemoryRegion) -> None:
        """Let the lane write ``mr`` (a registered region that allows remote writes)."""
        if len(self.mrs) < RX_MRS_MAX:
            self.mrs[mr.rkey] = mr

    def drop_mr(self, rkey: int) -> None:
        """Forget the region with ``rkey`` (deregistered)."""
        self.mrs.pop(rkey, None)

    def clear_mrs(self) -> None:
        """Forget every region."""
        self.mrs.clear()

    def malformed(self) -> MalformedReason | None:
        """Why the frame the lane stopped at (``why`` WHY_PARSE) did not parse (None: a
        parser bug, not the frame)."""
        e = self.error
        return e.reason if isinstance(e, MalformedFrame) else None

    # --- the lane --------------------------------------------------------------------

    def run(self, i: int, n: int, now: float, plane: int) -> int:
        """Handle frames ``i .. n-1``, received at ``now`` on a port of ``plane``;
        returns ``pos << RX_POS_SHIFT | result`` (| RX_SACKS when SACK frames it built
        wait in ``take_sacks``, | RX_ACKS when records of SACKs it took wait in
        ``take_acks``): RX_END
        (all done, pos n), RX_SACK (frame ``pos`` done, a SACK is due) or RX_STOP (frame
        ``pos`` not handled: ``parsed`` holds it, ``why`` says why). The twin of rxlane.c
        ``mrc_rx_run``, line for line."""
        frames, q, verify = self.frames, self.qp, self.verify
        self.plane = plane
        self.ack_moved = False
        for k in range(i, n):
            buf = frames[k]
            try:
                f = py_parse(buf, verify)
            except Exception as e:  # (the caller counts it)
                self.parsed, self.error = None, e
                return self._stop(k, WHY_PARSE)
            self.parsed, self.error = f, None
            if (not f.is_data and f.has_seth and self.ack_on and f.dest_qp == self.ack_qpn
                    and f.dest_qp != ENDPOINT_QPN):
                if self._ack_take(f, buf, now):
                    continue
                return self._stop(k, WHY_ACK)
            if q is None or not f.is_data or f.dest_qp != self.qpn:
                return self._stop(k, WHY_OTHER)
            o = f.src_off
            if bytes(buf[o : o + 16]) not in self.peers:
                return self._stop(k, WHY_PEER)
            rcv = q.rcv_nxt
            d = (f.psn - rcv) & PSN_MASK
            if d >= _HALF:
                d -= PSN_MASK + 1
            seq = rcv + d
            win = self.win
            if d >= win or d <= -win:
                return self._stop(k, WHY_WINDOW)
            n_ = f.length
            mr = self.mrs.get(f.rkey)
            if mr is None:
                return self._stop(k, WHY_MR_MISS)
            off = f.va - mr.addr
            if not mr.remote_write or off < 0 or off + n_ > mr.length:
                return self._stop(k, WHY_MR_BAD)
            m = q.ooo_cap - 1
            if d < 0 or (q.ooo_n and q.ooo_seq[seq & m] == seq):
                return self._stop(k, WHY_DUP)
            if f.trimmed:
                if self._lane_nack(q, f, seq):
                    continue
                return self._stop(k, WHY_TRIMMED)
            op = f.opcode
            if f.has_imm or not f.has_tseth or op not in _PLAIN:
                return self._stop(k, WHY_IMM)
            if d >= q.ooo_cap or q.unrep_n >= RX_UNREP_MAX:
                return self._stop(k, WHY_FULL)
            if d == 0 and q.ooo_nimm:
                return self._stop(k, WHY_DELIVER)
            if n_:
                po = f.payload_off
                if f.payload_len != n_ or po + n_ > len(buf):
                    return self._stop(k, WHY_SHORT)
                mr.view[off : off + n_] = memoryview(buf)[po : po + n_]
            self.placed += 1
            q.rcvd_bytes += n_
            ce = 1 if f.ce else 0
            defer = bool(f.ack_req and self.ack_req_burst)
            now_sack = bool((f.ack_req and not defer) or ce or f.rtx
                            or (d != 0 and self.sack_on_reorder))
            if self.ack_late:
                if f.rtx:
                    note_rtx(q, f.timestamp, now)
                elif sent_before_reported(q, seq, f.timestamp, now):
                    if self.ack_req_burst:
                        defer = True
                    else:
                        now_sack = True
            if d == 0:
                q.rx_msg_bytes += n_
                if op in (_OP_LAST, _OP_ONLY):
                    q.rx_msg_bytes = 0
                nxt = seq + 1
                if q.ooo_n:
                    seqs = q.ooo_seq
                    late_end = False
                    while seqs[nxt & m] == nxt:
                        j = nxt & m
                        seqs[j] = -1
                        q.ooo_n -= 1
                        q.rx_msg_bytes += q.ooo_len[j]
                        if q.ooo_op[j] in (_OP_LAST, _OP_ONLY):
                            q.rx_msg_bytes = 0
                            late_end = True
                        nxt += 1
                    if late_end and self.ack_gap_fill:
                        if self.ack_req_burst:
                            defer = True
                        else:
                            now_sack = True
                    if q.hole_old:
                        now_sack = True
                        q.hole_old = 0
                    q.hole_at = now if q.ooo_n else _INF
                q.rcv_nxt = nxt
            else:
                j = seq & m
                q.ooo_seq[j] = seq
                q.ooo_len[j], q.ooo_op[j], q.ooo_msn[j], q.ooo_imm[j] = n_, op, 0, 0
                q.ooo_n += 1
                if seq > q.rx_high:
                    q.rx_high = seq
                if q.hole_at == _INF:
                    q.hole_at = now
                elif (not q.hole_old and now - q.hole_at >= self.reorder_floor
                      and not self.sack_on_reorder):
                    q.hole_old = 1
                    now_sack = True
            q.unrep[q.unrep_n] = seq
            q.unrep_n += 1
            q.since_ack += 1
            q.ack_seq, q.ack_ev, q.ack_ts, q.ack_ce, q.ack_plane = (
                seq, f.ev, f.timestamp, ce, self.plane)
            if (now_sack or q.since_ack >= self.ack_every
                    or q.unrep[0] < seq - self.ack_span):
                if self.sack_ok and self._lane_sack(q):
                    continue  # built here, exactly as send_sack would
                self.pos, self.why = k, WHY_NONE
                return k << RX_POS_SHIFT | self._flags() | RX_SACK
            if defer:
                if q.ack_at > now:
                    q.ack_at = now  # due: the burst's end sends it
                    self.ack_moved = True
            elif q.ack_at == _INF:
                q.ack_at = now + self.ack_delay
                self.ack_moved = True
        self.pos, self.why = n, WHY_NONE
        return n << RX_POS_SHIFT | self._flags() | RX_END

    def _stop(self, k: int, why: int) -> int:
        self.pos, self.why = k, why
        return k << RX_POS_SHIFT | self._flags() | RX_STOP


def install(host: Host) -> PyRxLane:
    """Make a fresh :class:`PyRxLane` ``host``'s receive lane (a host whose responder
    state records are Python ones: ``HostConfig(fast_parse=False)``)."""
    lane = PyRxLane()
    host._lane = lane
    return lane
