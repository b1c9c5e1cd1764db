"""Reliability probe extended header (PETH), 16 bytes, opcode RELIABILITY_PROBE (0xDE).

[M+] @0..1 type/next (reserved) | @2 reserved | @3 vendor(8) | @4 probe id(16) |
@6 reserved(16) | @8 SPDCID(16) | @10 DPDCID(16) | @12 timestamp(16) |
@14 TSR(1) reserved(11) format type(4) = 1. The responder answers with a SACK with
PR = 1 that carries the probe id in ack_psn_offset and echoes the timestamp.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import PETH_LEN, TS_FORMAT_TYPE
from mrcnet.wire._util import Buffer, check_range, need
from mrcnet.wire.tseth import pack_ts_word, unpack_ts_word

_S = struct.Struct("!HBBHHHHHH")


@dataclass(frozen=True, slots=True)
class PETH:
    """A reliability probe."""

    probe_id: int
    timestamp: int = 0
    vendor: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    tsr: bool = False
    ftype: int = TS_FORMAT_TYPE

    LEN: ClassVar[int] = PETH_LEN

    def pack(self) -> bytes:
        """Serialize to 16 bytes."""
        check_range("vendor", self.vendor, 8)
        check_range("probe_id", self.probe_id, 16)
        check_range("spdcid", self.spdcid, 16)
        check_range("dpdcid", self.dpdcid, 16)
        check_range("timestamp", self.timestamp, 16)
        return _S.pack(0, 0, self.vendor, self.probe_id, 0, self.spdcid, self.dpdcid,
                       self.timestamp, pack_ts_word(self.tsr, self.ftype))

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> PETH:
        """Parse at ``offset``; raises ``MalformedFrame`` if truncated."""
        need(buf, offset, PETH_LEN, "PETH")
        _, _, vendor, pid, _, spdcid, dpdcid, ts, word = _S.unpack_from(buf, offset)
        tsr, ftype = unpack_ts_word(word)
        return cls(pid, ts, vendor, spdcid, dpdcid, tsr, ftype)
