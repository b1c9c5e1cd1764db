"""Immediate data header (ImmDt), 4 bytes: in *_IMM packets after the RETH, before the payload."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import IMMDT_LEN
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!I")


@dataclass(frozen=True, slots=True)
class ImmDt:
    """The 32-bit immediate value delivered to the responder's completion queue."""

    imm: int

    LEN: ClassVar[int] = IMMDT_LEN

    def pack(self) -> bytes:
        """Serialize to 4 bytes."""
        check_range("imm", self.imm, 32)
        return _S.pack(self.imm)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> ImmDt:
        """Parse at ``offset``; raises ``MalformedFrame`` if truncated."""
        need(buf, offset, IMMDT_LEN, "ImmDt")
        return cls(_S.unpack_from(buf, offset)[0])
