"""ACK extended transport header (AETH), 4 bytes, opcode ACK (0xD1): a RoCE cumulative ACK.

[M+] syndrome(8) @0 | MSN(24) @1. BTH.PSN is the cumulative acknowledgement: the last
PSN received in order (inclusive). mrcnet sends syndrome ``AETH_SYNDROME_ACK`` (an ACK
without end-to-end credits) and the responder's count of completed messages as MSN.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import AETH_LEN, AETH_SYNDROME_ACK
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!I")


@dataclass(frozen=True, slots=True)
class AETH:
    """Syndrome and message sequence number of a cumulative ACK."""

    syndrome: int = AETH_SYNDROME_ACK
    msn: int = 0

    LEN: ClassVar[int] = AETH_LEN

    def pack(self) -> bytes:
        """Serialize to 4 bytes."""
        check_range("syndrome", self.syndrome, 8)
        check_range("msn", self.msn, 24)
        return _S.pack(self.syndrome << 24 | self.msn)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> AETH:
        """Parse at ``offset``; raises ``MalformedFrame`` if truncated."""
        need(buf, offset, AETH_LEN, "AETH")
        w = _S.unpack_from(buf, offset)[0]
        return cls(w >> 24, w & 0xFFFFFF)
