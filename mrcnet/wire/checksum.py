"""The Internet checksum (RFC 1071) for UDP over IPv6: the Python reference and its C twin.

The one's-complement sum of 16-bit words equals the big-endian integer of the data modulo
0xFFFF (because 2**16 is 1 modulo 0xFFFF), which lets CPython's big integers do the work
at C speed. :func:`udp6_checksum` and :func:`udp6_checksum_ok` are the reference (the
wire builders and parsers use them); ``c_*`` are the twins in mrcnet/_csrc/checksum.c
(the tests check they agree), ``py_*`` the reference under a name that pairs with them,
and ``fast_*`` the one to use on a hot path: C when built (:mod:`mrcnet.native`), else
the reference.
"""

from __future__ import annotations

from collections.abc import Callable

from mrcnet.constants import IPPROTO_UDP, UDP_HEADER_LEN
from mrcnet.native import HAVE_C, C, as_ptr
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


py_udp6_checksum = udp6_checksum
py_udp6_checksum_ok = udp6_checksum_ok


def c_udp6_checksum(
    src: bytes | bytearray | memoryview,
    dst: bytes | bytearray | memoryview,
    udp: bytes | bytearray | memoryview,
) -> int:
    """C twin of :func:`udp6_checksum`."""
    try:  # bytes go straight in; other buffers need a cdata view (the rare case)
        return int(C.mrc_udp6_checksum(src, dst, udp, len(udp)))
    except TypeError:
        return int(C.mrc_udp6_checksum(as_ptr(src), as_ptr(dst), as_ptr(udp), len(udp)))


def c_udp6_checksum_ok(
    src: bytes | bytearray | memoryview,
    dst: bytes | bytearray | memoryview,
    udp: bytes | bytearray | memoryview,
) -> bool:
    """C twin of :func:`udp6_checksum_ok`."""
    if len(udp) >= UDP_HEADER_LEN and not (udp[6] or udp[7]):
        return False
    try:
        return bool(C.mrc_udp6_sum(src, dst, udp, len(udp)) == 0xFFFF)
    except TypeError:
        return bool(C.mrc_udp6_sum(as_ptr(src), as_ptr(dst), as_ptr(udp), len(udp))
                    == 0xFFFF)


#: :func:`c_udp6_checksum` when the C module is built, else :func:`udp6_checksum`.
fast_udp6_checksum: Callable[..., int] = c_udp6_checksum if HAVE_C else udp6_checksum
#: :func:`c_udp6_checksum_ok` when the C module is built, else :func:`udp6_checksum_ok`.
fast_udp6_checksum_ok: Callable[..., bool] = (c_udp6_checksum_ok if HAVE_C
                                              else udp6_checksum_ok)
