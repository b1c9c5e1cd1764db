"""The Internet checksum (RFC 1071) for UDP over IPv6, pure Python reference.

The one's-complement sum of 16-bit words equals the big-endian integer of the data modulo
0xFFFF (because 2**16 is 1 modulo 0xFFFF), which lets CPython's big integers do the work
at C speed; :mod:`mrcnet.fastpath` has the C twin and the tests check they agree.
"""

from __future__ import annotations

from mrcnet.constants import IPPROTO_UDP
from mrcnet.wire._util import Buffer


def ones_complement_sum(data: Buffer) -> int:
    """The 16-bit one's-complement sum of ``data`` (odd length padded with a zero byte)."""
    if len(data) % 2:
        data = bytes(data) + b"\x00"
    n = int.from_bytes(data, "big")
    if n == 0:
        return 0
    s = n % 0xFFFF
    # A nonzero multiple of 0xFFFF sums to "negative zero", 0xFFFF.
    return s if s else 0xFFFF


def _pseudo(src: bytes, dst: bytes, length: int) -> bytes:
    return bytes(src) + bytes(dst) + length.to_bytes(4, "big") + bytes((0, 0, 0, IPPROTO_UDP))


def udp6_checksum(src: bytes, dst: bytes, udp: Buffer) -> int:
    """Checksum to store in a UDP header over IPv6 (``udp`` with checksum field zeroed).

    ``src``/``dst`` are the pseudo-header addresses: for an encapsulated frame the inner
    header's, otherwise the final destination (SRH segment list[0], or the fully shifted
    uSID container). Zero is sent as 0xFFFF (RFC 8200 forbids a zero UDP checksum).
    """
    c = (~ones_complement_sum(_pseudo(src, dst, len(udp)) + bytes(udp))) & 0xFFFF
    return c or 0xFFFF


def udp6_checksum_ok(src: bytes, dst: bytes, udp: Buffer) -> bool:
    """True when the UDP segment ``udp`` (checksum field included) verifies."""
    if len(udp) >= 8 and udp[6] == 0 and udp[7] == 0:
        return False  # zero means "no checksum", which IPv6 does not allow
    return ones_complement_sum(_pseudo(src, dst, len(udp)) + bytes(udp)) == 0xFFFF
