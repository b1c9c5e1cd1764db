"""The C UDP checksum's two sum loops (AVX2 and scalar) against the Python reference."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnet import native
from mrcnet.native import HAVE_C
from mrcnet.wire.checksum import c_udp6_checksum
from mrcnet.wire.checksum import udp6_checksum as ref_udp6_checksum

needs_c = pytest.mark.skipif(not HAVE_C,
                             reason="C fast path off (not built, or MRCNET_NO_FASTPATH=1)")


@needs_c
@pytest.mark.parametrize("impl", ["avx2", "scalar"])
def test_c_udp6_checksum_every_length_and_alignment(impl: str) -> None:
    """Lengths through the vector loop's 128-byte threshold and its 64-byte tails, odd
    offsets, all-ones data (every carry), a jumbo frame."""
    lib = native.C
    active = lib.mrc_sum_impl(1 if impl == "avx2" else 0)
    try:
        if impl == "avx2" and not active:
            pytest.skip("this CPU has no AVX2")
        src, dst = os.urandom(16), os.urandom(16)
        data = os.urandom(10_000)
        for n in [*range(0, 400), 1023, 1024, 1025, 4096, 8191, 8192, 9000]:
            for off in (0, 1, 3, 8):
                chunk = data[off : off + n]
                assert c_udp6_checksum(src, dst, chunk) == \
                    ref_udp6_checksum(src, dst, chunk), (n, off)
        ones = b"\xff" * 9000
        assert c_udp6_checksum(src, dst, ones) == ref_udp6_checksum(src, dst, ones)
    finally:
        lib.mrc_sum_impl(1)


@needs_c
@settings(max_examples=200, deadline=None)
@given(udp=st.binary(min_size=0, max_size=9000), src=st.binary(min_size=16, max_size=16),
       dst=st.binary(min_size=16, max_size=16))
def test_c_udp6_sum_impls_agree(udp: bytes, src: bytes, dst: bytes) -> None:
    lib = native.C
    try:
        lib.mrc_sum_impl(0)
        scalar = lib.mrc_udp6_sum(src, dst, udp, len(udp))
        lib.mrc_sum_impl(1)
        assert lib.mrc_udp6_sum(src, dst, udp, len(udp)) == scalar
    finally:
        lib.mrc_sum_impl(1)
