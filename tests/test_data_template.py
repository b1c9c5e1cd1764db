"""Data-frame templates: reference builder == Python template == C template, byte for byte.

Thousands of hypothesis-random frames: payload sizes (0, odd, up to jumbo), EVs, PSNs
(wraparound included), every data opcode, timestamps, RTX/AckReq, uSID and SRH paths with
and without the inner IPv6 header, and per-packet path changes.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrcnet.constants import (
    DATA_OPCODES,
    DSCP_CONTROL,
    DSCP_DATA,
    DSCP_TRIMMABLE_RETX,
    ECN,
    ENDPOINT_QPN,
    IMM_OPCODES,
    PSN_MASK,
    NackReason,
    Opcode,
)
from mrcnet.io.batch import CBatchIO, PyBatchIO
from mrcnet.native import HAVE_C
from mrcnet.wire import (
    BTH,
    METH,
    NETH,
    RETH,
    Route,
    build_data,
    build_frame,
    parse_frame,
    usid_container,
)
from mrcnet.wire.checksum import c_udp6_checksum_ok
from mrcnet.wire.template import CTemplate, DataTemplate, PathSpec, make_template

NO_C = "C fast path off (not built, or MRCNET_NO_FASTPATH=1)"
needs_c = pytest.mark.skipif(not HAVE_C, reason=NO_C)

BLOCK = bytes.fromhex("fc000000")
usid = st.integers(1, 0xFFFF)
addr = st.binary(min_size=16, max_size=16)


def container(ids: list[int]) -> bytes:
    return usid_container(BLOCK, ids)


@dataclass
class Flow:
    route: Route
    mode: str  # "usid" | "srh" | "plain"
    dest_qp: int
    rkey: int
    dscp: int
    ecn: int


@st.composite
def flows(draw: st.DrawFn) -> Flow:
    mode = draw(st.sampled_from(["usid", "srh", "plain"]))
    encap = draw(st.booleans())
    kw: dict[str, Any] = {}
    if mode == "usid":
        kw["usid"] = container(draw(st.lists(usid, min_size=1, max_size=6)))
    elif mode == "srh":
        kw["segments"] = tuple(draw(st.lists(addr, min_size=1, max_size=5)))
    route = Route(
        src_mac=draw(st.binary(min_size=6, max_size=6)),
        dst_mac=draw(st.binary(min_size=6, max_size=6)),
        src_ip=draw(addr), dst_ip=draw(addr), encap=encap,
        hop_limit=draw(st.integers(1, 255)), **kw,
    )
    # Any QPN but ENDPOINT_QPN (reserved for endpoint operations); any DSCP a sender may use.
    return Flow(route, mode, draw(st.integers(0, ENDPOINT_QPN - 1)),
                draw(st.integers(0, 0xFFFFFFFF)),
                draw(st.sampled_from([DSCP_DATA, 0, 63])), draw(st.sampled_from(list(ECN))))


@st.composite
def packets(draw: st.DrawFn, flow: Flow) -> tuple[dict[str, Any], Route]:
    """Per-packet fields (DataTemplate.patch keywords) and the route build_data needs."""
    opcode = draw(st.sampled_from(sorted(DATA_OPCODES)))
    size = draw(st.one_of(st.sampled_from([0, 1, 2, 3, 4, 1023, 1024, 1025]),
                          st.integers(0, 1500), st.integers(8000, 8960)))
    fields: dict[str, Any] = {
        "opcode": opcode,
        "psn": draw(st.one_of(st.sampled_from([0, 1, PSN_MASK - 1, PSN_MASK]),
                              st.integers(0, PSN_MASK))),
        "ev": draw(st.one_of(st.sampled_from([0, 0xFFFF, 0x10000, 0xFFFFFFFF]),
                             st.integers(0, 0xFFFFFFFF))),
        "va": draw(st.one_of(st.just(0), st.just((1 << 64) - 1), st.integers(0, (1 << 64) - 1))),
        "payload": draw(st.binary(min_size=size, max_size=size)) if size < 64
        else os.urandom(size),  # big random payloads are cheap this way, and as good
        "rtx": draw(st.booleans()),
        "ack_req": draw(st.booleans()),
        "timestamp": draw(st.one_of(st.none(), st.integers(0, 0xFFFF))),
    }
    fields["rqmsn"] = draw(st.integers(0, 0xFFFF))
    fields["msn"] = draw(st.integers(0, 0xFFFF))
    if opcode in IMM_OPCODES:
        fields["imm"] = draw(st.integers(0, 0xFFFFFFFF))
    route = flow.route
    # Sometimes this packet takes another path than the template's (another EV).
    if draw(st.booleans()) and flow.mode == "usid":
        c = container(draw(st.lists(usid, min_size=1, max_size=6)))
        route = route.with_usid(c)
        fields["path_args"] = {"usid": c}
    elif flow.mode == "srh" and draw(st.booleans()):
        assert route.segments is not None
        segs = tuple(draw(st.lists(addr, min_size=len(route.segments),
                                   max_size=len(route.segments))))
        route = Route(route.src_mac, route.dst_mac, route.src_ip, route.dst_ip, segments=segs,
                      encap=route.encap, hop_limit=route.hop_limit)
        fields["path_args"] = {"segments": segs}
    return fields, route


def impls(t: DataTemplate) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("py", t)]
    if HAVE_C:
        out.append(("c", CTemplate(t)))
    return out


def check_flow(flow: Flow, pkts: list[tuple[dict[str, Any], Route]]) -> None:
    t = DataTemplate.for_route(flow.route, dest_qp=flow.dest_qp, rkey=flow.rkey,
                               dscp=flow.dscp, ecn=flow.ecn)
    # One reused buffer per implementation, never cleared: stale bytes must not leak (nor
    # from CTemplate.frame's own buffer, reused over the packets of different sizes).
    both = impls(t)
    bufs = {name: bytearray(os.urandom(10_000)) for name, _ in both}
    for fields, route in pkts:
        fields = dict(fields)
        path_args = fields.pop("path_args", None)
        # A template marks retransmissions TRIMMABLE_RETX whatever its own DSCP.
        dscp = DSCP_TRIMMABLE_RETX if fields["rtx"] else flow.dscp
        want = build_data(route, dest_qp=flow.dest_qp, rkey=flow.rkey, dscp=dscp,
                          ecn=flow.ecn, **fields)
        # The templates take the METH word (RQMSN << 16 | MSN).
        tf = dict(fields)
        meth = tf.pop("rqmsn", 0) << 16 | tf.pop("msn", 0)
        if meth or "imm" in tf:
            tf["meth"] = meth
        for name, impl in both:
            path = impl.path(**path_args) if path_args else None
            n = impl.patch(bufs[name], path=path, **tf)
            assert bytes(bufs[name][:n]) == want, (name, fields["opcode"], len(want))
            got = impl.frame(fields["opcode"], fields["psn"], fields["ev"], fields["va"],
                             fields["payload"], path, tf.get("meth"), fields.get("imm"),
                             fields["timestamp"], fields["rtx"], fields["ack_req"])
            assert got == want, (name, "frame()", fields["opcode"], len(want))


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), flow=flows())
def test_template_matches_reference(data: st.DataObject, flow: Flow) -> None:
    # 800 flows x 1-12 packets: about 4,000 random frames per run, each built 3 ways.
    pkts = data.draw(st.lists(packets(flow), min_size=1, max_size=12))
    check_flow(flow, pkts)


def test_template_fixed_corners() -> None:
    """Named corners, independent of hypothesis's luck: every opcode x TS x payload edge."""
    route = Route(b"\x02" * 6, b"\x04" * 6, b"\xfd" + bytes(14) + b"\x01",
                  b"\xfd" + bytes(14) + b"\x02", usid=container([0x100, 0x200, 0x300, 0x7]))
    flow = Flow(route, "usid", 0x42, 0x1234, DSCP_DATA, ECN.ECT0)
    pkts = []
    for op in sorted(DATA_OPCODES):
        for ts in (None, 0xFFFF):
            for size in (0, 1, 3, 4, 8960):
                f: dict[str, Any] = {"opcode": op, "psn": PSN_MASK, "ev": 0xFFFFFFFF,
                                     "va": (1 << 64) - 1, "payload": os.urandom(size),
                                     "timestamp": ts, "rtx": True, "ack_req": True}
                f.update(rqmsn=0xFFFF, msn=0xFFFF)
                if op in IMM_OPCODES:
                    f.update(imm=0xFFFFFFFF)
                pkts.append((f, route))
    check_flow(flow, pkts)


@needs_c
@pytest.mark.parametrize("mode", ["usid", "srh"])
def test_patched_frames_parse_and_verify_with_c(mode: str) -> None:
    kw: dict[str, Any] = ({"usid": container([1, 2, 3])} if mode == "usid"
                          else {"segments": (os.urandom(16), os.urandom(16))})
    route = Route(b"\x02" * 6, b"\x04" * 6, os.urandom(16), os.urandom(16), **kw)
    t = make_template(DataTemplate.for_route(route, dest_qp=7, rkey=9))
    assert isinstance(t, CTemplate)
    buf = bytearray(9100)
    n = t.patch(buf, opcode=Opcode.WRITE_MIDDLE, psn=5, ev=0x12345678, va=4096,
                payload=memoryview(bytearray(b"x" * 1001)))
    f = parse_frame(buf[:n], checksum_ok=c_udp6_checksum_ok)
    assert (f.bth.psn, f.ev, f.reth.va if f.reth else None) == (5, 0x12345678, 4096)
    assert bytes(f.payload) == b"x" * 1001


@pytest.mark.parametrize("name", ["py", "c"])
def test_patch_into_batch_slot(name: str) -> None:
    """mrcd's zero-copy send path: the same code for both implementations."""
    if name == "c" and not HAVE_C:
        pytest.skip(NO_C)
    route = Route(b"\x02" * 6, b"\x04" * 6, os.urandom(16), os.urandom(16),
                  usid=container([9, 8]))
    t = DataTemplate.for_route(route, dest_qp=3, rkey=4)
    tmpl: Any = CTemplate(t) if name == "c" else t
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # any socket; no I/O here
    try:
        b: Any = (CBatchIO if name == "c" else PyBatchIO)(sock.fileno(), 4, 2048)
        kw: dict[str, Any] = {"opcode": Opcode.WRITE_ONLY, "psn": 1, "ev": 2, "va": 3,
                              "payload": b"hello"}
        n = tmpl.patch(b.slot_ptr(2), cap=b.bufsize, **kw)
        assert bytes(b.slot(2)[:n]) == t.build(**kw)
        with pytest.raises(ValueError):
            tmpl.patch(b.slot_ptr(3), cap=100, **{**kw, "payload": bytes(100)})
        b.close()
    finally:
        sock.close()


@pytest.mark.parametrize("name", ["py", "c"])
def test_patch_rejects_bad_fields(name: str) -> None:
    if name == "c" and not HAVE_C:
        pytest.skip("C fast path off (not built, or MRCNET_NO_FASTPATH=1)")
    route = Route(b"\x02" * 6, b"\x04" * 6, os.urandom(16), os.urandom(16),
                  usid=container([1]))
    t = DataTemplate.for_route(route, dest_qp=3, rkey=4)
    impl: Any = t if name == "py" else CTemplate(t)
    buf = bytearray(200)
    base: dict[str, Any] = {"opcode": Opcode.WRITE_ONLY, "psn": 0, "ev": 0, "va": 0}
    for bad in ({"psn": PSN_MASK + 1}, {"ev": 1 << 32}, {"va": -1}, {"opcode": Opcode.SACK},
                {"opcode": Opcode.WRITE_ONLY_IMM}, {"meth": 1, "imm": 2}, {"meth": 1 << 32},
                {"timestamp": 1 << 16}, {"payload": bytes(200)}):
        with pytest.raises(ValueError):
            impl.patch(buf, **{**base, **bad})
    with pytest.raises(ValueError):
        impl.path(segments=[bytes(16)])  # a uSID template takes usid=
    assert isinstance(impl.path(usid=container([5])), PathSpec)


def test_make_template_follows_binding() -> None:
    route = Route(b"\x02" * 6, b"\x04" * 6, os.urandom(16), os.urandom(16))
    frame = build_data(route, ev=1, opcode=Opcode.WRITE_FIRST, dest_qp=1, psn=1, va=0, rkey=0,
                       payload=b"abc")
    t = make_template(frame)
    assert isinstance(t, CTemplate if HAVE_C else DataTemplate)


def test_template_keeps_bth_byte1() -> None:
    """SE/M/Pad/TVer are the template's: neither patcher touches BTH byte 1."""
    route = Route(b"\x02" * 6, b"\x04" * 6, os.urandom(16), os.urandom(16),
                  usid=container([1, 2]))
    t = DataTemplate(build_frame(route, ev=0, bth=BTH(Opcode.WRITE_ONLY, 5, 0, se=True,
                                                      migreq=True),
                                 ext=[METH(), RETH(0, 9, 0)]), route)
    want = build_frame(route, ev=7, bth=BTH(Opcode.WRITE_FIRST, 5, 77, se=True, migreq=True,
                                            rtx=True), ext=[METH(), RETH(4096, 9, 3)],
                       payload=b"abc")
    for _name, impl in impls(t):
        assert impl.build(opcode=Opcode.WRITE_FIRST, psn=77, ev=7, va=4096, payload=b"abc",
                          rtx=True) == want


def test_template_refuses_non_data_and_trimmed_frames() -> None:
    route = Route(b"\x02" * 6, b"\x04" * 6, os.urandom(16), os.urandom(16))
    frame = build_data(route, ev=1, opcode=Opcode.WRITE_ONLY, dest_qp=1, psn=1, va=0, rkey=0,
                       payload=bytes(100))
    with pytest.raises(ValueError, match="trimmed"):
        DataTemplate(frame[:-50])  # cut after the headers, as a trimming switch does
    with pytest.raises(ValueError, match="data frame"):
        DataTemplate(build_frame(route, ev=1, bth=BTH(Opcode.NACK, 1, 0), ext=[
            NETH(reason=NackReason.TRIMMED, entropy=1, nack_psn=0)], dscp=DSCP_CONTROL))


@pytest.mark.parametrize("encap", [True, False], ids=["encap", "noencap"])
def test_template_for_mrc_srh_form(encap: bool) -> None:
    """MRC's SRv6-with-SRH form (a uSID container in the destination, the next one in a
    reduced SRH): every path patched into one template is build_data's frame."""
    c1 = container([0x100, 0x200])
    route = Route(b"\x02" * 6, b"\x04" * 6, os.urandom(16), os.urandom(16), usid=c1,
                  usid_srh=container([0x300, 0x7]), encap=encap)
    t = DataTemplate.for_route(route, dest_qp=3, rkey=4)
    for spine in (0x201, 0x202):
        r2 = Route(route.src_mac, route.dst_mac, route.src_ip, route.dst_ip,
                   usid=container([0x100, spine]), usid_srh=container([0x300 + spine, 7]),
                   encap=encap)
        assert r2.usid is not None
        want = build_data(r2, ev=9, opcode=Opcode.WRITE_ONLY, dest_qp=3, psn=5, va=6, rkey=4,
                          payload=b"abc", timestamp=7)
        for _name, impl in impls(t):
            path = impl.path(usid=r2.usid, usid_srh=r2.usid_srh)
            assert impl.build(opcode=Opcode.WRITE_ONLY, psn=5, ev=9, va=6, payload=b"abc",
                              timestamp=7, path=path) == want
    with pytest.raises(ValueError):
        t.path(usid=c1)  # this template's frames carry the SRH
