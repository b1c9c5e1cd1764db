"""Timestamp extended header (TSETH), 4 bytes, present when BTH.TS is set.

[M] send timestamp(16) | reserved(16). The timestamp is the sender's clock in microseconds
modulo 2**16; the receiver echoes it in SACK/NACK so the sender measures per-EV RTT.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import TSETH_LEN
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!HH")


@dataclass(frozen=True, slots=True)
class TSETH:
    """A 16-bit send timestamp (microseconds, wrapping)."""

    timestamp: int

    LEN: ClassVar[int] = TSETH_LEN

    def pack(self) -> bytes:
        """Serialize to 4 bytes."""
        check_range("timestamp", self.timestamp, 16)
        return _S.pack(self.timestamp, 0)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> TSETH:
        """Parse at ``offset``; raises ``MalformedFrame`` if truncated."""
        need(buf, offset, TSETH_LEN, "TSETH")
        return cls(_S.unpack_from(buf, offset)[0])
