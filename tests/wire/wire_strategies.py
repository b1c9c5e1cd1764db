"""Hypothesis strategies and frame helpers shared by the tests in tests/wire/.

Imported by the test modules as ``wire_strategies`` (pytest puts this directory on
``sys.path``; the tests tree has no packages). Nothing here is a test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import strategies as st

from mrcnet.constants import (
    BTH_LEN,
    DATA_OPCODES,
    DSCP_TRIMMED,
    DSCP_TRIMMED_LASTHOP,
    ECN,
    ENDPOINT_QPN,
    ETH_HEADER_LEN,
    ICRC_LEN,
    IMM_OPCODES,
    IPV6_HEADER_LEN,
    SRH_TLV_PAD1,
    SRH_TLV_PADN,
    UDP_HEADER_LEN,
    USID_MAX_PER_CONTAINER,
    EndpointOp,
    NackReason,
    Opcode,
    SackMode,
)
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire import (
    AETH,
    EETH,
    ERTH,
    NETH,
    PETH,
    SETH,
    CCState,
    Route,
    build_ack,
    build_data,
    build_endpoint,
    build_nack,
    build_probe,
    build_sack,
    ip6,
    usid_container,
)
from mrcnet.wire.checksum import udp6_checksum
from mrcnet.wire.icrc import icrc


def malformed_reason(parse: Callable[..., object], *args: Any, **kw: Any) -> MalformedReason:
    """The reason of the :class:`MalformedFrame` that ``parse(*args, **kw)`` raises (fails
    the test when it raises none)."""
    with pytest.raises(MalformedFrame) as exc:
        parse(*args, **kw)
    return exc.value.reason


def uint(bits: int) -> st.SearchStrategy[int]:
    """Any unsigned value of ``bits`` bits, edges included."""
    return st.integers(0, (1 << bits) - 1)


def sint(bits: int) -> st.SearchStrategy[int]:
    """Any signed value of ``bits`` bits."""
    lim = 1 << (bits - 1)
    return st.integers(-lim, lim - 1)


macs = st.binary(min_size=6, max_size=6)
addrs = st.binary(min_size=16, max_size=16)
blocks = st.binary(min_size=4, max_size=4)
usid_values = st.integers(1, 0xFFFF)
usid_lists = st.lists(usid_values, min_size=1, max_size=USID_MAX_PER_CONTAINER)
evs = uint(32)
psns = uint(24)
qpns = uint(24)
# Connected QPs: every QPN but the one reserved for endpoint operations.
conn_qpns = uint(24).filter(lambda q: q != ENDPOINT_QPN)
ecns = st.sampled_from(list(ECN))
# A data frame marked a trimmed DSCP parses as trimmed on purpose: keep it out of round trips.
data_dscps = st.integers(0, 63).filter(lambda d: d not in (DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP))


@st.composite
def srh_tlvs(draw: st.DrawFn, max_items: int = 4) -> bytes:
    """A valid TLV area: Pad1, PadN and unknown TLVs, padded to a multiple of 8 octets."""
    out = bytearray()
    for _ in range(draw(st.integers(0, max_items))):
        kind = draw(st.sampled_from(["pad1", "padn", "other"]))
        if kind == "pad1":
            out.append(SRH_TLV_PAD1)
        elif kind == "padn":
            n = draw(st.integers(0, 12))
            out += bytes((SRH_TLV_PADN, n)) + bytes(n)
        else:
            value = draw(st.binary(max_size=12))
            # type 0 is Pad1 (no length byte); anything else is a length-prefixed TLV
            out += bytes((draw(st.integers(1, 255)), len(value))) + value
    rem = -len(out) % 8
    if rem == 1:
        out.append(SRH_TLV_PAD1)
    elif rem:
        out += bytes((SRH_TLV_PADN, rem - 2)) + bytes(rem - 2)
    return bytes(out)


@st.composite
def routes(draw: st.DrawFn, mode: str | None = None, encap: bool | None = None) -> Route:
    """A route in uSID, SRH or plain mode (any when ``mode`` is None), encap or not."""
    mode = mode or draw(st.sampled_from(["usid", "srh", "plain"]))
    encap = draw(st.booleans()) if encap is None else encap
    kw: dict[str, Any] = {}
    if mode == "usid":
        block = draw(blocks)
        kw["usid"] = usid_container(block, draw(usid_lists))
        if draw(st.booleans()):  # MRC's SRH form: a second container in a reduced SRH
            kw["usid_srh"] = usid_container(block, draw(usid_lists))
    elif mode == "srh":
        kw["segments"] = tuple(draw(st.lists(addrs, min_size=1, max_size=6)))
    return Route(
        draw(macs), draw(macs), draw(addrs), draw(addrs),
        encap=encap, hop_limit=draw(st.integers(0, 255)), **kw,
    )


@dataclass
class Spec:
    """How a frame was built: the builder's keyword arguments, for comparing after parse."""

    kind: str
    route: Route
    kw: dict[str, Any] = field(default_factory=dict)

    def build(self) -> bytes:
        """Build the frame this spec describes."""
        return BUILDERS[self.kind](self.route, **self.kw)


BUILDERS: dict[str, Callable[..., bytes]] = {
    "data": build_data,
    "ack": build_ack,
    "sack": build_sack,
    "nack": build_nack,
    "probe": build_probe,
    "endpoint": build_endpoint,
}

seths = st.builds(
    SETH, cack_psn=psns, entropy=evs, ack_psn_offset=sint(16), sack_offset=sint(16),
    sack_bitmap=uint(64), m=st.sampled_from(list(SackMode)), pr=st.booleans(),
    spdcid=uint(16), dpdcid=uint(16), cc_type=uint(4), cc_flags=uint(4), mpr=uint(8),
)
ccstates = st.builds(
    CCState, timestamp=uint(16), ooo_count=uint(15), restore_cwnd=st.booleans(),
    rcv_cwnd_pen=st.integers(0, 127), rcvd_bytes=uint(24),
)
aeths = st.builds(AETH, syndrome=uint(8), msn=uint(24))
neths = st.builds(
    NETH, reason=st.sampled_from(list(NackReason)), entropy=evs, nack_psn=psns,
    timestamp=uint(16), vendor=uint(8), spdcid=uint(16), dpdcid=uint(16), cc_type=uint(4),
    cc_flags=uint(4),
)
peths = st.builds(PETH, probe_id=uint(16), timestamp=uint(16), vendor=uint(8),
                  spdcid=uint(16), dpdcid=uint(16), tsr=st.booleans(), ftype=uint(4))
erths = st.builds(ERTH, op=st.sampled_from(list(EndpointOp)), port_status_mask=uint(32),
                  timestamp=uint(16), vendor=uint(8), tsr=st.booleans(), ftype=uint(4))
eeths = st.builds(EETH, op=st.sampled_from(list(EndpointOp)), timestamp=uint(16))


@st.composite
def data_specs(
    draw: st.DrawFn, route: st.SearchStrategy[Route] | None = None, max_payload: int = 300
) -> Spec:
    """Any WRITE data frame: every opcode, with/without immediate and timestamp."""
    opcode = draw(st.sampled_from(sorted(DATA_OPCODES)))
    kw: dict[str, Any] = dict(
        ev=draw(evs), opcode=opcode, dest_qp=draw(conn_qpns), psn=draw(psns), va=draw(uint(64)),
        rkey=draw(uint(32)), payload=draw(st.binary(max_size=max_payload)),
        rqmsn=draw(uint(16)), msn=draw(uint(16)),
        timestamp=draw(st.none() | uint(16)), rtx=draw(st.booleans()),
        ack_req=draw(st.booleans()), ecn=draw(ecns), dscp=draw(data_dscps),
    )
    if opcode in IMM_OPCODES:
        kw["imm"] = draw(uint(32))
    return Spec("data", draw(route if route is not None else routes()), kw)


@st.composite
def control_specs(draw: st.DrawFn, route: st.SearchStrategy[Route] | None = None) -> Spec:
    """Any control frame: SACK, ACK, NACK (every reason), probe, endpoint req/resp."""
    r = draw(route if route is not None else routes())
    kind = draw(st.sampled_from(["sack", "ack", "nack", "probe", "endpoint"]))
    ev = draw(evs)
    kw: dict[str, Any]
    if kind == "sack":
        kw = dict(ev=ev, dest_qp=draw(conn_qpns), seth=draw(seths), cc=draw(st.none() | ccstates),
                  psn=draw(psns))
    elif kind == "ack":
        kw = dict(ev=ev, dest_qp=draw(conn_qpns), psn=draw(psns), aeth=draw(aeths))
    elif kind == "nack":
        kw = dict(ev=ev, dest_qp=draw(conn_qpns), neth=draw(neths), psn=draw(psns))
    elif kind == "probe":
        kw = dict(ev=ev, dest_qp=draw(conn_qpns), peth=draw(peths), psn=draw(psns))
    elif draw(st.booleans()):
        kw = dict(ev=ev, request_id=draw(psns), erth=draw(erths))
    else:
        kw = dict(ev=ev, request_id=draw(psns), eeth=draw(eeths))
    return Spec(kind, r, kw)


def any_specs(route: st.SearchStrategy[Route] | None = None) -> st.SearchStrategy[Spec]:
    """A data or control frame spec."""
    return data_specs(route) | control_specs(route)


# --- byte-level layout of a built frame -------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Offsets of each header inside a frame built by mrcnet (for targeted corruption)."""

    outer: int
    srh: int | None
    inner: int | None
    udp: int
    bth: int
    ext: int
    payload: int  # end of the extension headers
    icrc: int  # start of the ICRC (= len(frame) - 4)
    end: int


# Wire facts spelled out from PROTOCOL-NOTES.md / RFC 8200 / RFC 8754 on purpose, instead of
# imported from mrcnet.constants: the layout walk is an independent oracle, and
# test_wire_headers checks that the constants agree with it.
SPEC = {
    "nh_routing": 43, "nh_ipv6": 41, "srh_fixed": 8, "bth_ts_flag": 0x10,
    "meth": 4, "tseth": 4, "reth": 16, "immdt": 4, "aeth": 4, "seth+cc": 28 + 8,
    "neth": 20, "peth": 16, "erth": 16, "eeth": 36,
}


def layout(frame: bytes) -> Layout:
    """Find the headers of a *valid* frame by walking next-header fields (no parser used)."""
    outer = ETH_HEADER_LEN
    off = outer + IPV6_HEADER_LEN
    nh = frame[outer + 6]
    srh = inner = None
    if nh == SPEC["nh_routing"]:
        srh = off
        nh = frame[off]
        off += SPEC["srh_fixed"] + 8 * frame[off + 1]
    if nh == SPEC["nh_ipv6"]:
        inner = off
        off += IPV6_HEADER_LEN
    udp = off
    bth = udp + UDP_HEADER_LEN
    op = frame[bth]
    flags = frame[bth + 8]
    ext = bth + BTH_LEN
    if op in DATA_OPCODES:
        n = SPEC["meth"] + SPEC["reth"]
        n += SPEC["immdt"] if op in IMM_OPCODES else 0
        n += SPEC["tseth"] if flags & SPEC["bth_ts_flag"] else 0
    elif op == Opcode.SACK:
        n = SPEC["seth+cc"]
    elif op == Opcode.ACK:
        n = SPEC["aeth"]
    elif op == Opcode.NACK:
        n = SPEC["neth"]
    elif op == Opcode.RELIABILITY_PROBE:
        n = SPEC["peth"]
    elif op == Opcode.ENDPOINT_REQ:
        n = SPEC["erth"]
    else:
        n = SPEC["eeth"]
    return Layout(outer, srh, inner, udp, bth, ext, ext + n, len(frame) - ICRC_LEN, len(frame))


def refresh(frame: bytes | bytearray, route: Route) -> bytes:
    """Recompute ICRC and UDP checksum after an edit, so later checks see a valid frame."""
    buf = bytearray(frame)
    lay = layout(bytes(buf))
    start = lay.inner if lay.inner is not None else lay.udp
    buf[lay.icrc :] = icrc(buf[start : lay.icrc], has_ip=lay.inner is not None)
    buf[lay.udp + 6 : lay.udp + 8] = b"\0\0"
    if lay.inner is not None:
        src = bytes(buf[lay.inner + 8 : lay.inner + 24])
        dst = bytes(buf[lay.inner + 24 : lay.inner + 40])
    else:
        src, dst = route.src_ip, route.final_dst
    csum = udp6_checksum(src, dst, buf[lay.udp :])
    buf[lay.udp + 6 : lay.udp + 8] = csum.to_bytes(2, "big")
    return bytes(buf)


# --- fixed sample frames: every kind in every mode -------------------------------------------

MODES: list[tuple[str, bool]] = [(m, e) for m in ("usid", "srh", "plain") for e in (True, False)]


def sample_route(mode: str, encap: bool) -> Route:
    """A fixed route in ``mode`` ("usid", "srh" or "plain")."""
    kw: dict[str, Any] = {}
    if mode == "usid":
        kw["usid"] = usid_container(bytes.fromhex("fc000000"), [0x11, 0x22, 0x33])
    elif mode == "srh":
        kw["segments"] = (ip6("fd00:5::1"), ip6("fd00:6::1"), ip6("fd00:b::2"))
    return Route(
        bytes.fromhex("020000000001"), bytes.fromhex("020000000002"),
        ip6("fd00:a::2"), ip6("fd00:b::2"), encap=encap, **kw,
    )


def sample_specs(mode: str, encap: bool, payload: bytes = bytes(range(33))) -> list[Spec]:
    """One spec of each frame kind (data with and without IMM/TS, SACK, ACK, NACK, ...)."""
    r = sample_route(mode, encap)
    data = dict(ev=0x12345678, dest_qp=0x42, psn=0x10, va=0x1000, rkey=7, payload=payload)
    return [
        Spec("data", r, dict(data, opcode=Opcode.WRITE_MIDDLE)),
        Spec("data", r, dict(data, opcode=Opcode.WRITE_ONLY_IMM, rqmsn=3, msn=6, imm=4,
                             timestamp=5)),
        Spec("data", r, dict(data, opcode=Opcode.WRITE_FIRST, timestamp=0xFFFF)),
        Spec("sack", r, dict(ev=9, dest_qp=0x42, seth=SETH(100, 9, sack_bitmap=5), cc=None)),
        Spec("ack", r, dict(ev=9, dest_qp=0x42, psn=100, aeth=AETH(msn=3))),
        Spec("nack", r, dict(ev=9, dest_qp=0x42, neth=NETH(NackReason.TRIMMED, 9, 17))),
        Spec("probe", r, dict(ev=9, dest_qp=0x42, peth=PETH(1, 17))),
        Spec("endpoint", r, dict(ev=9, request_id=1, erth=ERTH(EndpointOp.EV_PROBE))),
        Spec("endpoint", r, dict(ev=9, request_id=2, eeth=EETH(EndpointOp.PORT_STATUS, 3))),
    ]


def all_sample_specs() -> list[Spec]:
    """sample_specs for every mode and encap setting."""
    return [s for m, e in MODES for s in sample_specs(m, e)]


def spec_id(spec: Spec) -> str:
    """A readable test id for a spec."""
    r = spec.route
    mode = "usid" if r.usid is not None else "srh" if r.segments is not None else "plain"
    op = spec.kw.get("opcode")
    what = Opcode(op).name if op is not None else spec.kind
    if spec.kind == "endpoint":
        what += "-resp" if "eeth" in spec.kw else "-req"
    return f"{what}-{mode}-{'encap' if r.encap else 'noencap'}"
