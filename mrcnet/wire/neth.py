"""NACK extended header (NETH), 20 bytes, opcode NACK (0xDD).

[M+] @0..1 type/next (reserved) | @2 reason(8) | @3 vendor(8) | @4 entropy(32) |
@8 SPDCID(16) | @10 DPDCID(16) | @12 reserved(8) | @13 NACK PSN(24) |
@16 CC type(4) = 2 | CC flags(4) | @17 reserved(8) | @18 echoed timestamp(16).
Sent at once for a trimmed packet (reason TRIMMED, or TRIMMED_LASTHOP when the trim
happened at the receiver's own port) and for other per-packet refusals; ``entropy``
reflects the EV the refused packet travelled on.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import CC_TYPE_NACK, NETH_LEN, NackReason
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire._util import Buffer, check_range, need

NETH_STRUCT = struct.Struct("!HBBIHHIBBH")
_REASONS = frozenset(int(r) for r in NackReason)


@dataclass(frozen=True, slots=True)
class NETH:
    """Negative acknowledgement of one PSN."""

    reason: int
    entropy: int
    nack_psn: int
    timestamp: int = 0
    vendor: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    cc_type: int = CC_TYPE_NACK
    cc_flags: int = 0

    LEN: ClassVar[int] = NETH_LEN

    def pack(self) -> bytes:
        """Serialize to 20 bytes."""
        if self.reason not in _REASONS:
            raise ValueError(f"NACK reason {self.reason!r} is not a NackReason")
        check_range("vendor", self.vendor, 8)
        check_range("entropy", self.entropy, 32)
        check_range("spdcid", self.spdcid, 16)
        check_range("dpdcid", self.dpdcid, 16)
        check_range("nack_psn", self.nack_psn, 24)
        check_range("cc_type", self.cc_type, 4)
        check_range("cc_flags", self.cc_flags, 4)
        check_range("timestamp", self.timestamp, 16)
        return NETH_STRUCT.pack(0, self.reason, self.vendor, self.entropy, self.spdcid,
                                self.dpdcid, self.nack_psn, self.cc_type << 4 | self.cc_flags,
                                0, self.timestamp)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> NETH:
        """Parse at ``offset``; an unknown reason raises ``MalformedFrame(BAD_FIELD)``."""
        need(buf, offset, NETH_LEN, "NETH")
        (_, reason, vendor, entropy, spdcid, dpdcid, psn, cc, _,
         ts) = NETH_STRUCT.unpack_from(buf, offset)
        if reason not in _REASONS:
            raise MalformedFrame(MalformedReason.BAD_FIELD, f"NACK reason {reason:#x}")
        return cls(reason=reason, entropy=entropy, nack_psn=psn & 0xFFFFFF, timestamp=ts,
                   vendor=vendor, spdcid=spdcid, dpdcid=dpdcid, cc_type=cc >> 4,
                   cc_flags=cc & 0xF)
