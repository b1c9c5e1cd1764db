"""Whole MRC frames: build any kind, and parse one strictly.

A frame on the wire (SRv6 mode)::

    Ethernet / outer IPv6 [DA = uSID container or active segment; flow label = half of
    the EV; traffic class = DSCP + ECN] / optional SRH / optional inner IPv6 [DA =
    receiving NIC; flow label as outer] / UDP [dport 4791, sport = the other half of the
    EV] / BTH / extension headers / payload / ICRC

Extension headers by opcode (see ``mrcnet.constants.Opcode``; PROTOCOL-NOTES section 8):

- data (WRITE_*): METH · TSETH if BTH.TS · RETH · ImmDt with *_IMM opcodes
- ACK: AETH (BTH.PSN is the cumulative acknowledgement)
- SACK: SETH + CC_STATE
- NACK: NETH
- RELIABILITY_PROBE: PETH
- ENDPOINT_REQ: ERTH; ENDPOINT_RESP: EETH (to the reserved QPN ``ENDPOINT_QPN``; the
  request id in BTH.PSN)

:func:`parse_frame` raises only :class:`~mrcnet.errors.MalformedFrame`. A data frame cut
short after its headers (a switch trimmed it; many do not fix the IP length) or marked with
either trimmed DSCP (TRIMMED, TRIMMED_LASTHOP: :mod:`mrcnet.wire.dscp`) parses with
``trimmed=True`` (and ``trim_lasthop=True`` for the latter), headers intact, checksums not
checked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from mrcnet.constants import (
    BTH_LEN,
    DATA_OPCODES,
    DEFAULT_HOP_LIMIT,
    ECN,
    ENDPOINT_QPN,
    ETH_HEADER_LEN,
    ETH_P_IPV6,
    ICRC_LEN,
    IMM_OPCODES,
    IPPROTO_IPV6,
    IPPROTO_ROUTING,
    IPPROTO_UDP,
    IPV6_HEADER_LEN,
    MRC_UDP_PORT,
    UDP_HEADER_LEN,
    Opcode,
)
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire._util import Buffer
from mrcnet.wire.aeth import AETH
from mrcnet.wire.bth import BTH
from mrcnet.wire.checksum import udp6_checksum, udp6_checksum_ok
from mrcnet.wire.dscp import dscp_classes
from mrcnet.wire.eeth import EETH
from mrcnet.wire.erth import ERTH, erth_token
from mrcnet.wire.ethernet import Ethernet
from mrcnet.wire.icrc import icrc
from mrcnet.wire.immdt import ImmDt
from mrcnet.wire.ipv6 import IPv6
from mrcnet.wire.meth import METH
from mrcnet.wire.neth import NETH
from mrcnet.wire.peth import PETH
from mrcnet.wire.reth import RETH
from mrcnet.wire.seth import SETH, CCState
from mrcnet.wire.srh import SRH
from mrcnet.wire.tseth import TSETH
from mrcnet.wire.udp import UDP, ev_from_headers, ev_to_flow_label, ev_to_sport
from mrcnet.wire.usid import usid_final

# Frames this short are Ethernet-padded; longer ones must end where IPv6 says.
_ETH_MIN_FRAME = 60


class _Header(Protocol):
    def pack(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Route:
    """How a frame reaches its destination: L2 next hop, addresses and SRv6 path.

    Exactly one of ``usid`` (a uSID container, see :mod:`mrcnet.wire.usid`) and
    ``segments`` (a classic RFC 8754 segment list in travel order, first hop first: not
    MRC's form) is normally given; with neither the frame is plain IPv6 to ``dst_ip``.
    ``usid_srh`` adds MRC's SRv6-with-SRH form to a uSID route: a second container, for a
    path longer than one container holds, in a one-segment (reduced) SRH that the last
    uSID of ``usid`` hands over to. With ``encap`` (the default) an inner IPv6 header from
    ``src_ip`` to ``dst_ip`` follows the outer header.
    """

    src_mac: bytes
    dst_mac: bytes
    src_ip: bytes
    dst_ip: bytes
    usid: bytes | None = None
    segments: tuple[bytes, ...] | None = None
    encap: bool = True
    hop_limit: int = DEFAULT_HOP_LIMIT
    usid_srh: bytes | None = None

    def __post_init__(self) -> None:
        if self.usid is not None and self.segments is not None:
            raise ValueError("a route is either uSID (usid=...) or SRH (segments=...), not both")
        if self.segments is not None and not self.segments:
            raise ValueError("an SRH route needs at least one segment")
        if self.usid_srh is not None and self.usid is None:
            raise ValueError("usid_srh= continues a uSID route: give usid= too")

    @property
    def outer_dst(self) -> bytes:
        """The outer IPv6 destination as the frame leaves the sender."""
        if self.usid is not None:
            return self.usid
        if self.segments is not None:
            return self.segments[0]
        return self.dst_ip

    @property
    def final_dst(self) -> bytes:
        """The pseudo-header destination of a frame without an inner IPv6 header."""
        if self.usid_srh is not None:
            return usid_final(self.usid_srh)
        if self.usid is not None:
            return usid_final(self.usid)
        if self.segments is not None:
            return self.segments[-1]
        return self.dst_ip

    def with_usid(self, container: bytes) -> Route:
        """The same route through another uSID path (per-EV path selection)."""
        return Route(
            self.src_mac, self.dst_mac, self.src_ip, self.dst_ip, usid=container,
            encap=self.encap, hop_limit=self.hop_limit, usid_srh=self.usid_srh,
        )


def build_frame(
    route: Route,
    *,
    ev: int,
    bth: BTH,
    ext: Sequence[_Header] = (),
    payload: Buffer = b"",
    dscp: int | None = None,
    ecn: int = ECN.ECT0,
    checksum: Callable[[bytes, bytes, Buffer], int] = udp6_checksum,
) -> bytes:
    """Build a complete frame (any kind) from a BTH, its extension headers and payload.

    ``dscp`` None: the class of the frame (:mod:`mrcnet.wire.dscp`): TRIMMABLE for data,
    TRIMMABLE_RETX for data with BTH.RTX, CONTROL for everything else.

    Raises ``ValueError`` for what a receiver would reject: a trimmed DSCP (only a
    switch sets those), or the endpoint QPN with anything but an endpoint opcode.
    """
    classes = dscp_classes()
    if dscp is None:
        if bth.opcode in DATA_OPCODES:
            dscp = classes.trimmable_retx if bth.rtx else classes.trimmable
        else:
            dscp = classes.control
    elif dscp in (classes.trimmed, classes.trimmed_lasthop):
        raise ValueError("the trimmed DSCPs are set by switches that trim, never by a sender")
    endpoint_op = bth.opcode in (Opcode.ENDPOINT_REQ, Opcode.ENDPOINT_RESP)
    if (bth.dest_qp == ENDPOINT_QPN) != endpoint_op:
        raise ValueError(
            f"QPN {ENDPOINT_QPN:#x} is reserved for endpoint operations"
            if not endpoint_op
            else "endpoint operations go to ENDPOINT_QPN"
        )
    l4 = bth.pack() + b"".join(h.pack() for h in ext) + bytes(payload)
    udp_len = UDP_HEADER_LEN + len(l4) + ICRC_LEN
    udp_hdr = UDP(sport=ev_to_sport(ev), length=udp_len).pack()
    inner = b""
    flow_label = ev_to_flow_label(ev)
    if route.encap:
        inner = IPv6(
            src=route.src_ip, dst=route.dst_ip, next_header=IPPROTO_UDP,
            payload_length=udp_len, hop_limit=DEFAULT_HOP_LIMIT, dscp=dscp, ecn=ecn,
            flow_label=flow_label,
        ).pack()
    crc = icrc(inner + udp_hdr + l4, has_ip=route.encap)
    if route.encap:
        ph_src, ph_dst = route.src_ip, route.dst_ip
    else:
        ph_src, ph_dst = route.src_ip, route.final_dst
    csum = checksum(ph_src, ph_dst, udp_hdr + l4 + crc)
    udp_hdr = udp_hdr[:6] + csum.to_bytes(2, "big")
    upper = inner + udp_hdr + l4 + crc
    upper_nh = IPPROTO_IPV6 if route.encap else IPPROTO_UDP
    srh = b""
    if route.segments is not None:
        srh = SRH.from_path(upper_nh, route.segments).pack()
    elif route.usid_srh is not None:
        srh = SRH.reduced(upper_nh, (route.usid_srh,)).pack()
    outer = IPv6(
        src=route.src_ip,
        dst=route.outer_dst,
        next_header=IPPROTO_ROUTING if srh else upper_nh,
        payload_length=len(srh) + len(upper),
        hop_limit=route.hop_limit,
        dscp=dscp,
        ecn=ecn,
        flow_label=flow_label,
    ).pack()
    return Ethernet(route.dst_mac, route.src_mac, ETH_P_IPV6).pack() + outer + srh + upper


def build_data(
    route: Route,
    *,
    ev: int,
    opcode: int,
    dest_qp: int,
    psn: int,
    va: int,
    rkey: int,
    payload: Buffer = b"",
    rqmsn: int = 0,
    msn: int = 0,
    imm: int | None = None,
    timestamp: int | None = None,
    rtx: bool = False,
    ack_req: bool = False,
    ecn: int = ECN.ECT0,
    dscp: int | None = None,
) -> bytes:
    """Build an RDMA WRITE data frame; *_IMM opcodes need ``imm``. ``dscp`` None: the
    TRIMMABLE class, TRIMMABLE_RETX when ``rtx``."""
    if opcode not in DATA_OPCODES:
        raise ValueError(f"opcode {opcode:#x} is not a WRITE opcode")
    ext: list[_Header] = [METH(rqmsn, msn)]
    if timestamp is not None:
        ext.append(TSETH(timestamp))
    ext.append(RETH(va, rkey, len(payload)))
    if opcode in IMM_OPCODES:
        if imm is None:
            raise ValueError("a write-with-immediate needs imm=")
        ext.append(ImmDt(imm))
    elif imm is not None:
        raise ValueError(f"opcode {Opcode(opcode).name} carries no immediate")
    bth = BTH(opcode, dest_qp, psn, ack_req=ack_req, rtx=rtx, ts=timestamp is not None)
    return build_frame(route, ev=ev, bth=bth, ext=ext, payload=payload, dscp=dscp, ecn=ecn)


def build_ack(route: Route, *, ev: int, dest_qp: int, psn: int, aeth: AETH | None = None) -> bytes:
    """Build an ACK frame: ``psn`` is the last PSN received in order."""
    return build_frame(
        route, ev=ev, bth=BTH(Opcode.ACK, dest_qp, psn), ext=[aeth or AETH()],
        ecn=ECN.NOT_ECT,
    )


def build_sack(
    route: Route,
    *,
    ev: int,
    dest_qp: int,
    seth: SETH,
    cc: CCState | None = None,
    psn: int = 0,
) -> bytes:
    """Build a SACK frame; ``ev`` is the reverse EV it travels on."""
    return build_frame(
        route, ev=ev, bth=BTH(Opcode.SACK, dest_qp, psn), ext=[seth, cc or CCState()],
        ecn=ECN.NOT_ECT,
    )


def build_nack(route: Route, *, ev: int, dest_qp: int, neth: NETH, psn: int = 0) -> bytes:
    """Build a NACK frame."""
    return build_frame(
        route, ev=ev, bth=BTH(Opcode.NACK, dest_qp, psn), ext=[neth],
        ecn=ECN.NOT_ECT,
    )


def build_probe(route: Route, *, ev: int, dest_qp: int, peth: PETH, psn: int = 0) -> bytes:
    """Build a reliability probe frame (travels on ``ev``, the EV being probed)."""
    return build_frame(
        route, ev=ev, bth=BTH(Opcode.RELIABILITY_PROBE, dest_qp, psn, ack_req=True),
        ext=[peth], ecn=ECN.NOT_ECT,
    )


def build_endpoint(
    route: Route, *, ev: int, request_id: int, erth: ERTH | None = None,
    eeth: EETH | None = None,
) -> bytes:
    """Build an endpoint request (``erth``) or response (``eeth``) to ``ENDPOINT_QPN``;
    the request id rides in BTH.PSN."""
    if (erth is None) == (eeth is None):
        raise ValueError("an endpoint frame carries either erth= (request) or eeth= (response)")
    op = Opcode.ENDPOINT_REQ if erth is not None else Opcode.ENDPOINT_RESP
    hdr: _Header = erth if erth is not None else eeth  # type: ignore[assignment]
    return build_frame(
        route, ev=ev, bth=BTH(op, ENDPOINT_QPN, request_id), ext=[hdr],
        ecn=ECN.NOT_ECT,
    )


@dataclass(slots=True)
class Frame:
    """Every header of a parsed frame; ``payload`` is a view into the caller's buffer."""

    eth: Ethernet
    outer: IPv6
    srh: SRH | None
    inner: IPv6 | None
    udp: UDP
    bth: BTH
    payload: memoryview
    trimmed: bool = False
    #: trimmed at the last hop: the outer DSCP is TRIMMED_LASTHOP (mrcnet.wire.dscp)
    trim_lasthop: bool = False
    reth: RETH | None = None
    meth: METH | None = None
    immdt: ImmDt | None = None
    tseth: TSETH | None = None
    aeth: AETH | None = None
    seth: SETH | None = None
    cc: CCState | None = None
    neth: NETH | None = None
    peth: PETH | None = None
    erth: ERTH | None = None
    eeth: EETH | None = None
    #: mrcnet's endpoint token, read from an endpoint request's ERTH reserved word (0:
    #: none sent; ERTH itself leaves that word reserved, see mrcnet.wire.erth).
    endpoint_token: int = 0

    @property
    def ev(self) -> int:
        """The entropy value this frame travelled on (UDP sport + outer flow label)."""
        return ev_from_headers(self.udp.sport, self.outer.flow_label)

    @property
    def opcode(self) -> Opcode:
        """The BTH opcode as an enum."""
        return Opcode(self.bth.opcode)

    @property
    def is_data(self) -> bool:
        """True for RDMA WRITE packets."""
        return self.bth.opcode in DATA_OPCODES

    @property
    def ce(self) -> bool:
        """True when a switch marked the frame Congestion Experienced."""
        return self.outer.ecn == ECN.CE


def _bad_len(detail: str) -> MalformedFrame:
    return MalformedFrame(MalformedReason.BAD_LENGTH, detail)


def parse_frame(
    buf: Buffer,
    *,
    verify_checksum: bool = True,
    verify_icrc: bool = True,
    checksum_ok: Callable[[bytes, bytes, Buffer], bool] = udp6_checksum_ok,
    icrc_fn: Callable[[Buffer, bool], bytes] = icrc,
    reth_per_packet: bool = True,
) -> Frame:
    """Parse an MRC frame strictly. Raises only ``MalformedFrame``; never copies payload.

    ``checksum_ok`` and ``icrc_fn`` let a caller plug in the C fast path
    (``mrcnet.wire.checksum.fast_udp6_checksum_ok`` / ``mrcnet.wire.icrc.fast_icrc``).

    ``reth_per_packet``: RETH's DMA length is this packet's payload length, as mrcnet
    sends it (docs/DECISIONS.md), and must agree with the IPv6 and UDP lengths. False
    reads captures of implementations that put the message's length there (the IBTA
    meaning): the payload is what the lengths hold, and a data frame whose switch fixed
    the lengths after trimming is recognised by having nothing after its headers (not
    even the ICRC) while its RETH promises payload.
    """
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    eth = Ethernet.unpack_from(mv, 0)
    if eth.ethertype != ETH_P_IPV6:
        raise MalformedFrame(MalformedReason.BAD_ETHERTYPE, f"EtherType {eth.ethertype:#06x}")
    outer = IPv6.unpack_from(mv, ETH_HEADER_LEN)
    off = ETH_HEADER_LEN + IPV6_HEADER_LEN
    ip_end = off + outer.payload_length
    if ip_end < len(mv) and len(mv) > _ETH_MIN_FRAME:
        raise _bad_len(f"frame has {len(mv)} bytes, IPv6 length says {ip_end}")
    end = min(ip_end, len(mv))
    mv = mv[:end]
    classes = dscp_classes()
    lasthop_dscp = outer.dscp == classes.trimmed_lasthop
    trimmed_dscp = lasthop_dscp or outer.dscp == classes.trimmed

    srh: SRH | None = None
    nh = outer.next_header
    if nh == IPPROTO_ROUTING:
        srh = SRH.unpack_from(mv, off)
        off += srh.length
        nh = srh.next_header
    inner: IPv6 | None = None
    claims: list[tuple[str, int]] = []
    if nh == IPPROTO_IPV6:
        inner = IPv6.unpack_from(mv, off)
        off += IPV6_HEADER_LEN
        if inner.next_header != IPPROTO_UDP:
            raise MalformedFrame(
                MalformedReason.BAD_NEXT_HEADER, f"inner next header {inner.next_header}"
            )
        claims.append(("inner IPv6", off + inner.payload_length))
    elif nh != IPPROTO_UDP:
        raise MalformedFrame(MalformedReason.BAD_NEXT_HEADER, f"next header {nh}")
    ip_payload_off = off - IPV6_HEADER_LEN if inner is not None else off

    udp = UDP.unpack_from(mv, off)
    if udp.dport != MRC_UDP_PORT:
        raise MalformedFrame(MalformedReason.BAD_UDP_PORT, f"UDP destination port {udp.dport}")
    if udp.length < UDP_HEADER_LEN + BTH_LEN + ICRC_LEN:
        raise _bad_len(f"UDP length {udp.length} cannot hold BTH and ICRC")
    udp_off = off
    claims.append(("UDP", off + udp.length))
    off += UDP_HEADER_LEN
    bth = BTH.unpack_from(mv, off)
    off += BTH_LEN
    frame = Frame(eth, outer, srh, inner, udp, bth, mv[0:0])

    op = bth.opcode
    if bth.dest_qp == ENDPOINT_QPN and op not in (Opcode.ENDPOINT_REQ, Opcode.ENDPOINT_RESP):
        raise MalformedFrame(
            MalformedReason.BAD_FIELD, f"{Opcode(op).name} to the endpoint QPN"
        )
    is_data = op in DATA_OPCODES
    if is_data:
        frame.meth = METH.unpack_from(mv, off)
        off += METH.LEN
        if bth.ts:
            frame.tseth = TSETH.unpack_from(mv, off)
            off += TSETH.LEN
        frame.reth = RETH.unpack_from(mv, off)
        off += RETH.LEN
        if op in IMM_OPCODES:
            frame.immdt = ImmDt.unpack_from(mv, off)
            off += ImmDt.LEN
        if reth_per_packet:
            claims.append(("RETH", off + frame.reth.length + ICRC_LEN))
    elif op == Opcode.SACK:
        frame.seth = SETH.unpack_from(mv, off)
        frame.cc = CCState.unpack_from(mv, off + SETH.LEN)
        off += SETH.LEN + CCState.LEN
    elif op == Opcode.ACK:
        frame.aeth = AETH.unpack_from(mv, off)
        off += AETH.LEN
    elif op == Opcode.NACK:
        frame.neth = NETH.unpack_from(mv, off)
        off += NETH.LEN
    elif op == Opcode.RELIABILITY_PROBE:
        frame.peth = PETH.unpack_from(mv, off)
        off += PETH.LEN
    else:  # ENDPOINT_REQ / ENDPOINT_RESP: the opcode set is closed (BTH checked it)
        if bth.dest_qp != ENDPOINT_QPN:
            raise MalformedFrame(
                MalformedReason.BAD_FIELD, f"endpoint operation to QPN {bth.dest_qp:#x}"
            )
        if op == Opcode.ENDPOINT_REQ:
            frame.erth = ERTH.unpack_from(mv, off)
            frame.endpoint_token = erth_token(mv, off)
            off += ERTH.LEN
        else:
            frame.eeth = EETH.unpack_from(mv, off)
            off += EETH.LEN
    if not is_data:
        claims.append((Opcode(op).name, off + ICRC_LEN))

    # Every inner layer must claim the same end; the outer IPv6 must agree too unless a
    # switch marked the frame trimmed (some fix the outer length, most leave it).
    claimed = claims[0][1]
    for name, value in claims[1:]:
        if value != claimed:
            raise _bad_len(f"{name} ends at {value}, {claims[0][0]} at {claimed}")
    if ip_end != claimed and not (is_data and trimmed_dscp and off <= ip_end < claimed):
        raise _bad_len(f"outer IPv6 ends at {ip_end}, inner headers at {claimed}")

    short = end < claimed
    if is_data:
        assert frame.reth is not None
        if reth_per_packet:
            frame.trimmed = trimmed_dscp or short
            frame.payload = mv[off : min(end, off + frame.reth.length)]
        else:
            cut = claimed - off < ICRC_LEN and frame.reth.length > 0  # lengths fixed
            frame.trimmed = trimmed_dscp or short or cut
            frame.payload = mv[off : min(end, claimed - ICRC_LEN)] if not frame.trimmed \
                else mv[off:end]
    elif short:
        raise MalformedFrame(
            MalformedReason.TRUNCATED, f"{Opcode(op).name} frame ends at {end}, needs {claimed}"
        )
    if frame.trimmed:
        frame.trim_lasthop = lasthop_dscp
        return frame

    if verify_icrc:
        got = bytes(mv[end - ICRC_LEN : end])
        want = icrc_fn(mv[ip_payload_off : end - ICRC_LEN], inner is not None)
        if got != want:
            raise MalformedFrame(MalformedReason.BAD_ICRC, f"ICRC {got.hex()} != {want.hex()}")
    if verify_checksum:
        udp_bytes = mv[udp_off:end]
        if inner is not None:
            ok = checksum_ok(inner.src, inner.dst, udp_bytes)
        elif srh is not None:
            ok = checksum_ok(outer.src, srh.final_segment, udp_bytes)
            if not ok:  # MRC's form: the final segment is a uSID container, shifted
                try:
                    ok = checksum_ok(outer.src, usid_final(srh.final_segment), udp_bytes)
                except ValueError:
                    ok = False
        else:
            # uSID mode without an inner header: the pseudo-header destination is the
            # fully shifted container; a plain IPv6 frame uses the destination as it is.
            ok = checksum_ok(outer.src, outer.dst, udp_bytes)
            if not ok:
                try:
                    ok = checksum_ok(outer.src, usid_final(outer.dst), udp_bytes)
                except ValueError:
                    ok = False
        if not ok:
            raise MalformedFrame(MalformedReason.BAD_CHECKSUM, "UDP checksum does not verify")
    return frame

