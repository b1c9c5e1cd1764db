"""The RoCEv2 invariant CRC (ICRC), 4 bytes at the end of every MRC frame.

RoCEv2 computes CRC-32 over 8 bytes of 0xFF (standing for the InfiniBand LRH) followed by
the IP header with the fields that change in flight set to all ones (traffic class, flow
label, hop limit), the UDP header with its checksum set to all ones, the BTH with its
reserved byte set to all ones, and the rest of the packet up to the ICRC. It is stored
little-endian.

[L] In SRv6 mode the outer destination changes at every hop, so the ICRC can only cover the
*inner* packet: inner IPv6 onwards when an inner header is present, UDP onwards otherwise.
How MRC itself applies it is not public; this module is the one place to change it.
"""

from __future__ import annotations

import zlib

from mrcnet.constants import ICRC_LEN, IPV6_HEADER_LEN, UDP_HEADER_LEN
from mrcnet.wire._util import Buffer

_PREFIX = b"\xff" * 8
_PREFIX_CRC = zlib.crc32(_PREFIX)


def icrc(covered: Buffer, has_ip: bool) -> bytes:
    """ICRC of ``covered`` (inner IPv6 or UDP onwards, excluding the ICRC itself)."""
    data = bytearray(covered)
    off = 0
    if has_ip:
        data[0] |= 0x0F  # version stays, traffic class high nibble masked
        data[1:4] = b"\xff\xff\xff"  # traffic class low nibble + flow label
        data[7] = 0xFF  # hop limit
        off = IPV6_HEADER_LEN
    data[off + 6 : off + 8] = b"\xff\xff"  # UDP checksum
    bth = off + UDP_HEADER_LEN
    if len(data) > bth + 4:
        data[bth + 4] = 0xFF  # BTH reserved byte
    return zlib.crc32(data, _PREFIX_CRC).to_bytes(ICRC_LEN, "little")
