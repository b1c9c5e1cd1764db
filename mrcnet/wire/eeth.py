"""Endpoint operation response header (EETH), 36 bytes, opcode ENDPOINT_RESP (0xD9).

[M+] op(2) = bits 5..4 of @1 | echoed timestamp(16) @28; every other byte reserved in the
public readings (``mrc.h``'s response reports an RTT and a service time: where they sit is
not known, so mrcnet sends zeros). The request id rides in BTH.PSN, as in the request.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import EETH_LEN, EndpointOp
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire._util import Buffer, check_range, need

EETH_OP_SHIFT = 4
EETH_TS_OFF = 28
_OPS = frozenset(int(o) for o in EndpointOp)


@dataclass(frozen=True, slots=True)
class EETH:
    """An endpoint operation response."""

    op: int
    timestamp: int = 0

    LEN: ClassVar[int] = EETH_LEN

    def pack(self) -> bytes:
        """Serialize to 36 bytes."""
        if self.op not in _OPS:
            raise ValueError(f"endpoint op {self.op!r} is not an EndpointOp")
        check_range("timestamp", self.timestamp, 16)
        b = bytearray(EETH_LEN)
        b[1] = self.op << EETH_OP_SHIFT
        struct.pack_into("!H", b, EETH_TS_OFF, self.timestamp)
        return bytes(b)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> EETH:
        """Parse at ``offset``; an unknown op raises ``MalformedFrame(BAD_FIELD)``."""
        need(buf, offset, EETH_LEN, "EETH")
        op = (buf[offset + 1] >> EETH_OP_SHIFT) & 0x3
        if op not in _OPS:
            raise MalformedFrame(MalformedReason.BAD_FIELD, f"endpoint op {op}")
        (ts,) = struct.unpack_from("!H", buf, offset + EETH_TS_OFF)
        return cls(op, ts)
