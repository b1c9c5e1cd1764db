"""Control frames (SACK) built fast: headers once per path, per frame only the EV bits,
the L4 bytes, the ICRC and the UDP checksum.

A SACK has a fixed size, so everything in front of the UDP checksum is the same for every
SACK on one route but the EV's bits. :class:`SackTemplate` takes those bytes from a frame the
reference builder (:func:`mrcnet.wire.build_sack`) made and redoes only what changes, with
:class:`mrcnet.wire.template.FrameFinisher`'s ICRC and checksum (one C call when built).
Tests compare it byte for byte with the reference.
"""

from __future__ import annotations

import struct

from mrcnet.constants import (
    BTH_LEN,
    ETH_HEADER_LEN,
    EV_FLOW_LABEL_MASK,
    EV_SPORT_SHIFT,
    ICRC_LEN,
    IPV6_HEADER_LEN,
    UDP_HEADER_LEN,
)
from mrcnet.wire import CCState, Route, build_sack, parse_frame
from mrcnet.wire.sack import CCSTATE_STRUCT, SETH, SETH_F_ECE, SETH_STRUCT
from mrcnet.wire.template import FrameFinisher

_DUMMY = SETH(ev=0, cack_psn=0)
# Bytes 2-3 of the outer IPv6 header: the flow label's low 16 bits (the EV's low half).
_FLOW_LABEL_LOW16 = ETH_HEADER_LEN + 2
_U16 = struct.Struct("!H")


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

    The whole frame is copied from a template and patched in place: the EV's bits (the
    UDP source port, covered by ICRC and checksum, and the low 16 bits of the outer flow
    label, covered by neither), SETH and CC state; then ICRC and UDP checksum
    (:class:`mrcnet.wire.template.FrameFinisher`, one C call when built).
    """

    __slots__ = ("_cc_off", "_fin", "_frame", "_pseudo", "_seth_off", "_udp_off")

    def __init__(self, route: Route, *, dest_qp: int) -> None:
        frame = build_sack(route, ev=0, dest_qp=dest_qp, seth=_DUMMY, cc=CCState())
        f = parse_frame(frame)
        udp_off = len(frame) - UDP_HEADER_LEN - BTH_LEN - SETH.LEN - CCState.LEN - ICRC_LEN
        assert udp_off >= ETH_HEADER_LEN + IPV6_HEADER_LEN
        self._frame = frame
        self._udp_off = udp_off
        self._seth_off = udp_off + UDP_HEADER_LEN + BTH_LEN
        self._cc_off = self._seth_off + SETH.LEN
        has_ip = f.inner is not None
        if f.inner is not None:
            psrc, pdst = f.inner.src, f.inner.dst
        else:
            psrc, pdst = route.src_ip, route.final_dst
        # The ICRC covers the inner IPv6 header (when there is one) onwards.
        icrc_from = udp_off - IPV6_HEADER_LEN if has_ip else udp_off
        self._fin = FrameFinisher(icrc_from, has_ip, udp_off, psrc, pdst)
        self._pseudo = (icrc_from, has_ip, bytes(psrc), bytes(pdst))

    def layout(self) -> tuple[bytes, int, int, int, int, bool, bytes, bytes]:
        """(template frame, UDP header offset, SETH offset, CC-state offset, where the
        ICRC starts, whether it starts at an inner IPv6 header, pseudo-header source and
        destination): what a builder elsewhere (the C receive lane's) needs to make the
        same frames as :meth:`build_fields`."""
        return (self._frame, self._udp_off, self._seth_off, self._cc_off, *self._pseudo)

    def build(self, ev: int, seth: SETH, cc: CCState) -> bytes:
        """One SACK frame travelling on ``ev``."""
        return self.build_raw(ev, seth.pack(), cc.pack())

    def build_raw(self, ev: int, seth: bytes, cc: bytes) -> bytes:
        """One SACK frame from packed SETH and CC state (see :func:`pack_sack_fields`)."""
        buf = bytearray(self._frame)
        _U16.pack_into(buf, _FLOW_LABEL_LOW16, ev & EV_FLOW_LABEL_MASK)
        _U16.pack_into(buf, self._udp_off, ev >> EV_SPORT_SHIFT)
        buf[self._seth_off : self._cc_off + CCState.LEN] = seth + cc
        self._fin.finish(buf)
        return bytes(buf)

    def build_fields(
        self, ev: int, sack_ev: int, cack_psn: int, ack_offset: int, sack_offset: int,
        max_psn_range: int, ece: bool, bitmap: int, imm_credit: int, ts_echo: int,
        ooo_count: int, window_penalty: int, rcvd_bytes: int,
    ) -> bytes:
        """One SACK frame travelling on ``ev``, its fields packed straight into the frame
        (no intermediate bytes; same values and checks as :func:`pack_sack_fields`)."""
        buf = bytearray(self._frame)
        _U16.pack_into(buf, _FLOW_LABEL_LOW16, ev & EV_FLOW_LABEL_MASK)
        _U16.pack_into(buf, self._udp_off, ev >> EV_SPORT_SHIFT)
        SETH_STRUCT.pack_into(buf, self._seth_off, sack_ev, cack_psn, ack_offset, sack_offset,
                              max_psn_range, SETH_F_ECE if ece else 0, bitmap, imm_credit)
        CCSTATE_STRUCT.pack_into(buf, self._cc_off, ts_echo, ooo_count, window_penalty,
                                 rcvd_bytes)
        self._fin.finish(buf)
        return bytes(buf)
