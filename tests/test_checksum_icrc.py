"""The UDP checksum and ICRC twins (mrcnet.wire.checksum, mrcnet.wire.icrc), C and pure
Python, against naive references.

Both implementations are tested in one process (``py_*`` and ``c_*``); the binding
switch (MRCNET_NO_FASTPATH, a missing C module) is tested in subprocesses.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnet import native
from mrcnet.constants import IPPROTO_UDP
from mrcnet.io.batch import BatchIO, CBatchIO
from mrcnet.native import HAVE_C
from mrcnet.wire import checksum as ref_checksum
from mrcnet.wire.checksum import (
    c_udp6_checksum,
    c_udp6_checksum_ok,
    fast_udp6_checksum,
    py_udp6_checksum,
    py_udp6_checksum_ok,
)
from mrcnet.wire.icrc import c_icrc, py_icrc
from mrcnet.wire.icrc import icrc as ref_icrc

NO_C = "C fast path off (not built, or MRCNET_NO_FASTPATH=1)"
needs_c = pytest.mark.skipif(not HAVE_C, reason=NO_C)

Checksum = Callable[[bytes, bytes, bytes], int]
Icrc = Callable[..., bytes]
IMPLS: list[tuple[str, Checksum, Callable[[bytes, bytes, bytes], bool], Icrc]]
IMPLS = [("py", py_udp6_checksum, py_udp6_checksum_ok, py_icrc)]
if HAVE_C:
    IMPLS.append(("c", c_udp6_checksum, c_udp6_checksum_ok, c_icrc))
IMPL_IDS = [i[0] for i in IMPLS]


def naive_udp6_checksum(src: bytes, dst: bytes, udp: bytes) -> int:
    """RFC 1071 word loop with end-around carry: the textbook, slow and obvious."""
    n = len(udp)
    data = src + dst + n.to_bytes(4, "big") + bytes(3) + bytes([IPPROTO_UDP]) + udp
    if len(data) % 2:
        data += b"\0"
    s = 0
    for i in range(0, len(data), 2):
        s += (data[i] << 8) | data[i + 1]
        s = (s & 0xFFFF) + (s >> 16)
    c = ~s & 0xFFFF
    return c if c else 0xFFFF


def naive_icrc(covered: bytes, has_ip: bool = True) -> bytes:
    masked = bytearray(covered)
    off = 0
    if has_ip:
        masked[0] |= 0x0F  # traffic class, low nibble of byte 0
        masked[1:4] = b"\xff\xff\xff"  # rest of traffic class, flow label
        masked[7] = 0xFF  # hop limit
        off = 40
    masked[off + 6 : off + 8] = b"\xff\xff"  # UDP checksum
    masked[off + 12] = 0xFF  # BTH reserved byte
    return zlib.crc32(b"\xff" * 8 + bytes(masked)).to_bytes(4, "little")


addr = st.binary(min_size=16, max_size=16)


@pytest.mark.parametrize(("name", "csum", "ok", "_icrc"), IMPLS, ids=IMPL_IDS)
@settings(max_examples=500, deadline=None)
@given(src=addr, dst=addr, body=st.binary(min_size=0, max_size=2000))
def test_checksum_matches_word_loop(name: str, csum: Checksum, ok: object, _icrc: object,
                                    src: bytes, dst: bytes, body: bytes) -> None:
    udp = b"\x12\x34\x12\xb7" + (8 + len(body)).to_bytes(2, "big") + b"\0\0" + body
    want = naive_udp6_checksum(src, dst, udp)
    assert csum(src, dst, udp) == want == ref_checksum.udp6_checksum(src, dst, udp)


@pytest.mark.parametrize(("name", "csum", "ok", "_icrc"), IMPLS, ids=IMPL_IDS)
@settings(max_examples=300, deadline=None)
@given(src=addr, dst=addr, body=st.binary(min_size=0, max_size=300))
def test_checksum_verifies_and_detects_flip(name: str, csum: Checksum,
                                            ok: Callable[[bytes, bytes, bytes], bool],
                                            _icrc: object, src: bytes, dst: bytes,
                                            body: bytes) -> None:
    udp = bytearray(b"\x00\x01\x12\xb7" + (8 + len(body)).to_bytes(2, "big") + b"\0\0" + body)
    udp[6:8] = csum(src, dst, bytes(udp)).to_bytes(2, "big")
    assert ok(src, dst, bytes(udp))
    assert ref_checksum.udp6_checksum_ok(src, dst, bytes(udp))
    udp[0] ^= 0x40  # any single-bit change breaks a one's-complement sum
    assert not ok(src, dst, bytes(udp))


@pytest.mark.parametrize(("name", "csum", "ok", "_icrc"), IMPLS, ids=IMPL_IDS)
def test_stored_zero_checksum_is_refused(name: str, csum: Checksum,
                                         ok: Callable[[bytes, bytes, bytes], bool],
                                         _icrc: object) -> None:
    # A datagram whose checksum computes to 0xFFFF may also "verify" with 0 stored, since
    # 0 and 0xFFFF are both zero in one's complement; IPv6 forbids 0 (no checksum).
    src, dst = bytes(16), bytes(16)
    udp = bytearray(b"\0\0\0\0\0\x0a\0\0\0\0")
    udp[8:10] = naive_udp6_checksum(src, dst, bytes(udp)).to_bytes(2, "big")
    assert csum(src, dst, bytes(udp)) == 0xFFFF
    assert not ok(src, dst, bytes(udp))  # stored 0
    assert not ref_checksum.udp6_checksum_ok(src, dst, bytes(udp))
    udp[6:8] = b"\xff\xff"
    assert ok(src, dst, bytes(udp))


@pytest.mark.parametrize(("name", "csum", "ok", "_icrc"), IMPLS, ids=IMPL_IDS)
def test_checksum_zero_is_sent_as_ffff(name: str, csum: Checksum, ok: object,
                                       _icrc: object) -> None:
    # Find a datagram whose one's-complement sum is 0xFFFF: its checksum computes to 0,
    # which UDP over IPv6 must send as 0xFFFF (RFC 8200 sec. 8.1).
    src, dst = bytes(16), bytes(16)
    udp = bytearray(b"\0\0\0\0\0\x0a\0\0\0\0")
    partial = naive_udp6_checksum(src, dst, bytes(udp))
    # Put the partial checksum into the last word: the total sum becomes 0xFFFF.
    udp[8:10] = partial.to_bytes(2, "big")
    assert csum(src, dst, bytes(udp)) == 0xFFFF == naive_udp6_checksum(src, dst, bytes(udp))


@pytest.mark.parametrize(("name", "csum", "ok", "_icrc"), IMPLS, ids=IMPL_IDS)
@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview"])
def test_checksum_takes_any_buffer(name: str, csum: Checksum, ok: object, _icrc: object,
                                   kind: str) -> None:
    src, dst = os.urandom(16), os.urandom(16)
    frame = bytearray(os.urandom(7)) + b"\0\x01\x12\xb7\0\x0d\0\0" + os.urandom(5)
    udp: bytes | bytearray | memoryview
    if kind == "bytes":
        udp = bytes(frame[7:])
    elif kind == "bytearray":
        udp = bytearray(frame[7:])
    else:
        udp = memoryview(frame)[7:]  # a slice at an odd offset
    assert csum(src, dst, udp) == naive_udp6_checksum(src, dst, bytes(frame[7:]))  # type: ignore[arg-type]


def test_checksum_matches_scapy() -> None:
    """An independent oracle: scapy's IPv6/UDP checksum for random datagrams."""
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6

    rnd = os.urandom
    for n in (0, 1, 2, 3, 57, 1460):
        pkt = IPv6(src="2001:db8::1", dst="fc00:0:1:2::9") / UDP(sport=0xBEEF, dport=4791) / rnd(n)
        raw = bytes(pkt)
        src, dst, udp = raw[8:24], raw[24:40], bytearray(raw[40:])
        want = int.from_bytes(udp[6:8], "big")
        udp[6:8] = b"\0\0"
        for _name, csum, _ok, _ic in IMPLS:
            assert csum(src, dst, bytes(udp)) == want


@pytest.mark.parametrize(("name", "csum", "ok", "icrc"), IMPLS, ids=IMPL_IDS)
@settings(max_examples=300, deadline=None)
@given(covered=st.binary(min_size=60, max_size=1200), has_ip=st.booleans())
def test_icrc_matches_masked_zlib(name: str, csum: object, ok: object, icrc: Icrc,
                                  covered: bytes, has_ip: bool) -> None:
    assert icrc(covered, has_ip) == naive_icrc(covered, has_ip) == ref_icrc(covered, has_ip)


@pytest.mark.parametrize(("name", "csum", "ok", "icrc"), IMPLS, ids=IMPL_IDS)
def test_icrc_ignores_variant_fields(name: str, csum: object, ok: object,
                                     icrc: Icrc) -> None:
    inner = bytearray(os.urandom(200))
    base = icrc(bytes(inner))
    for i in (0, 1, 2, 3, 7, 46, 47, 52):  # TC/flow label, hop limit, UDP csum, BTH resv
        changed = bytearray(inner)
        changed[i] ^= 0x0F if i == 0 else 0xA5
        assert icrc(bytes(changed)) == base, i
    changed = bytearray(inner)
    changed[8] ^= 1  # source address is invariant
    assert icrc(bytes(changed)) != base


#: mrc_crc32_impl's codes (the default, 2, is the best the CPU has).
CRC_CODES = {"table": 0, "clmul": 1, "vpclmul": 2}


@needs_c
@pytest.mark.parametrize("impl", list(CRC_CODES))
def test_c_crc32_equals_zlib_for_every_length_and_alignment(impl: str) -> None:
    """The C CRC-32 (PCLMULQDQ folding, its AVX-512 form, or the slicing-by-8 table)
    against zlib.crc32: every length through the 64- and 256-byte fold thresholds and
    their 16-byte tails, odd offsets."""
    lib = native.C
    active = lib.mrc_crc32_impl(CRC_CODES[impl])
    try:
        if active != CRC_CODES[impl]:
            pytest.skip(f"this CPU has no {impl.upper()}")
        data = os.urandom(10_000)
        for n in [*range(0, 600), 1023, 1024, 1025, 4096, 8191, 9000]:
            for off in (0, 1, 3, 8):
                chunk = data[off : off + n]
                for seed in (0, 0xFFFFFFFF, 0x12345678):
                    assert lib.mrc_crc32(seed, chunk, len(chunk)) == zlib.crc32(chunk, seed), (
                        n, off, seed)
    finally:
        lib.mrc_crc32_impl(2)


@needs_c
@pytest.mark.parametrize("impl", list(CRC_CODES))
@settings(max_examples=200, deadline=None)
@given(covered=st.binary(min_size=60, max_size=9000), has_ip=st.booleans())
def test_c_icrc_every_crc_code(impl: str, covered: bytes, has_ip: bool) -> None:
    lib = native.C
    lib.mrc_crc32_impl(CRC_CODES[impl])
    try:
        assert c_icrc(covered, has_ip) == ref_icrc(covered, has_ip)
    finally:
        lib.mrc_crc32_impl(2)


@needs_c
def test_binding_prefers_c() -> None:
    assert fast_udp6_checksum is c_udp6_checksum
    assert BatchIO is CBatchIO
