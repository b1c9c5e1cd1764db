"""The responder's receive lane in C (mrcnet/_csrc/rxlane.c): :class:`CRxLane`, the twin of
:class:`mrcnet.core.rxlane.PyRxLane`.

:mod:`mrcnet.core.rxlane` holds the lane's contract (what it does, its constants and
results) and its Python twin; :func:`mrcnet.core.rxlane.lane_class` picks between the
two. This binding has a file of its own only because the two together would pass the
800-line limit of a module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Final

from mrcnet.buffers import BatchSlots
from mrcnet.core.txtable import CTxTable
from mrcnet.errors import MalformedReason
from mrcnet.native import HAVE_C, NOT_BUILT, C, ffi
from mrcnet.wire.parsed import PARSE_REASONS, VERIFY_ALL

__all__ = ["CRxLane"]


def _sack_buffer(size: int) -> tuple[Any, Any]:
    """A char array (unpacks to bytes) and the same memory as ``uint8_t *``."""
    out = ffi.new("char[]", size)
    return out, ffi.cast("uint8_t *", out)


_RX_MRS_MAX: Final = 256  # mrcnet.core.rxlane.RX_MRS_MAX
_RX_PEERS_MAX: Final = 8  # MRC_RX_PEERS_MAX
_RX_PATHS_MAX: Final = 64  # SACK paths a lane holds (mrcnet.core.rxlane.RX_PATHS_MAX)
_RX_ACK_MAX: Final = 64  # SACK records a lane holds (mrcnet.core.rxlane.RX_ACK_MAX)


class CRxLane:
    """The responder's receive lane in C (``mrcnet/_csrc/rxlane.c``): the interface and
    results of :class:`mrcnet.core.rxlane.PyRxLane`, which documents it. ``run`` is the
    C function itself (bound to this lane's context: no Python frame per call)."""

    def __init__(self) -> None:
        if not HAVE_C:
            raise RuntimeError(NOT_BUILT)
        c = self._c = ffi.new("struct mrc_rx_ctx *")
        self._mrs = ffi.new("struct mrc_rx_mr[]", _RX_MRS_MAX)
        c.mrs, c.nmrs, c.qpn = self._mrs, 0, 0xFFFFFFFF
        self._mr_bufs: dict[int, Any] = {}  # rkey -> the from_buffer cdata c.mrs points into
        self._keep: list[Any] = []  # the loaded frames' cdata views (alive while in use)
        self._grow(64)
        # SACKs the lane builds: output (64 frames of up to MRC_RX_SACK_MAX bytes), the
        # per-path templates it may use (and the cdata they live in, kept alive here)
        self._sout = ffi.new("char[]", 64 * 512)
        self._sport = ffi.new("uint32_t[]", 64)
        self._slen = ffi.new("uint32_t[]", 64)
        self._paths = ffi.new("struct mrc_rx_path[]", _RX_PATHS_MAX)
        self._path_keep: list[Any] = []
        c.sout, c.sout_cap = ffi.cast("uint8_t *", self._sout), 64 * 512
        c.sport, c.slen, c.sout_max = self._sport, self._slen, 64
        c.paths, c.npaths = self._paths, 0
        self.qp: Any = None  # the state record c.qp points to (kept alive here)
        # The QP whose SACKs the lane takes: c.ack points to _ack while it does
        a = self._ack = ffi.new("struct mrc_rx_ack *")
        self._ack_rec = ffi.new("int64_t[]", _RX_ACK_MAX * C.MRC_RX_ACK_INTS)
        self._ack_sent = ffi.new("double[]", _RX_ACK_MAX)
        a.rec, a.rec_sent, a.max = self._ack_rec, self._ack_sent, _RX_ACK_MAX
        self._ack_txt: Any = None  # the table a.txq points into (kept alive here)
        self.parsed: Any = ffi.addressof(c, "parsed")
        self.run: Callable[[int, int, float, int], int] = functools.partial(C.mrc_rx_run, c)

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

    _sack_out: Any = None  # output buffer of sack() (one thread: one buffer)

    @staticmethod
    def sack(rx: Any, tl: Any, ev: int, penalty: int, probe: int,
             bases: list[int] | None) -> list[bytes]:
        """The SACK frames ``QueuePair.send_sack`` sends now (``mrc_rx_sack``; see
        :meth:`mrcnet.core.rxlane.PyRxLane.sack`; ``tl``: :meth:`sack_template`'s)."""
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

    def release(self) -> None:
        """Let go of the loaded frames' buffers (a memoryview with an export left would
        be one the garbage collector cannot clear)."""
        for b in self._keep:
            ffi.release(b)
        self._keep = []

    def load_slots(self, io: BatchSlots, k: int) -> None:
        """Point the lane at the ``k`` frames ``io``'s last receive kept, where they are
        (no copy, no per-frame Python): they are the frames ``io.recv_views`` returned."""
        if k > self._cap:
            self._grow(max(k, io.max_batch))
        C.mrc_rx_slots(self._c, io._b, k)

    def set_qp(self, qpn: int, rx: Any, peers: frozenset[bytes], win: int, ack_every: int,
               ack_delay: float, reorder_floor: float, sack_on_reorder: bool) -> bool:
        """Serve QP ``qpn`` (a ready one) with state ``rx`` from now on; False (and no
        QP) if the lane cannot check its peers."""
        c = self._c
        if len(peers) > _RX_PEERS_MAX:
            self.clear_qp()
            return False
        for i, ip in enumerate(peers):
            ffi.memmove(c.peers + 16 * i, ip, 16)
        c.npeers, c.qpn, c.qp, self.qp = len(peers), qpn, rx, rx
        c.win, c.ack_every, c.ack_delay = win, ack_every, ack_delay
        c.reorder_floor, c.sack_on_reorder = reorder_floor, int(sack_on_reorder)
        c.npaths, c.sack_ok, self._path_keep = 0, 0, []
        return True

    def set_ack(self, qpn: int, txt: Any, peers: frozenset[bytes], txcap: int) -> bool:
        """See :meth:`mrcnet.core.rxlane.PyRxLane.set_ack` (the table must be a
        :class:`CTxTable`)."""
        self._c.ack = ffi.NULL
        a = self._ack
        if len(peers) > _RX_PEERS_MAX or not isinstance(txt, CTxTable):
            a.qpn, self._ack_txt = 0xFFFFFFFF, None
            return False
        for i, ip in enumerate(peers):
            ffi.memmove(a.peers + 16 * i, ip, 16)
        a.npeers, a.qpn, a.txcap = len(peers), qpn, txcap
        a.txq, a.o, self._ack_txt = txt._t, txt._o, txt
        return True

    def ack_sync(self, una: int, next_seq: int) -> None:
        """See :meth:`mrcnet.core.rxlane.PyRxLane.ack_sync`."""
        if self._ack_txt is not None:
            a = self._ack
            a.una, a.next_seq = una, next_seq
            self._c.ack = a

    def ack_pause(self) -> None:
        """See :meth:`mrcnet.core.rxlane.PyRxLane.ack_pause`."""
        self._c.ack = ffi.NULL

    def take_acks(self) -> tuple[list[int], list[float]]:
        """See :meth:`mrcnet.core.rxlane.PyRxLane.take_acks`."""
        a = self._ack
        n = a.n
        a.n = 0
        return (ffi.unpack(self._ack_rec, n * C.MRC_RX_ACK_INTS),
                ffi.unpack(self._ack_sent, n))

    def clear_qp(self) -> None:
        """Serve no QP: every data frame stops."""
        c = self._c
        c.qp, c.qpn, c.npeers, self.qp = ffi.NULL, 0xFFFFFFFF, 0, None
        c.npaths, c.sack_ok, self._path_keep = 0, 0, []

    def sack_setup(self, plane_ok: int,
                   tmpls: dict[int, tuple[Any, int]] | None) -> None:
        """Let the lane build the QP's due SACKs itself when the triggering packet's
        plane is in ``plane_ok`` (bits: usable planes with paths) and the QP has a
        template for its path; ``tmpls``: the QP's templates (path key -> ((template,
        length), port)) if they changed."""
        c = self._c
        c.plane_ok, c.sack_ok = plane_ok, 1
        if tmpls is not None:
            self.set_paths(tmpls)

    def set_paths(self, tmpls: dict[int, tuple[Any, int]]) -> None:
        """The QP's SACK templates: path key -> ((template, length), port)."""
        keep, paths = [], self._paths
        for i, (key, ((t, _ln), port)) in enumerate(tmpls.items()):
            if i >= _RX_PATHS_MAX:
                break
            e = paths[i]
            e.key, e.port, e.t = key, port, t
            keep.append(t)
        self._path_keep = keep
        self._c.npaths = len(keep)

    @property
    def npaths(self) -> int:
        """SACK templates the lane knows."""
        return int(self._c.npaths)

    def take_sacks(self) -> list[tuple[int, bytes]]:
        """The SACK frames the lane built since the last call: (port, frame), in order."""
        c = self._c
        n = c.nsout
        if not n:
            return []
        data = ffi.unpack(self._sout, c.sout_len)
        ports = ffi.unpack(self._sport, n)
        if n == 1:
            c.nsout = c.sout_len = 0
            return [(ports[0], data)]
        lens = ffi.unpack(self._slen, n)
        c.nsout = c.sout_len = 0
        out, o = [], 0
        for p, ln in zip(ports, lens, strict=True):
            out.append((p, data[o : o + ln]))
            o += ln
        return out

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
        """Why (``mrcnet.core.rxlane.WHY_*``)."""
        return int(self._c.why)

    @property
    def mrs(self) -> dict[int, int]:
        """rkey -> address of each region in the lane's table."""
        return {int(m.rkey): int(m.addr) for m in self._mrs[0 : self._c.nmrs]}

    def add_mr(self, mr: Any) -> None:
        """Let the lane write ``mr`` (a registered region that allows remote writes)."""
        c = self._c
        if mr.rkey in self._mr_bufs or c.nmrs >= _RX_MRS_MAX:
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

