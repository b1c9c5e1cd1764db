"""MRC message extended header (METH), 4 bytes, with WRITE_LAST_IMM / WRITE_ONLY_IMM.

[M] reserved(8) | message sequence number(24). The MSN numbers write-with-immediate
messages per QP so the responder completes them in order, exactly once.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import METH_LEN
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!I")


@dataclass(frozen=True, slots=True)
class METH:
    """Message sequence number of a write-with-immediate."""

    msn: int

    LEN: ClassVar[int] = METH_LEN

    def pack(self) -> bytes:
        """Serialize to 4 bytes."""
        check_range("msn", self.msn, 24)
        return _S.pack(self.msn)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> METH:
        """Parse at ``offset`` (reserved bits ignored); raises ``MalformedFrame`` if short."""
        need(buf, offset, METH_LEN, "METH")
        return cls(_S.unpack_from(buf, offset)[0] & 0xFFFFFF)
