"""Data-frame templates: the pure-Python reference of the per-packet header patcher.

Every data frame a QP sends to one destination carries the same Ethernet, IPv6, SRH, UDP,
BTH and RETH bytes except for a handful of fields. A :class:`DataTemplate` is made once
per (QP, destination) from a frame the reference builder (:func:`mrcnet.wire.build_data`)
made; it records where those fields are, and :meth:`DataTemplate.patch` writes one packet
into a caller's buffer: opcode, BTH flags (AckReq, RTX, TS), PSN, EV (UDP source port and
outer flow label), the path (outer destination, or SRH segments), RETH address and length,
METH/ImmDt/TSETH, payload, all length fields, ICRC and UDP checksum.

:class:`mrcnet.fastpath.CTemplate` does the same in one C call. The tests prove
``build_data(...) == DataTemplate.patch(...) == CTemplate.patch(...)`` byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import (
    DATA_OPCODES,
    DSCP_DATA,
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
    TSETH_LEN,
    UDP_HEADER_LEN,
    Opcode,
)
from mrcnet.wire._util import Buffer
from mrcnet.wire.bth import F_ACKREQ, F_RTX, F_TS
from mrcnet.wire.checksum import udp6_checksum, udp6_checksum_ok
from mrcnet.wire.frame import Route, build_data, parse_frame
from mrcnet.wire.icrc import icrc
from mrcnet.wire.usid import usid_final

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_U64 = struct.Struct("!Q")
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
    METH/ImmDt/TSETH and payload are not kept), or with :meth:`for_route`.
    """

    #: Layout choices of the reference builder that the C patcher takes as settings.
    IMM_BEFORE_TSETH: ClassVar[bool] = True
    ICRC_LITTLE_ENDIAN: ClassVar[bool] = True

    hdr: bytes
    """Ethernet through the end of the RETH, as the reference built them."""
    off_outer: int
    off_srh_segs: int
    """Offset of the SRH segment list (0: no SRH)."""
    srh_segs_len: int
    off_inner: int
    """Offset of the inner IPv6 header (0: none)."""
    off_udp: int
    off_bth: int
    off_reth: int
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
        self.off_reth = self.off_bth + f.bth.LEN
        self.hdr = bytes(memoryview(frame)[: self.off_reth + RETH_LEN])
        self.usid_pseudo = False
        udp = memoryview(frame)[self.off_udp : len(frame)]
        if f.inner is not None:
            self.pseudo_src, self.pseudo_dst = f.inner.src, f.inner.dst
        elif f.srh is not None:
            self.pseudo_src, self.pseudo_dst = f.outer.src, f.srh.final_segment
        else:
            if route is not None:
                self.usid_pseudo = route.usid is not None
            else:  # parse_frame checked that one of the two verifies
                self.usid_pseudo = not udp6_checksum_ok(f.outer.src, f.outer.dst, udp)
            self.pseudo_src = f.outer.src
            self.pseudo_dst = usid_final(f.outer.dst) if self.usid_pseudo else f.outer.dst

    @classmethod
    def for_route(
        cls, route: Route, *, dest_qp: int, rkey: int, dscp: int = DSCP_DATA,
        ecn: int = ECN.ECT0,
    ) -> DataTemplate:
        """The template for data frames to ``dest_qp`` along ``route``."""
        frame = build_data(route, ev=0, opcode=Opcode.WRITE_ONLY, dest_qp=dest_qp, psn=0, va=0,
                           rkey=rkey, dscp=dscp, ecn=ecn)
        return cls(frame, route)

    @property
    def has_srh(self) -> bool:
        """True when the frames carry an SRH (classic SRv6 mode)."""
        return self.off_srh_segs != 0

    def max_frame_len(self, payload_len: int) -> int:
        """Largest frame :meth:`patch` can write for ``payload_len`` bytes of payload."""
        return len(self.hdr) + METH_LEN + IMMDT_LEN + TSETH_LEN + payload_len + ICRC_LEN

    def path(self, *, usid: bytes | None = None,
             segments: Sequence[bytes] | None = None) -> PathSpec:
        """Precompute the bytes of one path: a uSID container, or SRH segments in travel
        order (first hop first; the same number as the template's)."""
        if (usid is None) == (segments is None):
            raise ValueError("give exactly one of usid= and segments=")
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
        msn: int | None = None,
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
        imm_ext = check_data_args(opcode, psn, ev, va, msn, imm, timestamp)
        hdr = self.hdr
        hlen = len(hdr)
        plen = len(payload)
        ext_len = (METH_LEN + IMMDT_LEN if imm_ext else 0) + (
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
        _U16.pack_into(mv, o + 2, ev & 0xFFFF)  # low 16 bits of the flow label
        _U16.pack_into(mv, o + 4, total - o - IPV6_HEADER_LEN)
        pseudo_dst = self.pseudo_dst
        if path is not None:
            mv[o + 24 : o + 40] = path.outer_da
            if path.srh_segs is not None:
                mv[self.off_srh_segs : self.off_srh_segs + self.srh_segs_len] = path.srh_segs
            if path.pseudo_dst is not None:
                pseudo_dst = path.pseudo_dst
        if self.off_inner:
            _U16.pack_into(mv, self.off_inner + 4, total - self.off_inner - IPV6_HEADER_LEN)
        u = self.off_udp
        _U16.pack_into(mv, u, ev >> 16)  # source port; the destination port stays
        _U16.pack_into(mv, u + 4, total - u)

        b = self.off_bth
        mv[b] = opcode
        flags = ((F_ACKREQ if ack_req else 0) | (F_RTX if rtx else 0)
                 | (F_TS if timestamp is not None else 0))
        _U32.pack_into(mv, b + 8, (flags << 24) | psn)
        r = self.off_reth
        _U64.pack_into(mv, r, va)
        _U32.pack_into(mv, r + 12, plen)

        e = hlen
        if imm_ext:
            assert msn is not None and imm is not None
            _U32.pack_into(mv, e, msn)
            _U32.pack_into(mv, e + 4, imm)
            e += METH_LEN + IMMDT_LEN
        if timestamp is not None:
            _U32.pack_into(mv, e, timestamp << 16)
            e += TSETH_LEN
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
              path: PathSpec | None, msn: int | None, imm: int | None,
              timestamp: int | None, rtx: bool, ack_req: bool) -> bytes:
        """One frame as ``bytes``, every field positional (the core's per-packet call;
        :class:`mrcnet.fastpath.CTemplate` has the same method, one C call)."""
        buf = bytearray(self.max_frame_len(len(payload)))
        n = self.patch(buf, opcode=opcode, psn=psn, ev=ev, va=va, payload=payload, path=path,
                       msn=msn, imm=imm, timestamp=timestamp, rtx=rtx, ack_req=ack_req)
        return bytes(buf[:n])


def check_data_args(opcode: int, psn: int, ev: int, va: int, msn: int | None,
                    imm: int | None, timestamp: int | None) -> bool:
    """Check per-packet fields as :func:`mrcnet.wire.build_data` does (``ValueError``);
    returns True when the opcode carries METH + ImmDt. Shared with the C patcher, which
    would otherwise truncate silently."""
    if opcode not in DATA_OPCODES:
        raise ValueError(f"opcode {opcode:#x} is not a WRITE opcode")
    imm_ext = opcode in IMM_OPCODES
    if imm_ext:
        if msn is None or imm is None:
            raise ValueError("a write-with-immediate needs msn= and imm=")
        if not (0 <= msn < 1 << 24 and 0 <= imm <= 0xFFFFFFFF):
            raise ValueError(f"msn={msn!r} (24 bits) or imm={imm!r} (32 bits) out of range")
    elif msn is not None or imm is not None:
        raise ValueError(f"opcode {opcode:#x} carries no immediate")
    if not 0 <= psn <= PSN_MASK:
        raise ValueError(f"psn={psn!r} does not fit in 24 bits")
    if not 0 <= ev <= _EV_MAX:
        raise ValueError(f"ev={ev!r} does not fit in 32 bits")
    if not 0 <= va < 1 << 64:
        raise ValueError(f"va={va!r} does not fit in 64 bits")
    if timestamp is not None and not 0 <= timestamp <= 0xFFFF:
        raise ValueError(f"timestamp={timestamp!r} does not fit in 16 bits")
    return imm_ext
