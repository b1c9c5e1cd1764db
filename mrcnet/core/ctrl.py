"""Control frames (SACK) built fast: headers once per path, per frame only the EV bits,
the L4 bytes, the ICRC and the UDP checksum.

A SACK has a fixed size, so everything in front of the UDP checksum is the same for every
SACK on one route but the EV's bits. :class:`SackTemplate` takes those bytes from a frame the
reference builder (:func:`mrcnet.wire.build_sack`) made and redoes only what changes, with
:mod:`mrcnet.fastpath`'s checksum and ICRC (C when built). Tests compare it byte for byte
with the reference.
"""

from __future__ import annotations

from mrcnet.constants import (
    BTH_LEN,
    ETH_HEADER_LEN,
    EV_FLOW_LABEL_MASK,
    EV_SPORT_SHIFT,
    ICRC_LEN,
    IPV6_HEADER_LEN,
    UDP_HEADER_LEN,
)
from mrcnet.fastpath import icrc, udp6_checksum
from mrcnet.wire import BTH, CCState, Route, build_sack, parse_frame
from mrcnet.wire.sack import CCSTATE_STRUCT, SETH, SETH_F_ECE, SETH_STRUCT

_DUMMY = SETH(ev=0, cack_psn=0)
_FLOW_LABEL_LOW16 = 2  # bytes 2-3 of an IPv6 header: the flow label's low 16 bits


def pack_sack_fields(
    ev: int, cack_psn: int, ack_offset: int, sack_offset: int, max_psn_range: int, ece: bool,
    bitmap: int, imm_credit: int, ts_echo: int, ooo_count: int, window_penalty: int,
    rcvd_bytes: int,
) -> tuple[bytes, bytes]:
    """SETH and CC-state bytes without the dataclasses' range checks (the responder's
    values are in range by construction), with the wire module's own struct layouts, so
    the layout still lives in one place (mrcnet/wire/sack.py). M field: NONE."""
    return (
        SETH_STRUCT.pack(ev, cack_psn, ack_offset, sack_offset, max_psn_range,
                   SETH_F_ECE if ece else 0, bitmap, imm_credit),
        CCSTATE_STRUCT.pack(ts_echo, ooo_count, window_penalty, rcvd_bytes),
    )


class SackTemplate:
    """SACK frames to one QP along one route (one path), for any EV of that path.

    The EV changes only the UDP source port (covered by ICRC and checksum, which are
    recomputed anyway) and the low 16 bits of the outer flow label (covered by neither).
    """

    __slots__ = ("_bth", "_head", "_icrc_from", "_inner", "_pdst", "_psrc", "_udp_len",
                 "_udp_off")

    def __init__(self, route: Route, *, dest_qp: int) -> None:
        frame = build_sack(route, ev=0, dest_qp=dest_qp, seth=_DUMMY, cc=CCState())
        f = parse_frame(frame)
        udp_off = len(frame) - UDP_HEADER_LEN - BTH_LEN - SETH.LEN - CCState.LEN - ICRC_LEN
        self._udp_off = udp_off
        self._head = frame[:udp_off]  # Ethernet .. inner IPv6
        self._udp_len = frame[udp_off + 2 : udp_off + 6]  # destination port and length
        self._bth = BTH(f.bth.opcode, dest_qp, 0).pack()
        self._inner = f.inner is not None
        # The ICRC covers the inner IPv6 header (when there is one) onwards.
        self._icrc_from = udp_off - IPV6_HEADER_LEN if self._inner else udp_off
        if f.inner is not None:
            self._psrc, self._pdst = f.inner.src, f.inner.dst
        else:
            self._psrc, self._pdst = route.src_ip, route.final_dst
        assert udp_off >= ETH_HEADER_LEN + IPV6_HEADER_LEN

    def build(self, ev: int, seth: SETH, cc: CCState) -> bytes:
        """One SACK frame travelling on ``ev``."""
        return self.build_raw(ev, seth.pack(), cc.pack())

    def build_raw(self, ev: int, seth: bytes, cc: bytes) -> bytes:
        """One SACK frame from packed SETH and CC state (see :func:`pack_sack_fields`)."""
        l4 = self._bth + seth + cc
        udp = (ev >> EV_SPORT_SHIFT).to_bytes(2, "big") + self._udp_len + b"\x00\x00"
        head = bytearray(self._head)
        fl = ETH_HEADER_LEN + _FLOW_LABEL_LOW16
        head[fl : fl + 2] = (ev & EV_FLOW_LABEL_MASK).to_bytes(2, "big")
        covered = (head[self._icrc_from :] if self._inner else b"") + udp + l4
        crc = icrc(covered, self._inner)
        csum = udp6_checksum(self._psrc, self._pdst, udp + l4 + crc)
        return b"".join((head, udp[:6], csum.to_bytes(2, "big"), l4, crc))
