"""UDP header (RFC 768) and how MRC carries its 32-bit entropy value (EV).

[M] The EV's high 16 bits ride in the UDP source port and its low 16 bits in the low 16
bits of the outer IPv6 flow label; the destination port is RoCEv2's 4791. The split is a
third-party reading of the spec, kept here so it can be corrected in one place.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import EV_FLOW_LABEL_MASK, EV_SPORT_SHIFT, MRC_UDP_PORT, UDP_HEADER_LEN
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!HHHH")


def ev_to_sport(ev: int) -> int:
    """UDP source port that carries ``ev``'s high 16 bits."""
    check_range("ev", ev, 32)
    return ev >> EV_SPORT_SHIFT


def ev_to_flow_label(ev: int) -> int:
    """Flow-label value that carries ``ev``'s low 16 bits."""
    check_range("ev", ev, 32)
    return ev & EV_FLOW_LABEL_MASK


def ev_from_headers(sport: int, flow_label: int) -> int:
    """Recover the EV from a UDP source port and an outer flow label."""
    return (sport << EV_SPORT_SHIFT) | (flow_label & EV_FLOW_LABEL_MASK)


@dataclass(frozen=True, slots=True)
class UDP:
    """A UDP header. ``length`` covers header and data; ``checksum`` as on the wire."""

    sport: int
    dport: int = MRC_UDP_PORT
    length: int = UDP_HEADER_LEN
    checksum: int = 0

    LEN: ClassVar[int] = UDP_HEADER_LEN

    def pack(self) -> bytes:
        """Serialize to 8 bytes."""
        for name in ("sport", "dport", "length", "checksum"):
            check_range(name, getattr(self, name), 16)
        return _S.pack(self.sport, self.dport, self.length, self.checksum)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> UDP:
        """Parse at ``offset``; raises ``MalformedFrame`` if truncated."""
        need(buf, offset, UDP_HEADER_LEN, "UDP header")
        return cls(*_S.unpack_from(buf, offset))
