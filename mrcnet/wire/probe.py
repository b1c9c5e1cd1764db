"""Reliability probe header (PRBH), 16 bytes, opcode RELIABILITY_PROBE.

[L] probe id(32) | EV(32) | reserved(8) PSN(24) | timestamp(16) | reserved(16). A sender
that has heard nothing for a while sends a probe on an EV; the responder answers with a
SACK reflecting that EV, which both measures the path and recovers a lost tail. ``psn`` is
the next PSN the sender would send, so the responder can tell what it is missing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import PRBH_LEN
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!IIIHH")


@dataclass(frozen=True, slots=True)
class ProbeHeader:
    """A reliability probe."""

    probe_id: int
    ev: int
    psn: int
    timestamp: int = 0

    LEN: ClassVar[int] = PRBH_LEN

    def pack(self) -> bytes:
        """Serialize to 16 bytes."""
        check_range("probe_id", self.probe_id, 32)
        check_range("ev", self.ev, 32)
        check_range("psn", self.psn, 24)
        check_range("timestamp", self.timestamp, 16)
        return _S.pack(self.probe_id, self.ev, self.psn, self.timestamp, 0)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> ProbeHeader:
        """Parse at ``offset``; raises ``MalformedFrame`` if truncated."""
        need(buf, offset, PRBH_LEN, "probe header")
        pid, ev, psn, ts, _ = _S.unpack_from(buf, offset)
        return cls(pid, ev, psn & 0xFFFFFF, ts)
