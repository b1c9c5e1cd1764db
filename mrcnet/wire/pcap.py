"""Classic pcap files (LINKTYPE_ETHERNET), standard library only.

A file is a 24-byte global header then one 16-byte record header + frame per packet::

    global: magic(32) version major(16) minor(16) thiszone(s32) sigfigs(32) snaplen(32)
            linktype(32)
    record: ts_sec(32) ts_frac(32) incl_len(32) orig_len(32) frame[incl_len]

The writer always writes microsecond little-endian files (magic 0xA1B2C3D4 written
little-endian), what tcpdump writes on this machine class and every tool reads. The
reader also accepts big-endian files and nanosecond timestamps (magic 0xA1B23C4D), so it
can read captures from elsewhere. pcapng is not supported: convert with
``editcap -F pcap in.pcapng out.pcap``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from mrcnet.errors import MrcError

LINKTYPE_ETHERNET = 1
PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
PCAPNG_MAGIC = 0x0A0D0D0A  # section header block type: a pcapng file, not pcap
PCAP_VERSION = (2, 4)
DEFAULT_SNAPLEN = 262144  # tcpdump's default; MRC frames are at most a jumbo MTU

_GLOBAL = struct.Struct("<IHHiIII")
_RECORD_LEN = 16


class PcapError(MrcError, ValueError):
    """A file that is not a classic pcap of Ethernet frames, or is cut short."""


@dataclass(frozen=True, slots=True)
class PcapRecord:
    """One captured frame: time (seconds since the epoch), bytes, length on the wire.

    ``orig_len`` can exceed ``len(data)`` when the capture kept only a snap length.
    """

    timestamp: float
    data: bytes
    orig_len: int

    @property
    def truncated_by_capture(self) -> bool:
        """True when the capturing tool kept fewer bytes than were on the wire."""
        return self.orig_len > len(self.data)


def write_pcap(
    dest: str | Path | BinaryIO,
    frames: Iterable[bytes | PcapRecord],
    *,
    start: float = 0.0,
    interval: float = 1e-6,
    snaplen: int = DEFAULT_SNAPLEN,
) -> int:
    """Write Ethernet frames as a classic pcap; returns the number of frames written.

    Plain ``bytes`` get timestamps ``start + i * interval`` (deterministic by default, so
    the same frames give the same file); :class:`PcapRecord` items keep their own.
    """
    if isinstance(dest, str | Path):
        with open(dest, "wb") as fh:
            return write_pcap(fh, frames, start=start, interval=interval, snaplen=snaplen)
    dest.write(_GLOBAL.pack(PCAP_MAGIC_US, *PCAP_VERSION, 0, 0, snaplen, LINKTYPE_ETHERNET))
    n = 0
    for i, item in enumerate(frames):
        if isinstance(item, PcapRecord):
            ts, data, orig = item.timestamp, item.data, item.orig_len
        else:
            ts, data, orig = start + i * interval, bytes(item), len(item)
        if len(data) > snaplen:
            raise ValueError(f"frame {i} has {len(data)} bytes, more than snaplen {snaplen}")
        # Round to whole microseconds once, so 0.9999999 s does not become usec 1000000.
        usec_total = round(ts * 1_000_000)
        sec, usec = divmod(usec_total, 1_000_000)
        dest.write(struct.pack("<IIII", sec, usec, len(data), max(orig, len(data))))
        dest.write(data)
        n += 1
    return n


def read_pcap(src: str | Path | BinaryIO) -> Iterator[PcapRecord]:
    """Yield every record of a classic pcap of Ethernet frames.

    Raises :class:`PcapError` (not a pcap, pcapng, another link type, a record cut short)
    and ``OSError`` (missing or unreadable file). A path is opened lazily, on first ``next``.
    """
    if isinstance(src, str | Path):
        with open(src, "rb") as fh:
            yield from read_pcap(fh)
        return
    head = src.read(_GLOBAL.size)
    name = getattr(src, "name", "input")
    if len(head) < 4:
        raise PcapError(f"{name}: empty or too short to be a pcap file ({len(head)} bytes)")
    magic_le = struct.unpack("<I", head[:4])[0]
    if magic_le == PCAPNG_MAGIC:
        raise PcapError(
            f"{name}: is pcapng, not classic pcap; convert it with "
            "'editcap -F pcap IN OUT' (or capture with 'tcpdump -w')"
        )
    endian = ""
    for order in "<>":
        magic = struct.unpack(order + "I", head[:4])[0]
        if magic in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
            endian = order
            break
    if not endian:
        raise PcapError(f"{name}: not a pcap file (magic {head[:4].hex()})")
    if len(head) < _GLOBAL.size:
        raise PcapError(f"{name}: pcap global header cut short ({len(head)} bytes)")
    frac = 1e-9 if magic == PCAP_MAGIC_NS else 1e-6
    _, major, _minor, _zone, _sigfigs, _snaplen, linktype = struct.unpack(
        endian + "IHHiIII", head
    )
    if major != PCAP_VERSION[0]:
        raise PcapError(f"{name}: pcap version {major} not supported (want 2)")
    if linktype != LINKTYPE_ETHERNET:
        raise PcapError(f"{name}: link type {linktype}, only Ethernet (1) is supported")
    rec = struct.Struct(endian + "IIII")
    index = 0
    while True:
        rh = src.read(_RECORD_LEN)
        if not rh:
            return
        if len(rh) < _RECORD_LEN:
            raise PcapError(f"{name}: record {index} header cut short")
        sec, sub, incl, orig = rec.unpack(rh)
        data = src.read(incl)
        if len(data) < incl:
            raise PcapError(f"{name}: record {index} needs {incl} bytes, file has {len(data)}")
        yield PcapRecord(sec + sub * frac, data, orig)
        index += 1
