"""The responder's receive lane: the common case of receiving data, a batch at a time.

Like TCP header prediction. :meth:`mrcnet.core.host.Host.receive_batch` hands each batch
to a lane, which parses the frames one after the other and handles, on its own, every
data frame of the QP it is set to that needs nothing unusual: from the QP's peer, in the
receive window, not a duplicate, untrimmed, without an immediate, for a registered region
that allows remote writes and holds the range. It places the payload and moves the
responder's state exactly as :meth:`mrcnet.core.qp.QueuePair.on_data` would. It stops
and hands back to Python at any other frame (which then takes the full path, the
frame's parse done) and whenever a SACK is due (which Python builds, at the very point
``on_data`` would). The lane and the Python core share one responder state record (the
fields of ``struct mrc_rx_qp``, mrcnet/_csrc/rxlane.h), so neither copies anything back.

With the C module the lane is ``mrcnet/_csrc/rxlane.c`` (:class:`mrcnet.core.rxlane_c.CRxLane`);
:class:`PyRxLane` here is its pure-Python twin, with the same interface, the same
decisions and the same state (``tests/core/test_rxlane.py`` and
``tests/core/test_hotpath_batch.py`` compare them, and both with the frame-by-frame path).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mrcnet.constants import (
    ENDPOINT_QPN,
    EV_PATH_SHIFT,
    EV_PLANE_MASK,
    EV_PLANE_SHIFT,
    PSN_MASK,
    SACK_BITMAP_BITS,
    Opcode,
    SackMode,
)
from mrcnet.core.ctrl import SackTemplate
from mrcnet.core.memory import MemoryRegion
from mrcnet.core.rxlane_c import CRxLane
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.native import HAVE_C
from mrcnet.wire.parsed import py_parse

# mrcnet/_csrc/rxlane.h (a test checks the two agree)
RX_UNREP_MAX = 64  # PSNs received since the last SACK the record holds itself
RX_PEERS_MAX = 8  # peer addresses a lane checks a frame's source against
RX_MRS_MAX = 256  # regions a lane's table holds (more: their frames take the full path)
RX_PATHS_MAX = 64  # SACK paths (templates) a lane holds
RX_SOUT_MAX = 64  # SACK frames a lane builds before the caller takes them
RX_SOUT_BYTES = 64 * 512  # ... and their bytes (MRC_RX_SACK_MAX each)
# mrc_rx_run() results (low 2 bits; bit 2: SACKs built and waiting) and why it stopped
RX_END, RX_SACK, RX_STOP, RX_SACKS, RX_ACKS = 0, 1, 2, 4, 8
RX_POS_SHIFT = 4  # run()'s result: pos << RX_POS_SHIFT | flags | result
(WHY_NONE, WHY_PARSE, WHY_OTHER, WHY_PEER, WHY_WINDOW, WHY_MR_MISS, WHY_MR_BAD, WHY_DUP,
 WHY_TRIMMED, WHY_IMM, WHY_FULL, WHY_DELIVER, WHY_SHORT, WHY_ACK) = range(14)
RX_ACK_INTS = 10  # integers per SACK record (rxlane.h MRC_RX_ACK_INTS)
RX_ACK_MAX = 64  # records a lane holds: a run takes at most one batch (64 frames)

_HALF = 1 << 23
_INF = float("inf")
_OP_FIRST, _OP_MIDDLE = int(Opcode.WRITE_FIRST), int(Opcode.WRITE_MIDDLE)
_OP_LAST, _OP_ONLY = int(Opcode.WRITE_LAST), int(Opcode.WRITE_ONLY)
_PLAIN = frozenset((_OP_FIRST, _OP_MIDDLE, _OP_LAST, _OP_ONLY))
_HALF_BITS = SACK_BITMAP_BITS // 2
_EV_PLANE_SHIFT, _EV_PLANE_MASK, _EV_PATH_SHIFT = EV_PLANE_SHIFT, EV_PLANE_MASK, EV_PATH_SHIFT


def ring_size(window: int) -> int:
    """Slots of an out-of-order ring for a receive window: a power of 2, at least 64."""
    return max(SACK_BITMAP_BITS, 1 << max(0, window - 1).bit_length())


class PyRxQP:
    """The responder state record in Python: ``struct mrc_rx_qp``'s fields (rxlane.h
    documents them), the ring's arrays as lists."""

    __slots__ = (
        "ack_at", "ack_ce", "ack_ev", "ack_plane", "ack_seq", "ack_ts", "hole_at",
        "hole_old", "ooo_cap", "ooo_imm", "ooo_len", "ooo_msn", "ooo_n", "ooo_nimm",
        "ooo_op", "ooo_seq", "penalty", "rcv_nxt", "rcvd_bytes", "rx_burst", "rx_high",
        "rx_msg_bytes", "since_ack", "unrep", "unrep_n",
    )

    def __init__(self, cap: int) -> None:
        self.rcv_nxt = self.rx_high = self.rx_msg_bytes = self.rcvd_bytes = 0
        self.rx_burst = self.since_ack = 0
        self.hole_at = self.ack_at = _INF
        self.hole_old = self.ack_ce = 0
        self.ack_plane = -1
        self.ack_ev = self.ack_ts = self.ack_seq = 0
        self.penalty = 0.0
        self.unrep_n = 0
        self.unrep = [0] * RX_UNREP_MAX
        self.ooo_n = self.ooo_nimm = 0
        self._ring(cap)

    def _ring(self, cap: int) -> None:
        self.ooo_cap = cap
        self.ooo_seq = [-1] * cap
        self.ooo_len = [0] * cap
        self.ooo_msn = [0] * cap
        self.ooo_imm = [0] * cap
        self.ooo_op = [0] * cap


class PyRxLane:
    """The receive lane in Python (the module docstring says what it does). One per
    host; :class:`mrcnet.core.rxlane_c.CRxLane` has the same interface."""

    def __init__(self) -> None:
        self.frames: Sequence[Any] = ()
        self.qp: PyRxQP | None = None
        self.qpn = -1
        self.peers: frozenset[bytes] = frozenset()
        self.win = 0
        self.ack_every = 1
        self.sack_on_reorder = False
        self.ack_delay = self.reorder_floor = 0.0
        self.plane = -1
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

    # --- the responder state record --------------------------------------------------

    @staticmethod
    def new_state(cap: int) -> PyRxQP:
        """A fresh responder state with an empty ring of ``cap`` slots (a power of 2)."""
        return PyRxQP(cap)

    @staticmethod
    def grow(rx: Any, cap: int) -> None:
        """Move ``rx``'s ring to ``cap`` slots (a power of 2 that holds every entry)."""
        old = (rx.ooo_seq, rx.ooo_len, rx.ooo_msn, rx.ooo_imm, rx.ooo_op)
        rx._ring(cap)
        m = cap - 1
        for i, s in enumerate(old[0]):
            if s >= 0:
                j = s & m
                rx.ooo_seq[j] = s
                rx.ooo_len[j], rx.ooo_msn[j], rx.ooo_imm[j], rx.ooo_op[j] = (
                    old[1][i], old[2][i], old[3][i], old[4][i])

    @staticmethod
    def bitmap(rx: Any, base: int) -> int:
        """Bit i set when ``base + i`` is in ``rx``'s out-of-order set (a SACK bitmap)."""
        if not rx.ooo_n:
            return 0
        seqs, m, bm = rx.ooo_seq, rx.ooo_cap - 1, 0
        for i in range(SACK_BITMAP_BITS):
            s = base + i
            if s >= 0 and seqs[s & m] == s:
                bm |= 1 << i
        return bm

    # --- SACKs ------------------------------------------------------------------------

    @staticmethod
    def sack_template(st: SackTemplate) -> SackTemplate:
        """What :meth:`sack` builds SACKs from (in Python: ``st`` itself)."""
        return st

    @staticmethod
    def sack(rx: Any, t: Any, ev: int, penalty: int, probe: int,
             bases: list[int] | None) -> list[bytes]:
        """The SACK frames :meth:`mrcnet.core.qp.QueuePair.send_sack` sends now, on
        ``ev``, from template ``t``: one per window base (``bases``, or if None
        :func:`sack_bases` of ``rx.unrep``); ``probe`` >= 0: a probe response with that
        id. Empties ``rx.unrep``. The twin of rxlane.c ``mrc_rx_sack``."""
        rcv = rx.rcv_nxt
        if bases is None:
            bases = sack_bases(rx, [])
        rx.unrep_n = 0
        nooo = rx.ooo_n
        ack_ev, ack_ce, ack_ts, rcvd, ack_seq = (rx.ack_ev, rx.ack_ce, rx.ack_ts,
                                                 rx.rcvd_bytes, rx.ack_seq)
        return [t.build_fields(ev, ack_ev, rcv, ack_seq, base, ack_ce, probe,
                               PyRxLane.bitmap(rx, base) if nooo else 0, ack_ts, nooo,
                               penalty, rcvd)
                for base in bases]

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
               ack_delay: float, reorder_floor: float, sack_on_reorder: bool) -> bool:
        """Serve QP ``qpn`` (a ready one) with state ``rx`` from now on; False (and no
        QP) if the lane cannot check its peers."""
        if len(peers) > RX_PEERS_MAX:
            self.clear_qp()
            return False
        self.qp, self.qpn, self.peers = rx, qpn, peers
        self.win, self.ack_every, self.ack_delay = win, ack_every, ack_delay
        self.reorder_floor, self.sack_on_reorder = reorder_floor, sack_on_reorder
        self.paths, self.sack_ok = {}, False
        return True

    def clear_qp(self) -> None:
        """Serve no QP: every data frame stops."""
        self.qp, self.qpn = None, -1
        self.paths, self.sack_ok = {}, False

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

    def ack_sync(self, una: int, next_seq: int) -> None:
        """The ack QP's send window now (its snd_una and next_seq): take its SACKs."""
        self.ack_una, self.ack_next = una, next_seq
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
        return (RX_SACKS if self.sout else 0) | (RX_ACKS if self.ack_sent else 0)

    def take_sacks(self) -> list[tuple[int, bytes]]:
        """The SACK frames the lane built since the last call: (port, frame), in order."""
        out, self.sout, self.sout_len = self.sout, [], 0
        return out

    def _lane_sack(self, q: Any) -> bool:
        """rxlane.c lane_sack: send_sack's common case, or False (nothing changed)."""
        ev = q.ack_ev
        plane = (ev >> _EV_PLANE_SHIFT) & _EV_PLANE_MASK
        if not ev or plane >= 64 or not (self.plane_ok >> plane) & 1:
            return False
        tp = self.paths.get(ev >> _EV_PATH_SHIFT)
        if tp is None or len(self.sout) >= RX_SOUT_MAX:
            return False
        tmpl, port = tp
        ln = len(tmpl.layout()[0])
        room = min((RX_SOUT_MAX - len(self.sout)) * ln, RX_SOUT_BYTES - self.sout_len)
        bases = sack_bases(q, [])
        if len(bases) * ln > room:
            return False
        pen = q.penalty
        frames = PyRxLane.sack(q, tmpl, ev, int(pen) if pen else 0, -1, bases)
        if pen:
            q.penalty = pen * 0.5
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
            q.rx_burst += 1
            ce = 1 if f.ce else 0
            now_sack = bool(f.ack_req or ce or f.rtx or (d != 0 and self.sack_on_reorder))
            if d == 0:
                q.rx_msg_bytes += n_
                if op in (_OP_LAST, _OP_ONLY):
                    q.rx_msg_bytes = 0
                nxt = seq + 1
                if q.ooo_n:
                    seqs = q.ooo_seq
                    while seqs[nxt & m] == nxt:
                        j = nxt & m
                        seqs[j] = -1
                        q.ooo_n -= 1
                        q.rx_msg_bytes += q.ooo_len[j]
                        if q.ooo_op[j] in (_OP_LAST, _OP_ONLY):
                            q.rx_msg_bytes = 0
                        nxt += 1
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
                    or q.unrep[0] < seq - _HALF_BITS):
                if self.sack_ok and self._lane_sack(q):
                    continue  # built here, exactly as send_sack would
                self.pos, self.why = k, WHY_NONE
                return k << RX_POS_SHIFT | self._flags() | RX_SACK
            if q.ack_at == _INF:
                q.ack_at = now + self.ack_delay
        self.pos, self.why = n, WHY_NONE
        return n << RX_POS_SHIFT | self._flags() | RX_END

    def _stop(self, k: int, why: int) -> int:
        self.pos, self.why = k, why
        return k << RX_POS_SHIFT | self._flags() | RX_STOP


def sack_bases(rx: Any, more: list[int]) -> list[int]:
    """Where the SACK windows start: right after the cumulative point, and at each
    packet received since the last SACK (``rx.unrep``, then ``more``) beyond the first
    window and every window so far."""
    rcv = rx.rcv_nxt
    bases = [rcv + 1]
    far = rcv + SACK_BITMAP_BITS
    # Packets beyond `far` arrived out of order, so at most rx_high: usually none.
    if rx.rx_high > far:
        n = min(rx.unrep_n, RX_UNREP_MAX)
        for s in sorted(x for x in [*(rx.unrep[i] for i in range(n)), *more] if x > far):
            if s >= bases[-1] + SACK_BITMAP_BITS:
                bases.append(s)
    return bases


def lane_class(use_c: bool) -> Any:
    """The lane to use: C when asked for and built, else Python."""
    return CRxLane if use_c and HAVE_C else PyRxLane


__all__ = ["PyRxLane", "PyRxQP", "lane_class", "ring_size", "sack_bases"]
