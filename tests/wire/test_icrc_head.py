"""mrc_icrc (icrc.c) against the reference ICRC (mrcnet.wire.icrc.icrc, zlib's CRC of the
masked bytes) at every covered length around the point where its masked copy of the
headers joins the payload's CRC fold (a frame of 64 covered bytes or more: one fold from
the copy's first 64 bytes on, mrc_crc32_first_raw), with random header bytes so that each
masked field counts, unaligned, and with both CRC codes."""

from __future__ import annotations

import os

import pytest
from test_crc_copy import crc_impl  # noqa: F401 (the fixture: each CRC code in turn)

from mrcnet.native import HAVE_C
from mrcnet.wire.icrc import c_icrc, icrc

pytestmark = [pytest.mark.skipif(not HAVE_C, reason="C fast path not built"),
              pytest.mark.usefixtures("crc_impl")]


@pytest.mark.parametrize("has_ip", [True, False], ids=["inner-ip", "udp"])
def test_icrc_equals_reference_at_every_length(has_ip: bool) -> None:
    hlen = 60 if has_ip else 20
    data = os.urandom(9100)
    lengths = [*range(hlen, 260), 1023, 1024, 1025, 4096, 8191, 8192, 8193, 8276, 9000]
    for n in lengths:
        for start in (0, 1, 7):
            covered = data[start : start + n]
            assert c_icrc(covered, has_ip) == icrc(covered, has_ip), (n, start)


@pytest.mark.parametrize("has_ip", [True, False], ids=["inner-ip", "udp"])
def test_icrc_ignores_only_the_variant_fields(has_ip: bool) -> None:
    """Flipping a masked bit leaves the ICRC as it was, any other bit of the first 64
    bytes changes it (the copy the fold starts from is the frame's, masked)."""
    ip = 40 if has_ip else 0
    masked = {ip + 6, ip + 7, ip + 8 + 4}
    if has_ip:
        masked |= {1, 2, 3, 7}
    base = bytearray(os.urandom(300))
    want = c_icrc(bytes(base), has_ip)
    for i in range(64):
        for bit in (0x01, 0x80):
            flipped = bytearray(base)
            flipped[i] ^= bit
            got = c_icrc(bytes(flipped), has_ip)
            assert got == icrc(bytes(flipped), has_ip), (i, bit)
            same = i in masked or (has_ip and i == 0 and bit == 0x01)
            assert (got == want) == same, (i, bit)
