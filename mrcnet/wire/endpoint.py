"""Endpoint operation header (EPH), 16 bytes, opcodes ENDPOINT_REQ / ENDPOINT_RESP.

[M] op(8) | status(8) | reserved(16) | request id(32) | EV(32) | timestamp(16) |
port mask(16). Sent connectionless to the reserved QPN ``ENDPOINT_QPN``:

- EV probe: the request travels on the EV under test; the response echoes request id, EV
  and timestamp, so the prober learns the path works and its RTT.
- Port status: ``port_mask`` has bit p set for every live port (plane) of the sender; the
  peer stops using planes whose bit is clear.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import EPH_LEN, EndpointOp
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!BBHIIHH")
_OPS = frozenset(int(o) for o in EndpointOp)


@dataclass(frozen=True, slots=True)
class EndpointHeader:
    """An endpoint request or response."""

    op: int
    request_id: int
    ev: int = 0
    timestamp: int = 0
    port_mask: int = 0
    status: int = 0

    LEN: ClassVar[int] = EPH_LEN

    def pack(self) -> bytes:
        """Serialize to 16 bytes."""
        if self.op not in _OPS:
            raise ValueError(f"endpoint op {self.op!r} is not an EndpointOp")
        check_range("status", self.status, 8)
        check_range("request_id", self.request_id, 32)
        check_range("ev", self.ev, 32)
        check_range("timestamp", self.timestamp, 16)
        check_range("port_mask", self.port_mask, 16)
        return _S.pack(
            self.op, self.status, 0, self.request_id, self.ev, self.timestamp, self.port_mask
        )

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> EndpointHeader:
        """Parse at ``offset``; an unknown op raises ``MalformedFrame(BAD_FIELD)``."""
        need(buf, offset, EPH_LEN, "endpoint header")
        op, status, _, rid, ev, ts, mask = _S.unpack_from(buf, offset)
        if op not in _OPS:
            raise MalformedFrame(MalformedReason.BAD_FIELD, f"endpoint op {op}")
        return cls(op=op, request_id=rid, ev=ev, timestamp=ts, port_mask=mask, status=status)
