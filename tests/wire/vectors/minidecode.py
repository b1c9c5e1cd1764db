"""An independent minimal MRC 1.0 decoder, for the tests (no mrcnet import).

:func:`decode` walks Ethernet / IPv6 (/ IPv6-in-IPv6, routing headers including SRH, other
extension headers) / UDP 4791 and reads the MRC headers with ``struct`` at the literal
offsets of PROTOCOL-NOTES section 8. It returns the nested dict :mod:`vectors.mrc10`
describes (``bth``, ``ev``, ``trimmed``, one dict per header, ``immdt``, ``payload_len``
for data packets, ``icrc`` unless trimmed), so its output compares directly with a
vector's ``expected`` and, through :func:`vectors.mrc10.decode_json_form`, with
``python -m mrcnet.wire decode --json``.

It checks no checksum and no ICRC (a lenient reader) and raises :class:`MiniDecodeError`
for what it cannot read: not IPv6, not UDP 4791, a frame cut inside its MRC headers.

A frame is trimmed when it is a data packet whose headers are all there and either the
frame ends before its UDP length says, or fewer than 4 bytes (no ICRC) follow the
headers while RETH's DMA length is not zero.
"""

from __future__ import annotations

import struct
from typing import Any

DATA = frozenset(range(0xC6, 0xCC))
WITH_IMM = frozenset({0xC9, 0xCB})
CONTROL_HEADERS = {0xD1: ("aeth",), 0xDC: ("seth", "cc_state"), 0xDD: ("neth",),
                   0xDE: ("peth",), 0xD8: ("erth",), 0xD9: ("eeth",)}
HEADER_LEN = {"meth": 4, "tseth": 4, "reth": 16, "immdt": 4, "aeth": 4, "seth": 28,
              "cc_state": 8, "neth": 20, "peth": 16, "erth": 16, "eeth": 36}
EXT_HEADERS = frozenset({0, 43, 60})  # hop-by-hop, routing (SRH is type 4), dest options


class MiniDecodeError(ValueError):
    """A frame this decoder cannot read."""


def u24(b: bytes, off: int) -> int:
    return int.from_bytes(b[off : off + 3], "big")


def _bth(h: bytes) -> dict[str, int]:
    return {"opcode": h[0], "se": h[1] >> 7 & 1, "m": h[1] >> 6 & 1, "pad": h[1] >> 4 & 3,
            "tver": h[1] & 0xF, "pkey": struct.unpack_from(">H", h, 2)[0],
            "dqpn": u24(h, 5), "a": h[8] >> 7 & 1, "r": h[8] >> 6 & 1,
            "rtx": h[8] >> 5 & 1, "ts": h[8] >> 4 & 1, "psn": u24(h, 9)}


def _header(name: str, h: bytes) -> Any:
    if name == "meth":
        rqmsn, msn = struct.unpack_from(">HH", h, 0)
        return {"rqmsn": rqmsn, "msn": msn}
    if name == "tseth":
        ts, w = struct.unpack_from(">HH", h, 0)
        return {"timestamp": ts, "tsr": w >> 15, "ftype": w & 0xF}
    if name == "reth":
        va, rkey, dma_len = struct.unpack_from(">QII", h, 0)
        return {"va": va, "rkey": rkey, "dma_len": dma_len}
    if name == "immdt":
        return struct.unpack_from(">I", h, 0)[0]
    if name == "aeth":
        return {"syndrome": h[0], "msn": u24(h, 1)}
    if name == "seth":
        ack_off, entropy, spdcid, dpdcid = struct.unpack_from(">hIHH", h, 2)
        sack_off, bitmap = struct.unpack_from(">hQ", h, 18)
        return {"m": h[1] >> 5 & 3, "pr": h[1] >> 1 & 1, "ack_psn_offset": ack_off,
                "entropy": entropy, "spdcid": spdcid, "dpdcid": dpdcid,
                "cack_psn": u24(h, 13), "cc_type": h[16] >> 4, "cc_flags": h[16] & 0xF,
                "mpr": h[17], "sack_offset": sack_off, "sack_bitmap": bitmap}
    if name == "cc_state":
        ts, w = struct.unpack_from(">HH", h, 0)
        return {"timestamp": ts, "ooo_count": w & 0x7FFF, "restore_cwnd": h[4] >> 7,
                "rcv_cwnd_pen": h[4] & 0x7F, "rcvd_bytes": u24(h, 5)}
    if name == "neth":
        entropy, spdcid, dpdcid = struct.unpack_from(">IHH", h, 4)
        return {"reason": h[2], "vendor": h[3], "entropy": entropy, "spdcid": spdcid,
                "dpdcid": dpdcid, "nack_psn": u24(h, 13), "cc_type": h[16] >> 4,
                "cc_flags": h[16] & 0xF, "timestamp": struct.unpack_from(">H", h, 18)[0]}
    if name == "peth":
        probe_id = struct.unpack_from(">H", h, 4)[0]
        spdcid, dpdcid, ts, w = struct.unpack_from(">HHHH", h, 8)
        return {"vendor": h[3], "probe_id": probe_id, "spdcid": spdcid, "dpdcid": dpdcid,
                "timestamp": ts, "tsr": w >> 15, "ftype": w & 0xF}
    if name == "erth":
        mask = struct.unpack_from(">I", h, 4)[0]
        ts, w = struct.unpack_from(">HH", h, 12)
        return {"op": h[1] & 3, "vendor": h[3], "port_status_mask": mask, "timestamp": ts,
                "tsr": w >> 15, "ftype": w & 0xF}
    if name == "eeth":
        return {"op": h[1] >> 4 & 3, "timestamp": struct.unpack_from(">H", h, 28)[0]}
    raise AssertionError(name)


def find_udp(frame: bytes) -> tuple[int, int]:
    """Offset of the UDP header and the flow label of the IPv6 header nearest to it."""
    if len(frame) < 14:
        raise MiniDecodeError("shorter than an Ethernet header")
    ethertype = struct.unpack_from(">H", frame, 12)[0]
    off = 14
    while ethertype in (0x8100, 0x88A8):  # VLAN tags
        ethertype = struct.unpack_from(">H", frame, off + 2)[0]
        off += 4
    if ethertype != 0x86DD:
        raise MiniDecodeError(f"ethertype 0x{ethertype:04x} is not IPv6")
    nh, flow = 41, 0
    while True:
        if nh == 41:  # an IPv6 header (the first, or IPv6-in-IPv6)
            if len(frame) < off + 40 or frame[off] >> 4 != 6:
                raise MiniDecodeError(f"no IPv6 header at {off}")
            flow = struct.unpack_from(">I", frame, off)[0] & 0xFFFFF
            nh = frame[off + 6]
            off += 40
        elif nh in EXT_HEADERS:
            if len(frame) < off + 8:
                raise MiniDecodeError(f"extension header {nh} cut short")
            nh, off = frame[off], off + 8 + 8 * frame[off + 1]
        elif nh == 17:
            if len(frame) < off + 8:
                raise MiniDecodeError("UDP header cut short")
            return off, flow
        else:
            raise MiniDecodeError(f"next header {nh} is not UDP")


def decode(frame: bytes, *, ev_sport_high: bool = False) -> dict[str, Any]:
    """The MRC fields of one Ethernet frame, as a vector's ``expected`` dict."""
    udp, flow = find_udp(frame)
    sport, dport, udp_len = struct.unpack_from(">HHH", frame, udp)
    if dport != 4791:
        raise MiniDecodeError(f"UDP destination port {dport}, not 4791")
    ev = (sport << 16 | flow & 0xFFFF) if ev_sport_high else ((flow & 0xFFFF) << 16 | sport)
    mrc = frame[udp + 8 : udp + max(udp_len, 8)]  # what the UDP length claims and is there
    claimed = udp_len - 8
    if len(mrc) < 12:
        raise MiniDecodeError("frame ends inside the BTH")
    bth = _bth(mrc)
    out: dict[str, Any] = {"bth": bth, "ev": ev}
    opcode = bth["opcode"]
    if opcode in DATA:
        names = ["meth"] + (["tseth"] if bth["ts"] else []) + ["reth"]
        names += ["immdt"] if opcode in WITH_IMM else []
    elif opcode in CONTROL_HEADERS:
        names = list(CONTROL_HEADERS[opcode])
    else:
        raise MiniDecodeError(f"opcode 0x{opcode:02x} is not MRC")
    off = 12
    for name in names:
        n = HEADER_LEN[name]
        if len(mrc) < off + n:
            raise MiniDecodeError(f"frame ends inside the {name.upper()}")
        out[name] = _header(name, mrc[off : off + n])
        off += n
    avail = len(mrc) - off
    trimmed = False
    if opcode in DATA:
        trimmed = len(mrc) < claimed or (avail < 4 and out["reth"]["dma_len"] > 0)
        if not trimmed and avail < 4:
            raise MiniDecodeError("no room for the ICRC")
        out["payload_len"] = avail if trimmed else avail - 4
    elif avail < 4:
        raise MiniDecodeError("no room for the ICRC")
    out["trimmed"] = int(trimmed)
    if not trimmed:
        out["icrc"] = int.from_bytes(mrc[-4:], "big")
    return out
