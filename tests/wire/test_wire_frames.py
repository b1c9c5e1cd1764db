"""Whole frames: parse_frame(build_x(...)) gives back every field and the payload.

Every kind (data opcodes with/without immediate and timestamp, SACK, ACK, NACK of each
reason, probe, endpoint EV probe / port status) in every mode (uSID, SRH, plain) with and
without the inner IPv6 header.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wire_strategies import Spec, any_specs, control_specs, data_specs, layout, routes

from mrcnet.constants import (
    DATA_OPCODES,
    DEFAULT_HOP_LIMIT,
    DSCP_CONTROL,
    ECN,
    ENDPOINT_QPN,
    ETH_P_IPV6,
    IMM_OPCODES,
    IPPROTO_IPV6,
    IPPROTO_ROUTING,
    IPPROTO_UDP,
    MRC_UDP_PORT,
    EndpointOp,
    NackReason,
    Opcode,
    SackMode,
)
from mrcnet.wire import (
    AETH,
    BTH,
    EETH,
    ERTH,
    METH,
    NETH,
    PETH,
    SETH,
    CCState,
    Frame,
    Route,
    build_data,
    build_endpoint,
    build_nack,
    build_sack,
    ip6,
    parse_frame,
    usid_container,
    usid_final,
)

MODES = [(m, e) for m in ("usid", "srh", "plain") for e in (True, False)]
MODE_IDS = [f"{m}-{'encap' if e else 'noencap'}" for m, e in MODES]


def check_route(f: Frame, r: Route, ev: int) -> None:
    """Ethernet, outer IPv6, SRH, inner IPv6 and UDP agree with the route and EV."""
    assert f.eth.dst == r.dst_mac and f.eth.src == r.src_mac and f.eth.ethertype == ETH_P_IPV6
    assert f.outer.src == r.src_ip
    assert f.outer.dst == r.outer_dst
    assert f.outer.hop_limit == r.hop_limit
    assert f.ev == ev
    assert f.outer.flow_label == ev >> 16  # the default EV order: sport = low 16
    assert f.udp.sport == ev & 0xFFFF and f.udp.dport == MRC_UDP_PORT
    upper = IPPROTO_IPV6 if r.encap else IPPROTO_UDP
    if r.segments is not None:
        assert f.srh is not None
        assert f.outer.next_header == IPPROTO_ROUTING
        assert f.srh.next_header == upper
        assert f.srh.segments == tuple(reversed(r.segments))
        assert f.srh.segments_left == len(r.segments) - 1
        assert f.srh.active_segment == f.outer.dst
        assert f.srh.final_segment == r.final_dst
    elif r.usid_srh is not None:  # MRC's form: the second container in a reduced SRH
        assert f.srh is not None and f.outer.next_header == IPPROTO_ROUTING
        assert f.srh.next_header == upper
        assert f.srh.segments == (r.usid_srh,) and f.srh.segments_left == 1
        assert f.srh.active_segment is None and f.outer.dst == r.usid
    else:
        assert f.srh is None
        assert f.outer.next_header == upper
    if r.encap:
        assert f.inner is not None
        assert f.inner.src == r.src_ip and f.inner.dst == r.dst_ip
        assert f.inner.next_header == IPPROTO_UDP
        assert f.inner.hop_limit == DEFAULT_HOP_LIMIT
        assert f.inner.flow_label == ev >> 16
        assert (f.inner.dscp, f.inner.ecn) == (f.outer.dscp, f.outer.ecn)
        assert f.inner.payload_length == f.udp.length
    else:
        assert f.inner is None


def check_frame(spec: Spec, raw: bytes, f: Frame) -> None:
    """Every field the builder was given comes back from the parser."""
    kw = spec.kw
    check_route(f, spec.route, kw["ev"])
    assert f.trimmed is False
    lay = layout(raw)
    assert f.udp.length == len(raw) - lay.udp
    assert f.outer.payload_length == len(raw) - 54
    if spec.kind == "data":
        op = kw["opcode"]
        assert f.bth.opcode == op and f.opcode is Opcode(op) and f.is_data
        assert f.bth.dest_qp == kw["dest_qp"] and f.bth.psn == kw["psn"]
        assert f.bth.rtx == kw["rtx"] and f.bth.ack_req == kw["ack_req"]
        assert f.bth.ts == (kw["timestamp"] is not None)
        assert f.outer.dscp == kw["dscp"] and f.outer.ecn == kw["ecn"]
        assert f.ce == (kw["ecn"] == ECN.CE)
        assert f.reth is not None
        assert (f.reth.va, f.reth.rkey, f.reth.length) == (kw["va"], kw["rkey"], len(kw["payload"]))
        assert bytes(f.payload) == kw["payload"]
        assert f.meth == METH(kw.get("rqmsn", 0), kw.get("msn", 0))
        if op in IMM_OPCODES:
            assert f.immdt is not None and f.immdt.imm == kw["imm"]
        else:
            assert f.immdt is None
        if kw.get("timestamp") is None:
            assert f.tseth is None
        else:
            assert f.tseth is not None and f.tseth.timestamp == kw["timestamp"]
        assert (f.aeth, f.seth, f.cc, f.neth, f.peth, f.erth, f.eeth) == (None,) * 7
        return
    assert not f.is_data and f.reth is None and bytes(f.payload) == b""
    assert f.outer.dscp == DSCP_CONTROL and f.outer.ecn == ECN.NOT_ECT
    got = {k: getattr(f, k) for k in ("aeth", "seth", "cc", "neth", "peth", "erth", "eeth")}
    want: dict[str, object] = dict.fromkeys(got)
    if spec.kind == "sack":
        assert f.opcode is Opcode.SACK
        assert f.bth.dest_qp == kw["dest_qp"] and f.bth.psn == kw["psn"]
        want.update(seth=kw["seth"], cc=kw["cc"] or CCState())
    elif spec.kind == "ack":
        assert f.opcode is Opcode.ACK
        assert f.bth.dest_qp == kw["dest_qp"] and f.bth.psn == kw["psn"]
        want.update(aeth=kw.get("aeth") or AETH())
    elif spec.kind == "nack":
        assert f.opcode is Opcode.NACK
        assert f.bth.dest_qp == kw["dest_qp"] and f.bth.psn == kw["psn"]
        want.update(neth=kw["neth"])
    elif spec.kind == "probe":
        assert f.opcode is Opcode.RELIABILITY_PROBE and f.bth.ack_req
        assert f.bth.dest_qp == kw["dest_qp"] and f.bth.psn == kw["psn"]
        want.update(peth=kw["peth"])
    else:
        resp = "eeth" in kw
        assert f.opcode is (Opcode.ENDPOINT_RESP if resp else Opcode.ENDPOINT_REQ)
        assert f.bth.dest_qp == ENDPOINT_QPN and f.bth.psn == kw["request_id"]
        want.update(eeth=kw["eeth"]) if resp else want.update(erth=kw["erth"])
    assert got == want
    assert f.meth is None and f.immdt is None and f.tseth is None


def roundtrip(spec: Spec) -> None:
    """Build, parse from bytes, bytearray and memoryview, and compare."""
    raw = spec.build()
    for buf in (raw, bytearray(raw), memoryview(raw)):
        check_frame(spec, raw, parse_frame(buf))


@pytest.mark.parametrize(("mode", "encap"), MODES, ids=MODE_IDS)
def test_data_roundtrip(mode: str, encap: bool) -> None:
    """Every WRITE opcode, with/without immediate and timestamp, round-trips."""

    @settings(max_examples=80, deadline=None)
    @given(spec=data_specs(routes(mode, encap)))
    def check(spec: Spec) -> None:
        roundtrip(spec)

    check()


@pytest.mark.parametrize(("mode", "encap"), MODES, ids=MODE_IDS)
def test_control_roundtrip(mode: str, encap: bool) -> None:
    """SACK/ACK, NACK, probe and endpoint frames round-trip."""

    @settings(max_examples=80, deadline=None)
    @given(spec=control_specs(routes(mode, encap)))
    def check(spec: Spec) -> None:
        roundtrip(spec)

    check()


# --- explicit coverage of each kind (so no combination is left to chance) ------------------


def _route(mode: str, encap: bool) -> Route:
    kw: dict[str, object] = {}
    if mode == "usid":
        kw["usid"] = usid_container(ip6("fc00::")[:4], [0x11, 0x22, 0x33])
    elif mode == "srh":
        kw["segments"] = (ip6("fd00:5::1"), ip6("fd00:6::1"), ip6("fd00:b::2"))
    return Route(
        bytes.fromhex("020000000001"), bytes.fromhex("020000000002"),
        ip6("fd00:a::2"), ip6("fd00:b::2"), encap=encap, **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(("mode", "encap"), MODES, ids=MODE_IDS)
@pytest.mark.parametrize("opcode", sorted(DATA_OPCODES), ids=lambda o: Opcode(o).name)
@pytest.mark.parametrize("timestamp", [None, 0, 0xFFFF])
def test_each_data_opcode(mode: str, encap: bool, opcode: int, timestamp: int | None) -> None:
    """Each data opcode x timestamp x mode, with a payload of odd length."""
    imm = {"imm": 0xDEADBEEF} if opcode in IMM_OPCODES else {}
    spec = Spec("data", _route(mode, encap), dict(
        ev=0xA5A55A5A, opcode=opcode, dest_qp=0x123456, psn=0xFFFFFF, va=2**64 - 1,
        rkey=0x01020304, payload=bytes(range(255)), timestamp=timestamp, rtx=True,
        ack_req=True, ecn=ECN.CE, dscp=0, rqmsn=0xFFFF, msn=0xABCD, **imm,
    ))
    roundtrip(spec)


@pytest.mark.parametrize(("mode", "encap"), MODES, ids=MODE_IDS)
@pytest.mark.parametrize("reason", list(NackReason), ids=lambda r: r.name)
def test_each_nack_reason(mode: str, encap: bool, reason: NackReason) -> None:
    """A NACK of each reason round-trips."""
    neth = NETH(reason, entropy=0xFFFFFFFF, nack_psn=0x10, timestamp=0x1234, vendor=0xFF,
                spdcid=0xFFFF, dpdcid=1, cc_type=2, cc_flags=0xF)
    roundtrip(Spec("nack", _route(mode, encap), dict(ev=7, dest_qp=9, neth=neth, psn=3)))


@pytest.mark.parametrize(("mode", "encap"), MODES, ids=MODE_IDS)
@pytest.mark.parametrize("pr", [False, True])
@pytest.mark.parametrize("mode_m", list(SackMode), ids=lambda m: m.name)
def test_each_sack(mode: str, encap: bool, pr: bool, mode_m: SackMode) -> None:
    """SACK, each M value, PR or not, every field at its edge, CC state given."""
    seth = SETH(0xFFFFFE, 0x89ABCDEF, -5, 7, 2**64 - 1, mode_m, pr, 0xFFFF, 1, 15, 15, 255)
    cc = CCState(0xFFFF, 0x7FFF, True, 127, 0xFFFFFF)
    roundtrip(Spec("sack", _route(mode, encap), dict(
        ev=0x10001, dest_qp=1, seth=seth, cc=cc, psn=0,
    )))


@pytest.mark.parametrize(("mode", "encap"), MODES, ids=MODE_IDS)
def test_ack(mode: str, encap: bool) -> None:
    """A cumulative ACK (AETH) round-trips."""
    roundtrip(Spec("ack", _route(mode, encap), dict(
        ev=0x10001, dest_qp=1, psn=0xFFFFFF, aeth=AETH(0x1F, 0xABCDEF))))


@pytest.mark.parametrize(("mode", "encap"), MODES, ids=MODE_IDS)
@pytest.mark.parametrize("response", [False, True])
@pytest.mark.parametrize("op", list(EndpointOp), ids=lambda o: o.name)
def test_each_endpoint(mode: str, encap: bool, response: bool, op: EndpointOp) -> None:
    """EV probe and port status, request and response."""
    kw: dict[str, object] = dict(ev=0xCAFEF00D, request_id=42)
    if response:
        kw["eeth"] = EETH(op, 9)
    else:
        kw["erth"] = ERTH(op, 0xF000000B, 9, vendor=1)
    roundtrip(Spec("endpoint", _route(mode, encap), kw))


@pytest.mark.parametrize(("mode", "encap"), MODES, ids=MODE_IDS)
def test_probe(mode: str, encap: bool) -> None:
    """A reliability probe round-trips."""
    peth = PETH(probe_id=0xFFFF, timestamp=0xFFFF, vendor=3, spdcid=4, dpdcid=5, tsr=True)
    roundtrip(Spec("probe", _route(mode, encap), dict(ev=0x1234, dest_qp=5, peth=peth,
                                                      psn=0xABCDEF)))


# --- builder argument checks ------------------------------------------------------------------


def test_builder_rejects_bad_arguments() -> None:
    """Non-WRITE opcodes, missing/unexpected immediates and bad routes raise ValueError."""
    r = _route("usid", True)
    base: dict[str, Any] = dict(ev=1, dest_qp=1, psn=1, va=0, rkey=0)
    with pytest.raises(ValueError):
        build_data(r, opcode=Opcode.SACK, **base)
    with pytest.raises(ValueError):
        build_data(r, opcode=Opcode.WRITE_ONLY_IMM, msn=1 << 16, imm=1, **base)
    with pytest.raises(ValueError):
        build_data(r, opcode=Opcode.WRITE_ONLY_IMM, **base)
    with pytest.raises(ValueError):
        build_data(r, opcode=Opcode.WRITE_ONLY, imm=1, **base)
    with pytest.raises(ValueError):
        build_data(r, opcode=Opcode.WRITE_ONLY, ev=2**32, dest_qp=1, psn=1, va=0, rkey=0)
    with pytest.raises(ValueError):
        build_data(r, opcode=Opcode.WRITE_ONLY, ev=1, dest_qp=1, psn=2**24, va=0, rkey=0)
    with pytest.raises(ValueError):
        build_nack(r, ev=1, dest_qp=2**24, neth=NETH(NackReason.TRIMMED, 1, 1))
    with pytest.raises(ValueError):
        Route(bytes(6), bytes(6), bytes(16), bytes(16), usid=bytes(16), segments=(bytes(16),))
    with pytest.raises(ValueError):
        Route(bytes(6), bytes(6), bytes(16), bytes(16), segments=())
    ok = dict(opcode=Opcode.WRITE_ONLY, **base)
    for bad_route in (
        Route(bytes(6), bytes(6), bytes(16), bytes(16), hop_limit=256),
        Route(bytes(6), bytes(6), bytes(15), bytes(16)),
        Route(bytes(6), bytes(6), bytes(16), bytes(17), encap=True),
        Route(bytes(5), bytes(6), bytes(16), bytes(16)),
        Route(bytes(6), bytes(6), bytes(16), bytes(16), segments=(bytes(16), bytes(8))),
    ):
        with pytest.raises(ValueError):
            build_data(bad_route, **ok)
    with pytest.raises(ValueError):
        build_data(r, dscp=64, **ok)
    with pytest.raises(ValueError):
        build_data(r, ecn=4, **ok)
    with pytest.raises(ValueError):  # UDP length would overflow 16 bits
        build_data(r, payload=bytes(65536 - 8 - 12 - 4 - 16 - 4 + 1), **ok)
    with pytest.raises(ValueError):  # outer IPv6 payload length would overflow 16 bits
        build_data(r, payload=bytes(65535 - 40 - 8 - 12 - 4 - 16 - 4 + 1), **ok)
    assert build_data(r, payload=bytes(65535 - 40 - 8 - 12 - 4 - 16 - 4), **ok)


@settings(max_examples=50, deadline=None)
@given(
    spec=any_specs(routes("usid")),
    container=st.lists(st.integers(1, 0xFFFF), min_size=1, max_size=6),
)
def test_with_usid_changes_only_the_path(spec: Spec, container: list[int]) -> None:
    """Route.with_usid keeps everything but the outer destination."""
    new = usid_container(b"\xfc\x00\x00\x00", container)
    r2 = spec.route.with_usid(new)
    assert r2.outer_dst == new and r2.usid_srh == spec.route.usid_srh
    assert r2.final_dst == usid_final(r2.usid_srh or new)
    assert (r2.src_ip, r2.dst_ip, r2.encap, r2.hop_limit) == (
        spec.route.src_ip, spec.route.dst_ip, spec.route.encap, spec.route.hop_limit,
    )
    roundtrip(Spec(spec.kind, r2, spec.kw))


def test_build_frame_generic_bth() -> None:
    """build_sack/build_endpoint produce the BTH their docstrings promise."""
    r = _route("plain", False)
    f = parse_frame(build_sack(r, ev=3, dest_qp=4, seth=SETH(3, 5)))
    assert f.bth == BTH(Opcode.SACK, 4, 0)
    f = parse_frame(build_endpoint(r, ev=3, request_id=9,
                                   erth=ERTH(EndpointOp.PORT_STATUS, 1)))
    assert f.bth == BTH(Opcode.ENDPOINT_REQ, ENDPOINT_QPN, 9)
