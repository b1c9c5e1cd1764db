"""Segment Routing Header (RFC 8754): IPv6 routing header type 4.

Layout: next header(8) | hdr ext len(8, 8-octet units not counting the first 8) |
routing type(8)=4 | segments left(8) | last entry(8) | flags(8) | tag(16) |
segment list[0..last entry] (16 bytes each, in *reverse* travel order: list[0] is the
final segment) | optional TLVs (Pad1, PadN and others, skipped).

The API takes segments in travel order (first hop first) and stores them on the wire
reversed, as the RFC does. A *reduced* SRH (RFC 8986 H.Encaps.Red) leaves the first
segment out, in the destination address only: segments left is then last entry + 1, which
RFC 8754 allows. MRC's SRv6-with-SRH form is one: the outer destination is a uSID
container and the SRH holds the next container (:meth:`SRH.reduced`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from mrcnet.constants import SRH_FIXED_LEN, SRH_ROUTING_TYPE, SRH_TLV_PAD1
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire._util import Buffer, addr16, check_range, need

_S = struct.Struct("!BBBBBBH")


@dataclass(frozen=True, slots=True)
class SRH:
    """A Segment Routing Header.

    ``segments`` is the segment list *as on the wire*: ``segments[0]`` is the final
    destination. Build one from a travel-order path with :meth:`from_path`.
    """

    next_header: int
    segments: tuple[bytes, ...]
    segments_left: int
    flags: int = 0
    tag: int = 0
    tlvs: bytes = b""

    routing_type: ClassVar[int] = SRH_ROUTING_TYPE

    @classmethod
    def from_path(cls, next_header: int, path: Sequence[bytes], *, tag: int = 0) -> SRH:
        """An SRH for ``path`` in travel order; segments left points at the first hop."""
        if not path:
            raise ValueError("an SRH needs at least one segment")
        segs = tuple(addr16("segment", s) for s in reversed(path))
        return cls(next_header=next_header, segments=segs, segments_left=len(segs) - 1, tag=tag)

    @classmethod
    def reduced(cls, next_header: int, rest: Sequence[bytes], *, tag: int = 0) -> SRH:
        """A reduced SRH: the segments after the one in the destination address, in
        travel order; segments left = how many remain (last entry + 1)."""
        if not rest:
            raise ValueError("a reduced SRH needs at least one segment")
        segs = tuple(addr16("segment", s) for s in reversed(rest))
        return cls(next_header=next_header, segments=segs, segments_left=len(segs), tag=tag)

    @property
    def last_entry(self) -> int:
        """Index of the last element of the segment list (the first hop)."""
        return len(self.segments) - 1

    @property
    def length(self) -> int:
        """Total header length in bytes."""
        return SRH_FIXED_LEN + 16 * len(self.segments) + len(self.tlvs)

    @property
    def hdr_ext_len(self) -> int:
        """The Hdr Ext Len field: length in 8-octet units, not counting the first 8."""
        return (self.length - SRH_FIXED_LEN) // 8

    @property
    def active_segment(self) -> bytes | None:
        """The segment the packet is travelling to now (segment list[segments left]);
        None while a reduced SRH's first segment, in the destination only, is active."""
        if self.segments_left >= len(self.segments):
            return None
        return self.segments[self.segments_left]

    @property
    def final_segment(self) -> bytes:
        """The last segment of the path (segment list[0]): the upper-layer destination."""
        return self.segments[0]

    def pack(self) -> bytes:
        """Serialize, with TLVs appended as given (their total must keep 8-octet alignment)."""
        if not self.segments:
            raise ValueError("an SRH needs at least one segment")
        if len(self.segments) > 127:
            raise ValueError("an SRH holds at most 127 segments (hdr ext len is 8 bits)")
        if len(self.tlvs) % 8:
            raise ValueError("SRH TLVs must pad the header to a multiple of 8 octets")
        if not 0 <= self.segments_left <= self.last_entry + 1:
            raise ValueError(
                f"segments_left={self.segments_left} outside 0..{self.last_entry + 1}"
            )
        check_range("next_header", self.next_header, 8)
        check_range("flags", self.flags, 8)
        check_range("tag", self.tag, 16)
        check_range("hdr_ext_len", self.hdr_ext_len, 8)
        head = _S.pack(
            self.next_header,
            self.hdr_ext_len,
            SRH_ROUTING_TYPE,
            self.segments_left,
            self.last_entry,
            self.flags,
            self.tag,
        )
        return head + b"".join(addr16("segment", s) for s in self.segments) + self.tlvs

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> SRH:
        """Parse at ``offset``. Rejects any inconsistency with ``MalformedFrame(BAD_SRH)``."""
        need(buf, offset, SRH_FIXED_LEN, "SRH")
        nh, hel, rtype, sl, last, flags, tag = _S.unpack_from(buf, offset)
        if rtype != SRH_ROUTING_TYPE:
            raise MalformedFrame(MalformedReason.BAD_SRH, f"routing type {rtype}, want 4")
        total = SRH_FIXED_LEN + 8 * hel
        seg_bytes = 16 * (last + 1)
        if seg_bytes > 8 * hel:
            raise MalformedFrame(
                MalformedReason.BAD_SRH,
                f"last entry {last} needs {seg_bytes} bytes, hdr ext len gives {8 * hel}",
            )
        if sl > last + 1:  # (last + 1: a reduced SRH, RFC 8754 4.3.1.1)
            raise MalformedFrame(
                MalformedReason.BAD_SRH, f"segments left {sl} beyond last entry {last} + 1"
            )
        need(buf, offset, total, "SRH segment list")
        base = offset + SRH_FIXED_LEN
        segs = tuple(bytes(buf[base + 16 * i : base + 16 * i + 16]) for i in range(last + 1))
        tlvs = bytes(buf[base + seg_bytes : offset + total])
        _check_tlvs(tlvs)
        return cls(
            next_header=nh, segments=segs, segments_left=sl, flags=flags, tag=tag, tlvs=tlvs
        )


def _check_tlvs(tlvs: bytes) -> None:
    """Walk the TLV area; every TLV must fit exactly (contents are skipped, not trusted)."""
    i = 0
    while i < len(tlvs):
        if tlvs[i] == SRH_TLV_PAD1:
            i += 1
            continue
        if i + 2 > len(tlvs) or i + 2 + tlvs[i + 1] > len(tlvs):
            raise MalformedFrame(MalformedReason.BAD_SRH, f"SRH TLV at {i} overruns the header")
        i += 2 + tlvs[i + 1]
