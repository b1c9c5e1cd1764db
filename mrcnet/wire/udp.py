"""UDP header (RFC 768) and how MRC carries its 32-bit entropy value (EV).

[M+] The EV rides in the UDP source port (16 bits) and the low 16 bits of the flow label of
the outer and the inner IPv6 header. By default the EV's low 16 bits go in the source port
and its high 16 bits in the flow label (``EV_ORDER_SPORT_LOW``); :func:`set_ev_order`
selects the other order (``EV_ORDER_SPORT_HIGH``) for the whole process, the Python and the
C codecs alike. The destination port is RoCEv2's 4791.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import (
    EV_HALF_MASK,
    EV_HALF_SHIFT,
    EV_ORDER_SPORT_HIGH,
    EV_ORDER_SPORT_LOW,
    MRC_UDP_PORT,
    UDP_HEADER_LEN,
)
from mrcnet.wire._util import Buffer, check_range, need

_S = struct.Struct("!HHHH")
_order = [EV_ORDER_SPORT_LOW]


def set_ev_order(order: int) -> None:
    """Which half of the EV goes in the UDP source port, for every codec of this
    process (the C module's too, when built)."""
    if order not in (EV_ORDER_SPORT_LOW, EV_ORDER_SPORT_HIGH):
        raise ValueError(f"EV order {order!r}: use EV_ORDER_SPORT_LOW or EV_ORDER_SPORT_HIGH")
    _order[0] = order
    from mrcnet.native import C

    if C is not None:
        C.mrc_set_ev_order(order)


def ev_order() -> int:
    """The EV order in use (``EV_ORDER_SPORT_LOW`` unless :func:`set_ev_order` said)."""
    return _order[0]


def ev_to_sport(ev: int) -> int:
    """UDP source port that carries half of ``ev``."""
    check_range("ev", ev, 32)
    return ev >> EV_HALF_SHIFT if _order[0] else ev & EV_HALF_MASK


def ev_to_flow_label(ev: int) -> int:
    """Flow-label value (low 16 bits) that carries the other half of ``ev``."""
    check_range("ev", ev, 32)
    return ev & EV_HALF_MASK if _order[0] else ev >> EV_HALF_SHIFT


def ev_from_headers(sport: int, flow_label: int) -> int:
    """Recover the EV from a UDP source port and a flow label."""
    fl = flow_label & EV_HALF_MASK
    if _order[0]:
        return (sport << EV_HALF_SHIFT) | fl
    return (fl << EV_HALF_SHIFT) | sport


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
