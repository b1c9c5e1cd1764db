"""Base Transport Header (BTH), 12 bytes.

[M] Layout: opcode(8) | SE(1) M(1) PadCnt(2) TVer(4) | P_Key(16) | reserved(8) |
DestQP(24) | A(1) R(1) RTX(1) TS(1) reserved(4) | PSN(24). RoCEv2's BTH with MRC's use
of the bits after AckReq: RTX marks a retransmission, TS says a TSETH follows.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import (
    BTH_F_ACKREQ,
    BTH_F_R,
    BTH_F_RTX,
    BTH_F_TS,
    BTH_LEN,
    BTH_TVER,
    DEFAULT_PKEY,
    Opcode,
)
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!BBHII")
_OPCODES = frozenset(int(o) for o in Opcode)

F_ACKREQ = BTH_F_ACKREQ
F_R = BTH_F_R
F_RTX = BTH_F_RTX
F_TS = BTH_F_TS


@dataclass(frozen=True, slots=True)
class BTH:
    """Base Transport Header fields."""

    opcode: int
    dest_qp: int
    psn: int
    ack_req: bool = False
    rtx: bool = False
    ts: bool = False
    r: bool = False
    se: bool = False
    migreq: bool = False
    pad: int = 0
    tver: int = BTH_TVER
    pkey: int = DEFAULT_PKEY

    LEN: ClassVar[int] = BTH_LEN

    def pack(self) -> bytes:
        """Serialize to 12 bytes."""
        check_range("opcode", self.opcode, 8)
        check_range("pad", self.pad, 2)
        check_range("tver", self.tver, 4)
        check_range("pkey", self.pkey, 16)
        check_range("dest_qp", self.dest_qp, 24)
        check_range("psn", self.psn, 24)
        b1 = (self.se << 7) | (self.migreq << 6) | (self.pad << 4) | self.tver
        flags = (
            (F_ACKREQ if self.ack_req else 0)
            | (F_R if self.r else 0)
            | (F_RTX if self.rtx else 0)
            | (F_TS if self.ts else 0)
        )
        return _S.pack(self.opcode, b1, self.pkey, self.dest_qp, (flags << 24) | self.psn)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> BTH:
        """Parse at ``offset``; unknown opcode or transport version raise ``MalformedFrame``."""
        need(buf, offset, BTH_LEN, "BTH")
        op, b1, pkey, qp_word, psn_word = _S.unpack_from(buf, offset)
        if op not in _OPCODES:
            raise MalformedFrame(MalformedReason.BAD_OPCODE, f"opcode {op:#04x}")
        tver = b1 & 0x0F
        if tver != BTH_TVER:
            raise MalformedFrame(MalformedReason.BAD_VERSION, f"BTH TVer {tver}")
        flags = psn_word >> 24
        return cls(
            opcode=op,
            dest_qp=qp_word & 0xFFFFFF,
            psn=psn_word & 0xFFFFFF,
            ack_req=bool(flags & F_ACKREQ),
            rtx=bool(flags & F_RTX),
            ts=bool(flags & F_TS),
            r=bool(flags & F_R),
            se=bool(b1 & 0x80),
            migreq=bool(b1 & 0x40),
            pad=(b1 >> 4) & 0b11,
            tver=tver,
            pkey=pkey,
        )
