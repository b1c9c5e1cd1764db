"""Timestamp extended header (TSETH), 4 bytes, after METH when BTH.TS is set.

[M+] send timestamp(16) @0 | TSR(1) bit 15 of @2 | reserved(11) | format type(4) bits 3..0
of @2 (= 1). The timestamp is the sender's clock in microseconds modulo 2**16 (TSR clear:
mrcnet's resolution); the receiver echoes it in SACK/NACK so the sender measures per-EV
RTT. :func:`pack_ts_word` / :func:`unpack_ts_word` are the timestamp-and-format half-word
layout that PETH and ERTH share.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import TS_FORMAT_TYPE, TS_FTYPE_MASK, TS_TSR_BIT, TSETH_LEN
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!HH")


def pack_ts_word(tsr: bool, ftype: int) -> int:
    """The half-word after a 16-bit timestamp: TSR flag and format type."""
    check_range("ftype", ftype, 4)
    return (TS_TSR_BIT if tsr else 0) | ftype


def unpack_ts_word(word: int) -> tuple[bool, int]:
    """(TSR, format type) of that half-word (reserved bits ignored)."""
    return bool(word & TS_TSR_BIT), word & TS_FTYPE_MASK


@dataclass(frozen=True, slots=True)
class TSETH:
    """A 16-bit send timestamp (microseconds, wrapping)."""

    timestamp: int
    tsr: bool = False
    ftype: int = TS_FORMAT_TYPE

    LEN: ClassVar[int] = TSETH_LEN

    def pack(self) -> bytes:
        """Serialize to 4 bytes."""
        check_range("timestamp", self.timestamp, 16)
        return _S.pack(self.timestamp, pack_ts_word(self.tsr, self.ftype))

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> TSETH:
        """Parse at ``offset``; raises ``MalformedFrame`` if truncated."""
        need(buf, offset, TSETH_LEN, "TSETH")
        ts, word = _S.unpack_from(buf, offset)
        return cls(ts, *unpack_ts_word(word))
