"""The ICRC's pass over a data frame's payload also takes its part of the UDP checksum
(crc32.c, mrc_crc32_copy_sum_raw / mrc_crc32_first_sum_raw): when the sending side builds
a frame (template.c) and when the receiving side checks one (parsed.c). The two sums must
stay independent checks: a payload whose ICRC was made right again but whose checksum was
not is still refused (BAD_CHECKSUM), and the other way round (BAD_ICRC). Every payload
length around the folds' 64- and 256-byte steps, odd ones (the checksum's own pass
then), in every route mode, with each CRC code, against the reference parser."""

from __future__ import annotations

import os

import pytest
from test_crc_copy import crc_impl  # noqa: F401 (the fixture: each CRC code in turn)
from test_parse_differential import agree
from wire_strategies import MODES, layout, refresh, sample_route

from mrcnet.constants import Opcode
from mrcnet.errors import MalformedReason
from mrcnet.native import HAVE_C
from mrcnet.wire import build_data
from mrcnet.wire.icrc import icrc

pytestmark = [pytest.mark.skipif(not HAVE_C, reason="C fast path not built"),
              pytest.mark.usefixtures("crc_impl")]

LENGTHS = [0, 1, 2, 63, 64, 65, 200, 255, 256, 257, 300, 319, 320, 511, 512, 1001, 4095,
           4096, 8190, 8191, 8192]


def _frames(mode: str, encap: bool) -> list[bytes]:
    route = sample_route(mode, encap)
    data = os.urandom(8192)
    return [build_data(route, ev=0x1234, opcode=Opcode.WRITE_MIDDLE, dest_qp=0x42, psn=n,
                       va=0x1000, rkey=7, payload=data[:n], timestamp=9)
            for n in LENGTHS]


def _flip(frame: bytes, at: int) -> bytearray:
    bad = bytearray(frame)
    bad[at] ^= 0x20
    return bad


@pytest.mark.parametrize(("mode", "encap"), MODES)
def test_frames_verify_and_each_sum_catches_what_the_other_misses(mode: str,
                                                                   encap: bool) -> None:
    route = sample_route(mode, encap)
    for frame in _frames(mode, encap):
        assert agree(frame) == "ok"
        lay = layout(frame)
        if lay.icrc == lay.payload:
            continue  # no payload to corrupt
        for at in {lay.payload, (lay.payload + lay.icrc) // 2, lay.icrc - 1}:
            # the ICRC made right again, the checksum left as it was
            bad = _flip(frame, at)
            start = lay.inner if lay.inner is not None else lay.udp
            bad[lay.icrc :] = icrc(bad[start : lay.icrc], has_ip=lay.inner is not None)
            assert agree(bad) == MalformedReason.BAD_CHECKSUM.value, (len(frame), at)
            # both made right: the frame verifies; then the ICRC alone broken
            fixed = refresh(_flip(frame, at), route)
            assert agree(fixed) == "ok"
            bad = bytearray(fixed)
            bad[lay.icrc] ^= 0x01
            assert agree(bad) == MalformedReason.BAD_ICRC.value
