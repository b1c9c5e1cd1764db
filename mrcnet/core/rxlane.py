"""The responder's receive lane, and the responder state record it shares with Python.

Like TCP header prediction. :meth:`mrcnet.core.host.Host.receive_batch` hands each batch
to the lane (:class:`CRxLane`, the C function ``mrc_rx_run`` of
``mrcnet/_csrc/rxlane.c``), which parses the frames one after the other and handles, on
its own, every data frame of the QP it is set to that needs nothing unusual: from the
QP's peer, in the receive window, not a duplicate, untrimmed, without an immediate, for a
registered region that allows remote writes and holds the range; and a single-packet
write-with-immediate in order (nothing out of order, the RQ MSN expected, a receive
posted for it), leaving a record from which the caller's Python pushes the completion
(:meth:`mrcnet.core.responder.Responder.lane_completed`). It places the payload and moves
the responder's state exactly as :meth:`mrcnet.core.responder.Responder.on_data` would.
It stops and hands back to Python at any other frame (which then takes the full path, the
frame's parse done) and whenever a SACK is due that it cannot build itself (which Python
builds, at the very point ``on_data`` would). It also takes the SACKs of one sending QP
to that QP's table of packets in flight (:class:`mrcnet.core.txtable.CTxTable`), leaving
a record per SACK for :meth:`mrcnet.core.recovery.Recovery.on_sack_records`.

The lane and the Python core share one responder state record (the fields of ``struct
mrc_rx_qp``, mrcnet/_csrc/rxlane.h), so neither copies anything back. Without the C
module the record is :class:`PyRxQP` and its operations (ring growth, SACK bitmaps and
frames) are :class:`PyRxState`'s; there is no lane then: every frame takes the per-frame
path, which is the reference the C lane is held to (``tests/core/pylane.py`` keeps the
lane's logic in Python as the tests' oracle, and ``tests/core/test_rxlane.py``,
``test_acklane.py`` and ``test_hotpath_batch.py`` compare the three).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any

from mrcnet.buffers import BatchSlots
from mrcnet.constants import SACK_BITMAP_BITS
from mrcnet.core.ctrl import NO_TS, NackTemplate, SackTemplate
from mrcnet.core.laneplane import LanePlane
from mrcnet.core.txtable import CTxTable
from mrcnet.errors import MalformedReason
from mrcnet.native import HAVE_C, NOT_BUILT, C, ffi
from mrcnet.wire import Route
from mrcnet.wire.parsed import PARSE_REASONS, VERIFY_ALL

# mrcnet/_csrc/rxlane.h (a test checks the two agree)
RX_UNREP_MAX = 64  # PSNs received since the last SACK the record holds itself
RX_PEERS_MAX = 8  # peer addresses a lane checks a frame's source against
RX_MRS_MAX = 256  # regions a lane's table holds (more: their frames take the full path)
RX_PATHS_MAX = 64  # SACK paths (templates) a lane holds
RX_SOUT_MAX = 64  # SACK frames a lane builds before the caller takes them
RX_SOUT_BYTES = 64 * 512  # ... and their bytes (MRC_RX_SACK_MAX each)
_TAKE_MASK = 0x3FF  # mrc_rx_take()'s 10-bit counts (nsout, nnack, nnack_last: <= 64)
# mrc_rx_run() results (low 2 bits; bit 2: SACKs built and waiting, bit 3: SACK records
# waiting, bit 4: frame pos a write-with-immediate the lane completed, bit 5: the run
# moved its QP's ack_at, the delayed-SACK deadline) and why it stopped
RX_END, RX_SACK, RX_STOP, RX_DONE, RX_SACKS, RX_ACKS, RX_IMM = 0, 1, 2, 3, 4, 8, 16
RX_ACKAT = 32
RX_POS_SHIFT = 6  # run()'s result: pos << RX_POS_SHIFT | flags | result
# the held-ACK decision of a write-with-immediate the lane completed (rxlane.h
# MRC_RX_IMM_*): held for the answer, acknowledged at once, the lane sent its SACK
RX_IMM_HELD, RX_IMM_ALONE, RX_IMM_SACKED = 1, 2, 4
(WHY_NONE, WHY_PARSE, WHY_OTHER, WHY_PEER, WHY_WINDOW, WHY_MR_MISS, WHY_MR_BAD, WHY_DUP,
 WHY_TRIMMED, WHY_IMM, WHY_FULL, WHY_DELIVER, WHY_SHORT, WHY_ACK) = range(14)
RX_ACK_INTS = 10  # integers per SACK record (rxlane.h MRC_RX_ACK_INTS)
RX_ACK_MAX = 64  # records a lane holds: a run takes at most one batch (64 frames)
RX_IMM_MAX = 64  # completion records a lane holds (a run returns when they are full)
RX_IMM_INTS = 3  # integers per completion record (rxlane.h MRC_RX_IMM_INTS)
# mrc_rx_imm_take()'s result: records waiting | how many of them the lane wrote into the
# client's ring itself << RX_IMM_WRITTEN_SHIFT | RX_IMM_RANG if a doorbell is owed |
# RX_IMM_BELL if the lane rang one itself
RX_IMM_COUNT_MASK, RX_IMM_WRITTEN_SHIFT, RX_IMM_RANG = 0xFF, 8, 0x10000
RX_IMM_BELL = 0x20000
#: C's NULL (the lane's "none" for a pointer it is given; None without the C module)
NULL: Any = ffi.NULL if HAVE_C else None
#: rxlane.c RX_LATE_WINDOW: how long after its arrival a reported retransmission's send
#: stamp is compared with later arrivals' (ack_late): a quarter of the 16-bit microsecond
#: stamp's wrap, so that two stamps compare without wrapping
RX_LATE_WINDOW = 16e-3

_INF = float("inf")


def ring_size(window: int) -> int:
    """Slots of an out-of-order ring for a receive window: a power of 2, at least 64."""
    return max(SACK_BITMAP_BITS, 1 << max(0, window - 1).bit_length())


class PyRxQP:
    """The responder state record in Python: ``struct mrc_rx_qp``'s fields (rxlane.h
    documents them), the ring's arrays as lists."""

    __slots__ = (
        "ack_at", "ack_ce", "ack_ev", "ack_plane", "ack_seq", "ack_ts", "hole_at",
        "hole_old", "ooo_cap", "ooo_imm", "ooo_len", "ooo_msn", "ooo_n", "ooo_nimm",
        "ooo_op", "ooo_seq", "penalty", "rcv_nxt", "rcvd_bytes", "rep_high", "rtx_at",
        "rtx_ts", "rx_high", "rx_msg_bytes", "since_ack", "unrep", "unrep_n",
    )

    def __init__(self, cap: int) -> None:
        self.rcv_nxt = self.rx_high = self.rx_msg_bytes = self.rcvd_bytes = 0
        self.since_ack = 0
        self.hole_at = self.ack_at = _INF
        self.hole_old = self.ack_ce = 0
        self.ack_plane = -1
        self.ack_ev = self.ack_ts = self.ack_seq = 0
        self.penalty = 0.0
        self.rep_high = self.rtx_ts = 0
        self.rtx_at = -_INF
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


class PyRxState:
    """The responder state record's operations in Python (without the C module): the
    static methods :class:`CRxLane` has for ``struct mrc_rx_qp``, on a :class:`PyRxQP`."""

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
    def lane_plane(port: int, route: Route, routes: Sequence[Route]) -> LanePlane:
        """A plane's routes for a receive lane (:class:`LanePlane`; no C record)."""
        return LanePlane(port, route, routes, False)

    @staticmethod
    def nack_template(nt: NackTemplate) -> NackTemplate:
        """What a lane builds NACKs from (in Python: ``nt`` itself)."""
        return nt

    @staticmethod
    def sack(rx: Any, t: Any, ev: int, penalty: int, probe: int,
             bases: list[int] | None) -> list[bytes]:
        """The SACK frames :meth:`mrcnet.core.qp.QueuePair.send_sack` sends now, on
        ``ev``, from template ``t``: one per window base (``bases``, or if None
        :func:`sack_bases` of ``rx.unrep``); ``probe`` >= 0: a probe response with that
        id. Empties ``rx.unrep`` (and sets ``rx.rep_high``). The twin of rxlane.c
        ``mrc_rx_sack``."""
        rcv = rx.rcv_nxt
        if bases is None:
            bases = sack_bases(rx, [])
        rx.unrep_n = 0
        rx.rep_high = max(rx.rx_high, rcv - 1)  # (everything received so far)
        nooo = rx.ooo_n
        ack_ev, ack_ce, ack_ts, rcvd, ack_seq = (rx.ack_ev, rx.ack_ce, rx.ack_ts,
                                                 rx.rcvd_bytes, rx.ack_seq)
        return [t.build_fields(ev, ack_ev, rcv, ack_seq, base, ack_ce, probe,
                               PyRxState.bitmap(rx, base) if nooo else 0, ack_ts, nooo,
                               penalty, rcvd)
                for base in bases]


def sent_before_reported(rx: Any, seq: int, ts: int, now: float) -> bool:
    """``ack_late``: whether a new packet (``seq``, send stamp ``ts``, arriving at
    ``now``) was sent before something a SACK already reported: a higher sequence number
    (first transmissions leave in sequence order), or a retransmission with a newer
    stamp (:func:`note_rtx`). rxlane.c ``sent_before_reported``."""
    if seq < rx.rep_high:
        return True
    d = (rx.rtx_ts - ts) & 0xFFFF
    return ts != NO_TS and now - rx.rtx_at <= RX_LATE_WINDOW and 0 < d < 0x8000


def note_rtx(rx: Any, ts: int, now: float) -> None:
    """``ack_late``: a retransmission with send stamp ``ts`` arrived at ``now`` (and is
    reported at once): keep its stamp if it is the newest, or the kept one is too old to
    compare. rxlane.c ``note_rtx``."""
    if ts != NO_TS and (now - rx.rtx_at > RX_LATE_WINDOW or (ts - rx.rtx_ts) & 0xFFFF < 0x8000):
        rx.rtx_ts, rx.rtx_at = ts, now


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


def _sack_buffer(size: int) -> tuple[Any, Any]:
    """A char array (unpacks to bytes) and the same memory as ``uint8_t *``."""
    out = ffi.new("char[]", size)
    return out, ffi.cast("uint8_t *", out)


class CRxLane:
    """The responder's receive lane in C (``mrcnet/_csrc/rxlane.c``; the module docstring
    says what it does). One per host.

    ``run(i, n, now, plane)`` is the C function ``mrc_rx_run`` itself, bound to this
    lane's context (no Python frame per call): it handles frames ``i .. n-1``, received
    at ``now`` on a port of ``plane``, and returns ``pos << RX_POS_SHIFT | result``
    (| RX_SACKS when SACK frames it built wait in :meth:`take_sacks`, | RX_ACKS when
    records of SACKs it took wait in :meth:`take_acks`, | RX_IMM when records of the
    writes-with-immediate it completed wait in :attr:`imm_rec`, | RX_ACKAT when it
    moved its QP's ``ack_at``): RX_END (all done, pos
    n), RX_DONE (frame ``pos`` done, returned for those completions),
    RX_SACK (frame ``pos`` done, a SACK is due) or RX_STOP (frame ``pos`` not handled:
    ``parsed`` holds it, ``why`` says why)."""

    def __init__(self) -> None:
        if not HAVE_C:
            raise RuntimeError(NOT_BUILT)
        c = self._c = ffi.new("struct mrc_rx_ctx *")
        self._mrs = ffi.new("struct mrc_rx_mr[]", RX_MRS_MAX)
        c.mrs, c.nmrs, c.qpn = self._mrs, 0, 0xFFFFFFFF
        self._mr_bufs: dict[int, Any] = {}  # rkey -> the from_buffer cdata c.mrs points into
        self._keep: list[Any] = []  # the loaded frames' cdata views (alive while in use)
        self._grow(64)
        # SACKs the lane builds: output (64 frames of up to MRC_RX_SACK_MAX bytes), the
        # per-path templates it may use (and the cdata they live in, kept alive here)
        self._sout = ffi.new("char[]", 64 * 512)
        self._sport = ffi.new("uint32_t[]", 64)
        self._slen = ffi.new("uint32_t[]", 64)
        self._paths = ffi.new("struct mrc_rx_path[]", RX_PATHS_MAX)
        self._path_keep: list[Any] = []
        # What the lane was given, read by the responder before it gives it again (plain
        # attributes: no read through cffi, no call): c.plane_ok while c.sack_ok is 1,
        # else -1; and the number of SACK templates (c.npaths)
        self.sack_planes = -1
        self.npaths = 0
        # the QP's routes by plane (LanePlane), as given to c.planes
        self._planes: dict[int, LanePlane] = {}
        self.nplanes = 0
        self.nacks = self.nacks_last = 0  # NACKs among take_sacks' frames (its doc)
        c.sout, c.sout_cap = ffi.cast("uint8_t *", self._sout), 64 * 512
        c.sport, c.slen, c.sout_max = self._sport, self._slen, 64
        c.paths, c.npaths = self._paths, 0
        self.qp: Any = None  # the state record c.qp points to (kept alive here)
        # The QP whose SACKs the lane takes: c.ack points to _ack while it does
        a = self._ack = ffi.new("struct mrc_rx_ack *")
        self._ack_rec = ffi.new("int64_t[]", RX_ACK_MAX * C.MRC_RX_ACK_INTS)
        self._ack_sent = ffi.new("double[]", RX_ACK_MAX)
        a.rec, a.rec_sent, a.max = self._ack_rec, self._ack_sent, RX_ACK_MAX
        self._ack_txt: Any = None  # the table a.txq points into (kept alive here)
        #: ``ack_sync(una, next_seq, early)``: the ack QP's send window now (its snd_una
        #: and next_seq): take its SACKs (``early``: a first transmission acknowledged
        #: sooner is forged, :func:`mrcnet.core.forged.sack_verdict`; 0: no such check);
        #: nothing before a :meth:`set_ack` or after a refused one. ``mrc_rx_ack_sync``
        #: without a Python frame (the receive loop: once a batch whose window moved).
        self.ack_sync: Callable[[int, int, float], None] = functools.partial(
            C.mrc_rx_ack_sync, c, a)
        #: The SACK records the lane took wait in these arrays (``RX_ACK_INTS`` integers
        #: each, and each one's triggering send time) until it runs again ...
        self.ack_rec, self.ack_sent = self._ack_rec, self._ack_sent
        #: ... and this says how many, and that none wait after (``mrc_rx_ack_take``):
        #: :meth:`take_acks` without the lists, for
        #: :meth:`mrcnet.core.recovery.Recovery.on_lane_records` to hand them to C.
        self.take_ack_n: Callable[[], int] = functools.partial(C.mrc_rx_ack_take, a)
        self.parsed: Any = ffi.addressof(c, "parsed")
        self.run: Callable[[int, int, float, int], int] = functools.partial(C.mrc_rx_run, c)
        #: :meth:`run_one` without its Python frame, for the receive loop: the frame as
        #: bytes or a cdata of it (``ffi.from_buffer``), its length, now, the plane
        self.one: Callable[[Any, int, float, int], int] = functools.partial(C.mrc_rx_one, c)
        #: ``ffi.from_buffer``: a bytearray as :attr:`one` takes it
        self.cdata_of: Callable[[Any], Any] = ffi.from_buffer
        #: ``mrc_rx_imm_set``: the lane's QP's write-with-immediate state (the RQ MSN
        #: expected, posted receives left, pingpong, ack_with_data; its posted receives
        #: and receive CQ's ring when the lane writes the completions there itself, else
        #: NULL, NULL), before a run
        self.imm_set: Callable[[int, int, int, int, Any, Any], None] = functools.partial(
            C.mrc_rx_imm_set, c)
        #: The records of the writes-with-immediate the lane completed (RX_IMM), in
        #: order, RX_IMM_INTS integers each (rxlane.h MRC_RX_IMM_INTS: the message's
        #: bytes, the immediate, the ``RX_IMM_*`` flags), until it runs again ...
        self.imm_rec = c.imm_rec = ffi.new("int64_t[]", RX_IMM_MAX * RX_IMM_INTS)
        c.imm_n, c.imm_max = 0, RX_IMM_MAX
        #: ... and how many, none waiting after (``mrc_rx_imm_take``), for
        #: :meth:`mrcnet.core.responder.Responder.lane_completed` to read in place
        self.take_imm_n: Callable[[], int] = functools.partial(C.mrc_rx_imm_take, c)
        self._take: Callable[[Any], int] = C.mrc_rx_take

    def _grow(self, cap: int) -> None:
        self._ptr = ffi.new("const uint8_t *[]", cap)
        self._len = ffi.new("uint32_t[]", cap)
        c = self._c
        c.ptr, c.len, c.cap = self._ptr, self._len, cap
        self._cap = cap

    # --- the responder state record (struct mrc_rx_qp) --------------------------------

    @staticmethod
    def new_state(cap: int) -> Any:
        """A fresh responder state with an empty ring of ``cap`` slots (a power of 2),
        freed with the returned cdata."""
        q = C.mrc_rx_new(cap)
        if q == ffi.NULL:
            raise MemoryError(f"receive ring of {cap} slots")
        return ffi.gc(q, C.mrc_rx_free)

    @staticmethod
    def grow(rx: Any, cap: int) -> None:
        """Move ``rx``'s ring to ``cap`` slots (a power of 2 that holds every entry)."""
        if C.mrc_rx_grow(rx, cap):
            raise MemoryError(f"receive ring of {cap} slots")

    @staticmethod
    def bitmap(rx: Any, base: int) -> int:
        """Bit i set when ``base + i`` is in ``rx``'s out-of-order set (a SACK bitmap)."""
        return int(C.mrc_rx_bitmap(rx, base))

    # --- SACKs ------------------------------------------------------------------------

    @staticmethod
    def sack_template(st: Any) -> Any:
        """What :meth:`sack` builds SACKs from: a ``struct mrc_rx_sackt`` laid out like
        ``st`` (a ``mrcnet.core.ctrl.SackTemplate``), with its length."""
        frame, udp_off, seth_off, cc_off, icrc_from, has_ip, psrc, pdst = st.layout()
        t = ffi.new("struct mrc_rx_sackt *")
        if len(frame) > len(t.frame):
            raise ValueError(f"a SACK of {len(frame)} bytes")
        ffi.memmove(t.frame, frame, len(frame))
        t.len, t.udp_off, t.seth_off, t.cc_off = len(frame), udp_off, seth_off, cc_off
        t.icrc_from, t.has_ip = icrc_from, int(has_ip)
        t.pseudo_sum = C.mrc_tmpl_addr_sum(psrc, pdst)
        return t, len(frame)

    @staticmethod
    def lane_plane(port: int, route: Route, routes: Sequence[Route]) -> LanePlane:
        """A plane's routes for the lane (:class:`LanePlane` with its C record)."""
        return LanePlane(port, route, routes, True)

    @staticmethod
    def nack_template(nt: NackTemplate) -> Any:
        """What the lane builds NACKs from: a ``struct mrc_rx_nackt`` laid out like
        ``nt`` (rxlane.c ``lane_nack`` makes ``nt.build``'s bytes)."""
        frame, udp_off, neth_off, icrc_from, has_ip, psrc, pdst = nt.layout()
        t = ffi.new("struct mrc_rx_nackt *")
        if len(frame) > len(t.frame):
            raise ValueError(f"a NACK of {len(frame)} bytes")
        ffi.memmove(t.frame, frame, len(frame))
        t.len, t.udp_off, t.neth_off = len(frame), udp_off, neth_off
        t.icrc_from, t.has_ip = icrc_from, int(has_ip)
        t.pseudo_sum = C.mrc_tmpl_addr_sum(psrc, pdst)
        return t

    _sack_out: Any = None  # output buffer of sack() (one thread: one buffer)

    @staticmethod
    def sack(rx: Any, tl: Any, ev: int, penalty: int, probe: int,
             bases: list[int] | None) -> list[bytes]:
        """The SACK frames ``Responder.send_sack`` sends now, on ``ev``, from ``tl``
        (:meth:`sack_template`'s): one per window base (``bases``, or if None
        :func:`sack_bases` of ``rx.unrep``); ``probe`` >= 0: a probe response with that
        id. Empties ``rx.unrep``. ``mrc_rx_sack``; the twin of :meth:`PyRxState.sack`."""
        t, ln = tl
        buf = CRxLane._sack_out
        if buf is None:
            buf = CRxLane._sack_out = _sack_buffer(66 * 512)  # MRC_RX_SACK_MAX each
        out, ptr = buf
        cb, nb = ffi.NULL, 0
        if bases is not None:
            cb, nb = ffi.new("int64_t[]", bases), len(bases)
            if nb * ln > len(out):
                out, ptr = CRxLane._sack_out = _sack_buffer(nb * ln)
        n = C.mrc_rx_sack(rx, t, ptr, len(out), ev, penalty, probe, cb, nb)
        if n == 1:
            return [ffi.unpack(out, ln)]  # (a char array unpacks to bytes)
        data = ffi.unpack(out, n * ln)
        return [data[i * ln : (i + 1) * ln] for i in range(n)]

    # --- set up --------------------------------------------------------------------

    def load(self, frames: Sequence[bytes | bytearray | memoryview]) -> Sequence[Any] | None:
        """Point the lane at a batch's frames (kept referenced until the next load);
        returns them as the lane reads them (memoryviews cast to bytes), or None if a
        frame is a buffer C cannot read (not contiguous: the caller's per-frame path
        counts it)."""
        n = len(frames)
        if n == 1 and type(frames[0]) is not memoryview:  # one frame a call (mrc-sim's hosts)
            f = frames[0]
            try:
                b = ffi.from_buffer(f)
            except (BufferError, TypeError, ValueError):
                self.release()
                return None
            self._keep = [b]
            self._ptr[0], self._len[0] = b, len(f)
            return frames
        if n > self._cap:
            self._grow(max(n, 2 * self._cap))
        try:
            frames = [f.cast("B") if type(f) is memoryview and (f.itemsize != 1 or f.ndim != 1)
                      else f for f in frames]
            keep = self._keep = [ffi.from_buffer(f) for f in frames]
        except (BufferError, TypeError, ValueError):
            self.release()
            return None
        self._ptr[0:n] = keep
        self._len[0:n] = [len(f) for f in frames]
        return frames

    def run_one(self, frame: bytes | bytearray, now: float, plane: int) -> int:
        """``run(0, 1, now, plane)`` of the one frame ``frame``, without :meth:`load`
        and :meth:`release` (``mrc_rx_one``: the lane keeps no pointer to it after)."""
        return int(self.one(frame if type(frame) is bytes else ffi.from_buffer(frame),
                            len(frame), now, plane))

    def release(self) -> None:
        """Let go of the loaded frames' buffers (a memoryview with an export left would
        be one the garbage collector cannot clear)."""
        for b in self._keep:
            ffi.release(b)
        self._keep = []

    def fit(self, k: int) -> Any:
        """Room for batches of ``k`` frames; returns the lane's context (``struct
        mrc_rx_ctx *``) for a reader that loads it (rxread.c ``mrc_rx_recv``), valid as
        long as this lane."""
        if k > self._cap:
            self._grow(k)
        return self._c

    def load_slots(self, io: BatchSlots, k: int) -> None:
        """Point the lane at the ``k`` frames ``io``'s last receive kept, where they are
        (no copy, no per-frame Python): they are the frames ``io.recv_views`` returned."""
        if k > self._cap:
            self._grow(max(k, io.max_batch))
        C.mrc_rx_slots(self._c, io._b, k)

    def set_qp(self, qpn: int, rx: Any, peers: frozenset[bytes], win: int, ack_every: int,
               ack_delay: float, reorder_floor: float, sack_on_reorder: bool,
               ack_req_burst: bool = False, ack_gap_fill: bool = False,
               ack_late: bool = False, ack_span: int = SACK_BITMAP_BITS // 2) -> bool:
        """Serve QP ``qpn`` (a ready one) with state ``rx`` from now on; False (and no
        QP) if the lane cannot check its peers. The acknowledgement knobs are
        :class:`~mrcnet.core.config.HostConfig`'s of the same names."""
        c = self._c
        if len(peers) > RX_PEERS_MAX:
            self.clear_qp()
            return False
        for i, ip in enumerate(peers):
            ffi.memmove(c.peers + 16 * i, ip, 16)
        c.npeers, c.qpn, c.qp, self.qp = len(peers), qpn, rx, rx
        c.win, c.ack_every, c.ack_delay, c.ack_span = win, ack_every, ack_delay, ack_span
        c.reorder_floor, c.sack_on_reorder = reorder_floor, int(sack_on_reorder)
        c.ack_req_burst, c.ack_gap_fill = int(ack_req_burst), int(ack_gap_fill)
        c.ack_late = int(ack_late)
        c.imm_credit = 0  # (no immediate until the caller's imm_set)
        c.imm_rq = c.imm_cq = ffi.NULL
        c.npaths, c.sack_ok, self._path_keep, self.sack_planes = 0, 0, [], -1
        self.npaths = 0
        if self._planes:
            self.set_planes({})
        return True

    def set_ack(self, qpn: int, txt: Any, peers: frozenset[bytes], txcap: int) -> bool:
        """Take the SACKs of QP ``qpn`` (its table ``txt``, its peers, the PSNs its table
        holds) once :attr:`ack_sync` says where its window is; False (and none taken) if
        the lane cannot (too many peers, or a table that is not a :class:`CTxTable`)."""
        self._c.ack = ffi.NULL
        a = self._ack
        if len(peers) > RX_PEERS_MAX or not isinstance(txt, CTxTable):
            a.qpn, a.txq, self._ack_txt = 0xFFFFFFFF, ffi.NULL, None  # (ack_sync: none)
            return False
        for i, ip in enumerate(peers):
            ffi.memmove(a.peers + 16 * i, ip, 16)
        a.npeers, a.qpn, a.txcap = len(peers), qpn, txcap
        a.txq, a.o, self._ack_txt = txt._t, txt._o, txt
        return True

    def ack_state(self) -> tuple[int, int, float, bool]:
        """What the last :attr:`ack_sync` left (una, next_seq, early) and whether the lane
        takes SACKs now (none after :meth:`ack_pause` or a refused :meth:`set_ack`)."""
        a = self._ack
        return (a.una, a.next_seq, a.early, self._c.ack != ffi.NULL)

    def ack_pause(self) -> None:
        """Take no SACKs until the next :attr:`ack_sync` (every SACK stops)."""
        self._c.ack = ffi.NULL

    def take_acks(self) -> tuple[list[int], list[float]]:
        """The records of the SACKs taken since the last call: ``RX_ACK_INTS`` integers
        each (rxlane.h MRC_RX_ACK_INTS says which), and each one's triggering send time."""
        n = self.take_ack_n()
        return (ffi.unpack(self._ack_rec, n * C.MRC_RX_ACK_INTS),
                ffi.unpack(self._ack_sent, n))

    def clear_qp(self) -> None:
        """Serve no QP: every data frame stops."""
        c = self._c
        c.qp, c.qpn, c.npeers, self.qp = ffi.NULL, 0xFFFFFFFF, 0, None
        c.imm_credit = 0
        c.imm_rq = c.imm_cq = ffi.NULL
        c.npaths, c.sack_ok, self._path_keep, self.sack_planes = 0, 0, [], -1
        self.npaths = 0
        if self._planes:
            self.set_planes({})

    def sack_setup(self, plane_ok: int,
                   tmpls: dict[int, tuple[Any, int]] | None) -> None:
        """Let the lane build the QP's due SACKs itself when the triggering packet's
        plane is in ``plane_ok`` (bits: usable planes with paths) and the QP has a
        template for its path; ``tmpls``: the QP's templates (path key -> ((template,
        length), port)) if they changed."""
        if plane_ok != self.sack_planes:  # (C never changes them: written on change)
            c = self._c
            c.plane_ok, c.sack_ok = plane_ok, 1
            self.sack_planes = plane_ok
        if tmpls is not None:
            self.set_paths(tmpls)

    def set_planes(self, planes: dict[int, LanePlane]) -> None:
        """The QP's routes by plane, for the SACKs and NACKs due on paths the QP has
        no template for yet."""
        c = self._c
        for p in self._planes:
            if 0 <= p < 64:
                c.planes[p] = ffi.NULL
        self._planes = dict(planes)
        self.nplanes = len(planes)  # (read by the responder: a plain attribute)
        for p, pl in planes.items():
            if 0 <= p < 64:
                c.planes[p] = pl.c

    def set_paths(self, tmpls: dict[int, tuple[Any, int]]) -> None:
        """The QP's SACK templates: path key -> ((template, length), port)."""
        keep, paths = self._path_keep, self._paths
        n = len(keep)
        # A responder only adds templates (a new path) until it clears them all: when the
        # lane's last one is still in its place, only the new ones are written (a QP that
        # answers on 128 paths otherwise rewrites them all 128 times).
        if 0 < n < len(tmpls) and next(islice(tmpls.values(), n - 1, None))[0][0] is keep[-1]:
            keep = list(keep)
            start = n
        else:
            keep, start = [], 0
        for i, (key, ((t, _ln), port)) in enumerate(islice(tmpls.items(), start, None), start):
            if i >= RX_PATHS_MAX:
                break
            e = paths[i]
            e.key, e.port, e.t = key, port, t
            keep.append(t)
        self._path_keep = keep
        self.npaths = len(keep)
        self._c.npaths = len(keep)


    def take_sacks(self) -> list[tuple[int, bytes]]:
        """The SACK (and NACK) frames the lane built since the last call: (port, frame),
        in order; ``nacks`` and ``nacks_last`` say how many of them are NACKs and how
        many of those TRIMMED_LASTHOP (zero after a call that returns no frame)."""
        r = self._take(self._c)  # (the counts in one C call: mrc_rx_take's layout)
        n = (r >> 32) & _TAKE_MASK
        if not n:
            self.nacks = self.nacks_last = 0
            return []
        self.nacks, self.nacks_last = (r >> 42) & _TAKE_MASK, r >> 52
        data = ffi.unpack(self._sout, r & 0xFFFFFFFF)
        if n == 1:  # (most calls: its port read in place, no list)
            return [(self._sport[0], data)]
        ports = ffi.unpack(self._sport, n)
        lens = ffi.unpack(self._slen, n)
        out, o = [], 0
        for p, ln in zip(ports, lens, strict=True):
            out.append((p, data[o : o + ln]))
            o += ln
        return out

    def check_imm(self, given: tuple[int, int, bool, bool]) -> None:
        """(receive.VERIFY_SETUP) The lane holds the write-with-immediate state ``given``
        (:attr:`imm_set`'s arguments): raise AssertionError if it does not."""
        c = self._c
        held = (c.imm_msn, c.imm_credit, bool(c.pingpong), bool(c.ack_with_data))
        if held != (given[0], given[1], bool(given[2]), bool(given[3])):
            raise AssertionError(f"the lane holds the immediate state {held}, not {given}, "
                                 "and imm_ver did not move (a writer without imm_ver += 1)")

    @property
    def plane(self) -> int:
        """The last run's receiving port's plane (the SACKs' ack_plane)."""
        return int(self._c.plane)

    @property
    def verify(self) -> bool:
        """Check the ICRC and UDP checksum of every frame."""
        return bool(self._c.verify)

    @verify.setter
    def verify(self, v: bool) -> None:
        self._c.verify = VERIFY_ALL if v else 0

    @property
    def placed(self) -> int:
        """Data frames the lane handled, ever."""
        return int(self._c.placed)

    @property
    def pos(self) -> int:
        """Where the last run stopped."""
        return int(self._c.pos)

    @property
    def why(self) -> int:
        """Why (``WHY_*``)."""
        return int(self._c.why)

    @property
    def mrs(self) -> dict[int, int]:
        """rkey -> address of each region in the lane's table."""
        return {int(m.rkey): int(m.addr) for m in self._mrs[0 : self._c.nmrs]}

    def add_mr(self, mr: Any) -> None:
        """Let the lane write ``mr`` (a registered region that allows remote writes)."""
        c = self._c
        if mr.rkey in self._mr_bufs or c.nmrs >= RX_MRS_MAX:
            return
        # The buffer is held through the object under the region's view (a bytearray, an
        # mmap), not the view itself: a memoryview with an export cannot be cleared by
        # the garbage collector (a Host in a reference cycle would leave it half torn
        # down). The view's place in it: its address less the object's.
        view = mr.view
        try:
            buf = ffi.from_buffer("uint8_t[]", view.obj, require_writable=True)
            vp = ffi.from_buffer("uint8_t[]", view, require_writable=True)
        except (TypeError, ValueError, BufferError):
            return  # not a plain writable buffer: its frames take the full path
        off = int(ffi.cast("uintptr_t", vp)) - int(ffi.cast("uintptr_t", buf))
        ffi.release(vp)
        if off < 0 or off + mr.length > len(buf) or mr.length > view.nbytes:
            ffi.release(buf)
            return
        e = self._mrs[c.nmrs]
        e.addr, e.length, e.base, e.rkey, e.remote_write = (
            mr.addr, mr.length, buf + off, mr.rkey, int(mr.remote_write))
        self._mr_bufs[mr.rkey] = buf
        c.nmrs += 1

    def drop_mr(self, rkey: int) -> None:
        """Forget the region with ``rkey`` (deregistered), and release its buffer."""
        buf = self._mr_bufs.pop(rkey, None)
        if buf is None:
            return
        c, mrs = self._c, self._mrs
        last = c.nmrs - 1
        for i in range(c.nmrs):
            if mrs[i].rkey == rkey:
                if i != last:  # the last entry fills the hole
                    m, e = mrs[last], mrs[i]
                    e.addr, e.length, e.base, e.rkey, e.remote_write = (
                        m.addr, m.length, m.base, m.rkey, m.remote_write)
                c.nmrs = last
                break
        ffi.release(buf)

    def clear_mrs(self) -> None:
        """Forget every region."""
        for rkey in list(self._mr_bufs):
            self.drop_mr(rkey)

    def malformed(self) -> MalformedReason | None:
        """Why the frame the lane stopped at (``why`` WHY_PARSE) did not parse."""
        return PARSE_REASONS[int(self._c.parsed.reason)]


def lane_class(use_c: bool) -> Any:
    """The responder state record's operations: :class:`CRxLane`'s when asked for and
    built, else :class:`PyRxState`'s."""
    return CRxLane if use_c and HAVE_C else PyRxState


def new_lane(use_c: bool) -> CRxLane | None:
    """A host's receive lane: a :class:`CRxLane` when asked for and built, else None
    (every frame takes the per-frame path)."""
    return CRxLane() if use_c and HAVE_C else None


__all__ = ["CRxLane", "PyRxQP", "PyRxState", "lane_class", "new_lane", "ring_size",
           "sack_bases"]
