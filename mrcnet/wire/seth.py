"""SACK extended header (SETH, 28 bytes) and the congestion-control state after it
(CC_STATE, 8 bytes): opcode SACK (0xDC).

[M+] Layout (PROTOCOL-NOTES section 8; offsets in bytes, big-endian)::

    SETH      @0..1 type/next (reserved) with M(2) = bits 6..5 of @1, PR(1) = bit 1 of @1
              @2 ack_psn_offset(s16) @4 entropy(32) @8 SPDCID(16) @10 DPDCID(16)
              @12 reserved(8) @13 CACK PSN(24) @16 CC type(4) | CC flags(4)
              @17 MPR(8) @18 sack_offset(s16) @20 SACK bitmap(64)
    CC_STATE  @0 echoed timestamp(16) @2 reserved(1) | out-of-order count(15)
              @4 restore_cwnd(1) | receiver window penalty(7) @5 received bytes(24)

Meanings:

- ``cack_psn``: the **last** PSN received in order (inclusive).
- ``ack_psn_offset``: the PSN this SACK answers minus ``cack_psn`` (a probe response,
  ``pr``, carries the probe id there instead).
- ``sack_offset``: bit i (LSB = 0) of ``sack_bitmap`` covers PSN
  ``cack_psn + sack_offset + i``.
- ``entropy``: the EV that carried the packet this SACK answers.
- ``m``: NONE, SKIP_ONCE (the packet arrived CE-marked: the ECN echo) or ALWAYS_SKIP.
- ``mpr``: the receiver's maximum PSN range in units of ``MPR_UNIT`` PSNs.
- ``rcvd_bytes``: bytes received, in units of ``RCVD_BYTES_UNIT``, mod 2**24.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import (
    CCSTATE_LEN,
    OOO_COUNT_MAX,
    SACK_BITMAP_BITS,
    SETH_LEN,
    WINDOW_PENALTY_MAX,
    SackMode,
)
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire._util import Buffer, check_range, check_signed, need

# Public so the core can pack SACKs per packet without building dataclasses.
SETH_STRUCT = struct.Struct("!BBhIHHIBBhQ")
CCSTATE_STRUCT = struct.Struct("!HHI")
SETH_M_SHIFT = 5
SETH_M_MASK = 0x3
SETH_PR = 0x02
CC_RESTORE = 0x80
_MODES = frozenset(int(m) for m in SackMode)


def seth_flags(m: int, pr: bool) -> int:
    """Byte 1 of SETH: the M field and the PR bit (the rest reserved)."""
    return m << SETH_M_SHIFT | (SETH_PR if pr else 0)


@dataclass(frozen=True, slots=True)
class SETH:
    """Selective acknowledgement of a window of PSNs, reflecting one EV."""

    cack_psn: int
    entropy: int = 0
    ack_psn_offset: int = 0
    sack_offset: int = 1
    sack_bitmap: int = 0
    m: int = SackMode.NONE
    pr: bool = False
    spdcid: int = 0
    dpdcid: int = 0
    cc_type: int = 0
    cc_flags: int = 0
    mpr: int = 0

    LEN: ClassVar[int] = SETH_LEN

    def pack(self) -> bytes:
        """Serialize to 28 bytes."""
        if self.m not in _MODES:
            raise ValueError(f"SACK M {self.m!r} is not one of {sorted(_MODES)}")
        check_signed("ack_psn_offset", self.ack_psn_offset, 16)
        check_range("entropy", self.entropy, 32)
        check_range("spdcid", self.spdcid, 16)
        check_range("dpdcid", self.dpdcid, 16)
        check_range("cack_psn", self.cack_psn, 24)
        check_range("cc_type", self.cc_type, 4)
        check_range("cc_flags", self.cc_flags, 4)
        check_range("mpr", self.mpr, 8)
        check_signed("sack_offset", self.sack_offset, 16)
        check_range("sack_bitmap", self.sack_bitmap, SACK_BITMAP_BITS)
        return SETH_STRUCT.pack(
            0, seth_flags(self.m, self.pr), self.ack_psn_offset, self.entropy, self.spdcid,
            self.dpdcid, self.cack_psn, self.cc_type << 4 | self.cc_flags, self.mpr,
            self.sack_offset, self.sack_bitmap,
        )

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> SETH:
        """Parse at ``offset``; M = 3 raises ``MalformedFrame(BAD_FIELD)``."""
        need(buf, offset, SETH_LEN, "SETH")
        (_, b1, ack_off, entropy, spdcid, dpdcid, cack, cc, mpr, sack_off,
         bitmap) = SETH_STRUCT.unpack_from(buf, offset)
        m = (b1 >> SETH_M_SHIFT) & SETH_M_MASK
        if m not in _MODES:
            raise MalformedFrame(MalformedReason.BAD_FIELD, f"SACK M field {m}")
        return cls(
            cack_psn=cack & 0xFFFFFF, entropy=entropy, ack_psn_offset=ack_off,
            sack_offset=sack_off, sack_bitmap=bitmap, m=m, pr=bool(b1 & SETH_PR),
            spdcid=spdcid, dpdcid=dpdcid, cc_type=cc >> 4, cc_flags=cc & 0xF, mpr=mpr,
        )


@dataclass(frozen=True, slots=True)
class CCState:
    """Receiver-side congestion-control feedback carried with every SACK."""

    timestamp: int = 0
    ooo_count: int = 0
    restore_cwnd: bool = False
    rcv_cwnd_pen: int = 0
    rcvd_bytes: int = 0

    LEN: ClassVar[int] = CCSTATE_LEN

    def pack(self) -> bytes:
        """Serialize to 8 bytes."""
        check_range("timestamp", self.timestamp, 16)
        if not 0 <= self.ooo_count <= OOO_COUNT_MAX:
            raise ValueError(f"ooo_count={self.ooo_count!r} does not fit in 15 bits")
        if not 0 <= self.rcv_cwnd_pen <= WINDOW_PENALTY_MAX:
            raise ValueError(f"rcv_cwnd_pen={self.rcv_cwnd_pen!r} outside 0..127")
        check_range("rcvd_bytes", self.rcvd_bytes, 24)
        b4 = (CC_RESTORE if self.restore_cwnd else 0) | self.rcv_cwnd_pen
        return CCSTATE_STRUCT.pack(self.timestamp, self.ooo_count, b4 << 24 | self.rcvd_bytes)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> CCState:
        """Parse at ``offset`` (the reserved bit ignored)."""
        need(buf, offset, CCSTATE_LEN, "CC_STATE")
        ts, ooo, w = CCSTATE_STRUCT.unpack_from(buf, offset)
        b4 = w >> 24
        return cls(ts, ooo & OOO_COUNT_MAX, bool(b4 & CC_RESTORE), b4 & WINDOW_PENALTY_MAX,
                   w & 0xFFFFFF)
