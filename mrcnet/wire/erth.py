"""Endpoint operation request header (ERTH), 16 bytes, opcode ENDPOINT_REQ (0xD8).

[M+] @0 type/next (reserved) | op(2) = bits 1..0 of @1 | @2 reserved | @3 vendor(8) |
@4 port status mask(32) | @8 reserved(32) | @12 timestamp(16) |
@14 TSR(1) reserved(11) format type(4) = 1. Connectionless, to the reserved QP number
``ENDPOINT_QPN``; the request id rides in BTH.PSN.

mrcnet's use of the reserved word @8: the *endpoint token* its two mrcds agreed at
connect (docs/DECISIONS.md "Wire format"). :class:`TokenERTH` sends it,
:func:`erth_token` reads it; the receiver drops a request whose token matches no QP with
the sender (docs/SECURITY.md). :class:`ERTH` itself leaves the word reserved: it packs
zeros there and ignores it, as other implementations do.

- EV probe: the request travels on the EV under test; the response (EETH) travels back on
  the same EV with the same request id and echoes the timestamp.
- Port status: ``port_status_mask`` has bit p set for every live port (plane) of the
  sender; the peer stops using planes whose bit is clear.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import ERTH_LEN, TS_FORMAT_TYPE, EndpointOp
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire._util import Buffer, check_range, need
from mrcnet.wire.tseth import pack_ts_word, unpack_ts_word

_S = struct.Struct("!BBBBIIHH")
OP_MASK = 0x3
#: Where mrcnet's endpoint token sits in ERTH (the reserved word).
TOKEN_OFF = 8
_TOKEN = struct.Struct("!I")
_OPS = frozenset(int(o) for o in EndpointOp)


@dataclass(frozen=True, slots=True)
class ERTH:
    """An endpoint operation request."""

    op: int
    port_status_mask: int = 0
    timestamp: int = 0
    vendor: int = 0
    tsr: bool = False
    ftype: int = TS_FORMAT_TYPE

    LEN: ClassVar[int] = ERTH_LEN

    def pack(self) -> bytes:
        """Serialize to 16 bytes."""
        if self.op not in _OPS:
            raise ValueError(f"endpoint op {self.op!r} is not an EndpointOp")
        check_range("vendor", self.vendor, 8)
        check_range("port_status_mask", self.port_status_mask, 32)
        check_range("timestamp", self.timestamp, 16)
        return _S.pack(0, self.op, 0, self.vendor, self.port_status_mask, 0, self.timestamp,
                       pack_ts_word(self.tsr, self.ftype))

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> ERTH:
        """Parse at ``offset``; an unknown op raises ``MalformedFrame(BAD_FIELD)``."""
        need(buf, offset, ERTH_LEN, "ERTH")
        _, b1, _, vendor, mask, _, ts, word = _S.unpack_from(buf, offset)
        op = b1 & OP_MASK
        if op not in _OPS:
            raise MalformedFrame(MalformedReason.BAD_FIELD, f"endpoint op {op}")
        tsr, ftype = unpack_ts_word(word)
        return cls(op, mask, ts, vendor, tsr, ftype)


@dataclass(frozen=True, slots=True)
class TokenERTH(ERTH):
    """An endpoint request carrying mrcnet's endpoint token in the reserved word @8."""

    token: int = 0

    def pack(self) -> bytes:
        """Serialize to 16 bytes, the token at @8."""
        check_range("token", self.token, 32)
        raw = bytearray(ERTH.pack(self))
        _TOKEN.pack_into(raw, TOKEN_OFF, self.token)
        return bytes(raw)


def erth_token(buf: Buffer, offset: int = 0) -> int:
    """The endpoint token of the ERTH at ``offset`` (0: none sent)."""
    need(buf, offset, ERTH_LEN, "ERTH")
    return int(_TOKEN.unpack_from(buf, offset + TOKEN_OFF)[0])
