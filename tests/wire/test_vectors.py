"""The hand-written MRC 1.0 vectors and the independent minimal decoder agree, and both
agree with bytes written out by hand from PROTOCOL-NOTES section 8.

The vectors (tests/wire/vectors/mrc10.py) and the decoder (vectors/minidecode.py) read
the same tables, so agreeing with each other proves little on its own: the byte strings
below were computed by hand from the tables, field by field, as a third reading.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from vectors import minidecode, mrc10

VECTORS = mrc10.all_vectors()
BY_NAME = {v.name: v for v in VECTORS}
# Where the BTH starts: Ethernet 14 + IPv6 40 + UDP 8; + outer IPv6 40; + SRH 8 + 16.
BTH_AT = {"ipv6": 62, "usid": 102, "usid-srh": 126}


def test_every_kind_is_there() -> None:
    opcodes = {v.expected["bth"]["opcode"] for v in VECTORS}
    assert opcodes == {0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xCB, 0xD1, 0xD8, 0xD9, 0xDC, 0xDD,
                       0xDE}
    for op in mrc10.DATA_OPCODES:
        ts = {v.expected["bth"]["ts"] for v in VECTORS
              if v.expected["bth"]["opcode"] == op and not v.trimmed}
        assert ts == {0, 1}, hex(op)
    reasons = {v.expected["neth"]["reason"] for v in VECTORS if "neth" in v.expected}
    assert reasons == set(mrc10.NACK_REASONS.values())
    assert {v.expected["seth"]["pr"] for v in VECTORS if "seth" in v.expected} == {0, 1}
    assert {v.expected["erth"]["op"] for v in VECTORS if "erth" in v.expected} == {0, 1}
    assert {v.wrapping for v in VECTORS} == set(mrc10.WRAPPINGS)
    assert {v.icrc for v in VECTORS} == {"rocev2", "zero"}
    assert len(BY_NAME) == len(VECTORS)


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: v.name)
def test_minidecode_reads_every_vector(v: mrc10.Vector) -> None:
    assert minidecode.decode(v.frame) == v.expected


@pytest.mark.parametrize("name,frame", mrc10.malformed_frames(), ids=lambda x: str(x)[:40])
def test_minidecode_rejects_frames_cut_inside_headers(name: str, frame: bytes) -> None:
    with pytest.raises(minidecode.MiniDecodeError, match="frame ends inside"):
        minidecode.decode(frame)


def test_minidecode_rejects_what_is_not_mrc() -> None:
    frame = bytearray(BY_NAME["ack-ipv6"].frame)
    frame[62] = 0x0A  # an RC RDMA WRITE_ONLY: RoCEv2, not MRC
    with pytest.raises(minidecode.MiniDecodeError, match="not MRC"):
        minidecode.decode(bytes(frame))
    frame = bytearray(BY_NAME["ack-ipv6"].frame)
    frame[56:58] = struct.pack(">H", 4792)  # UDP destination port
    with pytest.raises(minidecode.MiniDecodeError, match="4792"):
        minidecode.decode(bytes(frame))
    with pytest.raises(minidecode.MiniDecodeError, match="IPv6"):
        minidecode.decode(b"\x00" * 12 + b"\x08\x00" + b"\x45" + b"\x00" * 40)


def test_ev_split_and_its_other_order() -> None:
    v = BY_NAME["write-only-imm-edge-usid"]
    f = v.frame
    assert f[14:18] == bytes.fromhex("6120dead")  # outer: version 6, tc 0x12, label 0xDEAD
    assert f[54:58] == bytes.fromhex("6120dead")  # inner, the same label
    assert f[94:96] == bytes.fromhex("beef")  # UDP source port: the EV's low 16 bits
    assert f[96:98] == struct.pack(">H", 4791)
    assert minidecode.decode(f)["ev"] == 0xDEADBEEF
    assert minidecode.decode(f, ev_sport_high=True)["ev"] == 0xBEEFDEAD


# --- bytes written out by hand from the tables ------------------------------------------


def _mrc(name: str, start: int, hexstr: str) -> None:
    v = BY_NAME[name]
    at = BTH_AT[v.wrapping] + start
    want = bytes.fromhex(hexstr.replace(" ", ""))
    assert v.frame[at : at + len(want)] == want, name


def test_bth_bits_by_hand() -> None:
    # C7 · M (bit 6) · P_Key FFFF · res · QP 000123 · A 0x80 + RTX 0x20 · PSN 000101
    _mrc("write-middle-ipv6", 0, "c7 40 ffff 00 000123 a0 000101")
    # CB · SE/M 0 · P_Key 8001 · res · QP FFFFFE · R 0x40 + TS 0x10 · PSN FFFFFF
    _mrc("write-only-imm-edge-usid", 0, "cb 00 8001 00 fffffe 50 ffffff")
    # SE is bit 7 of byte 1 (IBTA order)
    _mrc("write-last-imm-ipv6", 0, "c9 80 ffff 00 000123 00 000103")


def test_data_headers_by_hand() -> None:
    # METH FFFF 0000 · TSETH FFFF, TSR bit 15 + format 1 · RETH VA 7F001333F000, rkey BEEF,
    # DMA length FFFFFFFF · ImmDt 5EED|PSN low 16
    _mrc("write-only-imm-edge-usid", 12,
         "ffff 0000  ffff 8001  00007f001333f000 0000beef ffffffff  5eedffff")
    # no TSETH when TS is clear: METH then RETH straight away
    _mrc("write-first-ipv6", 12, "0003 0002  00007f0012440000 0000beef 00000040")
    v = BY_NAME["write-first-ipv6"]
    assert len(v.frame) == 62 + 12 + 4 + 16 + 64 + 4


def test_control_headers_by_hand() -> None:
    _mrc("ack-ipv6", 0, "d1 00 ffff 00 000123 00 ffffff  1f abcdef")
    # SETH: res · M=1 at bits 6-5 · ack_psn_offset -3 · entropy · SPDCID · DPDCID · res ·
    # CACK FFFFFF · CC type F / flags A · MPR 255 · sack_offset -2 · bitmap bits 63 and 0;
    # CC_STATE: timestamp FFFF · ooo 7FFF · restore_cwnd + penalty 127 · rcvd FFFFFF
    _mrc("sack-usid", 12, "00 20 fffd deadbeef 0011 0022 00 ffffff fa ff fffe "
         "8000000000000001  ffff 7fff ff ffffff")
    # PR is bit 1 of byte 1, M=2 at bits 6-5: 0x40 | 0x02
    _mrc("sack-pr-usid-srh", 12, "00 42 7fff")
    # NETH: res res · reason 01 · vendor 00 · entropy · SPDCID 0100 · DPDCID 0200 · res ·
    # NACK PSN FFFFFF · CC type 2 / flags 0 · res · timestamp FFFF
    _mrc("nack-trimmed-ipv6", 12, "0000 01 00 80040000 0100 0200 00 ffffff 20 00 ffff")
    _mrc("nack-unexp-event-ipv6", 12, "0000 19 66")
    # PETH: res · vendor AB · probe id FFFF · res · SPDCID · DPDCID · timestamp 8000 ·
    # TSR + format 1
    _mrc("probe-usid", 12, "000000ab ffff 0000 0011 0022 8000 8001")
    # ERTH on QP 2, request id in the PSN: op 0 · vendor 0 · mask FFFFFFFF · res ·
    # timestamp 0102 · format 1
    _mrc("erth-port-status-ipv6", 0, "d8 00 ffff 00 000002 00 00beef")
    _mrc("erth-port-status-ipv6", 12, "0000 0000 ffffffff 00000000 0102 0001")
    _mrc("erth-ev-probe-usid-srh", 12, "0001 007f 00000005 00000000 ffff 8001")
    # EETH (36): op at bits 5-4 of byte 1, timestamp at 28
    _mrc("eeth-ev-probe-usid", 12, "0010" + "00" * 26 + "ffff 0000 0000")


# --- the wrappings, checksums, trims and the pcap -------------------------------------------


def _ones_sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f">{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


@pytest.mark.parametrize("v", [v for v in VECTORS if not v.trimmed or "fixed" in v.name],
                         ids=lambda v: v.name)
def test_udp_checksum_verifies(v: mrc10.Vector) -> None:
    udp, _ = minidecode.find_udp(v.frame)
    inner = udp - 40
    src, dst = v.frame[inner + 8 : inner + 24], v.frame[inner + 24 : inner + 40]
    datagram = v.frame[udp:]
    pseudo = src + dst + struct.pack(">II", len(datagram), 17)
    assert _ones_sum(pseudo + datagram) == 0xFFFF


def test_srv6_wrappings() -> None:
    f = BY_NAME["write-first-ts-usid"].frame
    assert f[20] == 41 and f[60] == 17  # outer -> IPv6, inner -> UDP
    assert f[38:54] == bytes.fromhex("fc000001100120024002000000000000")
    f = BY_NAME["write-middle-ts-usid-srh"].frame
    # outer -> routing; SRH: next IPv6 (41 = 0x29), length 2, type 4, segments left 1, last entry 0
    assert f[20] == 43 and f[54:59] == bytes.fromhex("2902040100")
    assert f[62:78] == bytes.fromhex("fc000001100320044002000000000000")
    assert f[78] >> 4 == 6 and f[84] == 17


def test_icrc_kinds() -> None:
    zero = BY_NAME["write-only-ts-usid"]
    assert zero.icrc == "zero" and zero.frame[-4:] == b"\x00" * 4
    crc = BY_NAME["write-first-ipv6"]
    covered = crc.frame[54:-4]  # UDP onwards: no inner IPv6 header in plain IPv6 mode
    assert crc.frame[-4:] == mrc10.icrc_rocev2(covered, has_ip=False)
    # the variant fields do not change it: flow label, hop limit, UDP checksum
    other = bytearray(BY_NAME["write-first-ts-usid"].frame)
    before = mrc10.icrc_rocev2(bytes(other[54:-4]))
    other[55:58] = b"\x00\x00\x00"
    other[61] = 1
    other[100:102] = b"\x12\x34"
    assert mrc10.icrc_rocev2(bytes(other[54:-4])) == before == other[-4:]


def test_trimmed_frames_keep_only_their_headers() -> None:
    v = BY_NAME["trimmed-write-first-ipv6"]
    assert len(v.frame) == 62 + 12 + 4 + 16  # cut right after its RETH
    assert struct.unpack_from(">H", v.frame, 58)[0] == 8 + 32 + 256 + 4  # UDP length as sent
    v = BY_NAME["trimmed-fixed-lengths-write-last-usid"]
    assert len(v.frame) == 102 + 32 and struct.unpack_from(">H", v.frame, 98)[0] == 40
    assert all(x.expected["payload_len"] == 0 and "icrc" not in x.expected
               for x in VECTORS if x.trimmed)


def test_flatten_and_decode_json_form() -> None:
    v = BY_NAME["write-only-imm-edge-usid"]
    flat = mrc10.flatten(v.expected)
    assert flat["bth.psn"] == 0xFFFFFF and flat["immdt"] == 0x5EEDFFFF
    assert flat["tseth.tsr"] == 1 and flat["trimmed"] == 0
    j = mrc10.decode_json_form(v.expected)
    assert j["opcode"] == 0xCB and j["ev"] == 0xDEADBEEF and j["trimmed"] is False
    assert j["reth"]["dma_len"] == 0xFFFFFFFF and "bth" not in j and "icrc" not in j
    assert mrc10.decode_json_form(BY_NAME["ack-ipv6"].expected)["payload_len"] == 0


def test_write_pcap(tmp_path: Path) -> None:
    path = tmp_path / "v.pcap"
    vs = mrc10.write_vectors_pcap(path)
    raw = path.read_bytes()
    magic, major, minor, _, _, _, link = struct.unpack_from("<IHHiIII", raw, 0)
    assert (magic, major, minor, link) == (0xA1B2C3D4, 2, 4, 1)
    off, frames = 24, []
    while off < len(raw):
        _, _, incl, orig = struct.unpack_from("<IIII", raw, off)
        frames.append(raw[off + 16 : off + 16 + incl])
        assert incl == orig
        off += 16 + incl
    assert frames == [v.frame for v in vs]
