"""RDMA Extended Transport Header (RETH), 16 bytes, in **every** MRC data packet.

[M+] VA(64) @0 | rkey(32) @8 | DMA length(32) @12. Unlike RoCE, where only the first
packet of a message carries it, MRC puts the packet's own final address in each packet so
it can be placed on arrival in any order. mrcnet's DMA length is this packet's payload
length (docs/DECISIONS.md says why).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import RETH_LEN
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!QII")


@dataclass(frozen=True, slots=True)
class RETH:
    """Remote address, key and length of the bytes this packet carries."""

    va: int
    rkey: int
    length: int

    LEN: ClassVar[int] = RETH_LEN

    def pack(self) -> bytes:
        """Serialize to 16 bytes."""
        check_range("va", self.va, 64)
        check_range("rkey", self.rkey, 32)
        check_range("length", self.length, 32)
        return _S.pack(self.va, self.rkey, self.length)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> RETH:
        """Parse at ``offset``; raises ``MalformedFrame`` if truncated."""
        need(buf, offset, RETH_LEN, "RETH")
        return cls(*_S.unpack_from(buf, offset))
