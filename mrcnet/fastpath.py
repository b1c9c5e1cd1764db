"""The per-packet hot path: checksums, data-frame template patching, batched packet I/O.

Every caller imports this module, never ``mrcnet._fastpath`` directly. It binds each
operation to the C implementation (``mrcnet._fastpath``, built with cffi from
mrcnet/_csrc) when that imports, and otherwise to a pure-Python twin that gives the same
bytes; ``HAVE_C`` says which. A missing C module costs one ``RuntimeWarning`` at import.
Set ``MRCNET_NO_FASTPATH=1`` to force the Python path (no warning: it was asked for).

What mrcd uses:

- ``make_template(frame_or_DataTemplate)`` once per (QP, destination), ``tmpl.path(usid=
  ...)`` or ``tmpl.path(segments=...)`` once per EV, then per packet
  ``tmpl.patch(out, opcode=, psn=, ev=, va=, payload=, path=, msn=, imm=, timestamp=,
  rtx=, ack_req=, cap=) -> length``; ``out`` is a bytearray/memoryview or, fastest,
  ``io.slot_ptr(i)`` of a batch (then ``cap=io.bufsize``) followed by
  ``io.send_slots(lengths)``: no copy but the payload's.
- ``BatchIO(fd, max_batch, bufsize)`` per port: ``send(frames) -> sent``,
  ``send_slots(lengths) -> sent``, ``recv(max_frames=None, wait=False,
  skip_outgoing=True) -> [(memoryview, pkttype, ifindex)]`` (views valid until the next
  ``recv``), ``slot(i)``/``slot_ptr(i)``, ``last_received``. A full queue gives a partial
  count; other errors raise ``OSError`` with its errno.
- ``FrameParser().parse(frame, verify=True) -> PyParsed``: the receive path's parser (C
  ``mrc_parse`` when built, else :func:`py_parse` = ``wire.parse_frame`` flattened). Same
  decisions and fields as ``wire.parse_frame``; raises ``MalformedFrame`` with the same
  reason. The result is a flat record of ints (header fields, offsets into the frame);
  the C parser reuses one record per ``FrameParser``, valid until its next ``parse``.
  :func:`parsed_to_frame` turns a record back into a ``wire.Frame``.
- ``FrameFinisher(icrc_from, has_ip, udp_off, src, dst).finish(buf)``: ICRC and UDP
  checksum of a control frame patched in place from a per-path template (the core's
  SACKs).
- ``udp6_checksum(src, dst, udp) -> int``, ``udp6_checksum_ok(src, dst, udp) -> bool``
  (pluggable into ``wire.parse_frame(checksum_ok=...)``), ``icrc(covered, has_ip) ->
  bytes``, and the stateless ``send_batch(fd, frames)`` / ``recv_batch(fd, ...)``.

Both implementations stay reachable so tests and tools/bench_wire.py compare them in one
process: ``py_*`` (the checksum and ICRC twins are the mrcnet.wire reference functions
themselves), :class:`PyBatchIO`, :class:`mrcnet.wire.template.DataTemplate`,
:func:`py_parse`, and when built ``c_*``, :class:`CBatchIO`, :class:`CTemplate`,
:func:`c_parse`.
"""

from __future__ import annotations

import errno as _errno
import fcntl
import functools
import importlib
import os
import socket
import struct
import warnings
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any, Final, TypeAlias, overload

from mrcnet.constants import (
    BTH_LEN,
    DATA_OPCODES,
    ETH_HEADER_LEN,
    ETH_P_IPV6,
    ICRC_LEN,
    IMM_OPCODES,
    IMMDT_LEN,
    IPV6_HEADER_LEN,
    METH_LEN,
    PSN_MASK,
    SRH_FIXED_LEN,
    TSETH_LEN,
    UDP_HEADER_LEN,
)
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire import (
    BTH,
    METH,
    NETH,
    RETH,
    SETH,
    SRH,
    TSETH,
    UDP,
    CCState,
    EndpointHeader,
    Ethernet,
    Frame,
    ImmDt,
    IPv6,
    ProbeHeader,
    parse_frame,
)
from mrcnet.wire.bth import F_ACKREQ, F_RTX, F_TS
from mrcnet.wire.checksum import udp6_checksum as py_udp6_checksum
from mrcnet.wire.checksum import udp6_checksum_ok as py_udp6_checksum_ok
from mrcnet.wire.icrc import icrc as _ref_icrc
from mrcnet.wire.template import DataTemplate, PathSpec, check_data_args

__all__ = [
    "HAVE_C",
    "PACKET_OUTGOING",
    "BatchIO",
    "CBatchIO",
    "CRxLane",
    "CTemplate",
    "CTxTable",
    "FrameFinisher",
    "FrameParser",
    "PyBatchIO",
    "PyParsed",
    "Received",
    "RunPatcher",
    "SlotFrames",
    "Template",
    "c_icrc",
    "c_parse",
    "c_udp6_checksum",
    "c_udp6_checksum_ok",
    "icrc",
    "make_template",
    "parsed_to_frame",
    "patch_data_frame",
    "py_icrc",
    "py_parse",
    "py_udp6_checksum",
    "py_udp6_checksum_ok",
    "recv_batch",
    "recv_slots",
    "run_patcher",
    "send_batch",
    "udp6_checksum",
    "udp6_checksum_ok",
]

# Linux <linux/if_packet.h>: sll_pkttype of a frame this host sent (a packet socket sees
# its own host's transmissions too; mrcd must not take them for received frames).
PACKET_OUTGOING: Final = 4

#: One received frame: (frame bytes, sll_pkttype, sll_ifindex). The memoryview points
#: into the batch's reusable buffer and is valid until that batch's next ``recv``.
Received = tuple[memoryview, int, int]

_SIOCGIFINDEX: Final = 0x8933  # <linux/sockios.h>
_IFREQ_INDEX: Final = struct.Struct("16si20x")  # struct ifreq: name, ifindex (40 bytes)

_U64_MAX: Final = (1 << 64) - 1
_PLAIN_DATA_OPS: Final = frozenset(int(op) for op in DATA_OPCODES - IMM_OPCODES)

_IMM_EXT_LEN: Final = METH_LEN + IMMDT_LEN
_TSETH_EXT_LEN: Final = TSETH_LEN
_ICRC_MIN_UDP: Final = UDP_HEADER_LEN + BTH_LEN
_ICRC_MIN_IP: Final = IPV6_HEADER_LEN + _ICRC_MIN_UDP


# ---- pure-Python reference -------------------------------------------------------------


def py_icrc(covered: bytes | bytearray | memoryview, has_ip: bool = True) -> bytes:
    """RoCEv2 invariant CRC, 4 bytes as stored: the reference, :func:`mrcnet.wire.icrc.icrc`.

    ``covered`` runs from the inner IPv6 header (``has_ip``) or the UDP header up to, not
    including, the ICRC.
    """
    return _ref_icrc(covered, has_ip)


class PyBatchIO:
    """Pure-Python twin of :class:`CBatchIO`: one syscall per frame.

    Same interface and the same zero-copy receive (``recvfrom_into`` reusable slots).
    """

    def __init__(self, fd: int, max_batch: int = 64, bufsize: int = 9216) -> None:
        if max_batch < 1 or bufsize < 1:
            raise ValueError("max_batch and bufsize must be positive")
        self.fd = fd
        self.max_batch = max_batch
        self.bufsize = bufsize
        # A socket object over the caller's fd, for recvfrom_into's sll address (packet
        # type, interface). It is detached, never closed: the fd stays the caller's.
        self._sock = socket.socket(fileno=fd)
        self._buf = bytearray(max_batch * bufsize)
        self._view = memoryview(self._buf)
        self._ifindex: dict[str, int] = {}
        #: Number of frames the last ``recv`` took from the socket, kept or not.
        self.last_received = 0

    def close(self) -> None:
        """Let go of the fd without closing it (it belongs to the caller)."""
        if self._sock.fileno() >= 0:
            self._sock.detach()

    def __del__(self) -> None:
        sock = getattr(self, "_sock", None)
        if sock is not None and sock.fileno() >= 0:
            sock.detach()

    def __enter__(self) -> PyBatchIO:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def slot(self, i: int) -> memoryview:
        """Writable view of send/receive buffer ``i`` (``bufsize`` bytes)."""
        return self._view[i * self.bufsize : (i + 1) * self.bufsize]

    def slot_ptr(self, i: int) -> memoryview:
        """Buffer ``i`` to patch into: the twin of :meth:`CBatchIO.slot_ptr` (a view here)."""
        if not 0 <= i < self.max_batch:
            raise IndexError(i)
        return self.slot(i)

    def send(self, frames: Sequence[bytes | bytearray | memoryview]) -> int:
        """Send up to ``max_batch`` frames; returns how many went (partial when full)."""
        sent = 0
        for f in frames[: self.max_batch]:
            try:
                self._sock.send(f, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                if e.errno == _errno.ENOBUFS:
                    break
                if sent:
                    break  # report the error on the next call, like sendmmsg
                raise
            sent += 1
        return sent

    def _if_index(self, ifname: str) -> int:
        # Ask through the socket itself (SIOCGIFINDEX): it may live in another netns than
        # this thread, where socket.if_nametoindex would look.
        ifr = fcntl.ioctl(self._sock.fileno(), _SIOCGIFINDEX,
                          _IFREQ_INDEX.pack(ifname.encode(), 0))
        return int(_IFREQ_INDEX.unpack(ifr)[1])

    def send_slots(self, lens: Sequence[int]) -> int:
        """Send frames already written into slots 0..len(lens)-1, frame i ``lens[i]`` long."""
        return self.send([self._view[i * self.bufsize : i * self.bufsize + n]
                          for i, n in enumerate(lens)])

    def recv(self, max_frames: int | None = None, *, wait: bool = False,
             skip_outgoing: bool = True) -> list[Received]:
        """Receive what is queued (up to ``max_frames``) without blocking, or with ``wait``
        block for the first frame only. Frames this host sent are dropped unless
        ``skip_outgoing`` is False. Views are valid until the next ``recv``."""
        n = self.max_batch if max_frames is None else min(max_frames, self.max_batch)
        out: list[Received] = []
        got = 0
        flags = 0 if wait else socket.MSG_DONTWAIT
        bs = self.bufsize
        for i in range(n):
            try:
                nbytes, addr = self._sock.recvfrom_into(self._view[i * bs : (i + 1) * bs],
                                                        bs, flags)
            except (BlockingIOError, InterruptedError):
                break
            got += 1
            flags = socket.MSG_DONTWAIT
            ifname, _proto, pkttype = addr[0], addr[1], addr[2]
            if skip_outgoing and pkttype == PACKET_OUTGOING:
                continue
            idx = self._ifindex.get(ifname)
            if idx is None:
                idx = self._ifindex[ifname] = self._if_index(ifname)
            out.append((self._view[i * bs : i * bs + nbytes], pkttype, idx))
        self.last_received = got
        return out

    def recv_views(self, max_frames: int | None = None, *, wait: bool = False) -> list[memoryview]:
        """:meth:`recv`'s views only (outgoing frames skipped)."""
        return [v for v, _pkttype, _ifindex in self.recv(max_frames, wait=wait)]


# ---- C implementation --------------------------------------------------------------------

_C: Any = None
_ffi: Any = None
_FORCED_OFF: Final = os.environ.get("MRCNET_NO_FASTPATH", "") not in ("", "0")
if not _FORCED_OFF:
    try:
        _fp_mod = importlib.import_module("mrcnet._fastpath")
        _C = _fp_mod.lib
        _ffi = _fp_mod.ffi
    except ImportError as exc:  # the package works without it, only slower
        warnings.warn(
            f"mrcnet._fastpath is not built ({exc}); using the pure-Python fast path "
            "(several times slower per packet). Rebuild: pip install -e . (needs a C "
            "compiler and the Python headers, Debian: gcc python3-dev)",
            RuntimeWarning,
            stacklevel=2,
        )

#: True when the C fast path is in use.
HAVE_C: bool = _C is not None


def _as_ptr(b: bytes | bytearray | memoryview) -> Any:
    # bytes pass to a uint8_t* argument as they are; writable or sliced buffers need a
    # cdata view (no copy).
    return b if type(b) is bytes else _ffi.from_buffer(b)


def c_udp6_checksum(
    src: bytes | bytearray | memoryview,
    dst: bytes | bytearray | memoryview,
    udp: bytes | bytearray | memoryview,
) -> int:
    """C twin of :func:`py_udp6_checksum`."""
    try:  # bytes go straight in; other buffers need a cdata view (the rare case)
        return int(_C.mrc_udp6_checksum(src, dst, udp, len(udp)))
    except TypeError:
        return int(_C.mrc_udp6_checksum(_as_ptr(src), _as_ptr(dst), _as_ptr(udp), len(udp)))


def c_udp6_checksum_ok(
    src: bytes | bytearray | memoryview,
    dst: bytes | bytearray | memoryview,
    udp: bytes | bytearray | memoryview,
) -> bool:
    """C twin of :func:`py_udp6_checksum_ok`."""
    if len(udp) >= UDP_HEADER_LEN and not (udp[6] or udp[7]):
        return False
    try:
        return bool(_C.mrc_udp6_sum(src, dst, udp, len(udp)) == 0xFFFF)
    except TypeError:
        return bool(_C.mrc_udp6_sum(_as_ptr(src), _as_ptr(dst), _as_ptr(udp), len(udp))
                    == 0xFFFF)


def c_icrc(covered: bytes | bytearray | memoryview, has_ip: bool = True) -> bytes:
    """C twin of :func:`py_icrc`."""
    if len(covered) < (_ICRC_MIN_IP if has_ip else _ICRC_MIN_UDP):
        return _ref_icrc(covered, has_ip)  # too short to mask: the reference's edge case
    try:
        crc = _C.mrc_icrc(covered, len(covered), has_ip)
    except TypeError:
        crc = _C.mrc_icrc(_as_ptr(covered), len(covered), has_ip)
    return int(crc).to_bytes(ICRC_LEN, "little")


class CBatchIO:
    """sendmmsg/recvmmsg on a packet socket with buffers allocated once and reused.

    ``fd`` is a bound AF_PACKET socket (blocking or not: calls never block unless asked).
    Frame i of a receive batch lands in slot i; ``recv`` returns memoryviews of the
    slots (no copy), valid until the next ``recv``.
    """

    def __init__(self, fd: int, max_batch: int = 64, bufsize: int = 9216) -> None:
        if _C is None:
            raise RuntimeError("mrcnet._fastpath is not available")
        if max_batch < 1 or bufsize < 1:
            raise ValueError("max_batch and bufsize must be positive")
        self.fd = fd
        self.max_batch = max_batch
        self.bufsize = bufsize
        ffi = _ffi
        # Everything is owned by this object (ffi.new frees with it); the struct only
        # holds pointers, so keep the arrays referenced here.
        self._msgs = ffi.new("struct mmsghdr[]", max_batch)
        self._iov = ffi.new("struct iovec[]", max_batch)
        self._addrs = ffi.new("struct sockaddr_ll[]", max_batch)
        self._bufs = ffi.new("uint8_t[]", max_batch * bufsize)
        self._lens = ffi.new("uint32_t[]", max_batch)
        self._pkttype = ffi.new("uint8_t[]", max_batch)
        self._ifindex = ffi.new("int32_t[]", max_batch)
        self._idx = ffi.new("uint32_t[]", max_batch)
        self._nrecv = ffi.new("unsigned *")
        b = self._b = ffi.new("struct mrc_batch *")
        b.max = max_batch
        b.bufsize = bufsize
        b.msgs, b.iov, b.addrs, b.bufs = self._msgs, self._iov, self._addrs, self._bufs
        b.lens, b.pkttype, b.ifindex, b.idx = self._lens, self._pkttype, self._ifindex, self._idx
        _C.mrc_batch_init(b)
        self._view = memoryview(ffi.buffer(self._bufs))  # type: ignore[arg-type]
        #: Number of frames the last ``recv`` took from the socket, kept or not.
        self.last_received = 0

    def close(self) -> None:
        """Nothing to release (the fd belongs to the caller); here for symmetry."""

    def __enter__(self) -> CBatchIO:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def slot(self, i: int) -> memoryview:
        """Writable view of send/receive buffer ``i`` (``bufsize`` bytes)."""
        return self._view[i * self.bufsize : (i + 1) * self.bufsize]

    def slot_ptr(self, i: int) -> Any:
        """cdata pointer to buffer ``i``, for :meth:`CTemplate.patch` (``cap=bufsize``)."""
        if not 0 <= i < self.max_batch:
            raise IndexError(i)
        return self._bufs + i * self.bufsize

    def send(self, frames: Sequence[bytes | bytearray | memoryview]) -> int:
        """Send up to ``max_batch`` frames in one sendmmsg; returns how many went.

        A full queue (EAGAIN/ENOBUFS) gives a partial count; another error raises OSError
        if nothing was sent, else shows on the next call.
        """
        frames = frames[: self.max_batch]
        n = len(frames)
        if n == 0:
            return 0
        # One join (a C loop) instead of one cdata conversion per frame; sendmmsg then
        # points its iovecs into the joined buffer.
        data = b"".join(frames)
        self._lens[0:n] = [len(f) for f in frames]
        r = int(_C.mrc_send_batch(self.fd, self._b, data, n))
        if r < 0:
            raise OSError(-r, os.strerror(-r))
        return r

    def send_slots(self, lens: Sequence[int]) -> int:
        """Send frames already written into slots 0..len(lens)-1 (zero copy)."""
        n = min(len(lens), self.max_batch)
        self._lens[0:n] = list(lens[:n])
        r = int(_C.mrc_send_slots(self.fd, self._b, n))
        if r < 0:
            raise OSError(-r, os.strerror(-r))
        return r

    def recv(self, max_frames: int | None = None, *, wait: bool = False,
             skip_outgoing: bool = True) -> list[Received]:
        """Receive what is queued (up to ``max_frames``) in one recvmmsg without blocking,
        or with ``wait`` block for the first frame only. Frames this host sent
        (PACKET_OUTGOING) are dropped unless ``skip_outgoing`` is False."""
        n = self.max_batch if max_frames is None else min(max_frames, self.max_batch)
        k = int(_C.mrc_recv_batch(self.fd, self._b, n, int(wait), int(skip_outgoing),
                                  self._nrecv))
        self.last_received = int(self._nrecv[0])
        if k < 0:
            raise OSError(-k, os.strerror(-k))
        if k == 0:
            return []
        bs = self.bufsize
        v, lens, pt, ifx = self._view, self._lens, self._pkttype, self._ifindex
        return [(v[i * bs : i * bs + lens[i]], pt[i], ifx[i])
                for i in _ffi.unpack(self._idx, k)]

    def recv_views(self, max_frames: int | None = None, *, wait: bool = False) -> list[memoryview]:
        """:meth:`recv` without the packet type and interface of each frame (outgoing
        frames skipped): only the views, for the per-frame receive path."""
        n = self.max_batch if max_frames is None else min(max_frames, self.max_batch)
        k = int(_C.mrc_recv_batch(self.fd, self._b, n, int(wait), 1, self._nrecv))
        self.last_received = int(self._nrecv[0])
        if k < 0:
            raise OSError(-k, os.strerror(-k))
        if k == 0:
            return []
        bs, v, lens = self.bufsize, self._view, self._lens
        return [v[i * bs : i * bs + lens[i]] for i in _ffi.unpack(self._idx, k)]


def _path_args(path: PathSpec | None, null: Any) -> tuple[Any, Any, Any]:
    """(outer destination, SRH segments, pseudo-header destination) of ``path`` for
    ``mrc_patch_data``: NULL where the template's own value stands."""
    if path is None:
        return null, null, null
    return (path.outer_da, null if path.srh_segs is None else path.srh_segs,
            null if path.pseudo_dst is None else path.pseudo_dst)


class CTemplate:
    """C twin of :class:`mrcnet.wire.template.DataTemplate`: one C call per packet.

    Made from a Python template (which found the offsets); ``patch`` takes the same
    arguments and writes the same bytes. ``out`` may also be a cdata pointer (such as
    :meth:`CBatchIO.slot_ptr`), then with ``cap``, to patch straight into a send slot.
    """

    def __init__(self, tmpl: DataTemplate) -> None:
        if _C is None:
            raise RuntimeError("mrcnet._fastpath is not available")
        ffi = _ffi
        hdr = tmpl.hdr
        if len(hdr) > _C.MRC_TMPL_HDR_MAX:
            raise ValueError(f"template headers of {len(hdr)} bytes exceed the C limit")
        t = self._t = ffi.new("struct mrc_tmpl *")
        ffi.memmove(t.hdr, hdr, len(hdr))
        t.hdr_len = len(hdr)
        t.off_outer_ip = tmpl.off_outer
        t.off_srh_segs = tmpl.off_srh_segs
        t.srh_segs_len = tmpl.srh_segs_len
        t.off_inner_ip = tmpl.off_inner
        t.off_udp = tmpl.off_udp
        t.off_bth = tmpl.off_bth
        t.off_reth = tmpl.off_reth
        t.imm_first = int(tmpl.IMM_BEFORE_TSETH)
        t.icrc_le = int(tmpl.ICRC_LITTLE_ENDIAN)
        t.pseudo_sum = _C.mrc_tmpl_addr_sum(tmpl.pseudo_src, tmpl.pseudo_dst)
        ffi.memmove(t.pseudo_src, tmpl.pseudo_src, 16)
        #: The Python template this one was made from (offsets, ``path()``).
        self.template = tmpl
        self._cdata_type = ffi.CData
        self._check = check_data_args
        self._null = ffi.NULL
        self._hdr_len = len(hdr)

    def path(self, *, usid: bytes | None = None,
             segments: Sequence[bytes] | None = None) -> PathSpec:
        """Same as :meth:`DataTemplate.path`."""
        return self.template.path(usid=usid, segments=segments)

    def max_frame_len(self, payload_len: int) -> int:
        """Same as :meth:`DataTemplate.max_frame_len`."""
        return self.template.max_frame_len(payload_len)

    def patch(
        self,
        out: bytearray | memoryview | Any,
        *,
        opcode: int,
        psn: int,
        ev: int,
        va: int,
        payload: bytes | bytearray | memoryview = b"",
        path: PathSpec | None = None,
        msn: int | None = None,
        imm: int | None = None,
        timestamp: int | None = None,
        rtx: bool = False,
        ack_req: bool = False,
        cap: int | None = None,
    ) -> int:
        """Write one data frame into ``out``; returns its length (see DataTemplate.patch)."""
        # The common packet (no immediate, no timestamp, fields in range) is checked inline;
        # anything else goes through the full check, which also words the errors.
        if (timestamp is None and msn is None and imm is None and opcode in _PLAIN_DATA_OPS
                and 0 <= psn <= PSN_MASK and 0 <= ev <= 0xFFFFFFFF and 0 <= va <= _U64_MAX):
            ext = 0
            flags = (F_ACKREQ if ack_req else 0) | (F_RTX if rtx else 0)
            timestamp = 0
        else:
            ext = _EXT_IMM if self._check(opcode, psn, ev, va, msn, imm, timestamp) else 0
            flags = (F_ACKREQ if ack_req else 0) | (F_RTX if rtx else 0)
            if timestamp is not None:
                ext |= _EXT_TSETH
                flags |= F_TS
            else:
                timestamp = 0
        if isinstance(out, self._cdata_type):
            if cap is None:
                raise ValueError("cap= is needed with a cdata output buffer")
            ptr = out
        else:
            ptr = _ffi.from_buffer(out)
            cap = len(out) if cap is None else min(cap, len(out))
        da, segs, pd = _path_args(path, self._null)
        if type(payload) is not bytes:
            payload = _ffi.from_buffer(payload)
        n = int(_C.mrc_patch_data(ptr, cap, self._t, opcode, flags, psn, ev, da, segs, pd, va,
                                  ext, msn or 0, imm or 0, timestamp, payload, len(payload)))
        if n == 0:
            raise ValueError(f"a frame with {len(payload)} payload bytes does not fit "
                             f"{cap} bytes or an IPv6 length field")
        return n

    def frame(self, opcode: int, psn: int, ev: int, va: int,
              payload: bytes | bytearray | memoryview, path: PathSpec | None,
              msn: int | None, imm: int | None, timestamp: int | None, rtx: bool,
              ack_req: bool) -> bytes:
        """One data frame as ``bytes``, every field positional: the core's per-packet
        call. Same bytes as :meth:`patch` (and :meth:`DataTemplate.frame`), written into a
        buffer of exactly the frame's size, so the only copy is ``bytes()``'s."""
        if (msn is None and imm is None and opcode in _PLAIN_DATA_OPS
                and 0 <= psn <= PSN_MASK and 0 <= ev <= 0xFFFFFFFF and 0 <= va <= _U64_MAX
                and (timestamp is None or 0 <= timestamp <= 0xFFFF)):
            ext = 0
        else:  # the full check, which also words the errors
            ext = _EXT_IMM if self._check(opcode, psn, ev, va, msn, imm, timestamp) else 0
        flags = (F_ACKREQ if ack_req else 0) | (F_RTX if rtx else 0)
        n = self._hdr_len + len(payload) + ICRC_LEN
        if ext:
            n += _IMM_EXT_LEN
        if timestamp is not None:
            ext |= _EXT_TSETH
            flags |= F_TS
            n += _TSETH_EXT_LEN
        else:
            timestamp = 0
        da, segs, pd = _path_args(path, self._null)
        if type(payload) is not bytes:
            payload = _ffi.from_buffer(payload)
        buf = bytearray(n)
        if not _C.mrc_patch_data(_ffi.from_buffer(buf), n, self._t, opcode, flags, psn, ev, da,
                                 segs, pd, va, ext, msn or 0, imm or 0, timestamp, payload,
                                 len(payload)):
            raise ValueError(f"a frame with {len(payload)} payload bytes does not fit an "
                             "IPv6 length field")
        return bytes(buf)

    def build(self, **fields: Any) -> bytes:
        """One frame as ``bytes`` (allocates; prefer ``patch`` into a reused buffer)."""
        buf = bytearray(self.max_frame_len(len(fields.get("payload", b""))))
        return bytes(buf[: self.patch(buf, **fields)])


# RunPatcher's buffers: each run's frames go into one of their own (views into it stay
# valid as long as anyone holds a frame), left uninitialised: every byte of a frame is
# written, and zeroing it first would cost as much as copying the frames out.
_RAW_ALLOC: Any = (_ffi.new_allocator(should_clear_after_alloc=False)
                   if _ffi is not None else None)


class RunPatcher:
    """A sender's data frames built a run at a time: one C call (``mrc_patch_run``) for
    consecutive packets of one message instead of one :meth:`CTemplate.frame` each.

    Paths (a template and its per-path fields) are registered once with :meth:`add`, which
    gives their slot; :meth:`frames` then takes per packet only its slot, EV, opcode, BTH
    flags and extension bits. Each frame is the same bytes :meth:`CTemplate.frame` makes.
    C only: :func:`run_patcher` gives None without it.
    """

    __slots__ = ("_keep", "_paths", "_size", "n")

    def __init__(self, size: int = 64) -> None:
        self._paths = _ffi.new("struct mrc_path[]", size)
        self._size = size
        self._keep: list[Any] = []  # owners of the pointers stored in the table
        #: Paths registered so far (the next slot).
        self.n = 0

    def add(self, tmpl: CTemplate, path: PathSpec | None) -> int:
        """Register a (template, path) pair; returns its slot."""
        if self.n == self._size:  # grow: a fresh table, the old entries copied over
            bigger = _ffi.new("struct mrc_path[]", 2 * self._size)
            _ffi.memmove(bigger, self._paths, _ffi.sizeof("struct mrc_path") * self._size)
            self._keep.append(self._paths)
            self._paths, self._size = bigger, 2 * self._size
        e = self._paths[self.n]
        e.tmpl = tmpl._t
        self._keep.append(tmpl)
        null = _ffi.NULL
        if path is None:
            e.outer_da = e.srh_segs = e.pseudo_dst = null
        else:
            for name in ("outer_da", "srh_segs", "pseudo_dst"):
                v = getattr(path, name)
                if v is None:
                    setattr(e, name, null)
                else:
                    buf = _ffi.from_buffer(v)
                    self._keep.append(buf)
                    setattr(e, name, _ffi.cast("const uint8_t *", buf))
        self.n += 1
        return self.n - 1

    def frames(self, slots: list[int], evs: list[int], ops: list[int], flags: list[int],
               exts: list[int], psn0: int, va0: int, payload: bytes | bytearray | memoryview,
               seg: int, msn: int, imm: int, timestamp: int) -> list[memoryview]:
        """Frames of ``len(slots)`` packets: packet i carries payload bytes ``[i * seg,
        (i + 1) * seg)`` (the last one the rest), PSN ``psn0 + i``, address ``va0 + i *
        seg``; ``flags`` are BTH flag bytes, ``exts`` ``MRC_EXT_*`` bits. Read-only
        views, one per frame, into a buffer of this run's own."""
        n = len(slots)
        buf, lens = self._build(slots, evs, ops, flags, exts, psn0, va0, payload, seg, msn,
                                imm, timestamp)
        view = memoryview(_ffi.buffer(buf)).toreadonly()  # (the buffer keeps buf alive)
        # The frames lie end to end: slices from running sums (C iterators: no Python
        # bytecode per frame).
        ends = list(accumulate(_ffi.unpack(lens, n)))
        return list(map(view.__getitem__, map(slice, [0, *ends[:-1]], ends)))

    def queue(self, sendq: SendQueue, ports: list[int], slots: list[int], evs: list[int],
              ops: list[int], flags: list[int], exts: list[int], psn0: int, va0: int,
              payload: bytes | bytearray | memoryview, seg: int, msn: int, imm: int,
              timestamp: int) -> None:
        """The frames :meth:`frames` makes, queued on ``sendq`` instead (frame i on port
        ``ports[i]``): no Python object per frame."""
        buf, lens = self._build(slots, evs, ops, flags, exts, psn0, va0, payload, seg, msn,
                                imm, timestamp)
        sendq.add_run(buf, lens, ports)

    def _build(self, slots: list[int], evs: list[int], ops: list[int], flags: list[int],
               exts: list[int], psn0: int, va0: int, payload: bytes | bytearray | memoryview,
               seg: int, msn: int, imm: int, timestamp: int) -> tuple[Any, Any]:
        """The run's frames back to back in a buffer of their own, and their lengths."""
        n = len(slots)
        cap = n * (_C.MRC_TMPL_HDR_MAX + _IMM_EXT_LEN + _TSETH_EXT_LEN + ICRC_LEN) + len(payload)
        buf = _RAW_ALLOC("uint8_t[]", cap)
        lens = _ffi.new("uint32_t[]", n)
        pl = payload if type(payload) is bytes else _ffi.from_buffer(payload)
        if not _C.mrc_patch_run(buf, cap, n, self._paths, slots, evs, ops, flags, exts, psn0,
                                va0, pl, len(payload), seg, msn, imm, timestamp, lens):
            raise ValueError(f"a run of {n} frames with {len(payload)} payload bytes does "
                             "not fit an IPv6 length field")
        return buf, lens


#: Frames a port's send queue holds (mrcnet.io.packet_port.MAX_BACKLOG's role).
SENDQ_CAP: Final = 4096


class SendQueue:
    """mrcd's data frames on their way to the ports, one queue per port, with no Python
    object per frame (``mrcnet/_csrc/sendq.c``): :meth:`RunPatcher.queue` adds a run's
    frames; :meth:`send` sends a port's queue through its :class:`CBatchIO` straight from
    the runs' buffers (this object keeps those until their frames are gone). C only:
    :func:`send_queue` gives None without it."""

    def __init__(self, nports: int, cap: int = SENDQ_CAP) -> None:
        self._q = _ffi.new("struct mrc_sendq[]", nports)
        self._iov = [_ffi.new("struct iovec[]", cap) for _ in range(nports)]
        for q, iov in zip(self._q, self._iov, strict=True):
            q.iov, q.cap = iov, cap
        self._n = nports
        self._keep: list[Any] = []  # buffers with frames still queued
        self._err = _ffi.new("int *")
        self._calls = _ffi.new("unsigned *")
        #: Frames queued and not yet sent or dropped, all ports.
        self.waiting = 0
        #: Frames queued since :meth:`take_added`.
        self.added = 0
        #: Frames not queued because their port's queue was full (the host counts them
        #: as ``tx_sendq_full`` and resets this).
        self.overflow = 0

    def add_run(self, buf: Any, lens: Any, ports: list[int]) -> None:
        """Queue the frames laid back to back in ``buf`` (``lens``), frame i on port
        ``ports[i]``."""
        n = len(ports)
        k = _C.mrc_sendq_add_run(self._q, self._n, buf, lens, ports, n)
        if k:
            self._keep.append(buf)
        self.waiting += k
        self.added += k
        self.overflow += n - k

    def take_added(self) -> int:
        """Frames queued since the last call."""
        k, self.added = self.added, 0
        return k

    def pending(self, port: int) -> int:
        """Frames waiting on ``port``."""
        q = self._q[port]
        return int(q.n - q.head)

    def send(self, port: int, io: CBatchIO) -> tuple[int, int, int]:
        """Send ``port``'s queue on ``io``'s socket until it is empty or the socket is
        full: (frames sent, sendmmsg calls, 0 / EAGAIN / the errno of the frame at the
        head of the queue, left there)."""
        n = _C.mrc_sendq_send(io.fd, io._b, _ffi.addressof(self._q, port), self._err,
                              self._calls)
        self._sent(n)
        return n, int(self._calls[0]), int(self._err[0])

    def drop(self, port: int, k: int) -> int:
        """Drop the ``k`` oldest frames of ``port``'s queue; returns how many went."""
        n = int(_C.mrc_sendq_drop(_ffi.addressof(self._q, port), k))
        self._sent(n)
        return n

    def _sent(self, n: int) -> None:
        self.waiting -= n
        if not self.waiting:
            self._keep.clear()


def send_queue(nports: int) -> SendQueue | None:
    """A :class:`SendQueue` for ``nports`` ports, or None without the C fast path."""
    return SendQueue(nports) if HAVE_C else None


class CSpray:
    """One QP's EV round robin in C (``mrcnet/_csrc/spray.c``): the plain rotation of
    ``EVManager.next_ev`` for a whole run of packets in one call.

    :meth:`build` lays out the rings (per usable plane, its paths, each a list of (EV,
    is SKIP)); :meth:`take` takes and returns the rotation counters, which the caller
    keeps."""

    __slots__ = ("_keep", "_nev", "_npath", "_nplane", "_out", "_s")

    def __init__(self) -> None:
        if not HAVE_C:
            raise RuntimeError("mrcnet._fastpath is not available")
        self._s = _ffi.new("struct mrc_spray *")
        self._keep: list[Any] = []
        self._out = _ffi.new("uint32_t[]", 1)
        self._nplane = self._npath = self._nev = 0

    def build(self, planes: list[list[list[tuple[int, bool]]]]) -> None:
        """Lay out the rings: ``planes[i]`` is usable plane i's list of paths (empty: the
        rotation stops at that plane), each path a non-empty list of (EV, is SKIP)."""
        paths = [path for ring in planes for path in ring]
        evs = [e for path in paths for e in path]
        np_, npath, nev = len(planes), len(paths), len(evs)
        a = self._keep = [
            _ffi.new("uint32_t[]", max(1, np_)), _ffi.new("uint32_t[]", max(1, np_)),
            _ffi.new("uint64_t[]", max(1, np_)), _ffi.new("uint32_t[]", max(1, npath)),
            _ffi.new("uint32_t[]", [len(p) for p in paths] or [1]),
            _ffi.new("uint64_t[]", max(1, npath)),
            _ffi.new("uint32_t[]", [ev for ev, _ in evs] or [0]),
            _ffi.new("uint8_t[]", [1 if skip else 0 for _, skip in evs] or [0]),
            _ffi.new("uint32_t[]", max(1, nev))]
        first = 0
        for i, ring in enumerate(planes):
            a[0][i], a[1][i] = first, len(ring)
            first += len(ring)
        first = 0
        for j, path in enumerate(paths):
            a[3][j] = first
            first += len(path)
        s = self._s
        s.nplanes = np_
        (s.plane_first, s.plane_len, s.plane_rr, s.path_first, s.path_len, s.path_inst,
         s.ev, s.skip, s.sent) = a
        self._nplane, self._npath, self._nev = np_, npath, nev

    def take(self, k: int, rr_plane: int, plane_rr: list[int], path_inst: list[int]
             ) -> tuple[list[int], int, list[int], list[int]]:
        """EVs for up to ``k`` packets from the given counters (per plane and per path,
        in :meth:`build` order); returns them and the counters after. What each EV was
        given adds up until :meth:`take_sent`."""
        s = self._s
        if k > len(self._out):
            self._out = _ffi.new("uint32_t[]", max(k, 2 * len(self._out)))
        s.rr_plane = rr_plane
        np_, npath = self._nplane, self._npath
        if np_:
            s.plane_rr[0:np_] = plane_rr
        if npath:
            s.path_inst[0:npath] = path_inst
        n = _C.mrc_spray_take(s, k, self._out)
        return (_ffi.unpack(self._out, n), int(s.rr_plane), _ffi.unpack(s.plane_rr, np_),
                _ffi.unpack(s.path_inst, npath))

    def take_sent(self) -> list[int]:
        """Packets given to each EV (in :meth:`build` order) since the last call."""
        nev = self._nev
        sent = _ffi.unpack(self._s.sent, nev)
        self._s.sent[0:nev] = [0] * nev
        return sent  # type: ignore[no-any-return]


class CTxTable:
    """The requester's table of packets in flight in C (``mrcnet/_csrc/tx.c``); the
    interface and results of :class:`mrcnet.core.txtable.PyTxTable`, which documents it."""

    __slots__ = ("_cap", "_keep", "_lost", "_o", "_t", "_wr", "trig_sent", "trig_tx")

    def __init__(self, capacity: int, seq: int, paths: int = 16) -> None:
        if not HAVE_C:
            raise RuntimeError("mrcnet._fastpath is not available")
        t = self._t = _ffi.new("struct mrc_txq *")
        pk = _ffi.new("struct mrc_txpkt[]", capacity)
        pslots = 1 << max(4, (2 * paths - 1).bit_length())
        ptab = _ffi.new("struct mrc_txpath[]", pslots)
        t.paths, t.pmask = ptab, pslots - 1
        self._wr = _ffi.new("int32_t[]", 2 * capacity)
        t.pk, t.mask = pk, capacity - 1
        t.wr_unacked, t.wr_mask = self._wr, 2 * capacity - 1
        o = self._o = _ffi.new("struct mrc_txsack *")
        keep = [pk, _ffi.new("uint32_t[]", capacity), _ffi.new("double[]", capacity),
                _ffi.new("uint64_t[]", capacity), _ffi.new("double[]", capacity),
                _ffi.new("uint8_t[]", capacity)]
        o.path_key, o.path_sent, o.special_seq, o.special_sent, o.special_pend = keep[1:]
        self._keep = [*keep, ptab]
        self._lost = _ffi.new("uint64_t[]", capacity)
        self._cap = capacity
        _C.mrc_tx_init(t, seq)
        self.trig_tx, self.trig_sent = 0, 0.0

    @property
    def ninfl(self) -> int:
        """Packets in flight."""
        return int(self._t.ninfl)

    @property
    def infl_bytes(self) -> int:
        """Payload bytes in flight."""
        return int(self._t.infl_bytes)

    @property
    def rack_sent(self) -> float:
        """Newest send time of any acknowledged packet (-1: none yet)."""
        return float(self._t.rack_sent)

    @property
    def rack_rtt(self) -> float:
        """RTT of that packet."""
        return float(self._t.rack_rtt)

    def send(self, seq0: int, evs: list[int], ops: list[int], wr: int, off0: int, seg: int,
             total: int, now: float, ts: int) -> None:
        """New packets ``seq0 ..`` (one per EV) of work request slot ``wr``, sent now."""
        _C.mrc_tx_send(self._t, seq0, len(evs), evs, bytes(ops), wr, off0, seg, total, now,
                       ts)

    def resend(self, seq: int, ev: int, now: float, ts: int) -> bool:
        """A retransmission of ``seq`` on ``ev`` (to the end of the flight order)."""
        return bool(_C.mrc_tx_resend(self._t, seq, ev, now, ts))

    def lose(self, seq: int) -> bool:
        """``seq`` is declared lost: out of flight, waiting for a retransmission."""
        return bool(_C.mrc_tx_lose(self._t, seq))

    def log(self, seq: int, on: bool) -> bool:
        """Mark (or unmark) ``seq`` as having a "declared lost" record."""
        return bool(_C.mrc_tx_log(self._t, seq, on))

    def get(self, seq: int) -> tuple[int, float, int, int, int, int, int, int, int] | None:
        """The entry of an unacknowledged ``seq``, else None."""
        if seq < 0:
            return None
        p = self._t.pk[seq & (self._cap - 1)]
        if not p.flags & 1 or p.seq != seq:
            return None
        return (p.ev, p.sent, p.ts, p.tx, p.len, p.off, p.opcode, p.wr, p.flags)

    def sack(self, now: float, snd_una: int, cack: int, next_seq: int, base: int, bm: int,
             first: bool, trig: int, ev: int, ts: int) -> int:
        """A SACK (see :meth:`mrcnet.core.txtable.PyTxTable.sack`)."""
        o = self._o
        n = _C.mrc_tx_sack(self._t, now, snd_una, cack, next_seq, base, bm, first, trig, ev,
                           ts, o)
        tx = self.trig_tx = o.trig_tx
        if tx:
            self.trig_sent = o.trig_sent
        return int(n)

    def paths(self) -> list[tuple[int, float]]:
        """(path key, newest send time) of what the last :meth:`sack` acknowledged."""
        o = self._o
        k = o.npaths
        return list(zip(_ffi.unpack(o.path_key, k), _ffi.unpack(o.path_sent, k),
                        strict=True))

    def specials(self) -> list[tuple[int, float, bool]]:
        """Packets with a "declared lost" record the last :meth:`sack` acknowledged."""
        o = self._o
        k = o.nspecial
        if not k:
            return []
        return [(o.special_seq[i], o.special_sent[i], bool(o.special_pend[i]))
                for i in range(k)]

    def rack(self, limit: float, wait: float, now: float) -> tuple[list[int], float]:
        """Packets in flight sent before ``limit`` and at least ``wait`` ago, and when the
        next would be (inf: none)."""
        at = _ffi.new("double *")
        n = _C.mrc_tx_rack(self._t, limit, wait, now, self._lost, self._cap, at)
        return _ffi.unpack(self._lost, n), at[0]

    def inflight(self) -> list[int]:
        """The packets in flight, oldest first."""
        n = _C.mrc_tx_inflight(self._t, self._lost, self._cap)
        return _ffi.unpack(self._lost, n)  # type: ignore[no-any-return]

    def oldest(self) -> int | None:
        """The packet in flight longest, if any."""
        t = self._t
        return int(t.pk[t.head].seq) if t.head >= 0 else None

    def wr_unacked(self, wr: int) -> int:
        """Packets of work request slot ``wr`` not yet acknowledged."""
        return int(self._wr[wr & self._t.wr_mask])

    def path_acked(self, key: int) -> float:
        """The newest send time of a packet acknowledged on path ``key`` (-1: none)."""
        return float(_C.mrc_tx_path_acked(self._t, key))


def run_patcher() -> RunPatcher | None:
    """A :class:`RunPatcher` when the C fast path is built, else None."""
    return RunPatcher() if HAVE_C else None


class FrameFinisher:
    """ICRC and UDP checksum for frames built in place from a per-path template (control
    frames: everything but these two fields is copied or packed by the caller).

    ``icrc_from``: where the ICRC starts (inner IPv6 header with ``has_ip``, else the UDP
    header); ``udp_off``: the UDP header (the datagram runs to the frame's end);
    ``pseudo_src``/``pseudo_dst``: the checksum's pseudo-header addresses. ``finish(buf)``
    writes both into ``buf`` (a bytearray holding the whole frame): one C call when built
    (``mrc_finish_frame``), else the reference functions; the same bytes either way.
    """

    __slots__ = ("_c", "_has_ip", "_icrc_from", "_pdst", "_psrc", "_sum", "_udp_off")

    def __init__(self, icrc_from: int, has_ip: bool, udp_off: int, pseudo_src: bytes,
                 pseudo_dst: bytes, use_c: bool | None = None) -> None:
        self._c = HAVE_C if use_c is None else use_c
        if self._c and _C is None:
            raise RuntimeError("mrcnet._fastpath is not available")
        self._icrc_from, self._has_ip, self._udp_off = icrc_from, has_ip, udp_off
        self._psrc, self._pdst = bytes(pseudo_src), bytes(pseudo_dst)
        self._sum = int(_C.mrc_tmpl_addr_sum(self._psrc, self._pdst)) if self._c else 0

    def finish(self, buf: bytearray) -> None:
        """Write the ICRC (last 4 bytes) and the UDP checksum of the frame in ``buf``."""
        n = len(buf)
        if self._c:
            _C.mrc_finish_frame(_ffi.from_buffer(buf), n, self._icrc_from, self._has_ip,
                                self._udp_off, self._sum)
            return
        u = self._udp_off
        buf[u + 6 : u + 8] = b"\0\0"
        buf[n - ICRC_LEN :] = py_icrc(buf[self._icrc_from : n - ICRC_LEN], self._has_ip)
        csum = py_udp6_checksum(self._psrc, self._pdst, buf[u:])
        buf[u + 6 : u + 8] = csum.to_bytes(2, "big")


# ---- frame parser --------------------------------------------------------------------------

#: MalformedReason of each ``mrc_parse`` result code (index = code; 0 = accepted).
PARSE_REASONS: Final[tuple[MalformedReason | None, ...]] = (
    None,
    MalformedReason.TRUNCATED,
    MalformedReason.BAD_ETHERTYPE,
    MalformedReason.BAD_IP_VERSION,
    MalformedReason.BAD_LENGTH,
    MalformedReason.BAD_NEXT_HEADER,
    MalformedReason.BAD_SRH,
    MalformedReason.BAD_UDP_PORT,
    MalformedReason.BAD_CHECKSUM,
    MalformedReason.BAD_ICRC,
    MalformedReason.BAD_OPCODE,
    MalformedReason.BAD_VERSION,
    MalformedReason.BAD_FIELD,
)
_VERIFY_ALL: Final = 3  # MRC_VERIFY_ICRC | MRC_VERIFY_CHECKSUM
_SRC_OFF_OUTER: Final = ETH_HEADER_LEN + 8  # outer IPv6 source address
_OUTER_END: Final = ETH_HEADER_LEN + IPV6_HEADER_LEN


class PyParsed:
    """One parsed frame as a flat record: the fields of ``struct mrc_parsed``
    (mrcnet/_csrc/fastpath.h), same names, same meaning, same values.

    The core reads these (and only these) on receive, whichever parser made them: this
    class for the pure-Python path, the C struct itself for the C path. Headers a frame
    does not have leave their fields 0; addresses are offsets into the frame
    (``src_off``: the sender's address, inner source else outer source).
    """

    # In the C struct's order (a test compares the two lists), not sorted.
    __slots__ = (  # noqa: RUF023
        "reason", "why",
        "end", "src_off", "srh_off", "inner_off", "udp_off", "payload_off", "payload_len",
        "outer_dscp", "outer_ecn", "outer_flow_label", "outer_next_header",
        "outer_payload_length", "outer_hop_limit",
        "srh_next_header", "srh_segments_left", "srh_last_entry", "srh_flags", "srh_tag",
        "srh_tlv_off", "srh_tlv_len",
        "inner_dscp", "inner_ecn", "inner_flow_label", "inner_next_header",
        "inner_payload_length", "inner_hop_limit",
        "sport", "dport", "udp_length", "udp_checksum",
        "opcode", "dest_qp", "psn", "ack_req", "rtx", "ts", "r", "se", "migreq", "pad", "tver",
        "pkey",
        "ev", "ce", "trimmed", "is_data",
        "va", "rkey", "length", "has_imm", "msn", "imm", "has_tseth", "timestamp",
        "has_seth", "sack_ev", "cack_psn", "ack_offset", "sack_offset", "max_psn_range",
        "mode", "ece", "bitmap", "imm_credit", "ts_echo", "ooo_count", "window_penalty",
        "rcvd_bytes",
        "has_neth", "nack_reason", "nack_ev", "nack_psn", "nack_cack_psn", "nack_ts_echo",
        "has_probe", "probe_id", "probe_ev", "probe_psn", "probe_timestamp",
        "has_endpoint", "ep_op", "ep_status", "ep_request_id", "ep_ev", "ep_timestamp",
        "ep_port_mask",
    )

    reason: int
    why: str
    end: int
    src_off: int
    srh_off: int
    inner_off: int
    udp_off: int
    payload_off: int
    payload_len: int
    outer_dscp: int
    outer_ecn: int
    outer_flow_label: int
    outer_next_header: int
    outer_payload_length: int
    outer_hop_limit: int
    srh_next_header: int
    srh_segments_left: int
    srh_last_entry: int
    srh_flags: int
    srh_tag: int
    srh_tlv_off: int
    srh_tlv_len: int
    inner_dscp: int
    inner_ecn: int
    inner_flow_label: int
    inner_next_header: int
    inner_payload_length: int
    inner_hop_limit: int
    sport: int
    dport: int
    udp_length: int
    udp_checksum: int
    opcode: int
    dest_qp: int
    psn: int
    ack_req: int
    rtx: int
    ts: int
    r: int
    se: int
    migreq: int
    pad: int
    tver: int
    pkey: int
    ev: int
    ce: int
    trimmed: int
    is_data: int
    va: int
    rkey: int
    length: int
    has_imm: int
    msn: int
    imm: int
    has_tseth: int
    timestamp: int
    has_seth: int
    sack_ev: int
    cack_psn: int
    ack_offset: int
    sack_offset: int
    max_psn_range: int
    mode: int
    ece: int
    bitmap: int
    imm_credit: int
    ts_echo: int
    ooo_count: int
    window_penalty: int
    rcvd_bytes: int
    has_neth: int
    nack_reason: int
    nack_ev: int
    nack_psn: int
    nack_cack_psn: int
    nack_ts_echo: int
    has_probe: int
    probe_id: int
    probe_ev: int
    probe_psn: int
    probe_timestamp: int
    has_endpoint: int
    ep_op: int
    ep_status: int
    ep_request_id: int
    ep_ev: int
    ep_timestamp: int
    ep_port_mask: int

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)
        self.why = ""

    def fields(self) -> dict[str, int]:
        """Every field but ``why`` (for comparing records)."""
        return {n: int(getattr(self, n)) for n in self.__slots__ if n != "why"}


def _byte_view(buf: bytes | bytearray | memoryview) -> memoryview:
    mv = memoryview(buf)
    return mv.cast("B") if mv.ndim != 1 or mv.itemsize != 1 else mv


def py_parse(buf: bytes | bytearray | memoryview, verify: bool = True) -> PyParsed:
    """The pure-Python parser of the receive path: :func:`mrcnet.wire.parse_frame`, its
    Frame flattened into a :class:`PyParsed`. Raises ``MalformedFrame`` like it."""
    mv = _byte_view(buf)
    f = parse_frame(mv, verify_checksum=verify, verify_icrc=verify,
                    checksum_ok=udp6_checksum_ok, icrc_fn=icrc)
    p = PyParsed()
    o, bth = f.outer, f.bth
    p.end = min(_OUTER_END + o.payload_length, len(mv))
    (p.outer_dscp, p.outer_ecn, p.outer_flow_label, p.outer_next_header,
     p.outer_payload_length, p.outer_hop_limit) = (
        o.dscp, o.ecn, o.flow_label, o.next_header, o.payload_length, o.hop_limit)
    off = _OUTER_END
    if f.srh is not None:
        s = f.srh
        p.srh_off = off
        (p.srh_next_header, p.srh_segments_left, p.srh_last_entry, p.srh_flags,
         p.srh_tag) = (s.next_header, s.segments_left, s.last_entry, s.flags, s.tag)
        p.srh_tlv_off = off + SRH_FIXED_LEN + 16 * len(s.segments)
        p.srh_tlv_len = len(s.tlvs)
        off += s.length
    p.src_off = _SRC_OFF_OUTER
    if f.inner is not None:
        i = f.inner
        p.inner_off = off
        p.src_off = off + 8
        (p.inner_dscp, p.inner_ecn, p.inner_flow_label, p.inner_next_header,
         p.inner_payload_length, p.inner_hop_limit) = (
            i.dscp, i.ecn, i.flow_label, i.next_header, i.payload_length, i.hop_limit)
        off += IPV6_HEADER_LEN
    p.udp_off = off
    u = f.udp
    p.sport, p.dport, p.udp_length, p.udp_checksum = u.sport, u.dport, u.length, u.checksum
    (p.opcode, p.dest_qp, p.psn, p.ack_req, p.rtx, p.ts, p.r, p.se, p.migreq, p.pad, p.tver,
     p.pkey) = (bth.opcode, bth.dest_qp, bth.psn, int(bth.ack_req), int(bth.rtx),
                int(bth.ts), int(bth.r), int(bth.se), int(bth.migreq), bth.pad, bth.tver,
                bth.pkey)
    p.ev, p.ce, p.trimmed, p.is_data = f.ev, int(f.ce), int(f.trimmed), int(f.is_data)
    off += UDP_HEADER_LEN + BTH_LEN
    if f.reth is not None:
        p.va, p.rkey, p.length = f.reth.va, f.reth.rkey, f.reth.length
        off += RETH.LEN
        if f.meth is not None and f.immdt is not None:
            p.has_imm, p.msn, p.imm = 1, f.meth.msn, f.immdt.imm
            off += METH.LEN + ImmDt.LEN
        if f.tseth is not None:
            p.has_tseth, p.timestamp = 1, f.tseth.timestamp
            off += TSETH.LEN
        p.payload_off, p.payload_len = off, len(f.payload)
    if f.seth is not None and f.cc is not None:
        s2, c = f.seth, f.cc
        p.has_seth = 1
        (p.sack_ev, p.cack_psn, p.ack_offset, p.sack_offset, p.max_psn_range, p.mode, p.ece,
         p.bitmap, p.imm_credit) = (s2.ev, s2.cack_psn, s2.ack_offset, s2.sack_offset,
                                    s2.max_psn_range, s2.mode, int(s2.ece), s2.bitmap,
                                    s2.imm_credit)
        p.ts_echo, p.ooo_count, p.window_penalty, p.rcvd_bytes = (
            c.ts_echo, c.ooo_count, c.window_penalty, c.rcvd_bytes)
    if f.neth is not None:
        n = f.neth
        p.has_neth = 1
        p.nack_reason, p.nack_ev, p.nack_psn, p.nack_cack_psn, p.nack_ts_echo = (
            n.reason, n.ev, n.psn, n.cack_psn, n.ts_echo)
    if f.probe is not None:
        pr = f.probe
        p.has_probe = 1
        p.probe_id, p.probe_ev, p.probe_psn, p.probe_timestamp = (
            pr.probe_id, pr.ev, pr.psn, pr.timestamp)
    if f.endpoint is not None:
        e = f.endpoint
        p.has_endpoint = 1
        (p.ep_op, p.ep_status, p.ep_request_id, p.ep_ev, p.ep_timestamp,
         p.ep_port_mask) = (e.op, e.status, e.request_id, e.ev, e.timestamp, e.port_mask)
    return p


def c_parse(buf: bytes | bytearray | memoryview, verify: bool = True,
            out: Any = None) -> Any:
    """The C parser (``mrc_parse``): a ``struct mrc_parsed`` cdata with the fields of
    :class:`PyParsed`. Fills ``out`` if given (a reused ``struct mrc_parsed *``), else a
    new one. Raises ``MalformedFrame`` with the reason :func:`py_parse` would give."""
    if _C is None:
        raise RuntimeError("mrcnet._fastpath is not available")
    if out is None:
        out = _ffi.new("struct mrc_parsed *")
    mv = _byte_view(buf) if type(buf) is memoryview else buf
    rc = _C.mrc_parse(_ffi.from_buffer(mv), len(mv), out, _VERIFY_ALL if verify else 0)
    if rc:
        raise MalformedFrame(PARSE_REASONS[rc], _ffi.string(out.why).decode())
    return out


class FrameParser:
    """The receive path's parser, one per receiving loop (a Host has one).

    ``parse(frame, verify)`` returns a :class:`PyParsed`-shaped record or raises
    ``MalformedFrame``. With the C fast path the record is this parser's own C struct,
    overwritten by the next ``parse``: read what you need before parsing again.
    ``use_c=False`` forces the Python reference (for benchmarks and tests).
    """

    def __init__(self, use_c: bool | None = None) -> None:
        self.use_c = HAVE_C if use_c is None else use_c
        if self.use_c and _C is None:
            raise RuntimeError("mrcnet._fastpath is not available")
        self._out: Any = _ffi.new("struct mrc_parsed *") if self.use_c else None
        if self.use_c:
            self.parse = self._parse_c  # type: ignore[method-assign]

    def parse(self, buf: bytes | bytearray | memoryview, verify: bool = True) -> PyParsed:
        """Parse one frame (see the class docstring)."""
        return py_parse(buf, verify)

    def _parse_c(self, buf: bytes | bytearray | memoryview, verify: bool = True) -> PyParsed:
        out = self._out
        # bytes go to a const uint8_t * as they are; other buffers need a cdata view.
        if type(buf) is bytes:
            rc = _C.mrc_parse(buf, len(buf), out, _VERIFY_ALL if verify else 0)
        else:
            if type(buf) is memoryview and (buf.itemsize != 1 or buf.ndim != 1):
                buf = buf.cast("B")  # (_byte_view's work, inlined: runs per frame)
            rc = _C.mrc_parse(_ffi.from_buffer(buf), len(buf), out,
                              _VERIFY_ALL if verify else 0)
        if rc:
            raise MalformedFrame(PARSE_REASONS[rc], _ffi.string(out.why).decode())
        return out  # type: ignore[no-any-return]  # the C struct has PyParsed's fields


class SlotFrames(Sequence[memoryview]):
    """The frames a :class:`CBatchIO`'s last receive kept (:func:`recv_slots`), as a
    sequence whose views are made only when asked for (the receive lane reads the frames
    in C and asks for the few it hands back); valid until the batch's next receive."""

    __slots__ = ("_io", "_n")

    def __init__(self, io: CBatchIO, n: int) -> None:
        self._io, self._n = io, n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, j: int) -> memoryview: ...
    @overload
    def __getitem__(self, j: slice) -> list[memoryview]: ...

    def __getitem__(self, j: int | slice) -> memoryview | list[memoryview]:
        if isinstance(j, slice):
            return [self[i] for i in range(*j.indices(self._n))]
        if j < 0:
            j += self._n
        if not 0 <= j < self._n:
            raise IndexError(j)
        io = self._io
        s, bs = io._idx[j], io.bufsize
        return io._view[s * bs : s * bs + io._lens[s]]


def recv_slots(io: CBatchIO, max_frames: int | None = None) -> int:
    """``io.recv_views()`` without the views: receive what is queued (outgoing frames
    skipped) and return how many frames were kept (:class:`SlotFrames` shows them)."""
    n = io.max_batch if max_frames is None else min(max_frames, io.max_batch)
    k: int = _C.mrc_recv_batch(io.fd, io._b, n, 0, 1, io._nrecv)
    io.last_received = io._nrecv[0]
    if k < 0:
        raise OSError(-k, os.strerror(-k))
    return k


def _sack_buffer(size: int) -> tuple[Any, Any]:
    """A char array (unpacks to bytes) and the same memory as ``uint8_t *``."""
    out = _ffi.new("char[]", size)
    return out, _ffi.cast("uint8_t *", out)


_RX_MRS_MAX: Final = 256  # mrcnet.core.rxlane.RX_MRS_MAX
_RX_PEERS_MAX: Final = 8  # MRC_RX_PEERS_MAX
_RX_PATHS_MAX: Final = 64  # SACK paths a lane holds (mrcnet.core.rxlane.RX_PATHS_MAX)
_RX_ACK_MAX: Final = 64  # SACK records a lane holds (mrcnet.core.rxlane.RX_ACK_MAX)


class CRxLane:
    """The responder's receive lane in C (``mrcnet/_csrc/rx.c``): the interface and
    results of :class:`mrcnet.core.rxlane.PyRxLane`, which documents it. ``run`` is the
    C function itself (bound to this lane's context: no Python frame per call)."""

    def __init__(self) -> None:
        if not HAVE_C:
            raise RuntimeError("mrcnet._fastpath is not available")
        c = self._c = _ffi.new("struct mrc_rx_ctx *")
        self._mrs = _ffi.new("struct mrc_rx_mr[]", _RX_MRS_MAX)
        c.mrs, c.nmrs, c.qpn = self._mrs, 0, 0xFFFFFFFF
        self._mr_bufs: dict[int, Any] = {}  # rkey -> the from_buffer cdata c.mrs points into
        self._keep: list[Any] = []  # the loaded frames' cdata views (alive while in use)
        self._grow(64)
        # SACKs the lane builds: output (64 frames of up to MRC_RX_SACK_MAX bytes), the
        # per-path templates it may use (and the cdata they live in, kept alive here)
        self._sout = _ffi.new("char[]", 64 * 512)
        self._sport = _ffi.new("uint32_t[]", 64)
        self._slen = _ffi.new("uint32_t[]", 64)
        self._paths = _ffi.new("struct mrc_rx_path[]", _RX_PATHS_MAX)
        self._path_keep: list[Any] = []
        c.sout, c.sout_cap = _ffi.cast("uint8_t *", self._sout), 64 * 512
        c.sport, c.slen, c.sout_max = self._sport, self._slen, 64
        c.paths, c.npaths = self._paths, 0
        self.qp: Any = None  # the state record c.qp points to (kept alive here)
        # The QP whose SACKs the lane takes: c.ack points to _ack while it does
        a = self._ack = _ffi.new("struct mrc_rx_ack *")
        self._ack_rec = _ffi.new("int64_t[]", _RX_ACK_MAX * _C.MRC_RX_ACK_INTS)
        self._ack_sent = _ffi.new("double[]", _RX_ACK_MAX)
        a.rec, a.rec_sent, a.max = self._ack_rec, self._ack_sent, _RX_ACK_MAX
        self._ack_txt: Any = None  # the table a.txq points into (kept alive here)
        self.parsed: Any = _ffi.addressof(c, "parsed")
        self.run: Callable[[int, int, float, int], int] = functools.partial(_C.mrc_rx_run, c)

    def _grow(self, cap: int) -> None:
        self._ptr = _ffi.new("const uint8_t *[]", cap)
        self._len = _ffi.new("uint32_t[]", cap)
        c = self._c
        c.ptr, c.len, c.cap = self._ptr, self._len, cap
        self._cap = cap

    # --- the responder state record (struct mrc_rx_qp) --------------------------------

    @staticmethod
    def new_state(cap: int) -> Any:
        """A fresh responder state with an empty ring of ``cap`` slots (a power of 2),
        freed with the returned cdata."""
        q = _C.mrc_rx_new(cap)
        if q == _ffi.NULL:
            raise MemoryError(f"receive ring of {cap} slots")
        return _ffi.gc(q, _C.mrc_rx_free)

    @staticmethod
    def grow(rx: Any, cap: int) -> None:
        """Move ``rx``'s ring to ``cap`` slots (a power of 2 that holds every entry)."""
        if _C.mrc_rx_grow(rx, cap):
            raise MemoryError(f"receive ring of {cap} slots")

    @staticmethod
    def bitmap(rx: Any, base: int) -> int:
        """Bit i set when ``base + i`` is in ``rx``'s out-of-order set (a SACK bitmap)."""
        return int(_C.mrc_rx_bitmap(rx, base))

    # --- SACKs ------------------------------------------------------------------------

    @staticmethod
    def sack_template(st: Any) -> Any:
        """What :meth:`sack` builds SACKs from: a ``struct mrc_rx_sackt`` laid out like
        ``st`` (a ``mrcnet.core.ctrl.SackTemplate``), with its length."""
        frame, udp_off, seth_off, cc_off, icrc_from, has_ip, psrc, pdst = st.layout()
        t = _ffi.new("struct mrc_rx_sackt *")
        if len(frame) > len(t.frame):
            raise ValueError(f"a SACK of {len(frame)} bytes")
        _ffi.memmove(t.frame, frame, len(frame))
        t.len, t.udp_off, t.seth_off, t.cc_off = len(frame), udp_off, seth_off, cc_off
        t.icrc_from, t.has_ip = icrc_from, int(has_ip)
        t.pseudo_sum = _C.mrc_tmpl_addr_sum(psrc, pdst)
        return t, len(frame)

    _sack_out: Any = None  # output buffer of sack() (one thread: one buffer)

    @staticmethod
    def sack(rx: Any, tl: Any, ev: int, penalty: int, credit: int,
             bases: list[int] | None) -> list[bytes]:
        """The SACK frames ``QueuePair.send_sack`` sends now (``mrc_rx_sack``; see
        :meth:`mrcnet.core.rxlane.PyRxLane.sack`; ``tl``: :meth:`sack_template`'s)."""
        t, ln = tl
        buf = CRxLane._sack_out
        if buf is None:
            buf = CRxLane._sack_out = _sack_buffer(66 * 512)  # MRC_RX_SACK_MAX each
        out, ptr = buf
        cb, nb = _ffi.NULL, 0
        if bases is not None:
            cb, nb = _ffi.new("int64_t[]", bases), len(bases)
            if nb * ln > len(out):
                out, ptr = CRxLane._sack_out = _sack_buffer(nb * ln)
        n = _C.mrc_rx_sack(rx, t, ptr, len(out), ev, penalty, credit, cb, nb)
        if n == 1:
            return [_ffi.unpack(out, ln)]  # (a char array unpacks to bytes)
        data = _ffi.unpack(out, n * ln)
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
            keep = self._keep = [_ffi.from_buffer(f) for f in frames]
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
            _ffi.release(b)
        self._keep = []

    def load_slots(self, io: CBatchIO, k: int) -> None:
        """Point the lane at the ``k`` frames ``io``'s last receive kept, where they are
        (no copy, no per-frame Python): they are the frames ``io.recv_views`` returned."""
        if k > self._cap:
            self._grow(max(k, io.max_batch))
        _C.mrc_rx_slots(self._c, io._b, k)

    def set_qp(self, qpn: int, rx: Any, peers: frozenset[bytes], win: int, ack_every: int,
               ack_delay: float, reorder_floor: float, sack_on_reorder: bool) -> bool:
        """Serve QP ``qpn`` (a ready one) with state ``rx`` from now on; False (and no
        QP) if the lane cannot check its peers."""
        c = self._c
        if len(peers) > _RX_PEERS_MAX:
            self.clear_qp()
            return False
        for i, ip in enumerate(peers):
            _ffi.memmove(c.peers + 16 * i, ip, 16)
        c.npeers, c.qpn, c.qp, self.qp = len(peers), qpn, rx, rx
        c.win, c.ack_every, c.ack_delay = win, ack_every, ack_delay
        c.reorder_floor, c.sack_on_reorder = reorder_floor, int(sack_on_reorder)
        c.npaths, c.sack_ok, self._path_keep = 0, 0, []
        return True

    def set_ack(self, qpn: int, txt: Any, peers: frozenset[bytes], txcap: int) -> bool:
        """See :meth:`mrcnet.core.rxlane.PyRxLane.set_ack` (the table must be a
        :class:`CTxTable`)."""
        self._c.ack = _ffi.NULL
        a = self._ack
        if len(peers) > _RX_PEERS_MAX or not isinstance(txt, CTxTable):
            a.qpn, self._ack_txt = 0xFFFFFFFF, None
            return False
        for i, ip in enumerate(peers):
            _ffi.memmove(a.peers + 16 * i, ip, 16)
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
        self._c.ack = _ffi.NULL

    def take_acks(self) -> tuple[list[int], list[float]]:
        """See :meth:`mrcnet.core.rxlane.PyRxLane.take_acks`."""
        a = self._ack
        n = a.n
        a.n = 0
        return (_ffi.unpack(self._ack_rec, n * _C.MRC_RX_ACK_INTS),
                _ffi.unpack(self._ack_sent, n))

    def clear_qp(self) -> None:
        """Serve no QP: every data frame stops."""
        c = self._c
        c.qp, c.qpn, c.npeers, self.qp = _ffi.NULL, 0xFFFFFFFF, 0, None
        c.npaths, c.sack_ok, self._path_keep = 0, 0, []

    def sack_setup(self, plane_ok: int, credit: int,
                   tmpls: dict[int, tuple[Any, int]] | None) -> None:
        """Let the lane build the QP's due SACKs itself when the triggering packet's
        plane is in ``plane_ok`` (bits: usable planes with paths) and the QP has a
        template for its path; ``credit``: the receive credit to advertise; ``tmpls``:
        the QP's templates (path key -> ((template, length), port)) if they changed."""
        c = self._c
        c.plane_ok, c.credit, c.sack_ok = plane_ok, credit, 1
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
        data = _ffi.unpack(self._sout, c.sout_len)
        ports = _ffi.unpack(self._sport, n)
        if n == 1:
            c.nsout = c.sout_len = 0
            return [(ports[0], data)]
        lens = _ffi.unpack(self._slen, n)
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
        self._c.verify = _VERIFY_ALL if v else 0

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
            buf = _ffi.from_buffer("uint8_t[]", view.obj, require_writable=True)
            vp = _ffi.from_buffer("uint8_t[]", view, require_writable=True)
        except (TypeError, ValueError, BufferError):
            return  # not a plain writable buffer: its frames take the full path
        off = int(_ffi.cast("uintptr_t", vp)) - int(_ffi.cast("uintptr_t", buf))
        _ffi.release(vp)
        if off < 0 or off + mr.length > len(buf) or mr.length > view.nbytes:
            _ffi.release(buf)
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
        _ffi.release(buf)

    def clear_mrs(self) -> None:
        """Forget every region."""
        for rkey in list(self._mr_bufs):
            self.drop_mr(rkey)

    def malformed(self) -> MalformedReason | None:
        """Why the frame the lane stopped at (``why`` WHY_PARSE) did not parse."""
        return PARSE_REASONS[int(self._c.parsed.reason)]


def parsed_to_frame(buf: bytes | bytearray | memoryview, p: PyParsed | Any) -> Frame:
    """The :class:`mrcnet.wire.Frame` a parsed record describes: header fields from the
    record, addresses, MACs and SRH segments from ``buf`` at the record's offsets. Equal
    to ``parse_frame(buf)`` for the same frame (the differential tests check it)."""
    mv = _byte_view(buf)

    def b(off: int, n: int = 16) -> bytes:
        return bytes(mv[off : off + n])

    eth = Ethernet(b(0, 6), b(6, 6), ETH_P_IPV6)
    outer = IPv6(b(_SRC_OFF_OUTER), b(_SRC_OFF_OUTER + 16), p.outer_next_header,
                 p.outer_payload_length, p.outer_hop_limit, p.outer_dscp, p.outer_ecn,
                 p.outer_flow_label)
    srh = None
    if p.srh_off:
        segs = tuple(b(p.srh_off + SRH_FIXED_LEN + 16 * i) for i in range(p.srh_last_entry + 1))
        srh = SRH(p.srh_next_header, segs, p.srh_segments_left, p.srh_flags, p.srh_tag,
                  b(p.srh_tlv_off, p.srh_tlv_len))
    inner = None
    if p.inner_off:
        inner = IPv6(b(p.inner_off + 8), b(p.inner_off + 24), p.inner_next_header,
                     p.inner_payload_length, p.inner_hop_limit, p.inner_dscp, p.inner_ecn,
                     p.inner_flow_label)
    udp = UDP(p.sport, p.dport, p.udp_length, p.udp_checksum)
    bth = BTH(p.opcode, p.dest_qp, p.psn, ack_req=bool(p.ack_req), rtx=bool(p.rtx),
              ts=bool(p.ts), r=bool(p.r), se=bool(p.se), migreq=bool(p.migreq), pad=p.pad,
              tver=p.tver, pkey=p.pkey)
    end = p.end
    f = Frame(eth, outer, srh, inner, udp, bth,
              mv[:end][p.payload_off : p.payload_off + p.payload_len] if p.is_data
              else mv[0:0], trimmed=bool(p.trimmed))
    if p.is_data:
        f.reth = RETH(p.va, p.rkey, p.length)
        if p.has_imm:
            f.meth, f.immdt = METH(p.msn), ImmDt(p.imm)
        if p.has_tseth:
            f.tseth = TSETH(p.timestamp)
    if p.has_seth:
        f.seth = SETH(p.sack_ev, p.cack_psn, p.ack_offset, p.sack_offset, p.max_psn_range,
                      p.mode, bool(p.ece), p.bitmap, p.imm_credit)
        f.cc = CCState(p.ts_echo, p.ooo_count, p.window_penalty, p.rcvd_bytes)
    if p.has_neth:
        f.neth = NETH(p.nack_reason, p.nack_ev, p.nack_psn, p.nack_cack_psn, p.nack_ts_echo)
    if p.has_probe:
        f.probe = ProbeHeader(p.probe_id, p.probe_ev, p.probe_psn, p.probe_timestamp)
    if p.has_endpoint:
        f.endpoint = EndpointHeader(p.ep_op, p.ep_request_id, p.ep_ev, p.ep_timestamp,
                                    p.ep_port_mask, p.ep_status)
    return f


# ---- public binding ----------------------------------------------------------------------

#: A data-frame template of either implementation (same ``patch``/``path`` interface).
Template: TypeAlias = "CTemplate | DataTemplate"

udp6_checksum: Callable[..., int]
udp6_checksum_ok: Callable[..., bool]
icrc: Callable[..., bytes]
BatchIO: type[CBatchIO] | type[PyBatchIO]

if HAVE_C:
    udp6_checksum = c_udp6_checksum
    udp6_checksum_ok = c_udp6_checksum_ok
    icrc = c_icrc
    BatchIO = CBatchIO
    _EXT_IMM, _EXT_TSETH = int(_C.MRC_EXT_IMM), int(_C.MRC_EXT_TSETH)
else:
    udp6_checksum = py_udp6_checksum
    udp6_checksum_ok = py_udp6_checksum_ok
    icrc = py_icrc
    BatchIO = PyBatchIO

_batches: dict[tuple[int, int, int], CBatchIO | PyBatchIO] = {}


def _batch_for(fd: int, max_frames: int, bufsize: int) -> CBatchIO | PyBatchIO:
    key = (fd, max_frames, bufsize)
    b = _batches.get(key)
    if b is None:
        b = _batches[key] = BatchIO(fd, max_frames, bufsize)
    return b


def send_batch(fd: int, frames: Sequence[bytes | bytearray | memoryview]) -> int:
    """Send ``frames`` on the bound packet socket ``fd`` in batches; returns how many
    went (fewer when the socket's queue is full). Long-lived callers should keep a
    :data:`BatchIO` instead (no per-call lookup)."""
    b = _batch_for(fd, 64, 1)
    sent = 0
    while sent < len(frames):
        chunk = frames[sent : sent + 64]
        r = b.send(chunk)
        sent += r
        if r < len(chunk):
            break
    return sent


def recv_batch(fd: int, max_frames: int = 64, bufsize: int = 9216, *,
               skip_outgoing: bool = True) -> list[tuple[bytes, int, int]]:
    """Receive up to ``max_frames`` queued frames from ``fd`` without blocking, as
    (bytes, sll_pkttype, sll_ifindex). Copies each frame (the batch buffer is shared);
    use :data:`BatchIO` for zero-copy views."""
    b = _batch_for(fd, max_frames, bufsize)
    return [(bytes(v), pt, ifx) for v, pt, ifx in b.recv(skip_outgoing=skip_outgoing)]


def make_template(frame_or_template: bytes | bytearray | memoryview | DataTemplate) -> Template:
    """The data-frame template mrcd should use: C when built, else the Python reference.

    Takes a data frame made by :func:`mrcnet.wire.build_data` or a ``DataTemplate``.
    """
    t = (frame_or_template if isinstance(frame_or_template, DataTemplate)
         else DataTemplate(frame_or_template))
    return CTemplate(t) if HAVE_C else t


def patch_data_frame(tmpl: Template, out: bytearray | memoryview | Any, **fields: Any) -> int:
    """Write one data frame from ``tmpl`` into ``out`` (see ``DataTemplate.patch``)."""
    return tmpl.patch(out, **fields)
