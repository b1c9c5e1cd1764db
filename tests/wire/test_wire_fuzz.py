"""Fuzz parse_frame: 100,000+ random and mutated frames; only Frame or MalformedFrame allowed.

Seeded ``random`` (not hypothesis) so the bulk runs fast and reproducibly: a failure prints
the seed, the iteration and the frame's hex, which reproduces it exactly. Mutations start
from valid frames of every kind and mode and stack bit flips, byte insertions/deletions,
truncations, field splices between frames and writes of edge values into length, version
and type fields; after some mutations the ICRC and UDP checksum are recomputed so the
later checks of the parser are reached too.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Callable

from wire_strategies import all_sample_specs

from mrcnet.constants import (
    DATA_OPCODES,
    DSCP_TRIMMED,
    DSCP_TRIMMED_LASTHOP,
    ENDPOINT_QPN,
    ETH_HEADER_LEN,
    IPV6_HEADER_LEN,
    MRC_UDP_PORT,
    UDP_HEADER_LEN,
    EndpointOp,
    NackReason,
    Opcode,
    SackMode,
)
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.native import HAVE_C
from mrcnet.wire import (
    AETH,
    EETH,
    ERTH,
    NETH,
    PETH,
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
    usid_list,
    usid_shift,
)
from mrcnet.wire._util import Buffer
from mrcnet.wire.checksum import c_udp6_checksum_ok, udp6_checksum
from mrcnet.wire.icrc import icrc

SEED = int(os.environ.get("MRCNET_FUZZ_SEED", "20260522"))
N_FRAMES = int(os.environ.get("MRCNET_FUZZ_FRAMES", "100000"))
EDGE8 = (0, 1, 0x7F, 0x80, 0xFE, 0xFF)
EDGE16 = (0, 1, 7, 8, 23, 24, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF)



def _sender_dscp(d: int) -> int:
    """``d``, or its neighbour when it is a code point only switches set."""
    return d + 1 if d in (DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP) else d

def random_route(rng: random.Random) -> Route:
    """A random route of a random mode (uSID with 1-6 uSIDs, SRH with 1-6 segments, plain)."""
    mode = rng.choice(["usid", "srh", "plain"])
    kw: dict[str, object] = {}
    if mode == "usid":
        ids = [rng.randrange(1, 0x10000) for _ in range(rng.randint(1, 6))]
        kw["usid"] = usid_container(rng.randbytes(4), ids)
    elif mode == "srh":
        kw["segments"] = tuple(rng.randbytes(16) for _ in range(rng.randint(1, 6)))
    return Route(
        rng.randbytes(6), rng.randbytes(6), rng.randbytes(16), rng.randbytes(16),
        encap=rng.random() < 0.5, hop_limit=rng.randrange(256), **kw,  # type: ignore[arg-type]
    )


def _qpn(rng: random.Random) -> int:
    """A connected QP number (any 24-bit value but the endpoint QPN)."""
    q = rng.getrandbits(24)
    return q if q != ENDPOINT_QPN else q + 1


def random_frame(rng: random.Random) -> bytes:
    """A valid frame of a random kind with random fields."""
    r = random_route(rng)
    ev = rng.getrandbits(32)
    kind = rng.randrange(7)
    if kind <= 1:
        op = rng.choice(sorted(DATA_OPCODES))
        imm = {"imm": rng.getrandbits(32)} if op in (
            Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY_IMM) else {}
        return build_data(
            r, ev=ev, opcode=op, dest_qp=_qpn(rng), psn=rng.getrandbits(24),
            va=rng.getrandbits(64), rkey=rng.getrandbits(32),
            payload=rng.randbytes(rng.choice((0, 1, 7, 64, 300))),
            rqmsn=rng.getrandbits(16), msn=rng.getrandbits(16),
            timestamp=rng.choice((None, rng.getrandbits(16))), rtx=rng.random() < 0.5,
            dscp=_sender_dscp(rng.choice((26, 46, rng.randrange(DSCP_TRIMMED)))), **imm,  # type: ignore[arg-type]
        )
    if kind == 2:
        seth = SETH(rng.getrandbits(24), ev, rng.randrange(-32768, 32768),
                    rng.randrange(-32768, 32768), rng.getrandbits(64),
                    rng.choice(list(SackMode)), rng.random() < 0.5, rng.getrandbits(16),
                    rng.getrandbits(16), rng.getrandbits(4), rng.getrandbits(4),
                    rng.getrandbits(8))
        cc = CCState(rng.getrandbits(16), rng.getrandbits(15), rng.random() < 0.5,
                     rng.randrange(128), rng.getrandbits(24))
        return build_sack(r, ev=ev, dest_qp=_qpn(rng), seth=seth, cc=cc)
    if kind == 3:
        neth = NETH(rng.choice(list(NackReason)), ev, rng.getrandbits(24), rng.getrandbits(16))
        return build_nack(r, ev=ev, dest_qp=_qpn(rng), neth=neth)
    if kind == 4:
        peth = PETH(rng.getrandbits(16), rng.getrandbits(16))
        return build_probe(r, ev=ev, dest_qp=_qpn(rng), peth=peth, psn=rng.getrandbits(24))
    if kind == 5:
        return build_ack(r, ev=ev, dest_qp=_qpn(rng), psn=rng.getrandbits(24),
                         aeth=AETH(rng.getrandbits(8), rng.getrandbits(24)))
    op = rng.choice(list(EndpointOp))
    if rng.random() < 0.5:
        return build_endpoint(r, ev=ev, request_id=rng.getrandbits(24),
                              erth=ERTH(op, rng.getrandbits(32), rng.getrandbits(16)))
    return build_endpoint(r, ev=ev, request_id=rng.getrandbits(24),
                          eeth=EETH(op, rng.getrandbits(16)))


def fix_checksums(buf: bytearray) -> None:
    """Recompute ICRC and UDP checksum of a (mutated) frame if its headers still parse."""
    try:
        f = parse_frame(buf, verify_checksum=False, verify_icrc=False)
    except MalformedFrame:
        return
    if f.trimmed:
        return
    udp = ETH_HEADER_LEN + IPV6_HEADER_LEN + (f.srh.length if f.srh else 0)
    start = udp
    if f.inner is not None:
        udp += IPV6_HEADER_LEN
    end = ETH_HEADER_LEN + IPV6_HEADER_LEN + f.outer.payload_length
    if end > len(buf) or end - 4 < udp + UDP_HEADER_LEN:
        return
    buf[end - 4 : end] = icrc(buf[start : end - 4], has_ip=f.inner is not None)
    buf[udp + 6 : udp + 8] = b"\0\0"
    if f.inner is not None:
        src, dst = f.inner.src, f.inner.dst
    elif f.srh is not None:
        src, dst = f.outer.src, f.srh.final_segment
    else:
        src, dst = f.outer.src, f.outer.dst
    buf[udp + 6 : udp + 8] = udp6_checksum(src, dst, buf[udp:end]).to_bytes(2, "big")


# Offsets worth hitting with edge values: lengths, versions, next headers, types, SRH fields.
def _field_offsets(buf: bytearray) -> list[tuple[int, int]]:
    """(offset, width) of interesting fields, found by a quick header walk."""
    out = [(12, 2), (14, 1), (18, 2), (20, 1)]
    off = ETH_HEADER_LEN + IPV6_HEADER_LEN
    if len(buf) > off + 8 and buf[20] == 43:
        out += [(off, 1), (off + 1, 1), (off + 2, 1), (off + 3, 1), (off + 4, 1)]
        off += 8 + 8 * buf[off + 1]
    if len(buf) > off + 40 and buf[off] >> 4 == 6:
        out += [(off, 1), (off + 4, 2), (off + 6, 1)]
        off += IPV6_HEADER_LEN
    out += [(off + 2, 2), (off + 4, 2), (off + 6, 2), (off + 8, 1), (off + 9, 1),
            (off + 16, 1), (off + 20, 1), (off + 20, 4), (off + 24, 1), (off + 35, 1),
            (off + 39, 1)]
    return [(o, w) for o, w in out if o + w <= len(buf)]


def mutate(rng: random.Random, corpus: list[bytes]) -> bytes:
    """One fuzz input: a corpus frame with 1-4 stacked mutations, or raw random bytes."""
    if rng.random() < 0.04:
        n = rng.randrange(0, 400)
        buf = bytearray(rng.randbytes(n))
        if n >= 14 and rng.random() < 0.7:
            buf[12:14] = b"\x86\xdd"
            if n > 14:
                buf[14] = 0x60 | (buf[14] & 0x0F)
        return bytes(buf)
    buf = bytearray(rng.choice(corpus))
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        op = rng.randrange(10)
        n = len(buf)
        if op == 0 and n:  # bit flips
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(n)
                buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:  # insert bytes
            i = rng.randrange(n + 1)
            buf[i:i] = rng.randbytes(rng.randint(1, 16))
        elif op == 2 and n:  # delete bytes
            i = rng.randrange(n)
            del buf[i : i + rng.randint(1, 16)]
        elif op == 3:  # truncate
            del buf[rng.randrange(n + 1) :]
        elif op == 4:  # splice: prefix of this frame, suffix of another
            other = rng.choice(corpus)
            i, j = rng.randrange(n + 1), rng.randrange(len(other) + 1)
            if rng.random() < 0.5:
                j = min(i, len(other))
            buf = buf[:i] + bytearray(other[j:])
        elif op == 5:  # field splice: same range from another frame
            other = rng.choice(corpus)
            i = rng.randrange(min(n, len(other)) + 1)
            k = rng.randint(1, 24)
            buf[i : i + k] = other[i : i + k]
        elif op in (6, 7):  # edge values into header fields
            fields = _field_offsets(buf)
            if fields:
                o, w = rng.choice(fields)
                if w == 1:
                    v = rng.choice((*EDGE8, rng.getrandbits(8), buf[o] ^ 0x0F))
                elif w == 2:
                    cur = int.from_bytes(buf[o : o + 2], "big")
                    v = rng.choice((*EDGE16, (cur + 1) & 0xFFFF, (cur - 1) & 0xFFFF,
                                    (cur + rng.randint(-64, 64)) & 0xFFFF))
                else:
                    v = rng.getrandbits(8 * w)
                buf[o : o + w] = v.to_bytes(w, "big")
        elif op == 8 and n > 15:  # DSCP := trimmed, maybe cut and fix the length
            buf[14] = 0x60 | (DSCP_TRIMMED >> 2)
            buf[15] = ((DSCP_TRIMMED & 0b11) << 6) | (buf[15] & 0x3F)
            if rng.random() < 0.7:
                del buf[rng.randrange(n + 1) :]
            if rng.random() < 0.5 and len(buf) > 20:
                buf[18:20] = max(len(buf) - 54, 0).to_bytes(2, "big")
        elif n:  # random byte run
            i = rng.randrange(n)
            k = rng.randint(1, 8)
            buf[i : i + k] = rng.randbytes(k)
    if rng.random() < 0.3:
        fix_checksums(buf)
    return bytes(buf)


def check_frame(f: Frame, buf: bytes) -> None:
    """Everything a consumer touches on an accepted frame works and is self-consistent."""
    assert isinstance(f.ev, int) and 0 <= f.ev < 2**32
    assert f.opcode in set(Opcode)
    assert f.udp.dport == MRC_UDP_PORT and f.bth.tver == 0
    assert isinstance(f.ce, bool)
    if f.srh is not None:
        assert 0 <= f.srh.segments_left <= f.srh.last_entry
    if f.inner is not None:
        assert f.inner.payload_length == f.udp.length
    payload = bytes(f.payload)
    if f.is_data:
        assert f.reth is not None
        assert len(payload) <= f.reth.length
        assert payload in buf
    else:
        assert payload == b"" and not f.trimmed
    if not f.trimmed:
        # an accepted, untrimmed frame is exactly as long as its headers say
        assert len(buf) == ETH_HEADER_LEN + IPV6_HEADER_LEN + f.outer.payload_length
        if f.reth is not None:
            assert len(payload) == f.reth.length


def in_flight(frame: bytes) -> list[bytes]:
    """The frame as later hops see it: every uSID shift, every SRH step (still valid)."""
    f = parse_frame(frame)
    out = []
    dst = f.outer.dst
    if f.srh is None and len(usid_list(dst)) > 1:
        while len(usid_list(dst)) > 1:
            dst = usid_shift(dst)
            out.append(frame[:38] + dst + frame[54:])
    if f.srh is not None:
        for sl in range(f.srh.segments_left - 1, -1, -1):
            b = bytearray(frame)
            b[57] = sl
            b[38:54] = f.srh.segments[sl]
            out.append(bytes(b))
    return out


def outcome(buf: Buffer, checksum_ok: Callable[[bytes, bytes, Buffer], bool]) -> str:
    """'ok', 'trimmed' or the rejection reason, with the given checksum verifier."""
    try:
        f = parse_frame(buf, checksum_ok=checksum_ok)
    except MalformedFrame as e:
        return e.reason.value
    return "trimmed" if f.trimmed else "ok"


def run(n: int, seed: int, differential: int = 0) -> Counter[str]:
    """Parse ``n`` fuzz inputs; return counts per outcome. Raises on any other exception.

    Every ``differential``-th input is also parsed with the C checksum (when built): the
    outcome must be identical.
    """
    rng = random.Random(seed)
    corpus = [s.build() for s in all_sample_specs()]
    corpus += [random_frame(rng) for _ in range(300)]
    corpus += [g for f in corpus[:: 3] for g in in_flight(f)]
    counts: Counter[str] = Counter()
    for i in range(n):
        buf = mutate(rng, corpus)
        try:
            f = parse_frame(memoryview(buf) if i % 7 == 0 else bytearray(buf) if i % 7 == 1
                            else buf)
        except MalformedFrame as e:
            assert isinstance(e.reason, MalformedReason)
            counts[e.reason.value] += 1
            res = e.reason.value
        except Exception as e:  # the bug this test exists to find
            raise AssertionError(
                f"seed={seed} i={i}: {type(e).__name__}: {e}\nframe={buf.hex()}"
            ) from e
        else:
            assert isinstance(f, Frame)
            check_frame(f, buf)
            res = "trimmed" if f.trimmed else "ok"
            counts[res] += 1
        if differential and i % differential == 0 and HAVE_C:
            assert outcome(buf, c_udp6_checksum_ok) == res, buf.hex()
            counts["differential"] += 1
    return counts


def test_fuzz_parse_frame() -> None:
    """100,000 mutated frames: Frame or MalformedFrame, never anything else."""
    t0 = time.perf_counter()
    counts = run(N_FRAMES, SEED, differential=5)
    dt = time.perf_counter() - t0
    total = sum(counts.values()) - counts["differential"]
    print(f"\nfuzz: {total} frames in {dt:.1f} s = {total / dt:,.0f} frames/s; {dict(counts)}")
    assert total == N_FRAMES
    # The fuzzer must reach deep: valid and trimmed frames, and nearly every rejection reason.
    assert counts["ok"] > N_FRAMES // 100
    assert counts["trimmed"] > N_FRAMES // 1000
    assert set(MalformedReason) <= {r for r in MalformedReason if counts[r.value]}
    assert counts["differential"] >= (N_FRAMES // 5 if HAVE_C else 0)


def test_in_flight_corpus_parses() -> None:
    """Frames as seen mid-path (uSIDs shifted, SRH advanced) still verify."""
    n = 0
    for spec in all_sample_specs():
        for g in in_flight(spec.build()):
            assert isinstance(parse_frame(g), Frame)
            n += 1
    assert n > 0


def test_fuzz_corpus_is_valid() -> None:
    """The fuzz corpus itself parses (so mutations start from real frames)."""
    rng = random.Random(SEED)
    for _ in range(200):
        assert isinstance(parse_frame(random_frame(rng)), Frame)


def test_fuzz_reproducible() -> None:
    """Same seed, same inputs: a failure can be replayed from its seed."""
    a = run(300, 7)
    b = run(300, 7)
    assert a == b

