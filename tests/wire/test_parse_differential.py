"""The C parser (``mrc_parse`` via ``mrcnet.wire.parsed``) against the reference
``mrcnet.wire.parse_frame``: same accept/reject decision, same reason, same trimmed flag,
same fields, for every kind of frame in every mode, valid, mutated and random.

For each input both run with the same ``verify`` setting. A rejection must name the same
``MalformedReason``; an accepted frame must give the same flat record as
``py_parse`` (which flattens parse_frame's ``Frame``: every header field and
every offset) and ``parsed_to_frame`` must rebuild a ``Frame`` equal to parse_frame's.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_wire_fuzz import fix_checksums, in_flight, mutate, random_frame
from wire_strategies import (
    Spec,
    all_sample_specs,
    any_specs,
    layout,
    malformed_reason,
    refresh,
)

from mrcnet import constants as K
from mrcnet import native
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.native import HAVE_C
from mrcnet.wire import DEFAULT_DSCP, DscpClasses, build_data, parse_frame, set_dscp_classes
from mrcnet.wire.parsed import (
    PARSE_REASONS,
    FrameParser,
    PyParsed,
    c_parse,
    parsed_to_frame,
    py_parse,
)

pytestmark = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")

SEED = int(os.environ.get("MRCNET_DIFF_SEED", "20261122"))
N_FUZZ = int(os.environ.get("MRCNET_DIFF_FRAMES", "100000"))


def _c_fields(c: object) -> dict[str, int]:
    return {n: int(getattr(c, n)) for n in PyParsed.__slots__ if n != "why"}


def agree(buf: bytes | bytearray | memoryview, verify: bool = True) -> str:
    """Parse ``buf`` with both parsers; assert they agree; return the outcome."""
    try:
        ref = parse_frame(buf, verify_checksum=verify, verify_icrc=verify)
    except MalformedFrame as e:
        ref_reason: MalformedReason | None = e.reason
    else:
        ref_reason = None
    try:
        c = c_parse(buf, verify)
    except MalformedFrame as e:
        assert e.reason == ref_reason, (e.reason, ref_reason, bytes(buf).hex())
        return e.reason.value
    assert ref_reason is None, (ref_reason, "C accepted", bytes(buf).hex())
    py = py_parse(buf, verify)
    cf, pf = _c_fields(c), py.fields()
    assert cf == pf, {k: (cf[k], pf[k]) for k in cf if cf[k] != pf[k]}
    assert parsed_to_frame(buf, c) == ref
    return "trimmed" if c.trimmed else "ok"


# --- the two lists of names and codes agree -----------------------------------------------


def test_record_fields_match_the_c_struct() -> None:
    """PyParsed and struct mrc_parsed have the same fields (the core reads either)."""
    ffi = native.ffi
    c_names = [name for name, _ in ffi.typeof("struct mrc_parsed").fields]
    assert c_names == list(PyParsed.__slots__)


def test_reason_codes_match() -> None:
    lib = native.C
    for i, reason in enumerate(PARSE_REASONS):
        if reason is None:
            assert i == lib.MRC_OK == 0
        else:
            assert getattr(lib, "MRC_" + reason.name) == i
    assert set(MalformedReason) == {r for r in PARSE_REASONS if r is not None}


# --- valid frames of every kind and mode -----------------------------------------------


@pytest.mark.parametrize("spec", all_sample_specs())
def test_samples_agree(spec: Spec) -> None:
    frame = spec.build()
    assert agree(frame) == "ok"
    assert agree(frame, verify=False) == "ok"
    for g in in_flight(frame):  # as later hops see it (uSIDs shifted, SRH advanced)
        assert agree(g) == "ok"


def _mark(frame: bytes, dscp: int, keep: int = 120) -> bytes:
    """What a trimming switch does: cut to ``keep`` bytes, outer DSCP := ``dscp``."""
    f = bytearray(frame[:keep])
    f[14] = 0x60 | (dscp >> 2)
    f[15] = ((dscp & 0b11) << 6) | (f[15] & 0x3F)
    return bytes(f)


@pytest.mark.parametrize(("classes", "lasthop"), [
    (None, False), (None, True),
    (DscpClasses(4, 8, 12, 16, 0, 46), False), (DscpClasses(4, 8, 12, 16, 0, 46), True),
])
def test_both_trimmed_code_points_agree(classes: DscpClasses | None, lasthop: bool) -> None:
    """TRIMMED and TRIMMED_LASTHOP (default and operator-set code points) both parse as
    trimmed in C and Python; the record says which; the other classes are not trims."""
    c = classes or DEFAULT_DSCP
    set_dscp_classes(c)
    try:
        sp = next(sp for sp in all_sample_specs() if sp.kind == "data")
        frame = build_data(sp.route, **{**sp.kw, "payload": bytes(range(256))})
        marked = _mark(frame, c.trimmed_lasthop if lasthop else c.trimmed, len(frame) - 200)
        assert agree(marked) == "trimmed"
        for rec in (c_parse(marked, True), py_parse(marked, True)):
            assert rec.trimmed == 1 and rec.trim_lasthop == int(lasthop)
        assert parse_frame(marked).trim_lasthop is lasthop
        for other in (c.trimmable, c.trimmable_retx, c.no_trim, c.control):
            assert agree(_mark(frame, other, len(frame))) == "ok"
    finally:
        set_dscp_classes(DEFAULT_DSCP)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=any_specs())
def test_random_frames_agree(spec: Spec) -> None:
    """Hypothesis: any frame of any kind, route mode and field values."""
    frame = spec.build()
    assert agree(frame) == "ok"
    assert agree(bytearray(frame)) == "ok"
    assert agree(memoryview(frame)) == "ok"


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=any_specs(), data=st.data())
def test_damaged_frames_agree(spec: Spec, data: st.DataObject) -> None:
    """Hypothesis: a valid frame cut, padded, bit-flipped or re-marked trimmed."""
    frame = bytearray(spec.build())
    what = data.draw(st.sampled_from(["cut", "pad", "flip", "trim", "trim-fix", "field"]))
    mark = data.draw(st.sampled_from([K.DSCP_TRIMMED, K.DSCP_TRIMMED_LASTHOP]))
    if what == "cut":
        del frame[data.draw(st.integers(0, len(frame))):]
    elif what == "pad":
        frame += bytes(data.draw(st.integers(1, 80)))
    elif what == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(frame) - 1))
            frame[i] ^= 1 << data.draw(st.integers(0, 7))
    elif what in ("trim", "trim-fix"):
        frame[14] = 0x60 | (mark >> 2)
        frame[15] = ((mark & 0b11) << 6) | (frame[15] & 0x3F)
        del frame[data.draw(st.integers(0, len(frame))):]
        if what == "trim-fix" and len(frame) > 20:
            frame[18:20] = max(len(frame) - 54, 0).to_bytes(2, "big")
    else:  # any byte of the headers to any value, checksums made right again
        lay = layout(bytes(frame))
        i = data.draw(st.integers(0, lay.payload - 1))
        frame[i] = data.draw(st.integers(0, 255))
        fix_checksums(frame)
    agree(bytes(frame))
    agree(bytes(frame), verify=False)


# --- every value of every one-byte code field --------------------------------------------


def _with_byte(spec: Spec, where: str, delta: int, value: int) -> bytes:
    frame = bytearray(spec.build())
    lay = layout(bytes(frame))
    frame[getattr(lay, where) + delta] = value
    return refresh(frame, spec.route)


def test_every_code_value_agrees() -> None:
    """Opcode, BTH TVer byte, SACK flags, window penalty, NACK reason, endpoint op: all
    256 values each, with checksums fixed so the field check itself decides."""
    n = 0
    by_kind: dict[str, list[Spec]] = {}
    for s in all_sample_specs():
        by_kind.setdefault(s.kind, []).append(s)
    targets = [
        (by_kind["data"], "bth", 0), (by_kind["data"], "bth", 1),
        (by_kind["sack"], "bth", 0), (by_kind["sack"], "ext", 15), (by_kind["sack"], "ext", 31),
        (by_kind["nack"], "ext", 0), (by_kind["endpoint"], "ext", 0),
        (by_kind["probe"], "bth", 0), (by_kind["endpoint"], "bth", 0),
    ]
    for specs, where, delta in targets:
        for spec in specs:
            for v in range(256):
                agree(_with_byte(spec, where, delta, v))
                n += 1
    assert n > 10_000


# --- the fuzz corpus, mutated: 100,000 inputs ---------------------------------------------


def test_fuzz_corpus_agrees() -> None:
    """tests/wire/test_wire_fuzz.py's generator (valid frames of every kind and mode,
    stacked mutations, raw bytes), 100,000 inputs; a quarter without verification, and
    one in three with checksums fixed after mutating so the later checks decide."""
    rng = random.Random(SEED)
    corpus = [s.build() for s in all_sample_specs()]
    corpus += [random_frame(rng) for _ in range(300)]
    corpus += [g for f in corpus[::3] for g in in_flight(f)]
    counts: Counter[str] = Counter()
    t0 = time.perf_counter()
    for i in range(N_FUZZ):
        buf = mutate(rng, corpus)
        if i % 3 == 0:
            b2 = bytearray(buf)
            fix_checksums(b2)
            buf = bytes(b2)
        view: bytes | bytearray | memoryview = (
            memoryview(buf) if i % 7 == 0 else bytearray(buf) if i % 7 == 1 else buf)
        try:
            counts[agree(view, verify=i % 4 != 3)] += 1
        except AssertionError as e:
            raise AssertionError(f"seed={SEED} i={i}: {e}\nframe={buf.hex()}") from e
    dt = time.perf_counter() - t0
    print(f"\ndifferential: {N_FUZZ} inputs in {dt:.1f} s; {dict(counts)}")
    assert sum(counts.values()) == N_FUZZ
    assert counts["ok"] > N_FUZZ // 20
    assert counts["trimmed"] > N_FUZZ // 1000
    assert set(MalformedReason) <= {r for r in MalformedReason if counts[r.value]}


# --- the reusable parser -------------------------------------------------------------------


def test_frame_parser_reuses_its_record_and_raises_like_parse_frame() -> None:
    specs = all_sample_specs()
    a, b = specs[0].build(), specs[3].build()
    for use_c in (True, False):
        fp = FrameParser(use_c=use_c)
        ra = fp.parse(a)
        assert ra.opcode == K.Opcode.WRITE_MIDDLE and ra.is_data and not ra.trimmed
        assert bytes(a[ra.payload_off : ra.payload_off + ra.payload_len]) == bytes(range(33))
        rb = fp.parse(memoryview(bytearray(b)))
        assert rb.has_seth and rb.opcode == K.Opcode.SACK and not rb.is_data
        assert (ra is rb) == use_c  # C: one record per parser, overwritten
        assert fp.parse(a[:-1]).trimmed  # a data frame cut short was trimmed
        # a control frame cut short is truncated
        assert malformed_reason(fp.parse, b[:-1]) is MalformedReason.TRUNCATED
        assert malformed_reason(fp.parse, a[:12]) is MalformedReason.TRUNCATED


def test_non_byte_memoryview() -> None:
    """A memoryview of another item size is read as its bytes, as parse_frame does."""
    frame = all_sample_specs()[0].build()
    pad = frame + bytes(-len(frame) % 4)
    mv = memoryview(bytearray(pad)).cast("I")
    # The padded frame is longer than IPv6 says (and longer than 60): both reject it alike.
    agree(mv)
    agree(memoryview(frame))


@pytest.fixture
def other_ev_order() -> object:
    """The EV order with the high 16 bits in the source port, for one test."""
    from mrcnet.wire import set_ev_order

    set_ev_order(K.EV_ORDER_SPORT_HIGH)
    yield
    set_ev_order(K.EV_ORDER_SPORT_LOW)


@pytest.mark.usefixtures("other_ev_order")
def test_the_other_ev_order_agrees() -> None:
    """With the other EV order set, the C parser, the C templates and the C SACK builder
    still make what the Python reference makes, and the EV round-trips."""
    from mrcnet.core.ctrl import SackTemplate
    from mrcnet.core.rxlane import CRxLane, PyRxState
    from mrcnet.wire import ev_from_headers
    from mrcnet.wire.template import CTemplate, DataTemplate

    for spec in all_sample_specs():
        raw = spec.build()
        assert agree(raw) == "ok"
        f = parse_frame(raw)
        assert f.ev == spec.kw["ev"] and f.udp.sport == spec.kw["ev"] >> 16
        assert ev_from_headers(f.udp.sport, f.outer.flow_label) == f.ev
        if spec.kind == "data" and f.inner is not None:
            t = DataTemplate.for_route(spec.route, dest_qp=spec.kw["dest_qp"],
                                       rkey=spec.kw["rkey"])
            kw = dict(opcode=spec.kw["opcode"], psn=1, ev=0x89ABCDEF, va=8, payload=b"z" * 9)
            if spec.kw["opcode"] in K.IMM_OPCODES:
                kw["imm"] = 5
            assert CTemplate(t).build(**kw) == t.build(**kw)
            assert parse_frame(t.build(**kw)).ev == 0x89ABCDEF
        if spec.kind == "sack":
            st_ = SackTemplate(spec.route, dest_qp=5)
            rx_c, rx_p = CRxLane.new_state(64), PyRxState.new_state(64)
            for rx in (rx_c, rx_p):
                rx.rcv_nxt, rx.ack_seq, rx.ack_ev, rx.ack_ts = 10, 9, 0x12345678, 3
            got_c = CRxLane.sack(rx_c, CRxLane.sack_template(st_), 0x9ABC0DEF, 0, -1, None)
            got_p = PyRxState.sack(rx_p, PyRxState.sack_template(st_), 0x9ABC0DEF, 0, -1, None)
            assert got_c == got_p and parse_frame(got_c[0]).ev == 0x9ABC0DEF
