"""The RoCEv2 invariant CRC (ICRC), 4 bytes at the end of every MRC frame.

RoCEv2 computes CRC-32 over 8 bytes of 0xFF (standing for the InfiniBand LRH) followed by
the IP header with the fields that change in flight set to all ones (traffic class, flow
label, hop limit), the UDP header with its checksum set to all ones, the BTH with its
reserved byte set to all ones, and the rest of the packet up to the ICRC. It is stored
little-endian.

[L] In SRv6 mode the outer destination changes at every hop, so the ICRC can only cover the
*inner* packet: inner IPv6 onwards when an inner header is present, UDP onwards otherwise.
How MRC itself applies it is not public; this module is the one place to change it.

:func:`icrc` is the reference; :func:`c_icrc` its twin in mrcnet/_csrc/icrc.c (on the
CRC-32 of mrcnet/_csrc/crc32.c), :func:`py_icrc` the reference under a name that pairs
with it, and :data:`fast_icrc` the one to use on a hot path: C when built
(:mod:`mrcnet.native`), else the reference.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Final

from mrcnet.constants import BTH_LEN, ICRC_LEN, IPV6_HEADER_LEN, UDP_HEADER_LEN
from mrcnet.native import HAVE_C, C, as_ptr
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


_ICRC_MIN_UDP: Final = UDP_HEADER_LEN + BTH_LEN
_ICRC_MIN_IP: Final = IPV6_HEADER_LEN + _ICRC_MIN_UDP


def py_icrc(covered: bytes | bytearray | memoryview, has_ip: bool = True) -> bytes:
    """RoCEv2 invariant CRC, 4 bytes as stored: the reference, :func:`icrc`.

    ``covered`` runs from the inner IPv6 header (``has_ip``) or the UDP header up to, not
    including, the ICRC.
    """
    return icrc(covered, has_ip)


def c_icrc(covered: bytes | bytearray | memoryview, has_ip: bool = True) -> bytes:
    """C twin of :func:`py_icrc`."""
    if len(covered) < (_ICRC_MIN_IP if has_ip else _ICRC_MIN_UDP):
        return icrc(covered, has_ip)  # too short to mask: the reference's edge case
    try:
        crc = C.mrc_icrc(covered, len(covered), has_ip)
    except TypeError:
        crc = C.mrc_icrc(as_ptr(covered), len(covered), has_ip)
    return int(crc).to_bytes(ICRC_LEN, "little")


#: :func:`c_icrc` when the C module is built, else :func:`py_icrc`.
fast_icrc: Callable[..., bytes] = c_icrc if HAVE_C else py_icrc
