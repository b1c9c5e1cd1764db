"""SACK extended header (SETH, 28 bytes) and the congestion-control state after it (8 bytes).

Used by SACK (0xDC) and ACK (0xD1) packets. [M] Field order and widths follow third-party
readings of the MRC spec; the lead's choice of exact offsets is documented here:

SETH:  EV(32) | reserved(8) cumulative-ACK PSN(24) | ack offset(s16) | SACK offset(s16) |
       max PSN range(16) | flags(16: bits 0-1 M field, bit 2 ECE) | SACK bitmap(64) |
       immediate credit(32)
CC:    echoed timestamp(16) | out-of-order count(8) | window penalty(8, 0-127) |
       received bytes(32, wrapping counter)

- ``cack_psn`` is the next PSN the responder expects in order (everything before it is in).
- ``ack_offset``: the PSN whose arrival triggered this SACK, minus ``cack_psn``.
- ``sack_offset``: the PSN of bitmap bit 0, minus ``cack_psn``; bit i set = PSN base+i in.
- ``ev`` reflects the triggering packet's entropy value; ``ece`` says it arrived CE-marked.
- ``imm_credit``: write-with-immediate MSNs below this value may be sent.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import (
    CCSTATE_LEN,
    SACK_BITMAP_BITS,
    SETH_LEN,
    WINDOW_PENALTY_MAX,
    SackMode,
)
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire._util import Buffer, check_range, check_signed, need

# Public so the core can pack SACKs per packet without building dataclasses.
SETH_STRUCT = struct.Struct("!IIhhHHQI")
CCSTATE_STRUCT = struct.Struct("!HBBI")
_MODES = frozenset(int(m) for m in SackMode)
SETH_F_MODE = 0x0003
SETH_F_ECE = 0x0004


@dataclass(frozen=True, slots=True)
class SETH:
    """Selective acknowledgement of a window of PSNs, reflecting one EV."""

    ev: int
    cack_psn: int
    ack_offset: int = 0
    sack_offset: int = 0
    max_psn_range: int = 0
    mode: int = SackMode.NONE
    ece: bool = False
    bitmap: int = 0
    imm_credit: int = 0

    LEN: ClassVar[int] = SETH_LEN

    def pack(self) -> bytes:
        """Serialize to 28 bytes."""
        check_range("ev", self.ev, 32)
        check_range("cack_psn", self.cack_psn, 24)
        check_signed("ack_offset", self.ack_offset, 16)
        check_signed("sack_offset", self.sack_offset, 16)
        check_range("max_psn_range", self.max_psn_range, 16)
        if self.mode not in _MODES:
            raise ValueError(f"SACK mode {self.mode!r} is not one of {sorted(_MODES)}")
        check_range("bitmap", self.bitmap, SACK_BITMAP_BITS)
        check_range("imm_credit", self.imm_credit, 32)
        flags = int(self.mode) | (SETH_F_ECE if self.ece else 0)
        return SETH_STRUCT.pack(
            self.ev,
            self.cack_psn,
            self.ack_offset,
            self.sack_offset,
            self.max_psn_range,
            flags,
            self.bitmap,
            self.imm_credit,
        )

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> SETH:
        """Parse at ``offset``; an unknown M value raises ``MalformedFrame(BAD_FIELD)``."""
        need(buf, offset, SETH_LEN, "SETH")
        fields = SETH_STRUCT.unpack_from(buf, offset)
        ev, cack, ack_off, sack_off, rng, flags, bitmap, credit = fields
        mode = flags & SETH_F_MODE
        if mode not in _MODES:
            raise MalformedFrame(MalformedReason.BAD_FIELD, f"SACK M field {mode}")
        return cls(
            ev=ev,
            cack_psn=cack & 0xFFFFFF,
            ack_offset=ack_off,
            sack_offset=sack_off,
            max_psn_range=rng,
            mode=mode,
            ece=bool(flags & SETH_F_ECE),
            bitmap=bitmap,
            imm_credit=credit,
        )


@dataclass(frozen=True, slots=True)
class CCState:
    """Receiver-side congestion-control feedback carried with every SACK."""

    ts_echo: int = 0
    ooo_count: int = 0
    window_penalty: int = 0
    rcvd_bytes: int = 0

    LEN: ClassVar[int] = CCSTATE_LEN

    def pack(self) -> bytes:
        """Serialize to 8 bytes."""
        check_range("ts_echo", self.ts_echo, 16)
        check_range("ooo_count", self.ooo_count, 8)
        if not 0 <= self.window_penalty <= WINDOW_PENALTY_MAX:
            raise ValueError(f"window_penalty={self.window_penalty} outside 0..127")
        check_range("rcvd_bytes", self.rcvd_bytes, 32)
        return CCSTATE_STRUCT.pack(
            self.ts_echo, self.ooo_count, self.window_penalty, self.rcvd_bytes
        )

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> CCState:
        """Parse at ``offset``; a penalty above 127 raises ``MalformedFrame(BAD_FIELD)``."""
        need(buf, offset, CCSTATE_LEN, "CC state")
        ts, ooo, penalty, rcvd = CCSTATE_STRUCT.unpack_from(buf, offset)
        if penalty > WINDOW_PENALTY_MAX:
            raise MalformedFrame(MalformedReason.BAD_FIELD, f"window penalty {penalty}")
        return cls(ts, ooo, penalty, rcvd)
