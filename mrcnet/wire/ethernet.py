"""Ethernet II header (14 bytes): destination MAC, source MAC, EtherType."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import ETH_ALEN, ETH_HEADER_LEN, ETH_P_IPV6
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!6s6sH")


def mac_to_bytes(mac: str | bytes) -> bytes:
    """Parse ``"02:00:00:00:00:01"`` (or pass 6 raw bytes through)."""
    if isinstance(mac, bytes | bytearray):
        if len(mac) != ETH_ALEN:
            raise ValueError(f"a MAC address is 6 bytes, got {len(mac)}")
        return bytes(mac)
    parts = mac.split(":")
    if len(parts) != ETH_ALEN:
        raise ValueError(f"bad MAC address {mac!r}: expected six hex octets")
    try:
        return bytes(int(p, 16) for p in parts)
    except ValueError:
        raise ValueError(f"bad MAC address {mac!r}") from None


def mac_to_str(mac: bytes) -> str:
    """Format 6 bytes as ``aa:bb:cc:dd:ee:ff``."""
    return ":".join(f"{b:02x}" for b in mac)


@dataclass(frozen=True, slots=True)
class Ethernet:
    """An Ethernet II header. MRC frames always carry IPv6 (EtherType 0x86DD)."""

    dst: bytes
    src: bytes
    ethertype: int = ETH_P_IPV6

    LEN: ClassVar[int] = ETH_HEADER_LEN

    def pack(self) -> bytes:
        """Serialize to 14 bytes."""
        if len(self.dst) != ETH_ALEN or len(self.src) != ETH_ALEN:
            raise ValueError("Ethernet addresses must be 6 bytes")
        check_range("ethertype", self.ethertype, 16)
        return _S.pack(self.dst, self.src, self.ethertype)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> Ethernet:
        """Parse the header at ``offset``; raises ``MalformedFrame`` if truncated."""
        need(buf, offset, ETH_HEADER_LEN, "Ethernet header")
        dst, src, ethertype = _S.unpack_from(buf, offset)
        return cls(dst, src, ethertype)
