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
    CC_TYPE_NACK,
    ETH_HEADER_LEN,
    ICRC_LEN,
    IPV6_HEADER_LEN,
    OOO_COUNT_MAX,
    PSN_MASK,
    RCVD_BYTES_MOD,
    UDP_HEADER_LEN,
    NackReason,
    SackMode,
)
from mrcnet.wire import CCState, Route, build_nack, build_sack
from mrcnet.wire.neth import NETH, NETH_STRUCT
from mrcnet.wire.seth import CCSTATE_STRUCT, SETH, SETH_STRUCT, seth_flags
from mrcnet.wire.template import FrameFinisher
from mrcnet.wire.udp import ev_to_flow_label, ev_to_sport

# Bytes 2-3 of an IPv6 header: the flow label's low 16 bits (half of the EV).
_FLOW_LABEL_LOW16 = 2
_U16 = struct.Struct("!H")
# BTH.PSN: the low 24 bits of BTH's last word (its first byte holds the flags)
_BTH_PSN = BTH_LEN - 3
_PSN24 = struct.Struct("!BH")
_NACK_REASONS = frozenset(int(r) for r in NackReason)
#: ack_ts of a packet that carried no TSETH (rxlane.c RX_NO_TS): nothing to echo.
NO_TS = 0x10000


def sack_fields(rcv: int, ack_seq: int, base: int, probe: int) -> tuple[int, int, int]:
    """(CACK PSN, ack_psn_offset, sack_offset) of a SACK from the responder's cumulative
    point ``rcv`` (next expected), the sequence number it answers and its window's base
    (the PSN of bitmap bit 0); ``probe`` >= 0: a probe response, carrying that id."""
    cack = rcv - 1
    ack_off = probe if probe >= 0 else max(-_S16_MAX, min(_S16_MAX, ack_seq - cack))
    if ack_off > _S16_MAX:
        ack_off -= 1 << 16
    return cack & PSN_MASK, ack_off, min(_S16_MAX, base - cack)


_S16_MAX = (1 << 15) - 1
# Offsets in a frame without SRH: outer hop limit and source, an IPv6 header's source
_HOP_LIMIT = ETH_HEADER_LEN + 7
_IP6_SRC = 8
_OUTER_SRC = ETH_HEADER_LEN + _IP6_SRC


def _finisher(route: Route, udp_off: int
              ) -> tuple[int, FrameFinisher, tuple[int, bool, bytes, bytes]]:
    """(inner IPv6 header's offset or 0, the finisher, its pseudo-header layout) of a
    control frame along ``route`` whose UDP header is at ``udp_off``. The addresses are
    the ones build_frame put in the inner header, or the pseudo-header's without one:
    taken from the route, not by parsing the frame back, which cost more than the rest
    (a responder makes one template per path it answers on)."""
    has_ip = route.encap
    if has_ip:
        psrc, pdst = route.src_ip, route.dst_ip
    else:
        psrc, pdst = route.src_ip, route.final_dst
    # The ICRC covers the inner IPv6 header (when there is one) onwards.
    icrc_from = udp_off - IPV6_HEADER_LEN if has_ip else udp_off
    return (icrc_from if has_ip else 0, FrameFinisher(icrc_from, has_ip, udp_off, psrc, pdst),
            (icrc_from, has_ip, bytes(psrc), bytes(pdst)))


def _retarget(frame: bytes, old: Route, route: Route) -> bytearray | None:
    """``frame`` (built along ``old``) along ``route`` instead, ICRC and checksum not
    redone; None unless both are plain uSID routes (MRC's form: no SRH), where only the
    MACs, the hop limit and the addresses differ."""
    if (route.segments is not None or route.usid_srh is not None or route.usid is None
            or old.segments is not None or old.usid_srh is not None
            or route.encap != old.encap):
        return None
    buf = bytearray(frame)
    buf[0:6], buf[6:12] = route.dst_mac, route.src_mac
    buf[_HOP_LIMIT] = route.hop_limit
    buf[_OUTER_SRC : _OUTER_SRC + 16] = route.src_ip
    buf[_OUTER_SRC + 16 : _OUTER_SRC + 32] = route.outer_dst
    if route.encap:
        inner = _OUTER_SRC + 32 + _IP6_SRC
        buf[inner : inner + 16], buf[inner + 16 : inner + 32] = route.src_ip, route.dst_ip
    return buf


def only_outer_dst_differs(a: Route, b: Route) -> bool:
    """Do control frames along ``a`` and ``b`` differ only in the outer IPv6
    destination? True for two plain, encapsulated uSID routes (MRC's form) with the same
    MACs, hop limit and addresses: what :func:`_retarget` patches is then the same but
    that address, and the ICRC and the checksum's pseudo-header cover the inner header
    only (rxlane.h ``struct mrc_rx_plane``)."""
    return (a.usid is not None and b.usid is not None and a.encap and b.encap
            and a.segments is None and b.segments is None and a.usid_srh is None
            and b.usid_srh is None and a.src_mac == b.src_mac and a.dst_mac == b.dst_mac
            and a.hop_limit == b.hop_limit and a.src_ip == b.src_ip
            and a.dst_ip == b.dst_ip)


def _put_ev(buf: bytearray, ev: int, inner_off: int, udp_off: int) -> None:
    """The EV's bits of a control frame: the UDP source port (covered by ICRC and
    checksum) and the low 16 bits of the flow labels (covered by neither)."""
    fl = ev_to_flow_label(ev)
    _U16.pack_into(buf, ETH_HEADER_LEN + _FLOW_LABEL_LOW16, fl)
    if inner_off:
        _U16.pack_into(buf, inner_off + _FLOW_LABEL_LOW16, fl)
    _U16.pack_into(buf, udp_off, ev_to_sport(ev))


class SackTemplate:
    """SACK frames to one QP along one route (one path), for any EV of that path.

    The whole frame is copied from a template and patched in place: the EV's bits (the
    UDP source port, covered by ICRC and checksum, and the low 16 bits of the flow labels,
    covered by neither), SETH and CC_STATE; then ICRC and UDP checksum
    (:class:`mrcnet.wire.template.FrameFinisher`, one C call when built). SPDCID, DPDCID
    (the two QP numbers' low 16 bits), CC type and MPR are the template's.
    """

    __slots__ = ("_cc_off", "_dest_qp", "_fin", "_frame", "_inner_off", "_pseudo",
                 "_route", "_seth_off", "_udp_off", "dpdcid", "mpr", "spdcid")

    def __init__(self, route: Route, *, dest_qp: int, src_qp: int = 0, mpr: int = 0,
                 _frame: bytes | None = None) -> None:
        self.spdcid, self.dpdcid, self.mpr = src_qp & 0xFFFF, dest_qp & 0xFFFF, mpr
        self._route, self._dest_qp = route, dest_qp
        if _frame is None:
            seth = SETH(cack_psn=0, spdcid=self.spdcid, dpdcid=self.dpdcid, mpr=mpr)
            _frame = build_sack(route, ev=0, dest_qp=dest_qp, seth=seth, cc=CCState())
        frame = _frame
        udp_off = len(frame) - UDP_HEADER_LEN - BTH_LEN - SETH.LEN - CCState.LEN - ICRC_LEN
        assert udp_off >= ETH_HEADER_LEN + IPV6_HEADER_LEN
        self._frame = frame
        self._udp_off = udp_off
        self._seth_off = udp_off + UDP_HEADER_LEN + BTH_LEN
        self._cc_off = self._seth_off + SETH.LEN
        self._inner_off, self._fin, self._pseudo = _finisher(route, udp_off)

    def matches(self, dest_qp: int, src_qp: int, mpr: int) -> bool:
        """Made for these QP numbers and MPR?"""
        return (dest_qp, src_qp & 0xFFFF, mpr) == (self._dest_qp, self.spdcid, self.mpr)

    def for_route(self, route: Route) -> SackTemplate:
        """The template of the same QP along another route (a responder answers on every
        path it receives on). For two plain uSID routes (MRC's form: no SRH) only the
        MACs, the hop limit and the addresses differ, so the frame is this one's with
        those patched and its ICRC and checksum redone: the bytes build_sack makes, for a
        fraction of the cost (a test compares them). Else built in full."""
        buf = _retarget(self._frame, self._route, route)
        if buf is None:
            return SackTemplate(route, dest_qp=self._dest_qp, src_qp=self.spdcid,
                                mpr=self.mpr)
        t = SackTemplate(route, dest_qp=self._dest_qp, src_qp=self.spdcid, mpr=self.mpr,
                         _frame=bytes(buf))
        t._fin.finish(buf)  # (the ICRC and checksum of the new addresses)
        t._frame = bytes(buf)
        return t

    def layout(self) -> tuple[bytes, int, int, int, int, bool, bytes, bytes]:
        """(template frame, UDP header offset, SETH offset, CC-state offset, where the
        ICRC starts, whether it starts at an inner IPv6 header, pseudo-header source and
        destination): what a builder elsewhere (the C receive lane's) needs to make the
        same frames as :meth:`build_fields`."""
        return (self._frame, self._udp_off, self._seth_off, self._cc_off, *self._pseudo)

    def _ev(self, buf: bytearray, ev: int) -> None:
        _put_ev(buf, ev, self._inner_off, self._udp_off)

    def build(self, ev: int, seth: SETH, cc: CCState) -> bytes:
        """One SACK frame travelling on ``ev`` (the given SETH whole)."""
        buf = bytearray(self._frame)
        self._ev(buf, ev)
        buf[self._seth_off : self._cc_off + CCState.LEN] = seth.pack() + cc.pack()
        self._fin.finish(buf)
        return bytes(buf)

    def build_fields(
        self, ev: int, sack_ev: int, rcv: int, ack_seq: int, base: int, ce: bool,
        probe: int, bitmap: int, ts_echo: int, ooo_count: int, window_penalty: int,
        rcvd_bytes: int,
    ) -> bytes:
        """One SACK frame travelling on ``ev`` from the responder's state, its fields
        packed straight into the frame: ``rcv`` the cumulative point (next expected),
        ``ack_seq`` the sequence number answered, ``base`` the window's first PSN,
        ``probe`` the probe id of a probe response (else -1), ``rcvd_bytes`` in bytes.
        The twin of rxlane.c ``mrc_rx_sack``'s per-frame work."""
        buf = bytearray(self._frame)
        self._ev(buf, ev)
        cack, ack_off, sack_off = sack_fields(rcv, ack_seq, base, probe)
        m = SackMode.SKIP_ONCE if ce else SackMode.NONE
        SETH_STRUCT.pack_into(buf, self._seth_off, 0, seth_flags(m, probe >= 0), ack_off,
                              sack_ev, self.spdcid, self.dpdcid, cack, 0, self.mpr, sack_off,
                              bitmap)
        CCSTATE_STRUCT.pack_into(buf, self._cc_off, ts_echo & 0xFFFF,
                                 min(OOO_COUNT_MAX, ooo_count),
                                 (window_penalty & 0x7F) << 24
                                 | (rcvd_bytes >> 8) % RCVD_BYTES_MOD)
        self._fin.finish(buf)
        return bytes(buf)


class NackTemplate:
    """NACK frames from one QP along one route (one path), for any EV, PSN, reason and
    timestamp: the template (a frame :func:`mrcnet.wire.build_nack` made) copied and
    patched in place (the EV's bits, BTH.PSN, NETH), then ICRC and UDP checksum, as
    :class:`SackTemplate` does. DEST_QP, SPDCID and DPDCID are the template's. Tests
    compare it byte for byte with the reference builder."""

    __slots__ = ("_bth_psn", "_dest_qp", "_fin", "_frame", "_inner_off", "_neth_off",
                 "_pseudo", "_route", "_udp_off", "dpdcid", "spdcid")

    def __init__(self, route: Route, *, dest_qp: int, src_qp: int = 0,
                 _frame: bytes | None = None) -> None:
        self.spdcid, self.dpdcid = src_qp & 0xFFFF, dest_qp & 0xFFFF
        self._route, self._dest_qp = route, dest_qp
        if _frame is None:
            _frame = build_nack(route, ev=0, dest_qp=dest_qp, neth=NETH(
                NackReason.TRIMMED, 0, 0, spdcid=self.spdcid, dpdcid=self.dpdcid))
        self._frame = _frame
        udp_off = len(_frame) - UDP_HEADER_LEN - BTH_LEN - NETH.LEN - ICRC_LEN
        assert udp_off >= ETH_HEADER_LEN + IPV6_HEADER_LEN
        self._udp_off = udp_off
        self._bth_psn = udp_off + UDP_HEADER_LEN + _BTH_PSN
        self._neth_off = udp_off + UDP_HEADER_LEN + BTH_LEN
        self._inner_off, self._fin, self._pseudo = _finisher(route, udp_off)

    def layout(self) -> tuple[bytes, int, int, int, bool, bytes, bytes]:
        """(template frame, UDP header offset, NETH offset, where the ICRC starts,
        whether it starts at an inner IPv6 header, pseudo-header source and destination):
        what the C receive lane needs to make :meth:`build`'s frames."""
        return (self._frame, self._udp_off, self._neth_off, *self._pseudo)

    def matches(self, dest_qp: int, src_qp: int) -> bool:
        """Made for these QP numbers?"""
        return dest_qp == self._dest_qp and src_qp & 0xFFFF == self.spdcid

    def for_route(self, route: Route) -> NackTemplate:
        """The template of the same QP along another route (as
        :meth:`SackTemplate.for_route`: patched for two plain uSID routes, else built)."""
        buf = _retarget(self._frame, self._route, route)
        if buf is None:
            return NackTemplate(route, dest_qp=self._dest_qp, src_qp=self.spdcid)
        return NackTemplate(route, dest_qp=self._dest_qp, src_qp=self.spdcid,
                            _frame=bytes(buf))

    def build(self, ev: int, psn: int, reason: int, entropy: int, nack_psn: int,
              ts: int) -> bytes:
        """One NACK travelling on ``ev`` with BTH.PSN ``psn`` and NETH (``reason``,
        ``entropy``, ``nack_psn``, timestamp ``ts``): the bytes of
        ``build_nack(route, ev=ev, dest_qp=..., psn=psn, neth=NETH(reason, entropy,
        nack_psn, ts, spdcid=..., dpdcid=...))``."""
        if reason not in _NACK_REASONS:
            raise ValueError(f"NACK reason {reason!r} is not a NackReason")
        buf = bytearray(self._frame)
        _put_ev(buf, ev, self._inner_off, self._udp_off)
        _PSN24.pack_into(buf, self._bth_psn, psn >> 16 & 0xFF, psn & 0xFFFF)
        NETH_STRUCT.pack_into(buf, self._neth_off, 0, reason, 0, entropy, self.spdcid,
                              self.dpdcid, nack_psn, CC_TYPE_NACK << 4, 0, ts)
        self._fin.finish(buf)
        return bytes(buf)
