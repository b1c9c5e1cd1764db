"""Capture files of Ethernet frames: classic pcap (read and write) and pcapng (read).

Classic pcap: a 24-byte global header then one 16-byte record header + frame per packet::

    global: magic(32) version major(16) minor(16) thiszone(s32) sigfigs(32) snaplen(32)
            linktype(32)
    record: ts_sec(32) ts_frac(32) incl_len(32) orig_len(32) frame[incl_len]

The writer always writes microsecond little-endian files (magic 0xA1B2C3D4 written
little-endian), what tcpdump writes on this machine class and every tool reads. The
reader also accepts big-endian files and nanosecond timestamps (magic 0xA1B23C4D), so it
can read captures from elsewhere.

pcapng (what dumpcap, tshark and Wireshark write by default) is read by the same
:func:`read_pcap`, which looks at the first four bytes. A pcapng file is a sequence of
blocks ``type(32) total_length(32) body total_length(32)``, each section starting with a
Section Header Block whose byte-order magic (0x1A2B3C4D) fixes the endianness of the
section. The reader uses Interface Description Blocks (link type, and the
``if_tsresol`` option: the timestamp unit) and the packets of Enhanced Packet Blocks,
Simple Packet Blocks and the obsolete Packet Blocks; every other block (name
resolution, statistics, custom, ...) is skipped. Packets of an interface that is not
Ethernet are refused, as in classic files.
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
PCAPNG_BYTE_ORDER = 0x1A2B3C4D
PCAPNG_IDB, PCAPNG_PB, PCAPNG_SPB, PCAPNG_EPB = 1, 2, 3, 6
PCAPNG_OPT_END, PCAPNG_OPT_TSRESOL = 0, 9
PCAPNG_MAX_BLOCK = 64 << 20  # a sanity bound: no packet block of a capture is larger
PCAP_VERSION = (2, 4)
DEFAULT_SNAPLEN = 262144  # tcpdump's default; MRC frames are at most a jumbo MTU

_GLOBAL = struct.Struct("<IHHiIII")
_RECORD_LEN = 16


class PcapError(MrcError, ValueError):
    """A file that is not a pcap or pcapng of Ethernet frames, or is cut short."""


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
    """Yield every record of a classic pcap or a pcapng file of Ethernet frames.

    The format is recognised from the first bytes, so a pipe works too. Raises
    :class:`PcapError` (neither format, another link type, a record or block cut short)
    and ``OSError`` (missing or unreadable file). A path is opened lazily, on first
    ``next``.
    """
    if isinstance(src, str | Path):
        with open(src, "rb") as fh:
            yield from read_pcap(fh)
        return
    head = src.read(4)
    name = getattr(src, "name", "input")
    if len(head) < 4:
        raise PcapError(f"{name}: empty or too short to be a pcap file ({len(head)} bytes)")
    if struct.unpack("<I", head)[0] == PCAPNG_MAGIC:
        yield from _read_pcapng(src, name)
        return
    head += src.read(_GLOBAL.size - 4)
    endian = ""
    for order in "<>":
        magic = struct.unpack(order + "I", head[:4])[0]
        if magic in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
            endian = order
            break
    if not endian:
        raise PcapError(f"{name}: not a pcap or pcapng file (magic {head[:4].hex()})")
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


@dataclass(slots=True)
class _Interface:
    linktype: int
    snaplen: int
    tick: float  #: seconds per timestamp unit (if_tsresol; default microseconds)


def _tsresol(value: int) -> float:
    """if_tsresol: high bit clear = 10^-v seconds, set = 2^-(v & 0x7f) seconds."""
    return 2.0 ** -(value & 0x7F) if value & 0x80 else 10.0 ** -value


def _options(body: bytes, endian: str) -> Iterator[tuple[int, bytes]]:
    """(code, value) of a pcapng option list, up to opt_endofopt."""
    pos = 0
    while pos + 4 <= len(body):
        code, length = struct.unpack_from(endian + "HH", body, pos)
        if code == PCAPNG_OPT_END:
            return
        yield code, body[pos + 4:pos + 4 + length]
        pos += 4 + ((length + 3) & ~3)


def _read_pcapng(src: BinaryIO, name: str) -> Iterator[PcapRecord]:
    """The packets of a pcapng stream whose first 4 bytes (the SHB type) were consumed."""
    endian = "<"
    interfaces: list[_Interface] = []
    block_type: int | None = PCAPNG_MAGIC
    index = 0  # packets yielded, for error messages
    while True:
        if block_type is None:
            raw = src.read(4)
            if not raw:
                return
            if len(raw) < 4:
                raise PcapError(f"{name}: pcapng block header cut short")
            if struct.unpack("<I", raw)[0] == PCAPNG_MAGIC:
                block_type = PCAPNG_MAGIC  # a new section: endianness read below
            else:
                block_type = struct.unpack(endian + "I", raw)[0]
        if block_type == PCAPNG_MAGIC:
            pre = src.read(8)  # total length, byte-order magic
            if len(pre) < 8:
                raise PcapError(f"{name}: pcapng section header cut short")
            for order in "<>":
                if struct.unpack(order + "I", pre[4:])[0] == PCAPNG_BYTE_ORDER:
                    endian = order
                    break
            else:
                raise PcapError(f"{name}: pcapng byte-order magic {pre[4:].hex()} unknown")
            total = struct.unpack(endian + "I", pre[:4])[0]
            body = _block_body(src, name, total, 12, endian)
            major = struct.unpack_from(endian + "H", body, 0)[0] if len(body) >= 2 else 0
            if major != 1:
                raise PcapError(f"{name}: pcapng version {major} not supported (want 1)")
            interfaces = []  # interface ids are per section
            block_type = None
            continue
        raw = src.read(4)
        if len(raw) < 4:
            raise PcapError(f"{name}: pcapng block of type {block_type:#x} cut short")
        total = struct.unpack(endian + "I", raw)[0]
        body = _block_body(src, name, total, 8, endian)
        kind, block_type = block_type, None
        if kind == PCAPNG_IDB:
            if len(body) < 8:
                raise PcapError(f"{name}: pcapng interface description cut short")
            linktype, _reserved, snaplen = struct.unpack_from(endian + "HHI", body, 0)
            tick = 1e-6
            for code, value in _options(body[8:], endian):
                if code == PCAPNG_OPT_TSRESOL and value:
                    tick = _tsresol(value[0])
            interfaces.append(_Interface(linktype, snaplen, tick))
            continue
        if kind == PCAPNG_EPB:
            if len(body) < 20:
                raise PcapError(f"{name}: pcapng packet block {index} cut short")
            iface, ts_hi, ts_lo, caplen, orig = struct.unpack_from(endian + "IIIII", body, 0)
            data, ts = body[20:20 + caplen], (ts_hi << 32) | ts_lo
        elif kind == PCAPNG_PB:
            if len(body) < 20:
                raise PcapError(f"{name}: pcapng packet block {index} cut short")
            iface, _drops, ts_hi, ts_lo, caplen, orig = struct.unpack_from(
                endian + "HHIIII", body, 0)
            data, ts = body[20:20 + caplen], (ts_hi << 32) | ts_lo
        elif kind == PCAPNG_SPB:
            if len(body) < 4:
                raise PcapError(f"{name}: pcapng packet block {index} cut short")
            iface, ts, orig = 0, 0, struct.unpack_from(endian + "I", body, 0)[0]
            caplen = orig
            if interfaces and interfaces[0].snaplen:
                caplen = min(orig, interfaces[0].snaplen)
            data = body[4:4 + caplen]
        else:
            continue  # name resolution, statistics, custom blocks: not packets
        if iface >= len(interfaces):
            raise PcapError(f"{name}: packet {index} names interface {iface}, which the "
                            "section does not describe")
        itf = interfaces[iface]
        if itf.linktype != LINKTYPE_ETHERNET:
            raise PcapError(f"{name}: interface {iface} has link type {itf.linktype}, only "
                            "Ethernet (1) is supported")
        if len(data) < caplen:
            raise PcapError(f"{name}: packet {index} needs {caplen} bytes, block has "
                            f"{len(data)}")
        yield PcapRecord(ts * itf.tick, data, orig)
        index += 1


def _block_body(src: BinaryIO, name: str, total: int, consumed: int, endian: str) -> bytes:
    """Read the rest of a block of ``total`` bytes (``consumed`` already read): its body
    without the trailing length, which must repeat the leading one."""
    if total < consumed + 4 or total % 4 or total > PCAPNG_MAX_BLOCK:
        raise PcapError(f"{name}: pcapng block length {total} is not valid")
    rest = src.read(total - consumed)
    if len(rest) < total - consumed:
        raise PcapError(f"{name}: pcapng block cut short ({len(rest)} of "
                        f"{total - consumed} bytes)")
    if struct.unpack(endian + "I", rest[-4:])[0] != total:
        raise PcapError(f"{name}: pcapng block lengths disagree (corrupt file)")
    return rest[:-4]
