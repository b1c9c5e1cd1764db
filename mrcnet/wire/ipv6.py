"""IPv6 fixed header (RFC 8200), 40 bytes.

The traffic class is split into DSCP (6 bits) and ECN (2 bits). MRC uses the outer flow
label to carry the low 16 bits of the entropy value (see :mod:`mrcnet.wire.udp`).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, replace
from typing import ClassVar

from mrcnet.constants import DEFAULT_HOP_LIMIT, IPV6_HEADER_LEN, IPV6_VERSION
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire._util import Buffer, addr16, check_range, need

_S = struct.Struct("!IHBB16s16s")


def ip6(addr: str | bytes | ipaddress.IPv6Address) -> bytes:
    """Return an IPv6 address as 16 bytes, from text, bytes or ``IPv6Address``."""
    if isinstance(addr, bytes | bytearray):
        return addr16("address", bytes(addr))
    if isinstance(addr, ipaddress.IPv6Address):
        return addr.packed
    return ipaddress.IPv6Address(addr).packed


def ip6_str(addr: bytes) -> str:
    """Format 16 bytes as compressed IPv6 text."""
    return str(ipaddress.IPv6Address(bytes(addr)))


@dataclass(frozen=True, slots=True)
class IPv6:
    """An IPv6 fixed header. Addresses are 16-byte ``bytes``."""

    src: bytes
    dst: bytes
    next_header: int
    payload_length: int = 0
    hop_limit: int = DEFAULT_HOP_LIMIT
    dscp: int = 0
    ecn: int = 0
    flow_label: int = 0
    version: int = IPV6_VERSION

    LEN: ClassVar[int] = IPV6_HEADER_LEN

    @property
    def traffic_class(self) -> int:
        """DSCP and ECN as the 8-bit traffic class."""
        return (self.dscp << 2) | self.ecn

    def with_(self, **changes: object) -> IPv6:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def pack(self) -> bytes:
        """Serialize to 40 bytes."""
        check_range("dscp", self.dscp, 6)
        check_range("ecn", self.ecn, 2)
        check_range("flow_label", self.flow_label, 20)
        check_range("payload_length", self.payload_length, 16)
        check_range("next_header", self.next_header, 8)
        check_range("hop_limit", self.hop_limit, 8)
        check_range("version", self.version, 4)
        word = (self.version << 28) | (self.traffic_class << 20) | self.flow_label
        return _S.pack(
            word,
            self.payload_length,
            self.next_header,
            self.hop_limit,
            addr16("src", self.src),
            addr16("dst", self.dst),
        )

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> IPv6:
        """Parse at ``offset``; raises ``MalformedFrame`` (truncated or not version 6)."""
        need(buf, offset, IPV6_HEADER_LEN, "IPv6 header")
        word, plen, nh, hlim, src, dst = _S.unpack_from(buf, offset)
        version = word >> 28
        if version != IPV6_VERSION:
            raise MalformedFrame(MalformedReason.BAD_IP_VERSION, f"IP version {version}")
        tc = (word >> 20) & 0xFF
        return cls(
            src=src,
            dst=dst,
            next_header=nh,
            payload_length=plen,
            hop_limit=hlim,
            dscp=tc >> 2,
            ecn=tc & 0b11,
            flow_label=word & 0xFFFFF,
        )
