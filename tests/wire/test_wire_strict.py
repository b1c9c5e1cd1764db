"""Strict parsing: every MalformedReason is reachable, truncation and trimming behave.

Frames are built by mrcnet, then corrupted at known offsets (found by walking the headers
independently of the parser, see ``wire_strategies.layout``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wire_strategies import (
    MODES,
    Layout,
    Spec,
    all_sample_specs,
    any_specs,
    data_specs,
    layout,
    malformed_reason,
    refresh,
    sample_specs,
    spec_id,
)

from mrcnet.constants import (
    DATA_OPCODES,
    DSCP_TRIMMED,
    ENDPOINT_QPN,
    ETH_HEADER_LEN,
    ETH_P_IPV6,
    IPV6_HEADER_LEN,
    SRH_TLV_PAD1,
    SRH_TLV_PADN,
    EndpointOp,
    NackReason,
    Opcode,
)
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire import Frame, parse_frame, usid_shift

SPECS = all_sample_specs()
SPEC_IDS = [spec_id(s) for s in SPECS]
TRUNC = {MalformedReason.TRUNCATED, MalformedReason.BAD_LENGTH}
OUTER_PLEN = ETH_HEADER_LEN + 4  # offset of the outer payload length


def reason_of(buf: bytes, verify_icrc: bool = True) -> MalformedReason:
    """The reason parse_frame rejects ``buf`` with (fails the test if it parses)."""
    return malformed_reason(parse_frame, buf, verify_icrc=verify_icrc)


def put(buf: bytes, off: int, value: bytes) -> bytes:
    """``buf`` with ``value`` written at ``off``."""
    return buf[:off] + value + buf[off + len(value) :]


def put16(buf: bytes, off: int, value: int) -> bytes:
    """``buf`` with a big-endian 16-bit ``value`` at ``off``."""
    return put(buf, off, (value & 0xFFFF).to_bytes(2, "big"))


def add16(buf: bytes, off: int, delta: int) -> bytes:
    """``buf`` with the 16-bit field at ``off`` changed by ``delta``."""
    return put16(buf, off, int.from_bytes(buf[off : off + 2], "big") + delta)


def headers(f: Frame) -> tuple[object, ...]:
    """Every parsed header of a frame except the outer IPv6 (which switches rewrite)."""
    return (f.eth, f.srh, f.inner, f.udp, f.bth, f.reth, f.meth, f.immdt, f.tseth,
            f.aeth, f.seth, f.cc, f.neth, f.peth, f.erth, f.eeth)


# --- the corruption table: each entry must hit exactly its reason ----------------------------

Mutator = Callable[[bytes, Layout, Spec], bytes | None]  # None: not applicable to this frame


def _ext_field(kind: str, off_in_ext: int, value: int) -> Mutator:
    def m(raw: bytes, lay: Layout, spec: Spec) -> bytes | None:
        if spec.kind != kind and not (kind in ("erth", "eeth") and kind in spec.kw):
            return None
        return put(raw, lay.ext + off_in_ext, bytes([value]))
    return m


def _reth(raw: bytes, lay: Layout) -> int:
    """Where a data frame's RETH is: after METH, and TSETH when BTH.TS is set."""
    return lay.ext + 4 + (4 if raw[lay.bth + 8] & 0x10 else 0)


def _srh(off: int, value: Callable[[int], int]) -> Mutator:
    def m(raw: bytes, lay: Layout, spec: Spec) -> bytes | None:
        if lay.srh is None:
            return None
        return put(raw, lay.srh + off, bytes([value(raw[lay.srh + off]) & 0xFF]))
    return m


def _srh_tlv_overrun(raw: bytes, lay: Layout, spec: Spec) -> bytes | None:
    """Append an 8-byte TLV area whose PadN claims more than the header holds."""
    if lay.srh is None:
        return None
    return _with_srh_tlvs(raw, lay, bytes([SRH_TLV_PADN, 7]) + bytes(6))


def _with_srh_tlvs(raw: bytes, lay: Layout, tlvs: bytes) -> bytes:
    """Insert ``tlvs`` after the segment list; fix hdr ext len and the outer length."""
    assert lay.srh is not None and len(tlvs) % 8 == 0
    srh_end = lay.srh + 8 + 8 * raw[lay.srh + 1]
    out = raw[:srh_end] + tlvs + raw[srh_end:]
    out = put(out, lay.srh + 1, bytes([raw[lay.srh + 1] + len(tlvs) // 8]))
    return add16(out, OUTER_PLEN, len(tlvs))


def _inner(off: int, value: Callable[[bytes], bytes]) -> Mutator:
    def m(raw: bytes, lay: Layout, spec: Spec) -> bytes | None:
        if lay.inner is None:
            return None
        return put(raw, lay.inner + off, value(raw[lay.inner + off : lay.inner + off + 1]))
    return m


def _flip_payload(raw: bytes, lay: Layout, spec: Spec) -> bytes | None:
    if lay.payload == lay.icrc:
        return None
    return put(raw, lay.payload, bytes([raw[lay.payload] ^ 0x01]))


def _data_only(m: Mutator) -> Mutator:
    def d(raw: bytes, lay: Layout, spec: Spec) -> bytes | None:
        return m(raw, lay, spec) if spec.kind == "data" else None
    return d


CASES: list[tuple[str, Mutator, MalformedReason, dict[str, bool]]] = [
    ("empty", lambda r, lay, s: b"", MalformedReason.TRUNCATED, {}),
    ("eth-only", lambda r, lay, s: r[:ETH_HEADER_LEN], MalformedReason.TRUNCATED, {}),
    ("ethertype-ipv4", lambda r, lay, s: put16(r, 12, 0x0800), MalformedReason.BAD_ETHERTYPE, {}),
    ("ethertype-vlan", lambda r, lay, s: put16(r, 12, 0x8100), MalformedReason.BAD_ETHERTYPE, {}),
    ("outer-version-4", lambda r, lay, s: put(r, 14, bytes([0x40 | (r[14] & 0xF)])),
     MalformedReason.BAD_IP_VERSION, {}),
    ("outer-version-0", lambda r, lay, s: put(r, 14, bytes([r[14] & 0xF])),
     MalformedReason.BAD_IP_VERSION, {}),
    ("inner-version-4", _inner(0, lambda b: bytes([0x40 | (b[0] & 0xF)])),
     MalformedReason.BAD_IP_VERSION, {}),
    ("inner-version-15", _inner(0, lambda b: bytes([0xF0 | (b[0] & 0xF)])),
     MalformedReason.BAD_IP_VERSION, {}),
    ("outer-nh-tcp", lambda r, lay, s: put(r, 20, b"\x06"), MalformedReason.BAD_NEXT_HEADER, {}),
    ("inner-nh-tcp", _inner(6, lambda b: b"\x06"), MalformedReason.BAD_NEXT_HEADER, {}),
    ("srh-nh-tcp", _srh(0, lambda v: 6), MalformedReason.BAD_NEXT_HEADER, {}),
    ("srh-type-0", _srh(2, lambda v: 0), MalformedReason.BAD_SRH, {}),
    ("srh-type-3", _srh(2, lambda v: 3), MalformedReason.BAD_SRH, {}),
    ("srh-sl-gt-last", _srh(3, lambda v: 4), MalformedReason.BAD_SRH, {}),
    ("srh-sl-255", _srh(3, lambda v: 255), MalformedReason.BAD_SRH, {}),
    ("srh-hel-short", _srh(1, lambda v: v - 2), MalformedReason.BAD_SRH, {}),
    ("srh-hel-1", _srh(1, lambda v: 1), MalformedReason.BAD_SRH, {}),
    ("srh-last-entry-big", _srh(4, lambda v: v + 1), MalformedReason.BAD_SRH, {}),
    ("srh-tlv-overrun", _srh_tlv_overrun, MalformedReason.BAD_SRH, {}),
    ("udp-dport", lambda r, lay, s: put16(r, lay.udp + 2, 4790), MalformedReason.BAD_UDP_PORT, {}),
    ("udp-dport-0", lambda r, lay, s: put16(r, lay.udp + 2, 0), MalformedReason.BAD_UDP_PORT, {}),
    ("udp-len+1", lambda r, lay, s: add16(r, lay.udp + 4, 1), MalformedReason.BAD_LENGTH, {}),
    ("udp-len-1", lambda r, lay, s: add16(r, lay.udp + 4, -1), MalformedReason.BAD_LENGTH, {}),
    ("udp-len-0", lambda r, lay, s: put16(r, lay.udp + 4, 0), MalformedReason.BAD_LENGTH, {}),
    ("udp-len-23", lambda r, lay, s: put16(r, lay.udp + 4, 23), MalformedReason.BAD_LENGTH, {}),
    ("inner-len+1", lambda r, lay, s: None if lay.inner is None else add16(r, lay.inner + 4, 1),
     MalformedReason.BAD_LENGTH, {}),
    ("inner-len-1", lambda r, lay, s: None if lay.inner is None else add16(r, lay.inner + 4, -1),
     MalformedReason.BAD_LENGTH, {}),
    ("outer-len+1", lambda r, lay, s: add16(r, OUTER_PLEN, 1), MalformedReason.BAD_LENGTH, {}),
    ("outer-len-1", lambda r, lay, s: add16(r, OUTER_PLEN, -1), MalformedReason.BAD_LENGTH, {}),
    ("trailing-byte", lambda r, lay, s: r + b"\0", MalformedReason.BAD_LENGTH, {}),
    ("reth-len+1", _data_only(lambda r, lay, s: put(
        r, _reth(r, lay) + 12, (int.from_bytes(r[_reth(r, lay) + 12 : _reth(r, lay) + 16],
                                               "big") + 1).to_bytes(4, "big"))),
     MalformedReason.BAD_LENGTH, {}),
    ("opcode-0", lambda r, lay, s: put(r, lay.bth, b"\x00"), MalformedReason.BAD_OPCODE, {}),
    ("opcode-send", lambda r, lay, s: put(r, lay.bth, b"\x04"), MalformedReason.BAD_OPCODE, {}),
    ("opcode-ff", lambda r, lay, s: put(r, lay.bth, b"\xff"), MalformedReason.BAD_OPCODE, {}),
    ("tver-1", lambda r, lay, s: put(r, lay.bth + 1, bytes([r[lay.bth + 1] | 1])),
     MalformedReason.BAD_VERSION, {}),
    ("tver-15", lambda r, lay, s: put(r, lay.bth + 1, bytes([r[lay.bth + 1] | 15])),
     MalformedReason.BAD_VERSION, {}),
    ("nack-reason-0", _ext_field("nack", 2, 0), MalformedReason.BAD_FIELD, {}),
    ("nack-reason-3", _ext_field("nack", 2, 3), MalformedReason.BAD_FIELD, {}),
    ("sack-mode-3", _ext_field("sack", 1, 3 << 5), MalformedReason.BAD_FIELD, {}),
    ("erth-op-2", _ext_field("erth", 1, 2), MalformedReason.BAD_FIELD, {}),
    ("erth-op-3", _ext_field("erth", 1, 3), MalformedReason.BAD_FIELD, {}),
    ("eeth-op-3", _ext_field("eeth", 1, 3 << 4), MalformedReason.BAD_FIELD, {}),
    ("endpoint-qpn", lambda r, lay, s: put(r, lay.bth + 5, b"\x00\x00\x01")
     if s.kind == "endpoint" else None, MalformedReason.BAD_FIELD, {}),
    ("flip-payload", _flip_payload, MalformedReason.BAD_ICRC, {}),
    ("flip-payload-no-icrc", _flip_payload, MalformedReason.BAD_CHECKSUM, {"verify_icrc": False}),
    ("flip-icrc", lambda r, lay, s: put(r, lay.icrc, bytes([r[lay.icrc] ^ 0x80])),
     MalformedReason.BAD_ICRC, {}),
    ("flip-icrc-no-icrc", lambda r, lay, s: put(r, lay.icrc, bytes([r[lay.icrc] ^ 0x80])),
     MalformedReason.BAD_CHECKSUM, {"verify_icrc": False}),
    ("flip-udp-csum", lambda r, lay, s: put(r, lay.udp + 7, bytes([r[lay.udp + 7] ^ 0x10])),
     MalformedReason.BAD_CHECKSUM, {}),
    ("zero-udp-csum", lambda r, lay, s: put16(r, lay.udp + 6, 0), MalformedReason.BAD_CHECKSUM, {}),
    ("flip-psn", lambda r, lay, s: put(r, lay.bth + 11, bytes([r[lay.bth + 11] ^ 4])),
     MalformedReason.BAD_ICRC, {}),
    ("flip-inner-src", _inner(8, lambda b: bytes([b[0] ^ 1])), MalformedReason.BAD_ICRC, {}),
    ("flip-outer-src-no-encap", lambda r, lay, s: None if lay.inner is not None
     else put(r, 22, bytes([r[22] ^ 1])), MalformedReason.BAD_CHECKSUM, {}),
]

def test_every_reason_is_reachable() -> None:
    """The corruption table reaches every MalformedReason."""
    assert {c[2] for c in CASES} == set(MalformedReason)


@pytest.mark.parametrize(("mutate", "want", "kw"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_corruption(mutate: Mutator, want: MalformedReason, kw: dict[str, bool]) -> None:
    """Each corruption, applied to every sample frame it applies to, gives its reason."""
    applied = 0
    for spec in SPECS:
        raw = spec.build()
        bad = mutate(raw, layout(raw), spec)
        if bad is None:
            continue
        applied += 1
        got = reason_of(bad, **kw)
        assert got is want, f"{spec_id(spec)}: {got} != {want}"
    assert applied > 0


# --- in-flight edits that must NOT break a frame ----------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_switch_edits_keep_frame_valid(spec: Spec) -> None:
    """Hop limit, traffic class, flow label high bits, uSID shifts and SRH steps are allowed.

    These are exactly what the fabric changes on the way, and the ICRC/checksum exclude them.
    """
    raw = spec.build()
    lay = layout(raw)
    base = parse_frame(raw)
    edits = [
        put(raw, 21, b"\x01"),  # hop limit
        put(raw, 14, bytes([0x60 | 0x0F])),  # traffic class high nibble (DSCP 60-63)
        put(raw, 15, bytes([(raw[15] & 0x0F) | 0xC0])),  # ECN -> CE
        put(raw, 15, bytes([(raw[15] & 0xF0) | 0x0F])),  # flow label bits 16-19
    ]
    r = spec.route
    if r.usid is not None:
        dst = r.usid
        while len([1 for i in range(4, 16, 2) if dst[i : i + 2] != b"\0\0"]) > 1:
            dst = usid_shift(dst)
            edits.append(put(raw, 38, dst))
    if r.segments is not None:
        assert lay.srh is not None
        for sl in range(len(r.segments) - 2, -1, -1):
            step = put(raw, lay.srh + 3, bytes([sl]))
            edits.append(put(step, 38, r.segments[len(r.segments) - 1 - sl]))
    assert len(edits) > 4 or (r.usid is None and r.segments is None)
    for e in edits:
        f = parse_frame(e)
        assert f.eth == base.eth
        assert headers(f)[2:] == headers(base)[2:]
        assert bytes(f.payload) == bytes(base.payload)
        if f.srh is not None:
            assert f.srh.active_segment == f.outer.dst
            assert f.srh.segments == (base.srh.segments if base.srh else None)


def test_tlvs_in_a_frame_parse() -> None:
    """An SRH carrying Pad1/PadN/unknown TLVs inside a real frame parses and verifies."""
    for spec in sample_specs("srh", True) + sample_specs("srh", False):
        raw = spec.build()
        lay = layout(raw)
        tlvs = bytes([SRH_TLV_PAD1, SRH_TLV_PADN, 2, 0, 0, 7, 1, 0xAB])
        f = parse_frame(_with_srh_tlvs(raw, lay, tlvs))
        assert f.srh is not None and f.srh.tlvs == tlvs
        assert headers(f)[2:] == headers(parse_frame(raw))[2:]


# --- truncation at every byte boundary ------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_every_prefix(spec: Spec) -> None:
    """Cut inside the headers: TRUNCATED/BAD_LENGTH. Data cut after: trimmed, partial payload."""
    raw = spec.build()
    lay = layout(raw)
    full = parse_frame(raw)
    for n in range(lay.payload):
        assert reason_of(raw[:n]) in TRUNC, n
    for n in range(lay.payload, len(raw)):
        if spec.kind != "data":
            assert reason_of(raw[:n]) is MalformedReason.TRUNCATED, n
            continue
        f = parse_frame(raw[:n])
        assert f.trimmed, n
        assert headers(f) == headers(full)
        assert f.outer == full.outer
        assert bytes(f.payload) == spec.kw["payload"][: n - lay.payload]


@settings(max_examples=40, deadline=None)
@given(spec=any_specs(), data=st.data())
def test_random_prefix(spec: Spec, data: st.DataObject) -> None:
    """Random frames cut anywhere behave as test_every_prefix says."""
    raw = spec.build()
    lay = layout(raw)
    n = data.draw(st.integers(0, len(raw) - 1))
    if n < lay.payload or spec.kind != "data":
        assert reason_of(raw[:n]) in TRUNC
    else:
        f = parse_frame(raw[:n])
        assert f.trimmed and bytes(f.payload) == spec.kw["payload"][: n - lay.payload]


# --- frames a switch trimmed and re-marked -------------------------------------------------------


def mark_trimmed(raw: bytes, cut: int, fix_length: bool) -> bytes:
    """What a trimming switch does: cut to ``cut`` bytes, DSCP := trimmed, maybe fix length."""
    out = bytearray(raw)
    tc = ((out[14] & 0x0F) << 4) | (out[15] >> 4)
    tc = (DSCP_TRIMMED << 2) | (tc & 0b11)
    out[14] = 0x60 | (tc >> 4)
    out[15] = ((tc & 0x0F) << 4) | (out[15] & 0x0F)
    if fix_length:
        plen = max(cut - ETH_HEADER_LEN - IPV6_HEADER_LEN, 0)
        out[OUTER_PLEN : OUTER_PLEN + 2] = plen.to_bytes(2, "big")
    return bytes(out[:cut])


@pytest.mark.parametrize("fix_length", [False, True], ids=["length-unfixed", "length-fixed"])
@pytest.mark.parametrize("spec", [s for s in SPECS if s.kind == "data"],
                         ids=[spec_id(s) for s in SPECS if s.kind == "data"])
def test_dscp_trimmed(spec: Spec, fix_length: bool) -> None:
    """A DSCP_TRIMMED data frame parses trimmed, headers intact, wherever it was cut."""
    raw = spec.build()
    lay = layout(raw)
    full = parse_frame(raw)
    for cut in range(lay.payload, len(raw) + 1):
        f = parse_frame(mark_trimmed(raw, cut, fix_length))
        assert f.trimmed, cut
        assert f.outer.dscp == DSCP_TRIMMED and f.outer.ecn == full.outer.ecn
        assert headers(f) == headers(full)
        assert f.ev == full.ev
        assert bytes(f.payload) == spec.kw["payload"][: cut - lay.payload]
    for cut in range(lay.payload):
        assert reason_of(mark_trimmed(raw, cut, fix_length)) in TRUNC, cut


@settings(max_examples=60, deadline=None)
@given(spec=data_specs(max_payload=600), data=st.data(), fix_length=st.booleans())
def test_dscp_trimmed_random(spec: Spec, data: st.DataObject, fix_length: bool) -> None:
    """Random data frames, random cut points, both length behaviours."""
    raw = spec.build()
    lay = layout(raw)
    cut = data.draw(st.integers(lay.payload, len(raw)))
    f = parse_frame(mark_trimmed(raw, cut, fix_length))
    assert f.trimmed and f.reth is not None and f.reth.length == len(spec.kw["payload"])
    assert bytes(f.payload) == spec.kw["payload"][: cut - lay.payload]


@pytest.mark.parametrize("spec", [s for s in SPECS if s.kind != "data"],
                         ids=[spec_id(s) for s in SPECS if s.kind != "data"])
def test_control_frames_are_never_trimmed(spec: Spec) -> None:
    """A cut control frame is rejected even when marked trimmed; uncut it parses normally."""
    raw = spec.build()
    for fix in (False, True):
        for cut in range(len(raw)):
            assert reason_of(mark_trimmed(raw, cut, fix)) in TRUNC
        assert parse_frame(mark_trimmed(raw, len(raw), fix)).trimmed is False


@pytest.mark.parametrize("spec", [s for s in SPECS if s.kind == "data"],
                         ids=[spec_id(s) for s in SPECS if s.kind == "data"])
def test_fixed_length_without_mark_is_bad_length(spec: Spec) -> None:
    """A shortened outer length without the trimmed DSCP is an inconsistency, not a trim."""
    raw = spec.build()
    lay = layout(raw)
    cut = (lay.payload + len(raw)) // 2
    out = put16(raw[:cut], OUTER_PLEN, cut - ETH_HEADER_LEN - IPV6_HEADER_LEN)
    assert reason_of(out) is MalformedReason.BAD_LENGTH


# --- helpers of this module are themselves right ------------------------------------------------


@pytest.mark.parametrize(("mode", "encap"), MODES)
def test_refresh_restores_validity(mode: str, encap: bool) -> None:
    """refresh() (used by the fuzz test) recomputes ICRC and checksum after a payload edit."""
    spec = sample_specs(mode, encap)[0]
    raw = spec.build()
    lay = layout(raw)
    bad = put(raw, lay.payload, b"\xee")
    assert reason_of(bad) is MalformedReason.BAD_ICRC
    f = parse_frame(refresh(bad, spec.route))
    assert bytes(f.payload)[0] == 0xEE


def test_layout_matches_parser() -> None:
    """The independent header walk agrees with parse_frame on every sample frame."""
    for spec in SPECS:
        raw = spec.build()
        lay = layout(raw)
        f = parse_frame(raw)
        assert raw[lay.bth] == f.bth.opcode
        assert (lay.inner is not None) == (f.inner is not None)
        assert (lay.srh is not None) == (f.srh is not None)
        assert lay.icrc - lay.payload == len(f.payload)
        assert int.from_bytes(raw[12:14], "big") == ETH_P_IPV6
        assert (f.bth.opcode in DATA_OPCODES) == (spec.kind == "data")


def test_endpoint_constants() -> None:
    """Endpoint frames go to ENDPOINT_QPN; NACK/endpoint enums are closed sets (as tested)."""
    raw = sample_specs("plain", False)[-1].build()
    assert int.from_bytes(raw[layout(raw).bth + 5 : layout(raw).bth + 8], "big") == ENDPOINT_QPN
    assert 3 not in set(NackReason) and 0 not in set(NackReason)
    assert set(EndpointOp) == {0, 1}
    assert 0x04 not in set(Opcode)


# --- single-bit errors anywhere in the protected part ---------------------------------------

# Inner IPv6 bits a router may change (traffic class, flow label, hop limit): the ICRC masks
# them and the UDP pseudo-header does not include them, so flipping them is not an error.
_INNER_MUTABLE = {(0, b) for b in range(4)} | {(i, b) for i in (1, 2, 3, 7) for b in range(8)}


@pytest.mark.parametrize(("mode", "encap"), MODES)
def test_every_single_bit_flip_is_caught(mode: str, encap: bool) -> None:
    """Flip each bit from the inner header (or UDP) to the ICRC: always MalformedFrame.

    One's-complement sums catch every single-bit error, so no flip may parse, except the
    inner header's in-flight-mutable bits, which must parse unchanged otherwise.
    """
    for spec in sample_specs(mode, encap, payload=b"\x5a" * 9):
        raw = spec.build()
        lay = layout(raw)
        start = lay.inner if lay.inner is not None else lay.udp
        for i in range(start, lay.end):
            for bit in range(8):
                bad = put(raw, i, bytes([raw[i] ^ (1 << bit)]))
                if lay.inner is not None and (i - lay.inner, bit) in _INNER_MUTABLE:
                    assert headers(parse_frame(bad))[3:] == headers(parse_frame(raw))[3:]
                    continue
                with pytest.raises(MalformedFrame):
                    parse_frame(bad)


@settings(max_examples=60, deadline=None)
@given(spec=data_specs().filter(lambda s: len(s.kw["payload"]) > 0), data=st.data())
def test_payload_bit_flip(spec: Spec, data: st.DataObject) -> None:
    """Any payload bit flipped: BAD_ICRC, or BAD_CHECKSUM when the ICRC is not checked."""
    raw = spec.build()
    lay = layout(raw)
    i = data.draw(st.integers(lay.payload, lay.icrc - 1))
    bad = put(raw, i, bytes([raw[i] ^ (1 << data.draw(st.integers(0, 7)))]))
    assert reason_of(bad) is MalformedReason.BAD_ICRC
    assert reason_of(bad, verify_icrc=False) is MalformedReason.BAD_CHECKSUM
