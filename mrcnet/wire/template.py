"""Data-frame templates: the pure-Python reference of the per-packet header patcher.

Every data frame a QP sends to one destination carries the same Ethernet, IPv6, SRH, UDP,
BTH bytes (and RETH's rkey) except for a handful of fields. A :class:`DataTemplate` is made once
per (QP, destination) from a frame the reference builder (:func:`mrcnet.wire.build_data`)
made; it records where those fields are, and :meth:`DataTemplate.patch` writes one packet
into a caller's buffer: opcode, BTH flags (AckReq, RTX, TS), PSN, EV (UDP source port and
inner and outer flow label), the path (outer destination, or SRH segments), METH, TSETH,
RETH address and length, ImmDt, payload, all length fields, ICRC and UDP checksum.

:class:`CTemplate` does the same in one C call (mrcnet/_csrc/template.c). The tests prove
``build_data(...) == DataTemplate.patch(...) == CTemplate.patch(...)`` byte for byte.
:class:`RunPatcher` (C only) builds a run of a message's frames in one call;
:class:`FrameFinisher` writes the ICRC and UDP checksum of a control frame patched in
place from a per-path template (the core's SACKs), in C when built.

What mrcd uses: ``make_template(frame_or_DataTemplate)`` once per (QP, destination),
``tmpl.path(usid=...)`` or ``tmpl.path(segments=...)`` once per EV, then per packet
``tmpl.patch(out, opcode=, psn=, ev=, va=, payload=, path=, meth=, imm=, timestamp=,
rtx=, ack_req=, cap=) -> length``; ``out`` is a bytearray/memoryview or, fastest, a batch's
``slot_ptr(i)`` (then ``cap=bufsize``): no copy but the payload's.
"""

from __future__ import annotations

import copy
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, ClassVar, Final, Protocol, TypeAlias

from mrcnet.constants import (
    DATA_OPCODES,
    ECN,
    ETH_HEADER_LEN,
    ICRC_LEN,
    IMM_OPCODES,
    IMMDT_LEN,
    IPV6_HEADER_LEN,
    METH_LEN,
    PSN_MASK,
    RETH_LEN,
    SRH_FIXED_LEN,
    TS_FORMAT_TYPE,
    TSETH_LEN,
    UDP_HEADER_LEN,
    Opcode,
)
from mrcnet.native import HAVE_C, NOT_BUILT, C, ffi
from mrcnet.wire._util import Buffer
from mrcnet.wire.bth import F_ACKREQ, F_RTX, F_TS
from mrcnet.wire.checksum import udp6_checksum, udp6_checksum_ok
from mrcnet.wire.dscp import dscp_classes
from mrcnet.wire.frame import Route, build_data, parse_frame
from mrcnet.wire.icrc import icrc
from mrcnet.wire.udp import ev_to_flow_label, ev_to_sport
from mrcnet.wire.usid import usid_final

_U16 = struct.Struct("!H")


def _set_dscp(mv: memoryview, ip: int, dscp: int) -> None:
    """The DSCP bits of the IPv6 header at ``ip`` (version, ECN, flow label stay)."""
    mv[ip] = 0x60 | dscp >> 2
    mv[ip + 1] = (dscp & 3) << 6 | (mv[ip + 1] & 0x3F)
_U32 = struct.Struct("!I")
_RETH = struct.Struct("!QII")
_MAX_IPV6_PAYLOAD = 0xFFFF
_EV_MAX = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class PathSpec:
    """The bytes one path puts in a frame; compute once per EV with :meth:`DataTemplate.path`.

    ``outer_da`` is the outer IPv6 destination (uSID container, or SRH active segment).
    ``srh_segs`` is the SRH segment list in wire order (SRH mode only). ``pseudo_dst`` is
    the checksum pseudo-header destination, set only for frames without an inner IPv6
    header (with one, the pseudo-header uses the inner addresses, which no path changes).
    """

    outer_da: bytes
    srh_segs: bytes | None = None
    pseudo_dst: bytes | None = None


class DataTemplate:
    """Headers of one (QP, destination) data flow, patched per packet (pure Python).

    Make it from a data frame built by :func:`mrcnet.wire.build_data` (any opcode; its
    METH/TSETH/ImmDt and payload are not kept, its RETH's rkey is), or with
    :meth:`for_route`. ``meth`` below is the METH word: RQMSN << 16 | MSN.
    """

    #: Layout choices of the reference builder that the C patcher takes as settings.
    ICRC_LITTLE_ENDIAN: ClassVar[bool] = True

    hdr: bytes
    """Ethernet through the end of the BTH, as the reference built them."""
    rkey: int
    off_outer: int
    off_srh_segs: int
    """Offset of the SRH segment list (0: no SRH)."""
    srh_segs_len: int
    off_inner: int
    """Offset of the inner IPv6 header (0: none)."""
    off_udp: int
    off_bth: int
    pseudo_src: bytes
    pseudo_dst: bytes
    usid_pseudo: bool
    """No inner header and a uSID outer destination: pseudo_dst is the fully shifted one."""

    def __init__(self, frame: Buffer, route: Route | None = None) -> None:
        """Learn the headers and offsets of ``frame``. Give the ``route`` it was built for
        when there is no inner IPv6 header, to say for sure whether its checksum used the
        fully shifted uSID container (otherwise inferred from which one verifies)."""
        f = parse_frame(frame)
        if not f.is_data or f.reth is None:
            raise ValueError(f"a template needs a data frame, got {f.opcode.name}")
        if f.trimmed:
            raise ValueError("a template needs a whole frame, not a trimmed one")
        off = ETH_HEADER_LEN + IPV6_HEADER_LEN
        self.off_outer = ETH_HEADER_LEN
        self.off_srh_segs = self.srh_segs_len = 0
        if f.srh is not None:
            self.off_srh_segs = off + SRH_FIXED_LEN
            self.srh_segs_len = 16 * len(f.srh.segments)
            off += f.srh.length
        self.off_inner = 0
        if f.inner is not None:
            self.off_inner = off
            off += IPV6_HEADER_LEN
        self.off_udp = off
        self.off_bth = off + UDP_HEADER_LEN
        self.hdr = bytes(memoryview(frame)[: self.off_bth + f.bth.LEN])
        self.rkey = f.reth.rkey
        self.usid_pseudo = False
        udp = memoryview(frame)[self.off_udp : len(frame)]
        if f.inner is not None:
            self.pseudo_src, self.pseudo_dst = f.inner.src, f.inner.dst
        elif f.srh is not None:
            self.pseudo_src, self.pseudo_dst = f.outer.src, f.srh.final_segment
            if (route is not None and route.usid_srh is not None) or (
                    route is None and not udp6_checksum_ok(f.outer.src, f.srh.final_segment,
                                                           udp)):
                self.pseudo_dst = usid_final(f.srh.final_segment)  # MRC's SRH form
        else:
            if route is not None:
                self.usid_pseudo = route.usid is not None
            else:  # parse_frame checked that one of the two verifies
                self.usid_pseudo = not udp6_checksum_ok(f.outer.src, f.outer.dst, udp)
            self.pseudo_src = f.outer.src
            self.pseudo_dst = usid_final(f.outer.dst) if self.usid_pseudo else f.outer.dst

    @classmethod
    def for_route(
        cls, route: Route, *, dest_qp: int, rkey: int, dscp: int | None = None,
        ecn: int = ECN.ECT0,
    ) -> DataTemplate:
        """The template for data frames to ``dest_qp`` along ``route``."""
        frame = build_data(route, ev=0, opcode=Opcode.WRITE_ONLY, dest_qp=dest_qp, psn=0, va=0,
                           rkey=rkey, dscp=dscp, ecn=ecn)
        return cls(frame, route)

    def along(self, route: Route) -> DataTemplate | None:
        """This template along another ``route`` (same QP, rkey, DSCP and ECN), when its
        frames and the route's are MRC's form (an inner IPv6 header, a uSID route, no
        SRH): then only the MACs, the outer hop limit, source and destination and the
        inner addresses differ, so the headers are these with those patched instead of a
        frame built and parsed again (a QP's template per plane). Its frames are the
        bytes :meth:`for_route`'s make (a test compares them; the UDP checksum the
        headers keep is the old route's, which every frame's own replaces). None for any
        other route: build that one with :meth:`for_route`."""
        if (self.off_srh_segs or not self.off_inner or route.usid is None
                or route.segments is not None or route.usid_srh is not None
                or not route.encap):
            return None
        hdr = bytearray(self.hdr)
        hdr[0:6], hdr[6:12] = route.dst_mac, route.src_mac
        o, i = self.off_outer, self.off_inner
        hdr[o + 7] = route.hop_limit
        hdr[o + 8 : o + 24], hdr[o + 24 : o + 40] = route.src_ip, route.usid
        hdr[i + 8 : i + 24], hdr[i + 24 : i + 40] = route.src_ip, route.dst_ip
        t = copy.copy(self)
        t.hdr = bytes(hdr)
        t.pseudo_src, t.pseudo_dst = bytes(route.src_ip), bytes(route.dst_ip)
        return t

    @property
    def has_srh(self) -> bool:
        """True when the frames carry an SRH (classic SRv6 mode)."""
        return self.off_srh_segs != 0

    def max_frame_len(self, payload_len: int) -> int:
        """Largest frame :meth:`patch` can write for ``payload_len`` bytes of payload."""
        return (len(self.hdr) + METH_LEN + TSETH_LEN + RETH_LEN + IMMDT_LEN + payload_len
                + ICRC_LEN)

    def path(self, *, usid: bytes | None = None, segments: Sequence[bytes] | None = None,
             usid_srh: bytes | None = None) -> PathSpec:
        """Precompute the bytes of one path: a uSID container (and, in MRC's SRH form, the
        second container its SRH holds), or classic SRH segments in travel order (first
        hop first; the same number as the template's)."""
        if (usid is None) == (segments is None):
            raise ValueError("give exactly one of usid= and segments=")
        if usid_srh is not None:
            if usid is None or self.srh_segs_len != 16 or len(usid) != 16 or len(usid_srh) != 16:
                raise ValueError("usid_srh= needs usid= and a template with a one-segment SRH")
            return PathSpec(bytes(usid), bytes(usid_srh),
                            None if self.off_inner else usid_final(usid_srh))
        if usid is not None:
            if self.has_srh:
                raise ValueError("this template's frames carry an SRH: give segments=")
            if len(usid) != 16:
                raise ValueError("a uSID container is 16 bytes")
            pd = None
            if not self.off_inner:
                pd = usid_final(usid) if self.usid_pseudo else bytes(usid)
            return PathSpec(bytes(usid), None, pd)
        assert segments is not None
        if not self.has_srh:
            raise ValueError("this template's frames carry no SRH: give usid=")
        if 16 * len(segments) != self.srh_segs_len or any(len(s) != 16 for s in segments):
            raise ValueError(f"the template's SRH holds {self.srh_segs_len // 16} segments")
        segs = b"".join(reversed(segments))  # RFC 8754: stored last hop first
        return PathSpec(bytes(segments[0]), segs,
                        None if self.off_inner else bytes(segments[-1]))

    def patch(
        self,
        out: bytearray | memoryview,
        *,
        opcode: int,
        psn: int,
        ev: int,
        va: int,
        payload: Buffer = b"",
        path: PathSpec | None = None,
        meth: int | None = None,
        imm: int | None = None,
        timestamp: int | None = None,
        rtx: bool = False,
        ack_req: bool = False,
        cap: int | None = None,
    ) -> int:
        """Write one data frame into ``out`` (from offset 0); returns its length.

        The arguments mean what :func:`mrcnet.wire.build_data`'s do; ``path`` (from
        :meth:`path`) replaces the template's own path; ``cap`` limits how much of ``out``
        may be used. Raises ``ValueError`` for a field out of range or a frame that does
        not fit.
        """
        imm_ext = check_data_args(opcode, psn, ev, va, meth, imm, timestamp)
        hdr = self.hdr
        hlen = len(hdr)
        plen = len(payload)
        ext_len = METH_LEN + RETH_LEN + (IMMDT_LEN if imm_ext else 0) + (
            TSETH_LEN if timestamp is not None else 0)
        total = hlen + ext_len + plen + ICRC_LEN
        room = len(out) if cap is None else min(cap, len(out))
        if total > room:
            raise ValueError(f"frame of {total} bytes does not fit a {room}-byte buffer")
        if total - self.off_outer - IPV6_HEADER_LEN > _MAX_IPV6_PAYLOAD:
            raise ValueError(f"payload of {plen} bytes overflows the IPv6 payload length")
        mv = memoryview(out)
        mv[:hlen] = hdr

        o = self.off_outer
        if rtx:  # a retransmission is marked TRIMMABLE_RETX (the template: TRIMMABLE)
            _set_dscp(mv, o, dscp_classes().trimmable_retx)
            if self.off_inner:
                _set_dscp(mv, self.off_inner, dscp_classes().trimmable_retx)
        fl = ev_to_flow_label(ev)
        _U16.pack_into(mv, o + 2, fl)  # low 16 bits of the flow label
        _U16.pack_into(mv, o + 4, total - o - IPV6_HEADER_LEN)
        pseudo_dst = self.pseudo_dst
        if path is not None:
            mv[o + 24 : o + 40] = path.outer_da
            if path.srh_segs is not None:
                mv[self.off_srh_segs : self.off_srh_segs + self.srh_segs_len] = path.srh_segs
            if path.pseudo_dst is not None:
                pseudo_dst = path.pseudo_dst
        if self.off_inner:
            _U16.pack_into(mv, self.off_inner + 2, fl)
            _U16.pack_into(mv, self.off_inner + 4, total - self.off_inner - IPV6_HEADER_LEN)
        u = self.off_udp
        _U16.pack_into(mv, u, ev_to_sport(ev))  # source port; the destination port stays
        _U16.pack_into(mv, u + 4, total - u)

        b = self.off_bth
        mv[b] = opcode
        flags = ((F_ACKREQ if ack_req else 0) | (F_RTX if rtx else 0)
                 | (F_TS if timestamp is not None else 0))
        _U32.pack_into(mv, b + 8, (flags << 24) | psn)

        e = hlen
        _U32.pack_into(mv, e, meth or 0)
        e += METH_LEN
        if timestamp is not None:
            _U32.pack_into(mv, e, timestamp << 16 | TS_FORMAT_TYPE)
            e += TSETH_LEN
        _RETH.pack_into(mv, e, va, self.rkey, plen)
        e += RETH_LEN
        if imm_ext:
            assert imm is not None
            _U32.pack_into(mv, e, imm)
            e += IMMDT_LEN
        mv[e : e + plen] = payload

        # ICRC first: it masks the UDP checksum, and the checksum then covers the ICRC.
        end = total - ICRC_LEN
        start = self.off_inner or u
        mv[end:total] = icrc(mv[start:end], has_ip=bool(self.off_inner))
        mv[u + 6 : u + 8] = b"\0\0"
        _U16.pack_into(mv, u + 6, udp6_checksum(self.pseudo_src, pseudo_dst, mv[u:total]))
        return total

    def build(self, **fields: object) -> bytes:
        """One frame as ``bytes`` (allocates; :meth:`patch` into a reused buffer does not)."""
        payload = fields.get("payload", b"")
        buf = bytearray(self.max_frame_len(len(payload)))  # type: ignore[arg-type]
        n = self.patch(buf, **fields)  # type: ignore[arg-type]
        return bytes(buf[:n])

    def frame(self, opcode: int, psn: int, ev: int, va: int, payload: Buffer,
              path: PathSpec | None, meth: int | None, imm: int | None,
              timestamp: int | None, rtx: bool, ack_req: bool) -> bytes:
        """One frame as ``bytes``, every field positional (the core's per-packet call;
        :class:`CTemplate` has the same method, one C call)."""
        buf = bytearray(self.max_frame_len(len(payload)))
        n = self.patch(buf, opcode=opcode, psn=psn, ev=ev, va=va, payload=payload, path=path,
                       meth=meth, imm=imm, timestamp=timestamp, rtx=rtx, ack_req=ack_req)
        return bytes(buf[:n])


def check_data_args(opcode: int, psn: int, ev: int, va: int, meth: int | None,
                    imm: int | None, timestamp: int | None) -> bool:
    """Check per-packet fields as :func:`mrcnet.wire.build_data` does (``ValueError``);
    returns True when the opcode carries ImmDt. Shared with the C patcher, which would
    otherwise truncate silently."""
    if opcode not in DATA_OPCODES:
        raise ValueError(f"opcode {opcode:#x} is not a WRITE opcode")
    imm_ext = opcode in IMM_OPCODES
    if imm_ext:
        if imm is None:
            raise ValueError("a write-with-immediate needs imm=")
        if not 0 <= imm <= 0xFFFFFFFF:
            raise ValueError(f"imm={imm!r} does not fit in 32 bits")
    elif imm is not None:
        raise ValueError(f"opcode {opcode:#x} carries no immediate")
    if meth is not None and not 0 <= meth <= 0xFFFFFFFF:
        raise ValueError(f"meth={meth!r} (RQMSN << 16 | MSN) does not fit in 32 bits")
    if not 0 <= psn <= PSN_MASK:
        raise ValueError(f"psn={psn!r} does not fit in 24 bits")
    if not 0 <= ev <= _EV_MAX:
        raise ValueError(f"ev={ev!r} does not fit in 32 bits")
    if not 0 <= va < 1 << 64:
        raise ValueError(f"va={va!r} does not fit in 64 bits")
    if timestamp is not None and not 0 <= timestamp <= 0xFFFF:
        raise ValueError(f"timestamp={timestamp!r} does not fit in 16 bits")
    return imm_ext


# ---- the C twin ----------------------------------------------------------------------

_U64_MAX: Final = (1 << 64) - 1
_PLAIN_DATA_OPS: Final = frozenset(int(op) for op in DATA_OPCODES - IMM_OPCODES)
_BASE_EXT_LEN: Final = METH_LEN + RETH_LEN
_IMM_EXT_LEN: Final = IMMDT_LEN
_TSETH_EXT_LEN: Final = TSETH_LEN
# mrc_patch_data's extension bits (template.h MRC_EXT_*; a test checks them against C)
EXT_IMM: Final = 1
EXT_TSETH: Final = 2


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
        if C is None:
            raise RuntimeError(NOT_BUILT)
        hdr = tmpl.hdr
        if len(hdr) > C.MRC_TMPL_HDR_MAX:
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
        t.rkey = tmpl.rkey
        t.icrc_le = int(tmpl.ICRC_LITTLE_ENDIAN)
        t.pseudo_sum = C.mrc_tmpl_addr_sum(tmpl.pseudo_src, tmpl.pseudo_dst)
        ffi.memmove(t.pseudo_src, tmpl.pseudo_src, 16)
        #: The Python template this one was made from (offsets, ``path()``).
        self.template = tmpl
        self._cdata_type = ffi.CData
        self._check = check_data_args
        self._null = ffi.NULL
        self._hdr_len = len(hdr)

    def path(self, *, usid: bytes | None = None, segments: Sequence[bytes] | None = None,
             usid_srh: bytes | None = None) -> PathSpec:
        """Same as :meth:`DataTemplate.path`."""
        return self.template.path(usid=usid, segments=segments, usid_srh=usid_srh)

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
        meth: int | None = None,
        imm: int | None = None,
        timestamp: int | None = None,
        rtx: bool = False,
        ack_req: bool = False,
        cap: int | None = None,
    ) -> int:
        """Write one data frame into ``out``; returns its length (see DataTemplate.patch)."""
        # The common packet (no immediate, no timestamp, fields in range) is checked inline;
        # anything else goes through the full check, which also words the errors.
        if (timestamp is None and imm is None and opcode in _PLAIN_DATA_OPS
                and (meth is None or 0 <= meth <= 0xFFFFFFFF)
                and 0 <= psn <= PSN_MASK and 0 <= ev <= 0xFFFFFFFF and 0 <= va <= _U64_MAX):
            ext = 0
            flags = (F_ACKREQ if ack_req else 0) | (F_RTX if rtx else 0)
            timestamp = 0
        else:
            ext = EXT_IMM if self._check(opcode, psn, ev, va, meth, imm, timestamp) else 0
            flags = (F_ACKREQ if ack_req else 0) | (F_RTX if rtx else 0)
            if timestamp is not None:
                ext |= EXT_TSETH
                flags |= F_TS
            else:
                timestamp = 0
        if isinstance(out, self._cdata_type):
            if cap is None:
                raise ValueError("cap= is needed with a cdata output buffer")
            ptr = out
        else:
            ptr = ffi.from_buffer(out)
            cap = len(out) if cap is None else min(cap, len(out))
        da, segs, pd = _path_args(path, self._null)
        if type(payload) is not bytes:
            payload = ffi.from_buffer(payload)
        n = int(C.mrc_patch_data(ptr, cap, self._t, opcode, flags, psn, ev, da, segs, pd, va,
                                  ext, meth or 0, imm or 0, timestamp, payload, len(payload)))
        if n == 0:
            raise ValueError(f"a frame with {len(payload)} payload bytes does not fit "
                             f"{cap} bytes or an IPv6 length field")
        return n

    def frame(self, opcode: int, psn: int, ev: int, va: int,
              payload: bytes | bytearray | memoryview, path: PathSpec | None,
              meth: int | None, imm: int | None, timestamp: int | None, rtx: bool,
              ack_req: bool) -> bytes:
        """One data frame as ``bytes``, every field positional: the core's per-packet
        call. Same bytes as :meth:`patch` (and :meth:`DataTemplate.frame`), written into
        a buffer reused by every template (not zeroed: C writes every byte) and copied
        out once."""
        if (imm is None and opcode in _PLAIN_DATA_OPS
                and (meth is None or 0 <= meth <= 0xFFFFFFFF)
                and 0 <= psn <= PSN_MASK and 0 <= ev <= 0xFFFFFFFF and 0 <= va <= _U64_MAX
                and (timestamp is None or 0 <= timestamp <= 0xFFFF)):
            ext = 0
        else:  # the full check, which also words the errors
            ext = EXT_IMM if self._check(opcode, psn, ev, va, meth, imm, timestamp) else 0
        flags = (F_ACKREQ if ack_req else 0) | (F_RTX if rtx else 0)
        n = self._hdr_len + _BASE_EXT_LEN + len(payload) + ICRC_LEN
        if ext:
            n += _IMM_EXT_LEN
        if timestamp is not None:
            ext |= EXT_TSETH
            flags |= F_TS
            n += _TSETH_EXT_LEN
        else:
            timestamp = 0
        da, segs, pd = _path_args(path, self._null)
        if type(payload) is not bytes:
            payload = ffi.from_buffer(payload)
        buf = _SCRATCH.buf
        if buf is None or n > len(buf):
            buf = _SCRATCH.buf = _RAW_ALLOC("uint8_t[]", max(n, 1 << 14))
        if not C.mrc_patch_data(buf, n, self._t, opcode, flags, psn, ev, da, segs, pd, va,
                                 ext, meth or 0, imm or 0, timestamp, payload, len(payload)):
            raise ValueError(f"a frame with {len(payload)} payload bytes does not fit an "
                             "IPv6 length field")
        return bytes(ffi.buffer(buf, n))

    def build(self, **fields: Any) -> bytes:
        """One frame as ``bytes`` (allocates; prefer ``patch`` into a reused buffer)."""
        buf = bytearray(self.max_frame_len(len(fields.get("payload", b""))))
        return bytes(buf[: self.patch(buf, **fields)])


# CTemplate.frame's buffer (``buf``), one per thread (cffi lets go of the GIL inside the
# C call): a zeroed bytearray per frame cost more than building the frame, and a buffer
# per template as much memory as the templates themselves.
class _Scratch(threading.local):
    buf: Any = None  # (each thread's starts as None: a class attribute)


_SCRATCH = _Scratch()


class RunQueue(Protocol):
    """Where :meth:`RunPatcher.queue` puts a run's frames: mrcd's ports' send queues
    (:class:`mrcnet.io.batch.SendQueue`). The core sees them only through this one call,
    so it never imports the I/O side."""

    #: The ports' queues as C sees them (``struct mrc_sendq[]``) and how many: for a
    #: C call that queues frames itself (mrcnet/_csrc/sender.h), then :meth:`queued`.
    queues: Any
    nports: int

    def add_run(self, buf: Any, lens: Any, ports: list[int]) -> None:
        """Queue the frames laid back to back in ``buf`` (``lens``), frame i on port
        ``ports[i]``."""
        ...

    def queued(self, buf: Any, n: int, k: int, payload: Any = None) -> None:
        """C queued ``k`` of the ``n`` frames in ``buf`` (keep it while they wait, and
        ``payload`` when their payloads go from there)."""
        ...


# RunPatcher's buffers: each run's frames go into one of their own (views into it stay
# valid as long as anyone holds a frame), left uninitialised: every byte of a frame is
# written, and zeroing it first would cost as much as copying the frames out.
_RAW_ALLOC: Any = (ffi.new_allocator(should_clear_after_alloc=False)
                   if ffi is not None else None)
#: That allocator, for a caller that builds frames in C itself (mrcnet/core/sender.py),
#: and the most bytes a frame takes beyond its payload (a buffer of ``n`` frames carrying
#: ``p`` payload bytes in all: ``n * FRAME_ROOM + p``).
ALLOC_FRAMES: Any = _RAW_ALLOC
FRAME_ROOM: Final = ((C.MRC_TMPL_HDR_MAX if C is not None else 512) + _BASE_EXT_LEN
                     + _IMM_EXT_LEN + _TSETH_EXT_LEN + ICRC_LEN)




class RunPatcher:
    """A sender's data frames built a run at a time: one C call (``mrc_patch_run``) for
    consecutive packets of one message instead of one :meth:`CTemplate.frame` each.

    Paths (a template and its per-path fields) are registered once with :meth:`add`, which
    gives their slot; :meth:`frames` then takes per packet only its slot, EV, opcode, BTH
    flags and extension bits. Each frame is the same bytes :meth:`CTemplate.frame` makes.
    C only: :func:`run_patcher` gives None without it.
    """

    __slots__ = ("_keep", "_size", "n", "paths")

    def __init__(self, size: int = 64) -> None:
        #: The registered paths as C takes them (``struct mrc_path[]``).
        self.paths = ffi.new("struct mrc_path[]", size)
        self._size = size
        self._keep: list[Any] = []  # owners of the pointers stored in the table
        #: Paths registered so far (the next slot).
        self.n = 0

    def add(self, tmpl: CTemplate, path: PathSpec | None) -> int:
        """Register a (template, path) pair; returns its slot."""
        if self.n == self._size:  # grow: a fresh table, the old entries copied over
            bigger = ffi.new("struct mrc_path[]", 2 * self._size)
            ffi.memmove(bigger, self.paths, ffi.sizeof("struct mrc_path") * self._size)
            self._keep.append(self.paths)
            self.paths, self._size = bigger, 2 * self._size
        e = self.paths[self.n]
        e.tmpl = tmpl._t
        self._keep.append(tmpl)
        null = ffi.NULL
        if path is None:
            e.outer_da = e.srh_segs = e.pseudo_dst = null
        else:
            for name in ("outer_da", "srh_segs", "pseudo_dst"):
                v = getattr(path, name)
                if v is None:
                    setattr(e, name, null)
                else:
                    buf = ffi.from_buffer(v)
                    self._keep.append(buf)
                    setattr(e, name, ffi.cast("const uint8_t *", buf))
        self.n += 1
        return self.n - 1

    def frames(self, slots: list[int], evs: list[int], ops: list[int], flags: list[int],
               exts: list[int], psn0: int, va0: int, payload: bytes | bytearray | memoryview,
               seg: int, meth: int, imm: int, timestamp: int) -> list[memoryview]:
        """Frames of ``len(slots)`` packets: packet i carries payload bytes ``[i * seg,
        (i + 1) * seg)`` (the last one the rest), PSN ``psn0 + i``, address ``va0 + i *
        seg``; ``flags`` are BTH flag bytes, ``exts`` ``MRC_EXT_*`` bits. Read-only
        views, one per frame, into a buffer of this run's own."""
        buf, lens = self._build(slots, evs, ops, flags, exts, psn0, va0, payload, seg, meth,
                                imm, timestamp)
        return _views(buf, lens, len(slots))

    def queue(self, sendq: RunQueue, ports: list[int], slots: list[int], evs: list[int],
              ops: list[int], flags: list[int], exts: list[int], psn0: int, va0: int,
              payload: bytes | bytearray | memoryview, seg: int, meth: int, imm: int,
              timestamp: int) -> None:
        """The frames :meth:`frames` makes, queued on ``sendq`` instead (frame i on port
        ``ports[i]``): no Python object per frame."""
        buf, lens = self._build(slots, evs, ops, flags, exts, psn0, va0, payload, seg, meth,
                                imm, timestamp)
        sendq.add_run(buf, lens, ports)

    @staticmethod
    def buffer(n: int, payload_len: int) -> tuple[Any, Any, int]:
        """A buffer for ``n`` frames carrying ``payload_len`` payload bytes in all, their
        lengths' array and the buffer's size."""
        cap = n * FRAME_ROOM + payload_len
        return _RAW_ALLOC("uint8_t[]", cap), ffi.new("uint32_t[]", n), cap

    def _build(self, slots: list[int], evs: list[int], ops: list[int], flags: list[int],
               exts: list[int], psn0: int, va0: int, payload: bytes | bytearray | memoryview,
               seg: int, meth: int, imm: int, timestamp: int) -> tuple[Any, Any]:
        """The run's frames back to back in a buffer of their own, and their lengths."""
        n = len(slots)
        buf, lens, cap = self.buffer(n, len(payload))
        pl = payload if type(payload) is bytes else ffi.from_buffer(payload)
        if not C.mrc_patch_run(buf, cap, n, self.paths, slots, evs, ops, flags, exts, psn0,
                                va0, pl, len(payload), seg, meth, imm, timestamp, lens):
            raise ValueError(f"a run of {n} frames with {len(payload)} payload bytes does "
                             "not fit an IPv6 length field")
        return buf, lens

    def msgs_frames(self, slots: list[int], evs: list[int], ops: list[int],
                    flags: list[int], exts: list[int], psn0: int, vas: list[int],
                    meths: list[int], imms: list[int], payload: bytes, plens: list[int],
                    timestamp: int) -> list[memoryview]:
        """Frames of ``len(slots)`` single-packet messages (one work request each):
        packet i carries PSN ``psn0 + i``, address ``vas[i]``, METH ``meths[i]``,
        immediate ``imms[i]`` and the next ``plens[i]`` bytes of ``payload`` (the
        messages' payloads end to end). Read-only views, as :meth:`frames`."""
        buf, lens = self._build_msgs(slots, evs, ops, flags, exts, psn0, vas, meths, imms,
                                     payload, plens, timestamp)
        return _views(buf, lens, len(slots))

    def msgs_queue(self, sendq: RunQueue, ports: list[int], slots: list[int],
                   evs: list[int], ops: list[int], flags: list[int], exts: list[int],
                   psn0: int, vas: list[int], meths: list[int], imms: list[int],
                   payload: bytes, plens: list[int], timestamp: int) -> None:
        """The frames :meth:`msgs_frames` makes, queued on ``sendq`` (frame i on port
        ``ports[i]``)."""
        buf, lens = self._build_msgs(slots, evs, ops, flags, exts, psn0, vas, meths, imms,
                                     payload, plens, timestamp)
        sendq.add_run(buf, lens, ports)

    def _build_msgs(self, slots: list[int], evs: list[int], ops: list[int],
                    flags: list[int], exts: list[int], psn0: int, vas: list[int],
                    meths: list[int], imms: list[int], payload: bytes, plens: list[int],
                    timestamp: int) -> tuple[Any, Any]:
        n = len(slots)
        buf, lens, cap = self.buffer(n, len(payload))
        if sum(plens) != len(payload):
            raise ValueError(f"{len(payload)} payload bytes for messages of {sum(plens)}")
        if not C.mrc_patch_msgs(buf, cap, n, self.paths, slots, evs, ops, flags, exts,
                                 psn0, vas, meths, imms, payload, plens, timestamp, lens):
            raise ValueError(f"one of {n} messages does not fit an IPv6 length field")
        return buf, lens


def _views(buf: Any, lens: Any, n: int) -> list[memoryview]:
    """The ``n`` frames laid end to end in ``buf`` (``lens``), as read-only views."""
    view = memoryview(ffi.buffer(buf)).toreadonly()  # (the buffer keeps buf alive)
    # The frames lie end to end: slices from running sums (C iterators: no Python
    # bytecode per frame).
    ends = list(accumulate(ffi.unpack(lens, n)))
    return list(map(view.__getitem__, map(slice, [0, *ends[:-1]], ends)))


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
        if self._c and C is None:
            raise RuntimeError(NOT_BUILT)
        self._icrc_from, self._has_ip, self._udp_off = icrc_from, has_ip, udp_off
        self._psrc, self._pdst = bytes(pseudo_src), bytes(pseudo_dst)
        self._sum = int(C.mrc_tmpl_addr_sum(self._psrc, self._pdst)) if self._c else 0

    def finish(self, buf: bytearray) -> None:
        """Write the ICRC (last 4 bytes) and the UDP checksum of the frame in ``buf``."""
        n = len(buf)
        if self._c:
            C.mrc_finish_frame(ffi.from_buffer(buf), n, self._icrc_from, self._has_ip,
                                self._udp_off, self._sum)
            return
        u = self._udp_off
        buf[u + 6 : u + 8] = b"\0\0"
        buf[n - ICRC_LEN :] = icrc(buf[self._icrc_from : n - ICRC_LEN], self._has_ip)
        csum = udp6_checksum(self._psrc, self._pdst, buf[u:])
        buf[u + 6 : u + 8] = csum.to_bytes(2, "big")



#: A data-frame template of either implementation (same ``patch``/``path`` interface).
Template: TypeAlias = "CTemplate | DataTemplate"


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
