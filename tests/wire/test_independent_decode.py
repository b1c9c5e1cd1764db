"""mrcnet's own frames read back by a minimal decoder written here from the public tables.

The decoder below uses only ``struct`` and the byte offsets of PROTOCOL-NOTES section 8
(and RFC 8200 / RFC 768 for IPv6 and UDP); it imports nothing from mrcnet's codecs, so a
layout mistake in ``mrcnet.wire`` and a matching one in its parser cannot hide each other.
Every sample frame (one of every kind) must decode here to the values mrcnet built it from.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from mrcnet.wire.samples import samples

_WRITES = range(0xC6, 0xCC)
_IMM = (0xC9, 0xCB)


def _ts_word(w: int) -> dict[str, int]:
    return {"tsr": w >> 15, "ftype": w & 0xF}


def decode(frame: bytes) -> dict[str, Any]:
    """Ethernet / IPv6 [/ SRH] [/ IPv6] / UDP 4791 / BTH / MRC headers, by offsets only."""
    assert struct.unpack_from("!H", frame, 12)[0] == 0x86DD
    off = 14
    word0, _plen, nh = struct.unpack_from("!IHB", frame, off)
    outer_fl = word0 & 0xFFFFF
    off += 40
    if nh == 43:  # routing header: next header, hdr ext len (8-octet units beyond 8)
        nh, hel = frame[off], frame[off + 1]
        off += 8 + 8 * hel
    inner_fl = None
    if nh == 41:
        inner_fl = struct.unpack_from("!I", frame, off)[0] & 0xFFFFF
        nh = frame[off + 6]
        off += 40
    assert nh == 17
    sport, dport, _ulen, _csum = struct.unpack_from("!HHHH", frame, off)
    assert dport == 4791
    off += 8
    op, b1, _pkey, qp_word, psn_word = struct.unpack_from("!BBHII", frame, off)
    assert b1 & 0x0F == 0
    out: dict[str, Any] = {
        "opcode": op, "dqpn": qp_word & 0xFFFFFF, "psn": psn_word & 0xFFFFFF,
        "ts_flag": psn_word >> 28 & 1, "ev_sport": sport, "ev_flow": outer_fl & 0xFFFF,
        "inner_flow": None if inner_fl is None else inner_fl & 0xFFFF,
    }
    off += 12
    if op in _WRITES:
        out["meth"] = dict(zip(("rqmsn", "msn"), struct.unpack_from("!HH", frame, off),
                               strict=True))
        off += 4
        if out["ts_flag"]:
            ts, w = struct.unpack_from("!HH", frame, off)
            out["tseth"] = {"timestamp": ts, **_ts_word(w)}
            off += 4
        va, rkey, dma = struct.unpack_from("!QII", frame, off)
        out["reth"] = {"va": va, "rkey": rkey, "dma_len": dma}
        off += 16
        if op in _IMM:
            out["immdt"] = struct.unpack_from("!I", frame, off)[0]
            off += 4
    elif op == 0xD1:  # ACK: AETH syndrome(8) MSN(24)
        w = struct.unpack_from("!I", frame, off)[0]
        out["aeth"] = {"syndrome": w >> 24, "msn": w & 0xFFFFFF}
    elif op == 0xDC:  # SACK: SETH(28) + CC_STATE(8)
        b = frame[off + 1]
        ack_off, entropy, sp, dp, cack_w, cc, mpr, sack_off, bitmap = struct.unpack_from(
            "!hIHHIBBhQ", frame, off + 2)
        out["seth"] = {
            "m": b >> 5 & 3, "pr": b >> 1 & 1, "ack_psn_offset": ack_off, "entropy": entropy,
            "spdcid": sp, "dpdcid": dp, "cack_psn": cack_w & 0xFFFFFF, "cc_type": cc >> 4,
            "cc_flags": cc & 0xF, "mpr": mpr, "sack_offset": sack_off, "sack_bitmap": bitmap,
        }
        ts, ooo, w = struct.unpack_from("!HHI", frame, off + 28)
        out["cc_state"] = {"timestamp": ts, "ooo_count": ooo & 0x7FFF,
                           "restore_cwnd": w >> 31, "rcv_cwnd_pen": w >> 24 & 0x7F,
                           "rcvd_bytes": w & 0xFFFFFF}
    elif op == 0xDD:  # NACK: NETH(20)
        reason, vendor, entropy, sp, dp, psn_w, cc, ts = struct.unpack_from(
            "!BBIHHIBxH", frame, off + 2)
        out["neth"] = {"reason": reason, "vendor": vendor, "entropy": entropy, "spdcid": sp,
                       "dpdcid": dp, "nack_psn": psn_w & 0xFFFFFF, "cc_type": cc >> 4,
                       "cc_flags": cc & 0xF, "timestamp": ts}
    elif op == 0xDE:  # reliability probe: PETH(16)
        vendor, pid, sp, dp, ts, w = struct.unpack_from("!BH2xHHHH", frame, off + 3)
        out["peth"] = {"vendor": vendor, "probe_id": pid, "spdcid": sp, "dpdcid": dp,
                       "timestamp": ts, **_ts_word(w)}
    elif op == 0xD8:  # endpoint request: ERTH(16), request id in BTH.PSN
        b1e, vendor, mask, ts, w = struct.unpack_from("!BxBI4xHH", frame, off + 1)
        out["erth"] = {"op": b1e & 3, "vendor": vendor, "port_status_mask": mask,
                       "timestamp": ts, **_ts_word(w)}
    elif op == 0xD9:  # endpoint response: EETH(36)
        out["eeth"] = {"op": frame[off + 1] >> 4 & 3,
                       "timestamp": struct.unpack_from("!H", frame, off + 28)[0]}
    return out


SAMPLES = [s for s in samples() if not s.trimmed]


@pytest.mark.parametrize("s", SAMPLES, ids=[s.name for s in SAMPLES])
def test_sample_decodes_independently(s: Any) -> None:
    """Each header of each sample decodes here to what mrcnet's parser reports."""
    from dataclasses import asdict

    from mrcnet.wire import parse_frame

    f = parse_frame(s.frame)
    got = decode(s.frame)
    assert (got["opcode"], got["dqpn"], got["psn"]) == (f.bth.opcode, f.bth.dest_qp, f.bth.psn)
    # The EV's default order: low 16 bits in the source port, high 16 in the flow labels.
    assert got["ev_sport"] | got["ev_flow"] << 16 == f.ev
    if got["inner_flow"] is not None:
        assert got["inner_flow"] == got["ev_flow"]
    pairs = {"meth": f.meth, "tseth": f.tseth, "reth": f.reth, "aeth": f.aeth, "seth": f.seth,
             "cc_state": f.cc, "neth": f.neth, "peth": f.peth, "erth": f.erth, "eeth": f.eeth}
    names = {"length": "dma_len"}
    for key, hdr in pairs.items():
        assert (key in got) == (hdr is not None), key
        if hdr is not None:
            want = {names.get(k, k): int(v) for k, v in asdict(hdr).items()}
            assert got[key] == want, key
    assert got.get("immdt") == (f.immdt.imm if f.immdt else None)


def test_known_values() -> None:
    """A few values fixed by the samples' documented construction, read independently."""
    by = {s.name: decode(s.frame) for s in SAMPLES}
    assert by["sack"]["seth"]["cack_psn"] == 100 and by["sack"]["seth"]["m"] == 1
    assert by["sack"]["seth"]["sack_offset"] == 2 and by["sack"]["seth"]["sack_bitmap"] == 13
    assert by["sack-probe-response"]["seth"]["pr"] == 1
    assert by["sack-probe-response"]["seth"]["ack_psn_offset"] == 42
    assert by["ack"]["aeth"] == {"syndrome": 0x1F, "msn": 3} and by["ack"]["psn"] == 100
    assert by["ep-port-status"]["erth"]["port_status_mask"] == 0b1011
    assert by["ep-port-status"]["dqpn"] == 2 and by["ep-port-status"]["psn"] == 10
    assert by["write-last-imm-ts"]["tseth"] == {"timestamp": 0x1235, "tsr": 0, "ftype": 1}
    assert by["write-last-imm-ts"]["immdt"] == 0xC0FFEE00
    assert by["probe"]["peth"]["probe_id"] == 42
