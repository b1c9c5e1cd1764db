"""Per-header codecs: every module round-trips, rejects out-of-range fields, parses strictly.

Each header is packed, embedded at a random offset between random bytes, and unpacked from
there: the result must equal the original object field by field.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wire_strategies import (
    SPEC,
    addrs,
    aeths,
    blocks,
    ccstates,
    eeths,
    erths,
    evs,
    macs,
    malformed_reason,
    neths,
    peths,
    psns,
    qpns,
    seths,
    srh_tlvs,
    uint,
    usid_lists,
)

from mrcnet.constants import (
    BTH_LEN,
    EV_FLOW_LABEL_MASK,
    FLOW_LABEL_MASK,
    IPPROTO_IPV6,
    IPPROTO_ROUTING,
    IPV6_HEADER_LEN,
    SRH_FIXED_LEN,
    SRH_TLV_PAD1,
    SRH_TLV_PADN,
    USID_MAX_PER_CONTAINER,
    EndpointOp,
    NackReason,
    Opcode,
    SackMode,
)
from mrcnet.errors import MalformedReason
from mrcnet.wire import (
    AETH,
    BTH,
    EETH,
    ERTH,
    METH,
    NETH,
    PETH,
    RETH,
    SETH,
    SRH,
    TSETH,
    UDP,
    CCState,
    Ethernet,
    ImmDt,
    IPv6,
    ev_from_headers,
    ev_to_flow_label,
    ev_to_sport,
    ip6,
    ip6_str,
    mac_to_bytes,
    mac_to_str,
    usid_block,
    usid_container,
    usid_final,
    usid_list,
    usid_shift,
)
from mrcnet.wire.bth import F_TS

FEW = settings(max_examples=60, deadline=None)
SOME = settings(max_examples=150, deadline=None)

Header = Any  # every header dataclass has pack() and a classmethod unpack_from(buf, off)

ethernets = st.builds(Ethernet, dst=macs, src=macs, ethertype=uint(16))
ipv6s = st.builds(
    IPv6, src=addrs, dst=addrs, next_header=uint(8), payload_length=uint(16),
    hop_limit=uint(8), dscp=uint(6), ecn=uint(2), flow_label=uint(20),
)
udps = st.builds(UDP, sport=uint(16), dport=uint(16), length=uint(16), checksum=uint(16))
bths = st.builds(
    BTH, opcode=st.sampled_from(list(Opcode)), dest_qp=qpns, psn=psns, ack_req=st.booleans(),
    rtx=st.booleans(), ts=st.booleans(), r=st.booleans(), se=st.booleans(),
    migreq=st.booleans(), pad=uint(2), pkey=uint(16),
)
reths = st.builds(RETH, va=uint(64), rkey=uint(32), length=uint(32))
meths = st.builds(METH, rqmsn=uint(16), msn=uint(16))
immdts = st.builds(ImmDt, imm=uint(32))
tseths = st.builds(TSETH, timestamp=uint(16), tsr=st.booleans(), ftype=uint(4))


@st.composite
def srhs(draw: st.DrawFn) -> SRH:
    """Any valid SRH: 1..8 segments, any segments-left, flags, tag and a TLV area."""
    segs = tuple(draw(st.lists(addrs, min_size=1, max_size=8)))
    return SRH(
        next_header=draw(uint(8)), segments=segs,
        segments_left=draw(st.integers(0, len(segs) - 1)), flags=draw(uint(8)),
        tag=draw(uint(16)), tlvs=draw(srh_tlvs()),
    )


ALL_HEADERS: list[tuple[str, type, st.SearchStrategy[Any], int | None]] = [
    ("ethernet", Ethernet, ethernets, 14),
    ("ipv6", IPv6, ipv6s, IPV6_HEADER_LEN),
    ("srh", SRH, srhs(), None),
    ("udp", UDP, udps, 8),
    ("bth", BTH, bths, BTH_LEN),
    ("reth", RETH, reths, 16),
    ("meth", METH, meths, 4),
    ("immdt", ImmDt, immdts, 4),
    ("tseth", TSETH, tseths, 4),
    ("aeth", AETH, aeths, 4),
    ("seth", SETH, seths, 28),
    ("ccstate", CCState, ccstates, 8),
    ("neth", NETH, neths, 20),
    ("peth", PETH, peths, 16),
    ("erth", ERTH, erths, 16),
    ("eeth", EETH, eeths, 36),
]


@pytest.mark.parametrize(
    ("cls", "strategy", "size"), [h[1:] for h in ALL_HEADERS], ids=[h[0] for h in ALL_HEADERS]
)
def test_header_roundtrip_at_any_offset(
    cls: type, strategy: st.SearchStrategy[Any], size: int | None
) -> None:
    """unpack_from(pack()) at any offset, in bytes/bytearray/memoryview, gives the object back."""

    @SOME
    @given(hdr=strategy, before=st.binary(max_size=40), after=st.binary(max_size=40),
           kind=st.sampled_from([bytes, bytearray, memoryview]))
    def check(hdr: Header, before: bytes, after: bytes, kind: Callable[[bytes], Any]) -> None:
        raw = hdr.pack()
        if size is not None:
            assert len(raw) == size == cls.LEN  # type: ignore[attr-defined]
        else:
            assert len(raw) == hdr.length
        got = cls.unpack_from(kind(before + raw + after), len(before))  # type: ignore[attr-defined]
        assert got == hdr
        assert got.pack() == raw

    check()


@pytest.mark.parametrize(
    ("cls", "strategy"), [h[1:3] for h in ALL_HEADERS], ids=[h[0] for h in ALL_HEADERS]
)
def test_header_truncated_raises(cls: type, strategy: st.SearchStrategy[Any]) -> None:
    """Every prefix shorter than the header raises MalformedFrame(TRUNCATED)."""

    @FEW
    @given(hdr=strategy, data=st.data())
    def check(hdr: Header, data: st.DataObject) -> None:
        raw = hdr.pack()
        cut = data.draw(st.integers(0, len(raw) - 1))
        reason = malformed_reason(cls.unpack_from, raw[:cut], 0)  # type: ignore[attr-defined]
        assert reason is MalformedReason.TRUNCATED

    check()


# --- out-of-range fields -------------------------------------------------------------------

# (constructor, valid kwargs, field, bits or (lo, hi) inclusive bounds)
_BASE: dict[str, tuple[Callable[..., Header], dict[str, Any]]] = {
    "ethernet": (Ethernet, dict(dst=bytes(6), src=bytes(6))),
    "ipv6": (IPv6, dict(src=bytes(16), dst=bytes(16), next_header=17)),
    "udp": (UDP, dict(sport=1)),
    "bth": (BTH, dict(opcode=Opcode.SACK, dest_qp=1, psn=1)),
    "reth": (RETH, dict(va=0, rkey=0, length=0)),
    "meth": (METH, {}),
    "immdt": (ImmDt, dict(imm=0)),
    "tseth": (TSETH, dict(timestamp=0)),
    "aeth": (AETH, {}),
    "seth": (SETH, dict(cack_psn=0)),
    "ccstate": (CCState, {}),
    "neth": (NETH, dict(reason=NackReason.TRIMMED, entropy=0, nack_psn=0)),
    "peth": (PETH, dict(probe_id=0)),
    "erth": (ERTH, dict(op=EndpointOp.EV_PROBE)),
    "eeth": (EETH, dict(op=EndpointOp.EV_PROBE)),
    "srh": (SRH, dict(next_header=17, segments=(bytes(16),), segments_left=0)),
}
_RANGES: list[tuple[str, str, int, int]] = [
    ("ethernet", "ethertype", 0, 0xFFFF),
    ("ipv6", "dscp", 0, 63), ("ipv6", "ecn", 0, 3), ("ipv6", "flow_label", 0, FLOW_LABEL_MASK),
    ("ipv6", "payload_length", 0, 0xFFFF), ("ipv6", "next_header", 0, 255),
    ("ipv6", "hop_limit", 0, 255), ("ipv6", "version", 0, 15),
    ("udp", "sport", 0, 0xFFFF), ("udp", "dport", 0, 0xFFFF), ("udp", "length", 0, 0xFFFF),
    ("udp", "checksum", 0, 0xFFFF),
    ("bth", "opcode", 0, 255), ("bth", "pad", 0, 3), ("bth", "tver", 0, 15),
    ("bth", "pkey", 0, 0xFFFF), ("bth", "dest_qp", 0, 0xFFFFFF), ("bth", "psn", 0, 0xFFFFFF),
    ("reth", "va", 0, 2**64 - 1), ("reth", "rkey", 0, 2**32 - 1),
    ("reth", "length", 0, 2**32 - 1),
    ("meth", "rqmsn", 0, 0xFFFF), ("meth", "msn", 0, 0xFFFF), ("immdt", "imm", 0, 2**32 - 1),
    ("tseth", "timestamp", 0, 0xFFFF), ("tseth", "ftype", 0, 15),
    ("aeth", "syndrome", 0, 255), ("aeth", "msn", 0, 0xFFFFFF),
    ("seth", "entropy", 0, 2**32 - 1), ("seth", "cack_psn", 0, 0xFFFFFF),
    ("seth", "ack_psn_offset", -(2**15), 2**15 - 1), ("seth", "sack_offset", -(2**15), 2**15 - 1),
    ("seth", "mpr", 0, 255), ("seth", "sack_bitmap", 0, 2**64 - 1),
    ("seth", "spdcid", 0, 0xFFFF), ("seth", "dpdcid", 0, 0xFFFF), ("seth", "cc_type", 0, 15),
    ("seth", "cc_flags", 0, 15),
    ("ccstate", "timestamp", 0, 0xFFFF), ("ccstate", "ooo_count", 0, 0x7FFF),
    ("ccstate", "rcv_cwnd_pen", 0, 127), ("ccstate", "rcvd_bytes", 0, 2**24 - 1),
    ("neth", "entropy", 0, 2**32 - 1), ("neth", "nack_psn", 0, 0xFFFFFF),
    ("neth", "timestamp", 0, 0xFFFF), ("neth", "vendor", 0, 255), ("neth", "spdcid", 0, 0xFFFF),
    ("neth", "dpdcid", 0, 0xFFFF), ("neth", "cc_type", 0, 15), ("neth", "cc_flags", 0, 15),
    ("peth", "probe_id", 0, 0xFFFF), ("peth", "timestamp", 0, 0xFFFF),
    ("peth", "vendor", 0, 255), ("peth", "spdcid", 0, 0xFFFF), ("peth", "dpdcid", 0, 0xFFFF),
    ("peth", "ftype", 0, 15),
    ("erth", "port_status_mask", 0, 2**32 - 1), ("erth", "timestamp", 0, 0xFFFF),
    ("erth", "vendor", 0, 255), ("erth", "ftype", 0, 15),
    ("eeth", "timestamp", 0, 0xFFFF),
    ("srh", "next_header", 0, 255), ("srh", "flags", 0, 255), ("srh", "tag", 0, 0xFFFF),
]


@pytest.mark.parametrize(
    ("hdr", "name", "lo", "hi"), _RANGES, ids=[f"{h}.{n}" for h, n, _, _ in _RANGES]
)
def test_out_of_range_field_raises_valueerror(hdr: str, name: str, lo: int, hi: int) -> None:
    """Both edges of a field's range pack; one past either edge raises ValueError."""
    make, base = _BASE[hdr]
    for ok in (lo, hi):
        assert len(make(**{**base, name: ok}).pack()) > 0
    for bad in (lo - 1, hi + 1, hi + 2**40, lo - 2**40):
        with pytest.raises(ValueError, match=name):
            make(**{**base, name: bad}).pack()


@pytest.mark.parametrize(
    ("hdr", "name", "bad"),
    [
        ("ethernet", "dst", bytes(5)), ("ethernet", "src", bytes(7)),
        ("ipv6", "src", bytes(15)), ("ipv6", "dst", bytes(17)),
        ("seth", "m", 3), ("neth", "reason", 0), ("neth", "reason", 0x03),
        ("erth", "op", 2), ("erth", "op", 3), ("eeth", "op", 3),
        ("srh", "segments", ()), ("srh", "segments", (bytes(15),)),
        ("srh", "segments_left", 2), ("srh", "segments_left", -1),
        ("srh", "tlvs", b"\x00" * 3), ("srh", "segments", (bytes(16),) * 129),
    ],
)
def test_invalid_value_raises_valueerror(hdr: str, name: str, bad: object) -> None:
    """Wrong-size addresses, unknown enum codes and inconsistent SRH fields cannot be packed."""
    make, base = _BASE[hdr]
    with pytest.raises(ValueError):
        make(**{**base, name: bad}).pack()


# --- Ethernet / IPv6 helpers -------------------------------------------------------------


@FEW
@given(mac=macs)
def test_mac_text_roundtrip(mac: bytes) -> None:
    """mac_to_str and mac_to_bytes are inverse; raw bytes pass through."""
    text = mac_to_str(mac)
    assert len(text) == 17
    assert mac_to_bytes(text) == mac
    assert mac_to_bytes(mac) == mac


@pytest.mark.parametrize("bad", ["02:00:00:00:00", "zz:00:00:00:00:01", b"\x00" * 5, ""])
def test_mac_bad(bad: str | bytes) -> None:
    """Malformed MAC text or a wrong byte count raises ValueError."""
    with pytest.raises(ValueError):
        mac_to_bytes(bad)


@FEW
@given(addr=addrs)
def test_ip6_text_roundtrip(addr: bytes) -> None:
    """ip6 and ip6_str are inverse."""
    assert ip6(ip6_str(addr)) == addr
    assert ip6(addr) == addr


@SOME
@given(hdr=ipv6s)
def test_ipv6_traffic_class_and_bit_positions(hdr: IPv6) -> None:
    """DSCP/ECN/flow label land in the RFC 8200 bit positions of the first word."""
    raw = hdr.pack()
    word = int.from_bytes(raw[:4], "big")
    assert word >> 28 == 6
    assert (word >> 20) & 0xFF == hdr.traffic_class == (hdr.dscp << 2) | hdr.ecn
    assert word & 0xFFFFF == hdr.flow_label
    assert raw[8:24] == hdr.src and raw[24:40] == hdr.dst
    assert hdr.with_(hop_limit=1).hop_limit == 1


@FEW
@given(hdr=ipv6s, version=st.integers(0, 15).filter(lambda v: v != 6))
def test_ipv6_bad_version(hdr: IPv6, version: int) -> None:
    """An IP version other than 6 raises BAD_IP_VERSION."""
    reason = malformed_reason(IPv6.unpack_from, hdr.with_(version=version).pack())
    assert reason is MalformedReason.BAD_IP_VERSION


# --- SRH ---------------------------------------------------------------------------------


@SOME
@given(nh=uint(8), path=st.lists(addrs, min_size=1, max_size=10), tag=uint(16))
def test_srh_from_path(nh: int, path: list[bytes], tag: int) -> None:
    """from_path stores the path reversed; SL points at the first hop; lengths add up."""
    srh = SRH.from_path(nh, path, tag=tag)
    raw = srh.pack()
    assert srh.segments == tuple(reversed(path))
    assert srh.active_segment == path[0]
    assert srh.final_segment == path[-1]
    assert srh.segments_left == srh.last_entry == len(path) - 1
    assert len(raw) == srh.length == SRH_FIXED_LEN + 16 * len(path)
    assert raw[:8] == bytes(
        (nh, 2 * len(path), 4, len(path) - 1, len(path) - 1, 0)
    ) + tag.to_bytes(2, "big")
    for i, seg in enumerate(reversed(path)):
        assert raw[8 + 16 * i : 24 + 16 * i] == seg


@SOME
@given(srh=srhs())
def test_srh_segments_left_walk(srh: SRH) -> None:
    """Decrementing segments left moves the active segment along the path, TLVs kept."""
    for sl in range(srh.last_entry, -1, -1):
        step = SRH(srh.next_header, srh.segments, sl, srh.flags, srh.tag, srh.tlvs)
        got = SRH.unpack_from(step.pack())
        assert got.segments_left == sl
        assert got.active_segment == srh.segments[sl]
        assert got.tlvs == srh.tlvs
        assert got.hdr_ext_len == (len(step.pack()) - 8) // 8


def test_srh_pad_tlvs_explicit() -> None:
    """Pad1 and PadN TLVs (with and without content bytes) are accepted and kept."""
    seg = ip6("fd00::1")
    for tlvs in (
        bytes([SRH_TLV_PAD1]) * 8,
        bytes([SRH_TLV_PADN, 6]) + bytes(6),
        bytes([SRH_TLV_PAD1, SRH_TLV_PADN, 4]) + bytes(4) + bytes([SRH_TLV_PAD1]),
        bytes([SRH_TLV_PADN, 14]) + bytes(14),
        bytes([5, 2, 0xAA, 0xBB, SRH_TLV_PADN, 2, 0, 0]),
    ):
        srh = SRH(17, (seg,), 0, tlvs=tlvs)
        assert SRH.unpack_from(srh.pack()).tlvs == tlvs


def _srh_bytes(hel: int, rtype: int, sl: int, last: int, body: bytes) -> bytes:
    return bytes((17, hel, rtype, sl, last, 0, 0, 0)) + body


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (_srh_bytes(2, 3, 0, 0, bytes(16)), "routing type 3"),
        (_srh_bytes(2, 0, 0, 0, bytes(16)), "routing type 0"),
        (_srh_bytes(2, 4, 2, 0, bytes(16)), "segments left > last entry + 1"),
        (_srh_bytes(2, 4, 0, 1, bytes(32)), "last entry needs more than hdr ext len"),
        (_srh_bytes(1, 4, 0, 0, bytes(16)), "hdr ext len shorter than one segment"),
        (_srh_bytes(0, 4, 0, 0, b""), "hdr ext len 0"),
        (_srh_bytes(3, 4, 0, 0, bytes(16) + bytes((SRH_TLV_PADN, 7)) + bytes(6)), "PadN overrun"),
        (_srh_bytes(3, 4, 0, 0, bytes(16) + bytes(7) + bytes((SRH_TLV_PADN,))), "TLV cut"),
        (_srh_bytes(3, 4, 0, 0, bytes(16) + bytes((9, 200)) + bytes(6)), "TLV overrun"),
    ],
)
def test_srh_inconsistent(raw: bytes, why: str) -> None:
    """Every inconsistent SRH raises BAD_SRH (never a bare exception)."""
    assert malformed_reason(SRH.unpack_from, raw + bytes(64)) is MalformedReason.BAD_SRH, why


def test_reduced_srh() -> None:
    """MRC's form: the first segment only in the destination, segments left = last entry
    + 1 (RFC 8754 allows it); the active segment is then none of the list's."""
    c2 = bytes.fromhex("fc000000000200330000000000000000")
    srh = SRH.reduced(41, [c2])
    assert (srh.segments, srh.segments_left, srh.last_entry) == ((c2,), 1, 0)
    assert srh.active_segment is None and srh.final_segment == c2
    assert SRH.unpack_from(srh.pack()) == srh


def test_srh_segment_list_truncated() -> None:
    """A segment list that runs past the buffer is TRUNCATED."""
    raw = SRH.from_path(17, [bytes(16)] * 3).pack()
    for cut in range(SRH_FIXED_LEN, len(raw)):
        assert malformed_reason(SRH.unpack_from, raw[:cut]) is MalformedReason.TRUNCATED


# --- uSID ----------------------------------------------------------------------------------


@SOME
@given(block=blocks, ids=usid_lists)
def test_usid_container_list_shift_final(block: bytes, ids: list[int]) -> None:
    """Build/list/shift/final agree with the F3216 layout at every step."""
    c = usid_container(block, ids)
    assert len(c) == 16
    assert c[:4] == block == usid_block(c)
    for i, u in enumerate(ids):
        assert int.from_bytes(c[4 + 2 * i : 6 + 2 * i], "big") == u
    assert c[4 + 2 * len(ids) :] == bytes(16 - 4 - 2 * len(ids))
    assert usid_list(c) == ids
    final = usid_container(block, ids[-1:])
    assert usid_final(c) == final
    cur = c
    for k in range(1, len(ids) + 1):
        nxt = usid_shift(cur)
        assert nxt[:4] == block
        assert nxt[4:14] == cur[6:16] and nxt[14:] == b"\0\0"  # exactly a 16-bit left shift
        cur = nxt
        assert usid_list(cur) == ids[k:]
        if k == len(ids) - 1:
            assert cur == final  # the address the frame arrives with
    assert usid_list(cur) == []
    with pytest.raises(ValueError):
        usid_final(cur)


@FEW
@given(
    block=blocks,
    ids=st.lists(st.integers(1, 0xFFFF), min_size=1, max_size=USID_MAX_PER_CONTAINER - 2),
    tail=st.binary(min_size=2, max_size=2),
)
def test_usid_list_stops_at_end_of_carrier(block: bytes, ids: list[int], tail: bytes) -> None:
    """usid_list stops at the first zero uSID, whatever follows it."""
    c = bytearray(usid_container(block, ids))
    c[6 + 2 * len(ids) : 8 + 2 * len(ids)] = tail  # just after the zero terminator
    assert usid_list(bytes(c)) == ids


@pytest.mark.parametrize(
    ("block", "ids"),
    [
        (bytes(3), [1]), (bytes(5), [1]), (bytes(4), []), (bytes(4), [0]),
        (bytes(4), [0x10000]), (bytes(4), [-1]), (bytes(4), [1] * (USID_MAX_PER_CONTAINER + 1)),
    ],
)
def test_usid_container_invalid(block: bytes, ids: list[int]) -> None:
    """Bad block size, no uSID, zero/oversized uSIDs or too many raise ValueError."""
    with pytest.raises(ValueError):
        usid_container(block, ids)


def test_usid_shift_needs_16_bytes() -> None:
    """usid_shift of anything but an address raises ValueError."""
    with pytest.raises(ValueError):
        usid_shift(bytes(15))


# --- UDP and the EV split ------------------------------------------------------------------


@SOME
@given(ev=evs, high_fl=uint(4))
def test_ev_split_roundtrip(ev: int, high_fl: int) -> None:
    """By default EV = flow label (high 16) + sport (low 16), the other order a setting;
    flow label bits 16-19 are ignored."""
    from mrcnet.constants import EV_ORDER_SPORT_HIGH, EV_ORDER_SPORT_LOW
    from mrcnet.wire import set_ev_order

    for order, want in ((EV_ORDER_SPORT_LOW, (ev & 0xFFFF, ev >> 16)),
                        (EV_ORDER_SPORT_HIGH, (ev >> 16, ev & 0xFFFF))):
        set_ev_order(order)
        try:
            sport, fl = ev_to_sport(ev), ev_to_flow_label(ev)
            assert 0 <= sport <= 0xFFFF and 0 <= fl <= EV_FLOW_LABEL_MASK
            assert (sport, fl) == want
            assert ev_from_headers(sport, fl) == ev
            assert ev_from_headers(sport, fl | (high_fl << 16)) == ev
        finally:
            set_ev_order(EV_ORDER_SPORT_LOW)


@pytest.mark.parametrize("ev", [-1, 2**32, 2**40])
def test_ev_out_of_range(ev: int) -> None:
    """An EV outside 32 bits cannot be split."""
    with pytest.raises(ValueError):
        ev_to_sport(ev)
    with pytest.raises(ValueError):
        ev_to_flow_label(ev)


# --- BTH -------------------------------------------------------------------------------------


@SOME
@given(hdr=bths)
def test_bth_bit_positions(hdr: BTH) -> None:
    """Every BTH flag sits at its documented bit; PSN and QPN are 24-bit fields."""
    raw = hdr.pack()
    assert raw[0] == hdr.opcode
    assert raw[1] == (hdr.se << 7) | (hdr.migreq << 6) | (hdr.pad << 4)
    assert int.from_bytes(raw[2:4], "big") == hdr.pkey
    assert raw[4] == 0
    assert int.from_bytes(raw[5:8], "big") == hdr.dest_qp
    assert raw[8] == (hdr.ack_req << 7) | (hdr.r << 6) | (hdr.rtx << 5) | (hdr.ts << 4)
    assert int.from_bytes(raw[9:12], "big") == hdr.psn


@pytest.mark.parametrize("psn", [0, 1, 0x7FFFFF, 0x800000, 0xFFFFFE, 0xFFFFFF])
def test_bth_psn_edges(psn: int) -> None:
    """PSNs at the edges of the 24-bit space round-trip with all flags set."""
    hdr = BTH(Opcode.WRITE_FIRST, 0xFFFFFF, psn, True, True, True, True, True, True, 3)
    assert BTH.unpack_from(hdr.pack()) == hdr


@FEW
@given(hdr=bths, tver=st.integers(1, 15))
def test_bth_bad_tver(hdr: BTH, tver: int) -> None:
    """TVer != 0 raises BAD_VERSION."""
    raw = bytearray(hdr.pack())
    raw[1] |= tver
    assert malformed_reason(BTH.unpack_from, bytes(raw)) is MalformedReason.BAD_VERSION


# --- reserved bits and enums of the extension headers ------------------------------------------


# Reserved bits of each extension header (byte offset, mask): set on the wire, ignored.
_RESERVED = {
    TSETH: [(2, 0x7F), (3, 0xF0)],
    SETH: [(0, 0xFF), (1, 0x9D), (12, 0xFF)],
    CCState: [(2, 0x80)],
    NETH: [(0, 0xFF), (1, 0xFF), (12, 0xFF), (17, 0xFF)],
    PETH: [(0, 0xFF), (1, 0xFF), (2, 0xFF), (6, 0xFF), (7, 0xFF), (14, 0x7F), (15, 0xF0)],
    ERTH: [(0, 0xFF), (1, 0xFC), (2, 0xFF), *[(i, 0xFF) for i in range(8, 12)], (14, 0x7F)],
    EETH: [(0, 0xFF), (1, 0xCF), *[(i, 0xFF) for i in (*range(2, 28), 30, 31, 32, 33, 34, 35)]],
}


@FEW
@given(hdr=st.one_of(tseths, seths, ccstates, neths, peths, erths, eeths), junk=uint(8))
def test_reserved_bits_ignored(hdr: Header, junk: int) -> None:
    """Reserved bits set on the wire are ignored on parse."""
    raw = bytearray(hdr.pack())
    for o, mask in _RESERVED[type(hdr)]:
        raw[o] |= junk & mask
    assert type(hdr).unpack_from(bytes(raw)) == hdr


@FEW
@given(hdr=seths)
def test_seth_unknown_mode(hdr: SETH) -> None:
    """The M field value 3 is not a SackMode: BAD_FIELD."""
    raw = bytearray(hdr.pack())
    raw[1] |= 3 << 5
    assert malformed_reason(SETH.unpack_from, bytes(raw)) is MalformedReason.BAD_FIELD


@pytest.mark.parametrize("mode", list(SackMode))
@pytest.mark.parametrize("pr", [False, True])
def test_seth_flags_layout(mode: SackMode, pr: bool) -> None:
    """M in bits 6..5 of byte 1, PR in bit 1; CACK at byte 13, MPR at 17, bitmap at 20."""
    raw = SETH(0x123456, 0xAABBCCDD, m=mode, pr=pr, mpr=9, sack_bitmap=1 << 63).pack()
    assert raw[1] == int(mode) << 5 | (2 if pr else 0)
    assert raw[4:8] == bytes.fromhex("aabbccdd") and raw[12:16] == bytes.fromhex("00123456")
    assert raw[17] == 9 and raw[20] == 0x80


def test_ccstate_layout() -> None:
    """restore_cwnd bit 7 and the 7-bit penalty share byte 4; received bytes 24 bits at 5."""
    raw = CCState(0x1234, 0x7FFF, True, 127, 0xABCDEF).pack()
    assert raw == bytes.fromhex("1234 7fff ff abcdef".replace(" ", ""))


@pytest.mark.parametrize(
    ("cls", "strategy", "enum", "where"),
    [
        (NETH, neths, NackReason, lambda b: (2, b)),
        (ERTH, erths, EndpointOp, lambda b: (1, b & 3)),
        (EETH, eeths, EndpointOp, lambda b: (1, (b & 3) << 4)),
    ],
    ids=["neth-reason", "erth-op", "eeth-op"],
)
def test_unknown_enum_value(cls: type, strategy: st.SearchStrategy[Any], enum: type[IntEnum],
                            where: Callable[[int], tuple[int, int]]) -> None:
    """A NACK reason or an endpoint op outside its enum raises BAD_FIELD."""

    @FEW
    @given(hdr=strategy, value=uint(8))
    def check(hdr: Header, value: int) -> None:
        off, byte = where(value)
        if (byte >> 4 if cls is EETH else byte) in set(enum):
            return
        raw = bytearray(hdr.pack())
        raw[off] = byte
        assert malformed_reason(cls.unpack_from, bytes(raw)) is MalformedReason.BAD_FIELD

    check()


def test_bth_unknown_opcode() -> None:
    """An opcode MRC does not use raises BAD_OPCODE."""
    for op in range(256):
        if op in set(Opcode):
            continue
        raw = bytes([op]) + BTH(Opcode.SACK, 1, 1).pack()[1:]
        assert malformed_reason(BTH.unpack_from, raw) is MalformedReason.BAD_OPCODE


@pytest.mark.parametrize("value", [-(2**15), -1, 0, 1, 2**15 - 1])
def test_seth_signed_offsets(value: int) -> None:
    """Negative ack/sack offsets survive as two's complement 16-bit fields."""
    hdr = SETH(0, 0, ack_psn_offset=value, sack_offset=-value - 1)
    raw = hdr.pack()
    assert int.from_bytes(raw[2:4], "big", signed=True) == value
    assert int.from_bytes(raw[18:20], "big", signed=True) == -value - 1
    assert SETH.unpack_from(raw) == hdr


def test_constants_agree_with_the_protocol_notes() -> None:
    """mrcnet.constants and the header classes agree with the sizes the notes give."""
    assert SPEC["nh_routing"] == IPPROTO_ROUTING and SPEC["nh_ipv6"] == IPPROTO_IPV6
    assert SPEC["srh_fixed"] == SRH_FIXED_LEN and SPEC["bth_ts_flag"] == F_TS
    assert SPEC["reth"] == RETH.LEN and SPEC["tseth"] == TSETH.LEN
    assert SPEC["meth"] == METH.LEN and SPEC["immdt"] == ImmDt.LEN
    assert SPEC["aeth"] == AETH.LEN and SPEC["seth+cc"] == SETH.LEN + CCState.LEN
    assert SPEC["neth"] == NETH.LEN and SPEC["peth"] == PETH.LEN
    assert SPEC["erth"] == ERTH.LEN and SPEC["eeth"] == EETH.LEN
