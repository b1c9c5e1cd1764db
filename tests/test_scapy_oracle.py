"""scapy as an oracle for the wire code: both decoders must agree on every field.

For random frames of every kind (data with every opcode, SACK/ACK, NACK, probe, endpoint)
in every route mode (uSID container, SRH segment list, plain IPv6; with and without the
inner IPv6 header), scapy's dissection of our bytes (scapy's own Ethernet, IPv6 and
IPv6ExtHdrSegmentRouting layers, :mod:`mrcnet.scapy` above UDP) must give the same value
for every field as :func:`mrcnet.wire.parse_frame`, and scapy recomputing the UDP checksum
and the ICRC must reproduce the bytes we wrote. The other direction too: frames scapy
builds from its layers parse with ``parse_frame`` and equal what our builders produce.
"""

from __future__ import annotations

import dataclasses
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import UDP as ScapyUDP
from scapy.layers.inet6 import IPv6 as ScapyIPv6
from scapy.layers.inet6 import (
    IPv6ExtHdrSegmentRouting,
    IPv6ExtHdrSegmentRoutingTLVHMAC,
    IPv6ExtHdrSegmentRoutingTLVIngressNode,
    IPv6ExtHdrSegmentRoutingTLVPad1,
    IPv6ExtHdrSegmentRoutingTLVPadN,
    in6_pseudoheader,
)
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from mrcnet.constants import (
    DATA_OPCODES,
    DSCP_TRIMMABLE,
    DSCP_TRIMMABLE_RETX,
    DSCP_TRIMMED,
    ECN,
    ENDPOINT_QPN,
    ETH_P_IPV6,
    IMM_OPCODES,
    MRC_UDP_PORT,
    NackReason,
    Opcode,
)
from mrcnet.scapy import (
    MRC_AETH,
    MRC_BTH,
    MRC_EETH,
    MRC_ERTH,
    MRC_METH,
    MRC_NETH,
    MRC_PETH,
    MRC_RETH,
    MRC_SETH,
    MRC_TSETH,
    MRC_CCState,
    MRC_ImmDt,
)
from mrcnet.wire import (
    NETH,
    SETH,
    CCState,
    Frame,
    Route,
    build_ack,
    build_data,
    build_endpoint,
    build_nack,
    build_probe,
    build_sack,
    parse_frame,
    usid_container,
    usid_final,
)
from mrcnet.wire.ethernet import mac_to_str

# The value and header strategies are tests/wire's (wire_strategies): pytest puts that
# folder on sys.path only when it collects it, so a run of this module alone adds it.
sys.path.append(str(Path(__file__).resolve().parent / "wire"))
from wire_strategies import (
    addrs,
    aeths,
    ccstates,
    conn_qpns,
    data_specs,
    eeths,
    erths,
    macs,
    neths,
    peths,
    seths,
    sint,
    uint,
)

# A few hundred examples in all, bounded: this machine's 2 cores are shared.
ORACLE = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# Field values and headers are drawn as in tests/wire (short names for the many uses).
u8, u16, u24, u32, s16 = uint(8), uint(16), uint(24), uint(32), sint(16)
qpn_conn, addr, mac = conn_qpns, addrs, macs


def a2b(text: str) -> bytes:
    """scapy prints addresses as text; compare them as 16 bytes."""
    return socket.inet_pton(socket.AF_INET6, text)


@st.composite
def routes(draw: st.DrawFn) -> Route:
    """A route in any mode: uSID container, SRH segment list or plain; encap or not."""
    mode = draw(st.sampled_from(["usid", "srh", "plain"]))
    kw: dict[str, Any] = {}
    if mode == "usid":
        block = draw(st.binary(min_size=4, max_size=4))
        ids = draw(st.lists(st.integers(1, 0xFFFF), min_size=1, max_size=6))
        kw["usid"] = usid_container(block, ids)
    elif mode == "srh":
        kw["segments"] = tuple(draw(st.lists(addr, min_size=1, max_size=5)))
    return Route(
        draw(mac), draw(mac), draw(addr), draw(addr), encap=draw(st.booleans()),
        hop_limit=draw(st.integers(1, 255)), **kw,
    )


def data_frames() -> st.SearchStrategy[tuple[Route, bytes]]:
    """A data frame: any WRITE opcode, immediates, timestamp, flags, DSCP/ECN (never the
    trimmed code point: trims are tested below), payload."""
    return data_specs(routes(), max_payload=96).map(lambda spec: (spec.route, spec.build()))


@st.composite
def sack_frames(draw: st.DrawFn) -> tuple[Route, bytes]:
    """A SACK frame with every SETH and CC_STATE field drawn."""
    seth, cc = draw(seths), draw(ccstates)
    route = draw(routes())
    return route, build_sack(
        route, ev=draw(u32), dest_qp=draw(qpn_conn), seth=seth, cc=cc, psn=draw(u24),
    )


@st.composite
def ack_frames(draw: st.DrawFn) -> tuple[Route, bytes]:
    """A cumulative ACK frame (AETH)."""
    route = draw(routes())
    return route, build_ack(route, ev=draw(u32), dest_qp=draw(qpn_conn), psn=draw(u24),
                            aeth=draw(aeths))


@st.composite
def nack_frames(draw: st.DrawFn) -> tuple[Route, bytes]:
    """A NACK frame of any reason."""
    neth = draw(neths)
    route = draw(routes())
    return route, build_nack(route, ev=draw(u32), dest_qp=draw(qpn_conn), neth=neth, psn=draw(u24))


@st.composite
def probe_frames(draw: st.DrawFn) -> tuple[Route, bytes]:
    """A reliability probe frame."""
    peth = draw(peths)
    route = draw(routes())
    frame = build_probe(route, ev=draw(u32), dest_qp=draw(qpn_conn), peth=peth, psn=draw(u24))
    return route, frame


@st.composite
def endpoint_frames(draw: st.DrawFn) -> tuple[Route, bytes]:
    """An endpoint request (ERTH) or response (EETH)."""
    route = draw(routes())
    hdr: dict[str, Any] = ({"erth": draw(erths)} if draw(st.booleans())
                           else {"eeth": draw(eeths)})
    return route, build_endpoint(route, ev=draw(u32), request_id=draw(u24), **hdr)


KINDS = {
    "data": data_frames(),
    "ack": ack_frames(),
    "sack": sack_frames(),
    "nack": nack_frames(),
    "probe": probe_frames(),
    "endpoint": endpoint_frames(),
}


def assert_ipv6_agrees(sp: Packet, ours: Any) -> None:
    """An IPv6 header as scapy and as mrcnet.wire decoded it."""
    assert isinstance(sp, ScapyIPv6)
    assert sp.version == ours.version == 6
    assert sp.tc == ours.traffic_class
    assert sp.fl == ours.flow_label
    assert sp.plen == ours.payload_length
    assert sp.nh == ours.next_header
    assert sp.hlim == ours.hop_limit
    assert a2b(sp.src) == ours.src
    assert a2b(sp.dst) == ours.dst


def assert_agrees(frame: bytes) -> tuple[Packet, Frame]:
    """Decode ``frame`` with both decoders and compare every field; return both."""
    f = parse_frame(frame)
    p = Ether(frame)
    assert p.dst == mac_to_str(f.eth.dst)
    assert p.src == mac_to_str(f.eth.src)
    assert p.type == f.eth.ethertype == ETH_P_IPV6

    outer = p[ScapyIPv6]
    assert_ipv6_agrees(outer, f.outer)
    nxt = outer.payload
    if f.srh is None:
        assert not p.haslayer(IPv6ExtHdrSegmentRouting)
    else:
        srh = nxt
        assert isinstance(srh, IPv6ExtHdrSegmentRouting)
        assert srh.nh == f.srh.next_header
        assert srh.len == f.srh.hdr_ext_len
        assert srh.type == 4
        assert srh.segleft == f.srh.segments_left
        assert srh.lastentry == f.srh.last_entry
        assert srh.tag == f.srh.tag
        flags = (
            srh.unused1 << 7 | srh.protected << 6 | srh.oam << 5 | srh.alert << 4
            | srh.hmac << 3 | srh.unused2
        )
        assert flags == f.srh.flags
        assert [a2b(a) for a in srh.addresses] == list(f.srh.segments)
        assert b"".join(bytes(t) for t in srh.tlv_objects) == f.srh.tlvs
        nxt = srh.payload
    if f.inner is None:
        assert isinstance(nxt, ScapyUDP)
    else:
        assert_ipv6_agrees(nxt, f.inner)
        nxt = nxt.payload

    udp = p[ScapyUDP]
    assert udp is nxt
    assert (udp.sport, udp.dport, udp.len, udp.chksum) == (
        f.udp.sport, f.udp.dport, f.udp.length, f.udp.checksum
    )
    assert udp.dport == MRC_UDP_PORT

    bth = udp.payload
    assert isinstance(bth, MRC_BTH)
    b = f.bth
    assert bth.opcode == b.opcode
    assert (bth.solicited, bth.migreq, bth.padcount, bth.version) == (b.se, b.migreq, b.pad, b.tver)
    assert bth.pkey == b.pkey
    assert bth.resv8 == 0
    assert bth.dqpn == b.dest_qp
    assert (bth.ackreq, bth.r, bth.rtx, bth.ts, bth.resv4) == (b.ack_req, b.r, b.rtx, b.ts, 0)
    assert bth.psn == b.psn
    assert bth.icrc == int.from_bytes(frame[-4:], "little")

    _assert_ext_agrees(p, f)
    load = p[Raw].load if p.haslayer(Raw) else b""
    assert load == bytes(f.payload)
    return p, f


# Each mrcnet header attribute, its scapy layer, and the scapy names of fields whose codec
# attribute is spelled otherwise.
_LAYERS: dict[str, tuple[type[Packet], dict[str, str]]] = {
    "meth": (MRC_METH, {}), "tseth": (MRC_TSETH, {}), "reth": (MRC_RETH, {"length": "dma_len"}),
    "immdt": (MRC_ImmDt, {}), "aeth": (MRC_AETH, {}), "seth": (MRC_SETH, {}),
    "cc": (MRC_CCState, {}), "neth": (MRC_NETH, {}), "peth": (MRC_PETH, {}),
    "erth": (MRC_ERTH, {}), "eeth": (MRC_EETH, {}),
}


def _assert_ext_agrees(p: Packet, f: Frame) -> None:
    """Each extension header present in exactly one decoder's view is a disagreement;
    every field of each agrees, and scapy's reserved fields are zero."""
    for attr, (layer, rename) in _LAYERS.items():
        hdr = getattr(f, attr)
        assert (hdr is not None) == p.haslayer(layer), attr
        if hdr is None:
            continue
        sp = p[layer]
        for name in (fl.name for fl in dataclasses.fields(hdr)):
            assert int(getattr(sp, rename.get(name, name))) == int(getattr(hdr, name)), (
                attr, name)
        for name in sp.fields:
            if "reserved" in name or name == "type_next":
                assert not sp.getfieldval(name) or sp.getfieldval(name) == b"\0" * len(
                    sp.getfieldval(name)), (attr, name)
    if f.erth is not None or f.eeth is not None:
        assert p[MRC_BTH].dqpn == ENDPOINT_QPN


def scapy_rebuild(frame: bytes, *, arrived: bool = False) -> bytes:
    """Dissect with scapy, drop the UDP checksum and ICRC, and let scapy compute them.

    With ``arrived`` the outer destination is first set to what a uSID frame carries when
    it reaches the receiver (the fully shifted container): for a frame without an inner
    header that is the pseudo-header destination, and scapy takes it from the outer header.
    """
    p = Ether(frame)
    if arrived:
        p[ScapyIPv6].dst = socket.inet_ntop(socket.AF_INET6, usid_final(a2b(p[ScapyIPv6].dst)))
    del p[ScapyUDP].chksum
    p[MRC_BTH].icrc = None
    return bytes(p)


def assert_checksums_agree(frame: bytes, route: Route) -> None:
    """scapy's UDP checksum and ICRC of the frame equal the ones we wrote.

    A uSID frame without an inner header is checked as it arrives (container shifted to
    its last uSID), since its pseudo-header destination is that final address.
    """
    arrived = route.usid is not None and not route.encap
    if route.segments is not None and not route.encap:
        # scapy's pseudo-header takes the SRH's final segment (list[0]), as RFC 8754 says.
        udp = Ether(frame)[ScapyUDP]
        ph = in6_pseudoheader(socket.IPPROTO_UDP, udp, udp.len)
        assert a2b(ph.dst) == route.segments[-1] == route.final_dst
    rebuilt = scapy_rebuild(frame, arrived=arrived)
    if not arrived:
        assert rebuilt == frame
        return
    # Only the outer destination (bytes 38..54) differs; checksum and ICRC must match.
    assert Ether(rebuilt)[ScapyUDP].chksum == Ether(frame)[ScapyUDP].chksum
    assert rebuilt[:38] + rebuilt[54:] == frame[:38] + frame[54:]
    assert rebuilt[38:54] == usid_final(frame[38:54])


@pytest.mark.parametrize("kind", sorted(KINDS))
@ORACLE
@given(data=st.data())
def test_scapy_decodes_like_parse_frame(kind: str, data: st.DataObject) -> None:
    """Every field agrees, and scapy recomputes the same UDP checksum and ICRC."""
    route, frame = data.draw(KINDS[kind])
    _, f = assert_agrees(frame)
    assert not f.trimmed
    assert_checksums_agree(frame, route)


def test_scapy_summary_names_mrc_opcode() -> None:
    """scapy's one-line summary shows the MRC opcode (dissection is MRC's, not RoCE's)."""
    r = Route(b"\x02" * 6, b"\x02" * 6, a2b("fc00:1::1"), a2b("fc00:2::1"))
    frame = build_nack(r, ev=1, dest_qp=5, neth=NETH(NackReason.TRIMMED, 1, 3))
    assert "NACK" in Ether(frame).summary()


@settings(max_examples=60, deadline=None)
@given(built=data_frames(), size=st.integers(0, 200), fix_len=st.booleans())
def test_trimmed_frame_headers_agree(
    built: tuple[Route, bytes], size: int, fix_len: bool
) -> None:
    """A switch-trimmed frame (DSCP re-marked; outer IP length left, or fixed as a few
    switches do) decodes alike up to the cut; scapy takes no ICRC from it."""
    frame = built[1]
    f0 = parse_frame(frame)
    hdr_end = len(frame) - 4 - len(f0.payload)
    cut = hdr_end + min(size, len(f0.payload))  # the ICRC goes with the payload
    trimmed = bytearray(frame[:cut])
    tc = (DSCP_TRIMMED << 2) | f0.outer.ecn
    trimmed[14] = (trimmed[14] & 0xF0) | (tc >> 4)
    trimmed[15] = (trimmed[15] & 0x0F) | ((tc & 0x0F) << 4)
    if fix_len:
        trimmed[18:20] = (cut - 54).to_bytes(2, "big")
    f = parse_frame(bytes(trimmed))
    assert f.trimmed
    p = Ether(bytes(trimmed))
    assert p[ScapyIPv6].tc >> 2 == DSCP_TRIMMED
    assert p[ScapyIPv6].plen == f.outer.payload_length
    assert f.outer.payload_length == (cut - 54 if fix_len else f0.outer.payload_length)
    assert "icrc" not in p[MRC_BTH].fields
    bth = p[MRC_BTH]
    assert (bth.opcode, bth.dqpn, bth.psn) == (f.bth.opcode, f.bth.dest_qp, f.bth.psn)
    assert f.reth is not None
    r = p[MRC_RETH]
    assert (r.va, r.rkey, r.dma_len) == (f.reth.va, f.reth.rkey, f.reth.length)
    load = p[Raw].load if p.haslayer(Raw) else b""
    assert load == bytes(f.payload) == bytes(f0.payload)[: len(f.payload)]


# --- the other direction: scapy builds, parse_frame reads ---------------------------------


def scapy_route_layers(route: Route, ev: int, dscp: int, ecn: int) -> Packet:
    """Ethernet / outer IPv6 [/ SRH] [/ inner IPv6] for ``route``, built from scapy layers."""
    def s(a: bytes) -> str:
        return socket.inet_ntop(socket.AF_INET6, a)

    tc = dscp << 2 | ecn
    # The EV's default order: low 16 bits in the source port, high 16 in the flow labels.
    pkt = Ether(dst=mac_to_str(route.dst_mac), src=mac_to_str(route.src_mac)) / ScapyIPv6(
        src=s(route.src_ip), dst=s(route.outer_dst), tc=tc, fl=ev >> 16,
        hlim=route.hop_limit,
    )
    upper_nh = socket.IPPROTO_IPV6 if route.encap else socket.IPPROTO_UDP
    if route.segments is not None:
        pkt = pkt / IPv6ExtHdrSegmentRouting(
            nh=upper_nh, addresses=[s(x) for x in reversed(route.segments)],
            segleft=len(route.segments) - 1,
        )
    else:
        pkt[ScapyIPv6].nh = upper_nh
    if route.encap:
        pkt = pkt / ScapyIPv6(src=s(route.src_ip), dst=s(route.dst_ip), tc=tc, fl=ev >> 16,
                              nh=17)
    return pkt / ScapyUDP(sport=ev & 0xFFFF, dport=MRC_UDP_PORT)


@settings(max_examples=60, deadline=None)
@given(
    route=routes(), ev=u32, op=st.sampled_from(sorted(DATA_OPCODES)), qp=qpn_conn, psn=u24,
    va=st.integers(0, 2**64 - 1), rkey=u32, payload=st.binary(max_size=64),
    rqmsn=u16, msn=u16, imm=u32, ts=st.none() | u16, rtx=st.booleans(),
    ack_req=st.booleans(),
)
def test_scapy_built_data_parses(
    route: Route, ev: int, op: int, qp: int, psn: int, va: int, rkey: int, payload: bytes,
    rqmsn: int, msn: int, imm: int, ts: int | None, rtx: bool, ack_req: bool,
) -> None:
    """A data frame built from scapy layers parses, fields intact, and equals ours."""
    # scapy's pseudo-header would use the unshifted container (covered by the oracle test).
    assume(route.usid is None or route.encap)
    with_imm = op in IMM_OPCODES
    dscp = DSCP_TRIMMABLE_RETX if rtx else DSCP_TRIMMABLE  # a sender's default classes
    pkt = scapy_route_layers(route, ev, dscp, ECN.ECT0) / MRC_BTH(
        opcode=op, dqpn=qp, psn=psn, ackreq=ack_req, rtx=rtx, ts=ts is not None
    ) / MRC_METH(rqmsn=rqmsn, msn=msn)
    if ts is not None:
        pkt = pkt / MRC_TSETH(timestamp=ts)
    pkt = pkt / MRC_RETH(va=va, rkey=rkey, dma_len=len(payload))
    if with_imm:
        pkt = pkt / MRC_ImmDt(imm=imm)
    raw = bytes(pkt / Raw(payload)) if payload else bytes(pkt)
    f = parse_frame(raw)  # checks the checksum and ICRC scapy computed
    assert (f.opcode, f.bth.dest_qp, f.bth.psn, f.bth.rtx, f.bth.ack_req, f.bth.ts) == (
        op, qp, psn, rtx, ack_req, ts is not None
    )
    assert f.ev == ev
    assert f.reth is not None and (f.reth.va, f.reth.rkey) == (va, rkey)
    assert bytes(f.payload) == payload
    assert f.meth is not None and (f.meth.rqmsn, f.meth.msn) == (rqmsn, msn)
    assert (f.immdt.imm if f.immdt else None) == (imm if with_imm else None)
    assert (f.tseth.timestamp if f.tseth else None) == ts
    ours = build_data(
        route, ev=ev, opcode=op, dest_qp=qp, psn=psn, va=va, rkey=rkey, payload=payload,
        rqmsn=rqmsn, msn=msn, imm=imm if with_imm else None, timestamp=ts,
        rtx=rtx, ack_req=ack_req,
    )
    assert raw == ours


@settings(max_examples=60, deadline=None)
@given(route=routes(), ev=u32, qp=qpn_conn, psn=u24, seth=seths, cc=ccstates)
def test_scapy_built_sack_parses(
    route: Route, ev: int, qp: int, psn: int, seth: SETH, cc: CCState,
) -> None:
    """A SACK frame built from scapy layers parses, fields intact, and equals ours."""
    assume(route.usid is None or route.encap)  # as in the data test above
    pkt = scapy_route_layers(route, ev, 46, ECN.NOT_ECT) / MRC_BTH(
        opcode=Opcode.SACK, dqpn=qp, psn=psn
    ) / MRC_SETH(
        m=seth.m, pr=seth.pr, ack_psn_offset=seth.ack_psn_offset, entropy=seth.entropy,
        spdcid=seth.spdcid, dpdcid=seth.dpdcid, cack_psn=seth.cack_psn, cc_type=seth.cc_type,
        cc_flags=seth.cc_flags, mpr=seth.mpr, sack_offset=seth.sack_offset,
        sack_bitmap=seth.sack_bitmap,
    ) / MRC_CCState(timestamp=cc.timestamp, ooo_count=cc.ooo_count,
                    restore_cwnd=cc.restore_cwnd, rcv_cwnd_pen=cc.rcv_cwnd_pen,
                    rcvd_bytes=cc.rcvd_bytes)
    raw = bytes(pkt)
    f = parse_frame(raw)
    assert (f.opcode, f.seth, f.cc, f.ev) == (Opcode.SACK, seth, cc, ev)
    assert raw == build_sack(route, ev=ev, dest_qp=qp, seth=seth, cc=cc, psn=psn)


def test_checksum_that_computes_to_zero_is_sent_as_ffff() -> None:
    """RFC 8200: a UDP checksum that computes to 0 goes out as 0xFFFF; scapy agrees.

    The rkey was found by search so that this frame's checksum computes to exactly zero.
    """
    from mrcnet.wire.samples import PLAIN

    frame = build_data(
        PLAIN, ev=1, opcode=Opcode.WRITE_ONLY, dest_qp=1, psn=2, va=3, rkey=87347,
        payload=b"ab",
    )
    _, f = assert_agrees(frame)
    assert f.udp.checksum == 0xFFFF
    assert_checksums_agree(frame, PLAIN)


_SEGS = ["fc00:2::1", "fc00:0:2001::", "fc00:0:1001::"]  # as on the wire: final first
_SRH_VARIANTS: dict[str, dict[str, Any]] = {
    "padn-tlv": {"tlv_objects": [IPv6ExtHdrSegmentRoutingTLVPadN(padding=bytes(4))]},
    "pad1-tlvs": {"tlv_objects": [IPv6ExtHdrSegmentRoutingTLVPad1()] * 8},
    "ingress-node-tlv": {"tlv_objects": [IPv6ExtHdrSegmentRoutingTLVIngressNode()]},
    "hmac-tlv": {"tlv_objects": [IPv6ExtHdrSegmentRoutingTLVHMAC(hmac=b"\x11" * 32)]},
    "mid-path": {"segleft": 1},
    "last-hop": {"segleft": 0},
    "tag-and-oam-flag": {"tag": 0x1234, "oam": 1},
}


@pytest.mark.parametrize("encap", [False, True], ids=["noencap", "encap"])
@pytest.mark.parametrize("variant", sorted(_SRH_VARIANTS))
def test_scapy_built_srh_variants_parse(variant: str, encap: bool) -> None:
    """SRHs our builder never writes (TLVs, flags, a frame caught mid-path) still parse,
    with the checksum taken against the final segment, and both decoders agree."""
    fields: dict[str, Any] = {"segleft": 2, **_SRH_VARIANTS[variant]}
    srh = IPv6ExtHdrSegmentRouting(nh=41 if encap else 17, addresses=_SEGS, **fields)
    pkt = Ether(dst="02:00:00:00:10:01", src="02:00:00:00:01:01") / ScapyIPv6(
        src="fc00:1::1", dst=_SEGS[fields["segleft"]], tc=26 << 2 | 2, fl=5
    ) / srh
    if encap:
        pkt = pkt / ScapyIPv6(src="fc00:1::1", dst="fc00:2::1", nh=17)
    pkt = pkt / ScapyUDP(sport=1, dport=MRC_UDP_PORT) / MRC_BTH(
        opcode=Opcode.WRITE_ONLY, dqpn=5, psn=9
    ) / MRC_METH() / MRC_RETH(va=1, rkey=2, dma_len=4) / Raw(b"abcd")
    frame = bytes(pkt)
    _, f = assert_agrees(frame)
    assert f.srh is not None and f.srh.segments_left == fields["segleft"]
    assert f.srh.final_segment == a2b("fc00:2::1")
    assert bytes(f.payload) == b"abcd"
    assert scapy_rebuild(frame) == frame


@pytest.mark.parametrize("sport", [53, 4789, MRC_UDP_PORT])
def test_mrc_binding_wins_over_source_port_bindings(sport: int) -> None:
    """Half of the EV rides in the UDP source port, so it may equal a port scapy binds
    another protocol to (DNS 53, VXLAN 4789 ...); destination 4791 must still mean MRC, and
    MRC's BTH, not scapy's RoCE BTH (whose byte after DestQP differs)."""
    import scapy.layers.dns  # binds UDP sport 53 to DNS
    import scapy.layers.vxlan  # noqa: F401 - binds UDP sport 4789 to VXLAN

    r = Route(b"\x02" * 6, b"\x02" * 6, a2b("fc00:1::1"), a2b("fc00:2::1"))
    frame = build_data(
        r, ev=(7 << 16) | sport, opcode=Opcode.WRITE_ONLY, dest_qp=1, psn=2, va=3, rkey=4,
        timestamp=5, rtx=True,
    )
    bth = Ether(frame)[ScapyUDP].payload
    assert type(bth) is MRC_BTH
    assert (bth.rtx, bth.ts) == (1, 1)
    assert_agrees(frame)


# --- the sample pcap: scapy against `decode --json`, field for field -------------------------

_JSON_LAYERS: dict[str, type[Packet]] = {
    "meth": MRC_METH, "tseth": MRC_TSETH, "reth": MRC_RETH, "aeth": MRC_AETH,
    "seth": MRC_SETH, "cc_state": MRC_CCState, "neth": MRC_NETH, "peth": MRC_PETH,
    "erth": MRC_ERTH, "eeth": MRC_EETH,
}


def test_scapy_agrees_with_decode_json_on_the_sample_pcap(tmp_path: Path) -> None:
    """Every frame of `sample-pcap` (the trimmed one too): the JSON decoder's opcode, PSN,
    QPN and every field of every MRC header equal scapy's fields of the same name."""
    import io
    import json

    from mrcnet.wire.__main__ import main as wire_main
    from mrcnet.wire.pcap import read_pcap

    pcap = tmp_path / "s.pcap"
    assert wire_main(["sample-pcap", str(pcap)], out=io.StringIO()) == 0
    out = io.StringIO()
    assert wire_main(["decode", str(pcap), "--json"], out=out) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    frames = [r.data for r in read_pcap(pcap)]
    assert len(rows) == len(frames) > 20
    for row, frame in zip(rows, frames, strict=True):
        p = Ether(frame)
        bth = p[MRC_BTH]
        assert (bth.opcode, bth.psn, bth.dqpn) == (row["opcode"], row["psn"], row["dqpn"])
        for key, layer in _JSON_LAYERS.items():
            assert (key in row) == p.haslayer(layer), (row["index"], key)
            if key in row:
                sp = p[layer]
                for name, value in row[key].items():
                    assert int(getattr(sp, name)) == value, (row["index"], key, name)
        assert ("immdt" in row) == p.haslayer(MRC_ImmDt)
        if "immdt" in row:
            assert p[MRC_ImmDt].imm == row["immdt"]
        load = p[Raw].load if p.haslayer(Raw) else b""
        assert len(load) == row["payload_len"], row["index"]
