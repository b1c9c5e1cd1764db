"""read_pcap reads pcapng as well as classic pcap (what dumpcap/tshark/Wireshark write).

The pcapng files here are built block by block in the test (both byte orders, several
sections and interfaces, timestamp resolutions, blocks that carry no packets), and, when
editcap is installed, converted from a classic pcap by Wireshark's own tool.
"""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from mrcnet.wire.pcap import PcapError, PcapRecord, read_pcap, write_pcap

FRAMES = [bytes([i]) * (60 + i) for i in range(5)]


def _block(e: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    total = 12 + len(body)
    return struct.pack(e + "II", btype, total) + body + struct.pack(e + "I", total)


def _shb(e: str) -> bytes:
    return _block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def _idb(e: str, linktype: int = 1, tsresol: int | None = None) -> bytes:
    opts = b""
    if tsresol is not None:
        opts = struct.pack(e + "HH", 9, 1) + bytes([tsresol]) + b"\0\0\0"
        opts += struct.pack(e + "HH", 0, 0)
    return _block(e, 1, struct.pack(e + "HHI", linktype, 0, 0) + opts)


def _epb(e: str, iface: int, ts: int, data: bytes, orig: int | None = None) -> bytes:
    head = struct.pack(e + "IIIII", iface, ts >> 32, ts & 0xFFFFFFFF, len(data),
                       len(data) if orig is None else orig)
    return _block(e, 6, head + data)


@pytest.mark.parametrize("e", ["<", ">"], ids=["little-endian", "big-endian"])
def test_pcapng_blocks_sections_and_resolutions(e: str) -> None:
    nsb = _block(e, 4, b"\0" * 8)  # name resolution: skipped
    isb = _block(e, 5, b"\0" * 12)  # interface statistics: skipped
    data = (
        _shb(e) + _idb(e) + _idb(e, tsresol=9) + nsb
        + _epb(e, 0, 1_500_000, FRAMES[0])                 # us: 1.5 s
        + _epb(e, 1, 2_250_000_000, FRAMES[1], orig=9000)  # ns: 2.25 s, snapped
        + isb
        + _shb(">" if e == "<" else "<")  # a new section, the other byte order
    )
    e2 = ">" if e == "<" else "<"
    spb = _block(e2, 3, struct.pack(e2 + "I", len(FRAMES[3])) + FRAMES[3])  # simple packet
    data += _idb(e2, tsresol=0x80 | 10) + _epb(e2, 0, 3 * 1024, FRAMES[2]) + spb
    got = list(read_pcap(io.BytesIO(data)))
    assert [r.data for r in got] == FRAMES[:4]
    assert got[0].timestamp == pytest.approx(1.5)
    assert got[1].timestamp == pytest.approx(2.25) and got[1].orig_len == 9000
    assert got[1].truncated_by_capture
    assert got[2].timestamp == pytest.approx(3.0)  # 2^-10 s units


def test_pcapng_refusals() -> None:
    e = "<"
    with pytest.raises(PcapError, match="link type 101"):
        list(read_pcap(io.BytesIO(_shb(e) + _idb(e, linktype=101) + _epb(e, 0, 0, b"x" * 40))))
    with pytest.raises(PcapError, match="interface 1"):
        list(read_pcap(io.BytesIO(_shb(e) + _idb(e) + _epb(e, 1, 0, b"x" * 40))))
    whole = _shb(e) + _idb(e) + _epb(e, 0, 0, FRAMES[0])
    with pytest.raises(PcapError, match="cut short"):
        list(read_pcap(io.BytesIO(whole[:-6])))
    bad = bytearray(whole)
    bad[-1] ^= 0xFF  # trailing length disagrees with the leading one
    with pytest.raises(PcapError, match="disagree"):
        list(read_pcap(io.BytesIO(bytes(bad))))
    with pytest.raises(PcapError, match="not a pcap or pcapng"):
        list(read_pcap(io.BytesIO(b"hello world, not a capture")))


def test_classic_pcap_still_read(tmp_path: Path) -> None:
    path = tmp_path / "a.pcap"
    write_pcap(path, [PcapRecord(10.0 + i, f, len(f)) for i, f in enumerate(FRAMES)])
    got = list(read_pcap(path))
    assert [r.data for r in got] == FRAMES and got[4].timestamp == pytest.approx(14.0)


@pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap (Wireshark) not installed")
def test_editcap_pcapng_reads_like_the_pcap(tmp_path: Path) -> None:
    from mrcnet.wire.samples import samples

    src, dst = tmp_path / "s.pcap", tmp_path / "s.pcapng"
    write_pcap(src, [s.frame for s in samples()], start=1000.0, interval=0.001)
    r = subprocess.run(["editcap", "-F", "pcapng", str(src), str(dst)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert dst.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"
    a, b = list(read_pcap(src)), list(read_pcap(dst))
    assert [x.data for x in a] == [x.data for x in b]
    assert [x.timestamp for x in b] == pytest.approx([x.timestamp for x in a])
    # `decode` reads it as it reads the pcap.
    r = subprocess.run([sys.executable, "-m", "mrcnet.wire", "decode", str(dst)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == len(a), r.stderr
