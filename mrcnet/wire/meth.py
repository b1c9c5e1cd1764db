"""MRC message extended header (METH), 4 bytes, in every request (data) packet.

[M+] RQMSN(16) @0 | MSN(16) @2 (PROTOCOL-NOTES section 8). mrcnet's meanings
(docs/DECISIONS.md "Wire format"): MSN numbers every WRITE message of the QP (mod 2^16),
RQMSN numbers the write-with-immediate messages, the ones that consume a posted receive
(mod 2^16); a packet carries the numbers of the message it belongs to. The responder
completes immediates in RQMSN order, exactly once.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import METH_LEN
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!HH")


@dataclass(frozen=True, slots=True)
class METH:
    """Receive-queue and message sequence numbers of the message a packet belongs to."""

    rqmsn: int = 0
    msn: int = 0

    LEN: ClassVar[int] = METH_LEN

    def pack(self) -> bytes:
        """Serialize to 4 bytes."""
        check_range("rqmsn", self.rqmsn, 16)
        check_range("msn", self.msn, 16)
        return _S.pack(self.rqmsn, self.msn)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> METH:
        """Parse at ``offset``; raises ``MalformedFrame`` if short."""
        need(buf, offset, METH_LEN, "METH")
        return cls(*_S.unpack_from(buf, offset))
