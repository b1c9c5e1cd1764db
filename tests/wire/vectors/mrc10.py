"""MRC 1.0 frames built by hand from the public packet tables (PROTOCOL-NOTES section 8).

Every header is packed here with ``struct`` at the byte offsets the tables give, never with
mrcnet's builders, so a frame and its expected values are a reading independent of
mrcnet's codecs. Each :class:`Vector` holds a whole Ethernet frame and ``expected``: the
raw integer value of every field the frame carries, as a nested dict::

    {"bth": {"opcode", "se", "m", "pad", "tver", "pkey", "dqpn", "a", "r", "rtx", "ts",
             "psn"},
     "ev": int, "trimmed": 0 | 1,
     # data (0xC6-0xCB): "meth", ["tseth"], "reth", ["immdt"], "payload_len"
     # ACK 0xD1: "aeth"; SACK 0xDC: "seth", "cc_state"; NACK 0xDD: "neth";
     # probe 0xDE: "peth"; 0xD8: "erth"; 0xD9: "eeth"
     "icrc": int}                       # absent when the frame was trimmed

with the header keys of PROTOCOL-NOTES section 8 (``seth.cack_psn``, ``cc_state.
rcv_cwnd_pen``, ...). :func:`flatten` turns it into ``{"bth.opcode": ..., "immdt": ...}``,
the Wireshark dissector's field names without their ``mrc.`` prefix;
:func:`decode_json_form` into the shape of ``python -m mrcnet.wire decode --json``.

Frames come in three wrappings: ``ipv6`` (Ethernet / IPv6 / UDP 4791), ``usid`` (an outer
IPv6 whose destination is a uSID container fc00:1:..., then the inner IPv6, then UDP) and
``usid-srh`` (the same with MRC's one-segment SRH holding a second container). The EV
rides as the notes say by default: low 16 bits in the UDP source port, high 16 in the low
16 bits of the flow label of both IPv6 headers. Every UDP checksum is correct (over the
inner IPv6 pseudo-header); the ICRC is a RoCEv2-style invariant CRC over the inner IPv6
header onwards (:func:`icrc_rocev2`) or four zero bytes (:func:`icrc_zero`), per vector.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

UDP_PORT = 4791  # RoCEv2's port, shared by MRC
ETHERTYPE_IPV6 = 0x86DD
NH_ROUTING, NH_IPV6, NH_UDP = 43, 41, 17

# Opcodes (BTH byte 0)
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST = 0xC6, 0xC7, 0xC8
WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM = 0xC9, 0xCA, 0xCB
ACK, ENDPOINT_REQ, ENDPOINT_RESP = 0xD1, 0xD8, 0xD9
SACK, NACK, PROBE = 0xDC, 0xDD, 0xDE
DATA_OPCODES = (WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY,
                WRITE_ONLY_IMM)
IMM_OPCODES = (WRITE_LAST_IMM, WRITE_ONLY_IMM)
NACK_REASONS = {"TRIMMED": 0x01, "TRIMMED_LASTHOP": 0x02, "NO_BITMAP": 0x06,
                "NO_PKT_BUFFER": 0x07, "NO_RESOURCE": 0x0A, "PSN_OOR_WINDOW": 0x0B,
                "UNEXP_EVENT": 0x19}
ENDPOINT_QPN = 0x2  # endpoint operations are connectionless, on this reserved QP
OP_PORT_STATUS, OP_EV_PROBE = 0, 1  # ERTH/EETH op values of the code readings [L]

MAC_DST = bytes.fromhex("02000000000b")
MAC_SRC = bytes.fromhex("02000000000a")
SRC_IP = bytes.fromhex("fd000000000000000000000000000001")  # fd00::1
DST_IP = bytes.fromhex("fd000000000000000000000000000002")  # fd00::2
# uSID containers, F3216: block fc00:1 then 16-bit uSIDs (spine 1001, leaf 2002, host 4002)
USID_DA = bytes.fromhex("fc000001100120024002000000000000")  # fc00:1:1001:2002:4002::
USID_SRH_SEG = bytes.fromhex("fc000001100320044002000000000000")  # fc00:1:1003:2004:4002::
WRAPPINGS = ("ipv6", "usid", "usid-srh")

Fields = dict[str, int]


# --- MRC headers, byte for byte from the tables ------------------------------------------


def bth(f: Fields) -> bytes:
    """BTH (12): opcode @0 · SE bit7 M bit6 pad bits5-4 tver bits3-0 @1 · P_Key @2 · res @4
    · dest QP(24) @5 · A 0x80 R 0x40 RTX 0x20 TS 0x10 of @8 · PSN(24) @9."""
    b = bytearray(12)
    b[0] = f["opcode"]
    b[1] = f["se"] << 7 | f["m"] << 6 | f["pad"] << 4 | f["tver"]
    struct.pack_into(">H", b, 2, f["pkey"])
    b[5:8] = f["dqpn"].to_bytes(3, "big")
    b[8] = f["a"] << 7 | f["r"] << 6 | f["rtx"] << 5 | f["ts"] << 4
    b[9:12] = f["psn"].to_bytes(3, "big")
    return bytes(b)


def meth(f: Fields) -> bytes:
    """METH (4): RQMSN(16) @0 · MSN(16) @2."""
    return struct.pack(">HH", f["rqmsn"], f["msn"])


def tseth(f: Fields) -> bytes:
    """TSETH (4): timestamp(16) @0 · TSR bit 15 of @2 · res(11) · format type bits 3-0."""
    return struct.pack(">HH", f["timestamp"], f["tsr"] << 15 | f["ftype"])


def reth(f: Fields) -> bytes:
    """RETH (16): VA(64) @0 · rkey(32) @8 · DMA length(32) @12."""
    return struct.pack(">QII", f["va"], f["rkey"], f["dma_len"])


def aeth(f: Fields) -> bytes:
    """AETH (4): syndrome(8) @0 · MSN(24) @1."""
    return bytes([f["syndrome"]]) + f["msn"].to_bytes(3, "big")


def seth(f: Fields) -> bytes:
    """SETH (28): res @0 · M bits 6-5 of @1 · PR bit 1 of @1 · ack_psn_offset(s16) @2 ·
    entropy(32) @4 · SPDCID @8 · DPDCID @10 · res @12 · CACK PSN(24) @13 · CC type bits 7-4
    / CC flags bits 3-0 of @16 · MPR @17 · sack_offset(s16) @18 · SACK bitmap(64) @20."""
    b = bytearray(28)
    b[1] = f["m"] << 5 | f["pr"] << 1
    struct.pack_into(">hIHH", b, 2, f["ack_psn_offset"], f["entropy"], f["spdcid"],
                     f["dpdcid"])
    b[13:16] = f["cack_psn"].to_bytes(3, "big")
    b[16] = f["cc_type"] << 4 | f["cc_flags"]
    b[17] = f["mpr"]
    struct.pack_into(">hQ", b, 18, f["sack_offset"], f["sack_bitmap"])
    return bytes(b)


def cc_state(f: Fields) -> bytes:
    """CC_STATE (8): timestamp(16) @0 · res bit 15 / out-of-order count(15) @2 ·
    restore_cwnd bit 7 / window penalty bits 6-0 of @4 · received bytes(24, x256) @5."""
    b = bytearray(8)
    struct.pack_into(">HH", b, 0, f["timestamp"], f["ooo_count"])
    b[4] = f["restore_cwnd"] << 7 | f["rcv_cwnd_pen"]
    b[5:8] = f["rcvd_bytes"].to_bytes(3, "big")
    return bytes(b)


def neth(f: Fields) -> bytes:
    """NETH (20): res @0..1 · reason @2 · vendor @3 · entropy(32) @4 · SPDCID @8 · DPDCID
    @10 · res @12 · NACK PSN(24) @13 · CC type/flags @16 · res @17 · timestamp(16) @18."""
    b = bytearray(20)
    b[2], b[3] = f["reason"], f["vendor"]
    struct.pack_into(">IHH", b, 4, f["entropy"], f["spdcid"], f["dpdcid"])
    b[13:16] = f["nack_psn"].to_bytes(3, "big")
    b[16] = f["cc_type"] << 4 | f["cc_flags"]
    struct.pack_into(">H", b, 18, f["timestamp"])
    return bytes(b)


def peth(f: Fields) -> bytes:
    """PETH (16): res @0..2 · vendor @3 · probe id(16) @4 · res(16) @6 · SPDCID @8 ·
    DPDCID @10 · timestamp(16) @12 · TSR bit 15 / format type bits 3-0 of @14."""
    b = bytearray(16)
    b[3] = f["vendor"]
    struct.pack_into(">H", b, 4, f["probe_id"])
    struct.pack_into(">HHHH", b, 8, f["spdcid"], f["dpdcid"], f["timestamp"],
                     f["tsr"] << 15 | f["ftype"])
    return bytes(b)


def erth(f: Fields) -> bytes:
    """ERTH (16): op bits 1-0 of @1 · res @2 · vendor @3 · port status mask(32) @4 ·
    res(32) @8 · timestamp(16) @12 · TSR / format type @14."""
    b = bytearray(16)
    b[1] = f["op"]
    b[3] = f["vendor"]
    struct.pack_into(">I", b, 4, f["port_status_mask"])
    struct.pack_into(">HH", b, 12, f["timestamp"], f["tsr"] << 15 | f["ftype"])
    return bytes(b)


def eeth(f: Fields) -> bytes:
    """EETH (36): op bits 5-4 of @1 · timestamp(16) @28 · the rest reserved."""
    b = bytearray(36)
    b[1] = f["op"] << 4
    struct.pack_into(">H", b, 28, f["timestamp"])
    return bytes(b)


# --- the ICRC ------------------------------------------------------------------------------


def icrc_rocev2(covered: bytes, has_ip: bool = True) -> bytes:
    """A RoCEv2-style invariant CRC, stored little-endian.

    CRC-32 over eight 0xFF bytes, then ``covered`` (inner IPv6 header onwards when
    ``has_ip``, else UDP header onwards) with the variant fields set to ones: IPv6 traffic
    class, flow label and hop limit, the UDP checksum, the BTH reserved byte.
    """
    d = bytearray(covered)
    udp = 0
    if has_ip:
        d[0] |= 0x0F
        d[1:4] = b"\xff\xff\xff"
        d[7] = 0xFF
        udp = 40
    d[udp + 6 : udp + 8] = b"\xff\xff"
    d[udp + 8 + 4] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(d)).to_bytes(4, "little")


def icrc_zero(covered: bytes, has_ip: bool = True) -> bytes:
    """Four zero bytes: what a lenient decoder must accept in place of the ICRC."""
    return b"\x00" * 4


ICRC_KINDS: dict[str, Callable[[bytes, bool], bytes]] = {
    "rocev2": icrc_rocev2, "zero": icrc_zero}


# --- Ethernet / IPv6 / SRH / UDP -----------------------------------------------------------


def ipv6(plen: int, nh: int, src: bytes, dst: bytes, *, tc: int, flow: int) -> bytes:
    """IPv6 (40): version 6 · traffic class(8) · flow label(20) · payload length · next
    header · hop limit 64 · source · destination."""
    return struct.pack(">IHBB", 6 << 28 | tc << 20 | flow, plen, nh, 64) + src + dst


def srh_one_segment(nh: int, segment: bytes) -> bytes:
    """MRC's SRH (RFC 8754 type 4): one segment, a second uSID container; segments left 1
    (the outer destination holds the first container, as in a reduced SRH)."""
    return struct.pack(">BBBBBBH", nh, 2, 4, 1, 0, 0, 0) + segment


def udp_checksum(src: bytes, dst: bytes, udp: bytes) -> int:
    """RFC 8200 section 8.1: ones' complement sum over the pseudo-header and datagram."""
    data = src + dst + struct.pack(">II", len(udp), NH_UDP) + udp
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f">{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total & 0xFFFF) or 0xFFFF


def wrap(mrc: bytes, *, wrapping: str, ev: int, dscp: int, icrc: str,
         keep: int | None = None, fix_lengths: bool = False) -> bytes:
    """Ethernet frame carrying ``mrc`` (BTH onwards, no ICRC) to UDP 4791.

    The EV goes low 16 bits to the UDP source port and high 16 bits to the flow label of
    every IPv6 header. ``keep`` cuts the frame to that many bytes of ``mrc`` (a trim): the
    IP and UDP lengths still claim the whole datagram, as most switches leave them, unless
    ``fix_lengths`` (the switch rewrote them, and the UDP checksum, for what is left).
    """
    sport, flow = ev & 0xFFFF, ev >> 16
    tc = dscp << 2 | 0b10  # ECT(0)
    fixed = keep is not None and fix_lengths
    body = mrc[:keep] if fixed else mrc
    udp_len = 8 + len(body) + (0 if fixed else 4)
    udp0 = struct.pack(">HHHH", sport, UDP_PORT, udp_len, 0) + body
    inner = ipv6(udp_len, NH_UDP, SRC_IP, DST_IP, tc=tc, flow=flow)
    has_ip = wrapping != "ipv6"
    crc = b"" if fixed else ICRC_KINDS[icrc]((inner if has_ip else b"") + udp0, has_ip)
    udp = udp0 + crc
    csum = udp_checksum(SRC_IP, DST_IP, udp)
    udp = udp[:6] + struct.pack(">H", csum) + udp[8:]
    if wrapping == "ipv6":
        ip = inner
    elif wrapping == "usid":
        ip = ipv6(40 + udp_len, NH_IPV6, SRC_IP, USID_DA, tc=tc, flow=flow) + inner
    elif wrapping == "usid-srh":
        srh = srh_one_segment(NH_IPV6, USID_SRH_SEG)
        ip = (ipv6(len(srh) + 40 + udp_len, NH_ROUTING, SRC_IP, USID_DA, tc=tc, flow=flow)
              + srh + inner)
    else:
        raise ValueError(f"unknown wrapping {wrapping!r}")
    frame = MAC_DST + MAC_SRC + struct.pack(">H", ETHERTYPE_IPV6) + ip + udp
    if keep is not None and not fixed:
        frame = frame[: len(frame) - len(udp) + 8 + keep]
    return frame


# --- the vectors -----------------------------------------------------------------------


@dataclass(frozen=True)
class Vector:
    """One frame and the raw value of every MRC field it carries."""

    name: str
    frame: bytes
    expected: dict[str, Any]
    wrapping: str
    icrc: str = "rocev2"
    tags: tuple[str, ...] = field(default=())

    @property
    def trimmed(self) -> bool:
        return bool(self.expected["trimmed"])


def _bth(opcode: int, psn: int, *, dqpn: int = 0x000123, ts: int = 0, **kw: int) -> Fields:
    f = {"opcode": opcode, "se": 0, "m": 0, "pad": 0, "tver": 0, "pkey": 0xFFFF,
         "dqpn": dqpn, "a": 0, "r": 0, "rtx": 0, "ts": ts, "psn": psn}
    f.update(kw)
    return f


def _payload(n: int, seed: int) -> bytes:
    return bytes((seed + 7 * i) & 0xFF for i in range(n))


def data_vector(name: str, opcode: int, *, psn: int, ev: int, wrapping: str,
                with_ts: bool, payload: int = 64, icrc: str = "rocev2",
                keep_after_headers: int | None = None, bth_extra: Fields | None = None,
                msn: tuple[int, int] = (1, 1), dma_len: int | None = None,
                tseth_f: Fields | None = None, fix_lengths: bool = False) -> Vector:
    """A data packet: BTH · METH · [TSETH] · RETH · [ImmDt] · payload · ICRC.

    ``keep_after_headers`` trims it: only that many payload bytes survive, and the ICRC
    is gone (0 = a trim that keeps only the headers).
    """
    b = _bth(opcode, psn, ts=int(with_ts), **(bth_extra or {}))
    exp: dict[str, Any] = {"bth": b, "ev": ev}
    m = {"rqmsn": msn[0], "msn": msn[1]}
    exp["meth"] = m
    hdrs = bth(b) + meth(m)
    if with_ts:
        t = tseth_f or {"timestamp": (psn * 13) & 0xFFFF, "tsr": 0, "ftype": 1}
        exp["tseth"] = t
        hdrs += tseth(t)
    r = {"va": 0x00007F0012340000 + (psn & 0xFFF) * 4096, "rkey": 0x0000BEEF,
         "dma_len": payload if dma_len is None else dma_len}
    exp["reth"] = r
    hdrs += reth(r)
    if opcode in IMM_OPCODES:
        imm = 0x5EED0000 | (psn & 0xFFFF)
        exp["immdt"] = imm
        hdrs += struct.pack(">I", imm)
    body = hdrs + _payload(payload, psn)
    keep = None if keep_after_headers is None else len(hdrs) + keep_after_headers
    frame = wrap(body, wrapping=wrapping, ev=ev, dscp=4, icrc=icrc, keep=keep,
                 fix_lengths=fix_lengths)
    exp["payload_len"] = payload if keep is None else keep_after_headers
    exp["trimmed"] = int(keep is not None)
    if keep is None:
        exp["icrc"] = int.from_bytes(frame[-4:], "big")
    return Vector(name, frame, exp, wrapping, icrc)


def control_vector(name: str, b: Fields, headers: list[tuple[str, Fields]], *, ev: int,
                   wrapping: str, icrc: str = "rocev2") -> Vector:
    """A control packet: BTH then ``headers`` (name, fields), then the ICRC."""
    packers = {"aeth": aeth, "seth": seth, "cc_state": cc_state, "neth": neth,
               "peth": peth, "erth": erth, "eeth": eeth}
    body = bth(b) + b"".join(packers[h](f) for h, f in headers)
    frame = wrap(body, wrapping=wrapping, ev=ev, dscp=46, icrc=icrc)
    exp: dict[str, Any] = {"bth": b, "ev": ev, "trimmed": 0}
    exp.update(dict(headers))
    exp["icrc"] = int.from_bytes(frame[-4:], "big")
    return Vector(name, frame, exp, wrapping, icrc)


def _seth(**kw: int) -> Fields:
    f = {"m": 0, "pr": 0, "ack_psn_offset": 0, "entropy": 0x8001C003, "spdcid": 0x0011,
         "dpdcid": 0x0022, "cack_psn": 0x000400, "cc_type": 1, "cc_flags": 0, "mpr": 8,
         "sack_offset": 1, "sack_bitmap": 0}
    f.update(kw)
    return f


def _cc(**kw: int) -> Fields:
    f = {"timestamp": 0x1234, "ooo_count": 0, "restore_cwnd": 0, "rcv_cwnd_pen": 0,
         "rcvd_bytes": 0x000100}
    f.update(kw)
    return f


EV_EDGE = 0xDEADBEEF  # low 16 (0xBEEF) in the source port, high 16 (0xDEAD) in the label


def all_vectors() -> list[Vector]:
    """One frame of every kind, each with its expected fields (edge values included)."""
    v: list[Vector] = []
    names = {WRITE_FIRST: "write-first", WRITE_MIDDLE: "write-middle",
             WRITE_LAST: "write-last", WRITE_LAST_IMM: "write-last-imm",
             WRITE_ONLY: "write-only", WRITE_ONLY_IMM: "write-only-imm"}
    # The six data opcodes without TSETH, plain IPv6 ...
    for i, op in enumerate(DATA_OPCODES):
        extra: Fields = {"se": 1} if op in IMM_OPCODES else {}
        if op == WRITE_MIDDLE:
            extra = {"m": 1, "rtx": 1, "a": 1}
        v.append(data_vector(f"{names[op]}-ipv6", op, psn=0x000100 + i,
                             ev=0x80010000 | (0x2000 + i), wrapping="ipv6", with_ts=False,
                             bth_extra=extra, msn=(3, 2 + i)))
    # ... and with TSETH, over SRv6 (uSID container, and container + SRH in turn).
    for i, op in enumerate(DATA_OPCODES):
        wr = "usid" if i % 2 == 0 else "usid-srh"
        v.append(data_vector(f"{names[op]}-ts-{wr}", op, psn=0xFFFFFA + i,
                             ev=0x81020000 | (0x3000 + i), wrapping=wr, with_ts=True,
                             icrc="zero" if op == WRITE_ONLY else "rocev2",
                             payload=32 + 4 * i, msn=(0xFFFF, 0xFFFE)))
    # Edge values in a data packet: PSN 0xFFFFFF, EV 0xDEADBEEF, TSR set, R set.
    v.append(data_vector("write-only-imm-edge-usid", WRITE_ONLY_IMM, psn=0xFFFFFF,
                         ev=EV_EDGE, wrapping="usid", with_ts=True,
                         bth_extra={"r": 1, "pkey": 0x8001, "dqpn": 0xFFFFFE},
                         tseth_f={"timestamp": 0xFFFF, "tsr": 1, "ftype": 1},
                         dma_len=0xFFFFFFFF, msn=(0xFFFF, 0)))

    # ACK: a RoCE cumulative ACK, BTH.PSN the acknowledgement.
    v.append(control_vector("ack-ipv6", _bth(ACK, 0xFFFFFF),
                            [("aeth", {"syndrome": 0x1F, "msn": 0xABCDEF})],
                            ev=0x80020000 | 0x4001, wrapping="ipv6"))
    # SACK without and with PR, edge values in each.
    v.append(control_vector(
        "sack-usid", _bth(SACK, 0x000000),
        [("seth", _seth(m=1, ack_psn_offset=-3, sack_offset=-2,
                        sack_bitmap=0x8000000000000001, mpr=255, cack_psn=0xFFFFFF,
                        cc_type=0xF, cc_flags=0xA, entropy=EV_EDGE)),
         ("cc_state", _cc(rcv_cwnd_pen=127, rcvd_bytes=0xFFFFFF, ooo_count=0x7FFF,
                          restore_cwnd=1, timestamp=0xFFFF))],
        ev=EV_EDGE, wrapping="usid"))
    v.append(control_vector(
        "sack-pr-usid-srh", _bth(SACK, 0x000010),
        [("seth", _seth(m=2, pr=1, ack_psn_offset=0x7FFF, sack_offset=0x7FFF,
                        sack_bitmap=0x00000000FFFF0000, mpr=0)),
         ("cc_state", _cc(rcv_cwnd_pen=1))],
        ev=0x80030000 | 0x4F00, wrapping="usid-srh"))
    v.append(control_vector(
        "sack-ipv6", _bth(SACK, 0x123456),
        [("seth", _seth(ack_psn_offset=-32768, sack_offset=-32768, cc_type=1)),
         ("cc_state", _cc())],
        ev=0x80030000 | 0x5000, wrapping="ipv6", icrc="zero"))
    # NACK, one per reason.
    for i, (rname, reason) in enumerate(NACK_REASONS.items()):
        wr = WRAPPINGS[i % 3]
        n = {"reason": reason, "vendor": i * 0x11, "entropy": 0x80040000 | i,
             "spdcid": 0x0100 + i, "dpdcid": 0x0200 + i,
             "nack_psn": 0xFFFFFF if i == 0 else 0x000200 + i, "cc_type": 2,
             "cc_flags": i & 0xF, "timestamp": 0xFFFF - i}
        v.append(control_vector(f"nack-{rname.lower().replace('_', '-')}-{wr}",
                                _bth(NACK, 0x000300 + i), [("neth", n)],
                                ev=0x80040000 | (0x6000 + i), wrapping=wr))
    # Reliability probe (answered by a SACK with PR = 1).
    v.append(control_vector(
        "probe-usid", _bth(PROBE, 0x000020),
        [("peth", {"vendor": 0xAB, "probe_id": 0xFFFF, "spdcid": 0x0011, "dpdcid": 0x0022,
                   "timestamp": 0x8000, "tsr": 1, "ftype": 1})],
        ev=0x80050000 | 0x7000, wrapping="usid"))
    # Endpoint operations on QP 0x2, the request id in BTH.PSN.
    v.append(control_vector(
        "erth-port-status-ipv6", _bth(ENDPOINT_REQ, 0x00BEEF, dqpn=ENDPOINT_QPN),
        [("erth", {"op": OP_PORT_STATUS, "vendor": 0, "port_status_mask": 0xFFFFFFFF,
                   "timestamp": 0x0102, "tsr": 0, "ftype": 1})],
        ev=0x80060000 | 0x7100, wrapping="ipv6"))
    v.append(control_vector(
        "erth-ev-probe-usid-srh", _bth(ENDPOINT_REQ, 0x00FFFF, dqpn=ENDPOINT_QPN),
        [("erth", {"op": OP_EV_PROBE, "vendor": 0x7F, "port_status_mask": 0x00000005,
                   "timestamp": 0xFFFF, "tsr": 1, "ftype": 1})],
        ev=EV_EDGE, wrapping="usid-srh"))
    v.append(control_vector(
        "eeth-ev-probe-usid", _bth(ENDPOINT_RESP, 0x00FFFF, dqpn=ENDPOINT_QPN),
        [("eeth", {"op": OP_EV_PROBE, "timestamp": 0xFFFF})],
        ev=EV_EDGE, wrapping="usid"))
    v.append(control_vector(
        "eeth-port-status-ipv6", _bth(ENDPOINT_RESP, 0x000001, dqpn=ENDPOINT_QPN),
        [("eeth", {"op": OP_PORT_STATUS, "timestamp": 0x0001})],
        ev=0x80060000 | 0x7200, wrapping="ipv6"))
    v.extend(trimmed_vectors())
    return v


def trimmed_vectors() -> list[Vector]:
    """Data frames a switch trimmed: only their headers survive (IP and UDP lengths left as
    sent, or rewritten to what is left: then only RETH's DMA length tells)."""
    return [
        data_vector("trimmed-write-first-ipv6", WRITE_FIRST, psn=0x000500,
                    ev=0x80070000 | 0x8000, wrapping="ipv6", with_ts=False, payload=256,
                    keep_after_headers=0),
        data_vector("trimmed-write-only-imm-ts-usid-srh", WRITE_ONLY_IMM, psn=0x000501,
                    ev=0x80070000 | 0x8001, wrapping="usid-srh", with_ts=True, payload=512,
                    keep_after_headers=0),
        data_vector("trimmed-fixed-lengths-write-last-usid", WRITE_LAST, psn=0x000502,
                    ev=0x80070000 | 0x8002, wrapping="usid", with_ts=False, payload=128,
                    keep_after_headers=0, fix_lengths=True),
    ]


def malformed_frames() -> list[tuple[str, bytes]]:
    """Frames cut inside their MRC headers: a decoder must report them, not crash."""
    ok = {v.name: v.frame for v in all_vectors()}
    out = []
    for name, cut in (("write-first-ipv6", 14 + 40 + 8 + 7),  # inside the BTH
                      ("write-first-ipv6", 14 + 40 + 8 + 12),  # BTH, nothing after
                      ("write-first-ipv6", 14 + 40 + 8 + 12 + 2),  # inside METH
                      ("write-only-imm-ts-usid-srh", 14 + 104 + 8 + 12 + 4 + 4 + 8),  # in RETH
                      ("sack-usid", 14 + 80 + 8 + 12 + 20),  # inside SETH
                      ("sack-usid", 14 + 80 + 8 + 12 + 28),  # SETH, no CC_STATE
                      ("nack-trimmed-ipv6", 14 + 40 + 8 + 12 + 5),  # inside NETH
                      ("eeth-ev-probe-usid", 14 + 80 + 8 + 12 + 30)):  # inside EETH
        out.append((f"{name}-cut{cut}", ok[name][:cut]))
    return out


def flatten(expected: dict[str, Any]) -> dict[str, int]:
    """``{"bth": {"psn": 1}, "immdt": 5}`` -> ``{"bth.psn": 1, "immdt": 5}``."""
    out: dict[str, int] = {}
    for k, val in expected.items():
        if isinstance(val, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in val.items()})
        else:
            out[k] = int(val)
    return out


def decode_json_form(expected: dict[str, Any]) -> dict[str, Any]:
    """The object ``python -m mrcnet.wire decode --json`` prints for this frame (issue
    item 8): opcode, psn, dqpn, ev, trimmed, payload_len (0 for control packets) and one
    object per header present; the BTH flags and the ICRC are not in it."""
    b = expected["bth"]
    out: dict[str, Any] = {"opcode": b["opcode"], "psn": b["psn"], "dqpn": b["dqpn"],
                           "ev": expected["ev"], "trimmed": bool(expected["trimmed"]),
                           "payload_len": expected.get("payload_len", 0)}
    for k, val in expected.items():
        if k not in ("bth", "ev", "trimmed", "payload_len", "icrc"):
            out[k] = dict(val) if isinstance(val, dict) else val
    return out


def write_pcap(path: str | Path, frames: Iterable[bytes]) -> int:
    """Classic little-endian microsecond pcap, Ethernet link type; returns the count."""
    n = 0
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        for i, frame in enumerate(frames):
            fh.write(struct.pack("<IIII", 1_800_000_000, i, len(frame), len(frame)))
            fh.write(frame)
            n += 1
    return n


def write_vectors_pcap(path: str | Path) -> list[Vector]:
    """Write :func:`all_vectors` to ``path`` in order; returns them."""
    vs = all_vectors()
    write_pcap(path, (x.frame for x in vs))
    return vs


if __name__ == "__main__":  # python tests/wire/vectors/mrc10.py OUT.pcap
    import sys

    out = sys.argv[1] if len(sys.argv) > 1 else "mrc10-vectors.pcap"
    print(f"{len(write_vectors_pcap(out))} frames -> {out}")
