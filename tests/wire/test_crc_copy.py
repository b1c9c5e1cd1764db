"""The payload copy fused with the CRC-32 (mrc_crc32_copy, crc32.c) against its twin, a
copy and zlib.crc32: every length through the fold's thresholds and tails, unaligned
source and destination, both CRC codes, nothing written past the copy. And the data
frames built on it (template.c) against the reference builder with either CRC code."""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator

import pytest

from mrcnet import native
from mrcnet.constants import Opcode
from mrcnet.native import HAVE_C
from mrcnet.wire import Route, build_data, usid_container
from mrcnet.wire.template import CTemplate, DataTemplate

pytestmark = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")

GUARD = 32  # bytes either side of the destination that must stay as they were


#: mrc_crc32_impl's codes: the table on every CPU, PCLMULQDQ and its AVX-512 form
#: (VPCLMULQDQ) where the CPU has them; BEST is the default, restored after each test.
CRC_CODES = {"table": 0, "clmul": 1, "vpclmul": 2}
BEST = 2


@pytest.fixture(params=list(CRC_CODES))
def crc_impl(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each CRC code in turn, skipped where the CPU does not have it, the default
    restored after."""
    want = CRC_CODES[request.param]
    active = native.C.mrc_crc32_impl(want)
    try:
        if active != want:
            pytest.skip(f"this CPU has no {request.param.upper()}")
        yield request.param
    finally:
        native.C.mrc_crc32_impl(BEST)


def test_crc32_copy_equals_copy_then_zlib(crc_impl: str) -> None:
    ffi, lib = native.ffi, native.C
    data = os.urandom(10_000)
    for n in [*range(0, 300), 319, 320, 321, 511, 1023, 1024, 1025, 4096, 8191, 8192,
              8193, 9000]:
        for src_off in (0, 1, 8):
            for dst_off in (0, 3, 16):
                src = data[src_off : src_off + n]
                fill = os.urandom(2 * GUARD + dst_off + n)
                buf = ffi.new("uint8_t[]", len(fill))
                ffi.memmove(buf, fill, len(fill))
                for seed in (0, 0x12345678):
                    crc = lib.mrc_crc32_copy(seed, buf + GUARD + dst_off, src, n)
                    assert crc == zlib.crc32(src, seed), (n, src_off, dst_off, seed)
                got = bytes(ffi.buffer(buf))
                start = GUARD + dst_off
                assert got[start : start + n] == src, (n, src_off, dst_off)
                assert got[:start] == fill[:start] and got[start + n :] == fill[start + n :]


@pytest.mark.parametrize("encap", [True, False], ids=["inner-ip", "udp"])
def test_template_frames_equal_reference_with_either_crc(crc_impl: str, encap: bool) -> None:
    """The fused build (the CRC's pass copies the payload) is build_data's frame byte for
    byte, for payloads around the fold's 64-byte and 16-byte steps and a full 8 KiB."""
    route = Route(b"\x02" * 6, b"\x04" * 6, bytes(15) + b"\x09", bytes(15) + b"\x01",
                  usid=usid_container(b"\xfc\0\0\0", [0x10, 0x101, 0x20]), encap=encap)
    t = DataTemplate.for_route(route, dest_qp=0x1234, rkey=77)
    ct = CTemplate(t)
    data = os.urandom(9000)
    for n in [0, 1, 15, 16, 17, 47, 63, 64, 65, 100, 255, 256, 257, 320, 1000, 4095, 4096,
              8190, 8191, 8192]:
        for off in (0, 5):
            payload = data[off : off + n]
            want = build_data(route, ev=0x1234, opcode=Opcode.WRITE_MIDDLE, dest_qp=0x1234,
                              psn=n, va=1 << 20, rkey=77, payload=payload, timestamp=9)
            got = ct.frame(Opcode.WRITE_MIDDLE, n, 0x1234, 1 << 20, memoryview(payload),
                           None, 0, None, 9, False, False)
            assert got == want, (n, off)
