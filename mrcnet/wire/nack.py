"""NACK extended header (NETH), 20 bytes.

[M] reason(8) | reserved(8) | echoed timestamp(16) | EV(32) | reserved(8) PSN(24) |
reserved(8) cumulative-ACK PSN(24) | reserved(32). Sent at once for a trimmed packet
(reason TRIMMED, or TRIMMED_LASTHOP when the trim happened at the receiver's own port) and
for other per-packet refusals; ``ev`` reflects the EV the refused packet travelled on.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import NETH_LEN, NackReason
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!BBHIIII")
_REASONS = frozenset(int(r) for r in NackReason)


@dataclass(frozen=True, slots=True)
class NETH:
    """Negative acknowledgement of one PSN."""

    reason: int
    ev: int
    psn: int
    cack_psn: int = 0
    ts_echo: int = 0

    LEN: ClassVar[int] = NETH_LEN

    def pack(self) -> bytes:
        """Serialize to 20 bytes."""
        if self.reason not in _REASONS:
            raise ValueError(f"NACK reason {self.reason!r} is not a NackReason")
        check_range("ev", self.ev, 32)
        check_range("psn", self.psn, 24)
        check_range("cack_psn", self.cack_psn, 24)
        check_range("ts_echo", self.ts_echo, 16)
        return _S.pack(self.reason, 0, self.ts_echo, self.ev, self.psn, self.cack_psn, 0)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> NETH:
        """Parse at ``offset``; an unknown reason raises ``MalformedFrame(BAD_FIELD)``."""
        need(buf, offset, NETH_LEN, "NETH")
        reason, _, ts, ev, psn, cack, _ = _S.unpack_from(buf, offset)
        if reason not in _REASONS:
            raise MalformedFrame(MalformedReason.BAD_FIELD, f"NACK reason {reason:#x}")
        return cls(reason=reason, ev=ev, psn=psn & 0xFFFFFF, cack_psn=cack & 0xFFFFFF, ts_echo=ts)
