"""The receive path's parse record: one parsed frame as a flat record of ints, and the
parsers that make it.

- :class:`PyParsed`: the record (the fields of ``struct mrc_parsed``, mrcnet/_csrc/parsed.h,
  same names, same meaning, same values). The core reads these (and only these) on
  receive, whichever parser made them.
- :func:`py_parse`: the Python parser, :func:`mrcnet.wire.parse_frame` flattened;
  :func:`c_parse`: its C twin (``mrc_parse``, mrcnet/_csrc/parsed.c).
- ``FrameParser().parse(frame, verify=True) -> PyParsed``: the receive path's parser (C
  when built, :mod:`mrcnet.native`, else :func:`py_parse`). Same decisions and fields as
  ``parse_frame``; raises ``MalformedFrame`` with the same reason. The C parser reuses one
  record per ``FrameParser``, valid until its next ``parse``.
- :func:`parsed_to_frame` turns a record back into a :class:`mrcnet.wire.Frame`.
"""

from __future__ import annotations

from typing import Any, Final

from mrcnet.constants import (
    BTH_LEN,
    ETH_HEADER_LEN,
    ETH_P_IPV6,
    ICRC_LEN,
    IPV6_HEADER_LEN,
    SRH_FIXED_LEN,
    UDP_HEADER_LEN,
)
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.native import HAVE_C, NOT_BUILT, C, ffi
from mrcnet.wire import (
    AETH,
    BTH,
    EETH,
    ERTH,
    METH,
    NETH,
    PETH,
    RETH,
    SETH,
    SRH,
    TSETH,
    UDP,
    CCState,
    Ethernet,
    Frame,
    ImmDt,
    IPv6,
    parse_frame,
)
from mrcnet.wire.checksum import fast_udp6_checksum_ok
from mrcnet.wire.erth import erth_token
from mrcnet.wire.icrc import fast_icrc

__all__ = [
    "PARSE_REASONS",
    "VERIFY_ALL",
    "FrameParser",
    "PyParsed",
    "c_parse",
    "parsed_to_frame",
    "py_parse",
]

#: MalformedReason of each ``mrc_parse`` result code (index = code; 0 = accepted).
PARSE_REASONS: Final[tuple[MalformedReason | None, ...]] = (
    None,
    MalformedReason.TRUNCATED,
    MalformedReason.BAD_ETHERTYPE,
    MalformedReason.BAD_IP_VERSION,
    MalformedReason.BAD_LENGTH,
    MalformedReason.BAD_NEXT_HEADER,
    MalformedReason.BAD_SRH,
    MalformedReason.BAD_UDP_PORT,
    MalformedReason.BAD_CHECKSUM,
    MalformedReason.BAD_ICRC,
    MalformedReason.BAD_OPCODE,
    MalformedReason.BAD_VERSION,
    MalformedReason.BAD_FIELD,
)
VERIFY_ALL: Final = 3  # MRC_VERIFY_ICRC | MRC_VERIFY_CHECKSUM
_SRC_OFF_OUTER: Final = ETH_HEADER_LEN + 8  # outer IPv6 source address
_OUTER_END: Final = ETH_HEADER_LEN + IPV6_HEADER_LEN



class PyParsed:
    """One parsed frame as a flat record: the fields of ``struct mrc_parsed``
    (mrcnet/_csrc/parsed.h), same names, same meaning, same values.

    The core reads these (and only these) on receive, whichever parser made them: this
    class for the pure-Python path, the C struct itself for the C path. Headers a frame
    does not have leave their fields 0; addresses are offsets into the frame
    (``src_off``: the sender's address, inner source else outer source).
    """

    # In the C struct's order (a test compares the two lists), not sorted.
    __slots__ = (  # noqa: RUF023
        "reason", "why",
        "end", "src_off", "srh_off", "inner_off", "udp_off", "payload_off", "payload_len",
        "outer_dscp", "outer_ecn", "outer_flow_label", "outer_next_header",
        "outer_payload_length", "outer_hop_limit",
        "srh_next_header", "srh_segments_left", "srh_last_entry", "srh_flags", "srh_tag",
        "srh_tlv_off", "srh_tlv_len",
        "inner_dscp", "inner_ecn", "inner_flow_label", "inner_next_header",
        "inner_payload_length", "inner_hop_limit",
        "sport", "dport", "udp_length", "udp_checksum",
        "opcode", "dest_qp", "psn", "ack_req", "rtx", "ts", "r", "se", "migreq", "pad", "tver",
        "pkey",
        "ev", "ce", "trimmed", "trim_lasthop", "is_data",
        "va", "rkey", "length", "has_imm", "imm", "rqmsn", "msn", "has_tseth", "timestamp",
        "tsr", "ftype",
        "has_aeth", "aeth_syndrome", "aeth_msn",
        "has_seth", "sack_ev", "cack_psn", "ack_offset", "sack_offset", "mpr", "mode", "pr",
        "spdcid", "dpdcid", "cc_type", "cc_flags", "bitmap", "ts_echo", "ooo_count",
        "restore_cwnd", "window_penalty", "rcvd_bytes",
        "has_neth", "nack_reason", "nack_vendor", "nack_ev", "nack_psn", "nack_spdcid",
        "nack_dpdcid", "nack_cc_type", "nack_cc_flags", "nack_ts_echo",
        "has_probe", "probe_id", "probe_vendor", "probe_spdcid", "probe_dpdcid",
        "probe_timestamp", "probe_tsr", "probe_ftype",
        "has_erth", "has_eeth", "ep_op", "ep_vendor", "ep_port_mask", "ep_timestamp",
        "ep_tsr", "ep_ftype",
    )

    reason: int
    why: str
    end: int
    src_off: int
    srh_off: int
    inner_off: int
    udp_off: int
    payload_off: int
    payload_len: int
    outer_dscp: int
    outer_ecn: int
    outer_flow_label: int
    outer_next_header: int
    outer_payload_length: int
    outer_hop_limit: int
    srh_next_header: int
    srh_segments_left: int
    srh_last_entry: int
    srh_flags: int
    srh_tag: int
    srh_tlv_off: int
    srh_tlv_len: int
    inner_dscp: int
    inner_ecn: int
    inner_flow_label: int
    inner_next_header: int
    inner_payload_length: int
    inner_hop_limit: int
    sport: int
    dport: int
    udp_length: int
    udp_checksum: int
    opcode: int
    dest_qp: int
    psn: int
    ack_req: int
    rtx: int
    ts: int
    r: int
    se: int
    migreq: int
    pad: int
    tver: int
    pkey: int
    ev: int
    ce: int
    trimmed: int
    trim_lasthop: int
    is_data: int
    va: int
    rkey: int
    length: int
    has_imm: int
    imm: int
    rqmsn: int
    msn: int
    has_tseth: int
    timestamp: int
    tsr: int
    ftype: int
    has_aeth: int
    aeth_syndrome: int
    aeth_msn: int
    has_seth: int
    sack_ev: int
    cack_psn: int
    ack_offset: int
    sack_offset: int
    mpr: int
    mode: int
    pr: int
    spdcid: int
    dpdcid: int
    cc_type: int
    cc_flags: int
    bitmap: int
    ts_echo: int
    ooo_count: int
    restore_cwnd: int
    window_penalty: int
    rcvd_bytes: int
    has_neth: int
    nack_reason: int
    nack_vendor: int
    nack_ev: int
    nack_psn: int
    nack_spdcid: int
    nack_dpdcid: int
    nack_cc_type: int
    nack_cc_flags: int
    nack_ts_echo: int
    has_probe: int
    probe_id: int
    probe_vendor: int
    probe_spdcid: int
    probe_dpdcid: int
    probe_timestamp: int
    probe_tsr: int
    probe_ftype: int
    has_erth: int
    has_eeth: int
    ep_op: int
    ep_vendor: int
    ep_port_mask: int
    ep_timestamp: int
    ep_tsr: int
    ep_ftype: int

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)
        self.why = ""

    def fields(self) -> dict[str, int]:
        """Every field but ``why`` (for comparing records)."""
        return {n: int(getattr(self, n)) for n in self.__slots__ if n != "why"}


def _byte_view(buf: bytes | bytearray | memoryview) -> memoryview:
    mv = memoryview(buf)
    return mv.cast("B") if mv.ndim != 1 or mv.itemsize != 1 else mv


def py_parse(buf: bytes | bytearray | memoryview, verify: bool = True) -> PyParsed:
    """The pure-Python parser of the receive path: :func:`mrcnet.wire.parse_frame`, its
    Frame flattened into a :class:`PyParsed`. Raises ``MalformedFrame`` like it."""
    mv = _byte_view(buf)
    f = parse_frame(mv, verify_checksum=verify, verify_icrc=verify,
                    checksum_ok=fast_udp6_checksum_ok, icrc_fn=fast_icrc)
    p = PyParsed()
    o, bth = f.outer, f.bth
    p.end = min(_OUTER_END + o.payload_length, len(mv))
    (p.outer_dscp, p.outer_ecn, p.outer_flow_label, p.outer_next_header,
     p.outer_payload_length, p.outer_hop_limit) = (
        o.dscp, o.ecn, o.flow_label, o.next_header, o.payload_length, o.hop_limit)
    off = _OUTER_END
    if f.srh is not None:
        s = f.srh
        p.srh_off = off
        (p.srh_next_header, p.srh_segments_left, p.srh_last_entry, p.srh_flags,
         p.srh_tag) = (s.next_header, s.segments_left, s.last_entry, s.flags, s.tag)
        p.srh_tlv_off = off + SRH_FIXED_LEN + 16 * len(s.segments)
        p.srh_tlv_len = len(s.tlvs)
        off += s.length
    p.src_off = _SRC_OFF_OUTER
    if f.inner is not None:
        i = f.inner
        p.inner_off = off
        p.src_off = off + 8
        (p.inner_dscp, p.inner_ecn, p.inner_flow_label, p.inner_next_header,
         p.inner_payload_length, p.inner_hop_limit) = (
            i.dscp, i.ecn, i.flow_label, i.next_header, i.payload_length, i.hop_limit)
        off += IPV6_HEADER_LEN
    p.udp_off = off
    u = f.udp
    p.sport, p.dport, p.udp_length, p.udp_checksum = u.sport, u.dport, u.length, u.checksum
    (p.opcode, p.dest_qp, p.psn, p.ack_req, p.rtx, p.ts, p.r, p.se, p.migreq, p.pad, p.tver,
     p.pkey) = (bth.opcode, bth.dest_qp, bth.psn, int(bth.ack_req), int(bth.rtx),
                int(bth.ts), int(bth.r), int(bth.se), int(bth.migreq), bth.pad, bth.tver,
                bth.pkey)
    p.ev, p.ce, p.trimmed, p.is_data = f.ev, int(f.ce), int(f.trimmed), int(f.is_data)
    p.trim_lasthop = int(f.trim_lasthop)
    off += UDP_HEADER_LEN + BTH_LEN
    if f.reth is not None and f.meth is not None:
        off += METH.LEN
        p.rqmsn, p.msn = f.meth.rqmsn, f.meth.msn
        if f.tseth is not None:
            t = f.tseth
            p.has_tseth, p.timestamp, p.tsr, p.ftype = 1, t.timestamp, int(t.tsr), t.ftype
            off += TSETH.LEN
        p.va, p.rkey, p.length = f.reth.va, f.reth.rkey, f.reth.length
        off += RETH.LEN
        if f.immdt is not None:
            p.has_imm, p.imm = 1, f.immdt.imm
            off += ImmDt.LEN
        p.payload_off, p.payload_len = off, len(f.payload)
    if f.aeth is not None:
        p.has_aeth, p.aeth_syndrome, p.aeth_msn = 1, f.aeth.syndrome, f.aeth.msn
    if f.seth is not None and f.cc is not None:
        s2, c = f.seth, f.cc
        p.has_seth = 1
        (p.sack_ev, p.cack_psn, p.ack_offset, p.sack_offset, p.mpr, p.mode, p.pr, p.spdcid,
         p.dpdcid, p.cc_type, p.cc_flags, p.bitmap) = (
            s2.entropy, s2.cack_psn, s2.ack_psn_offset, s2.sack_offset, s2.mpr, s2.m,
            int(s2.pr), s2.spdcid, s2.dpdcid, s2.cc_type, s2.cc_flags, s2.sack_bitmap)
        p.ts_echo, p.ooo_count, p.restore_cwnd, p.window_penalty, p.rcvd_bytes = (
            c.timestamp, c.ooo_count, int(c.restore_cwnd), c.rcv_cwnd_pen, c.rcvd_bytes)
    if f.neth is not None:
        n = f.neth
        p.has_neth = 1
        (p.nack_reason, p.nack_vendor, p.nack_ev, p.nack_psn, p.nack_spdcid, p.nack_dpdcid,
         p.nack_cc_type, p.nack_cc_flags, p.nack_ts_echo) = (
            n.reason, n.vendor, n.entropy, n.nack_psn, n.spdcid, n.dpdcid, n.cc_type,
            n.cc_flags, n.timestamp)
    if f.peth is not None:
        pr = f.peth
        p.has_probe = 1
        (p.probe_id, p.probe_vendor, p.probe_spdcid, p.probe_dpdcid, p.probe_timestamp,
         p.probe_tsr, p.probe_ftype) = (pr.probe_id, pr.vendor, pr.spdcid, pr.dpdcid,
                                        pr.timestamp, int(pr.tsr), pr.ftype)
    if f.erth is not None:
        e = f.erth
        p.has_erth = 1
        p.ep_op, p.ep_vendor, p.ep_port_mask, p.ep_timestamp, p.ep_tsr, p.ep_ftype = (
            e.op, e.vendor, e.port_status_mask, e.timestamp, int(e.tsr), e.ftype)
    if f.eeth is not None:
        p.has_eeth, p.ep_op, p.ep_timestamp = 1, f.eeth.op, f.eeth.timestamp
    return p


def c_parse(buf: bytes | bytearray | memoryview, verify: bool = True,
            out: Any = None) -> Any:
    """The C parser (``mrc_parse``): a ``struct mrc_parsed`` cdata with the fields of
    :class:`PyParsed`. Fills ``out`` if given (a reused ``struct mrc_parsed *``), else a
    new one. Raises ``MalformedFrame`` with the reason :func:`py_parse` would give."""
    if C is None:
        raise RuntimeError(NOT_BUILT)
    if out is None:
        out = ffi.new("struct mrc_parsed *")
    mv = _byte_view(buf) if type(buf) is memoryview else buf
    rc = C.mrc_parse(ffi.from_buffer(mv), len(mv), out, VERIFY_ALL if verify else 0)
    if rc:
        raise MalformedFrame(PARSE_REASONS[rc], ffi.string(out.why).decode())
    return out


class FrameParser:
    """The receive path's parser, one per receiving loop (a Host has one).

    ``parse(frame, verify)`` returns a :class:`PyParsed`-shaped record or raises
    ``MalformedFrame``. With the C fast path the record is this parser's own C struct,
    overwritten by the next ``parse``: read what you need before parsing again.
    ``use_c=False`` forces the Python reference (for benchmarks and tests).
    """

    def __init__(self, use_c: bool | None = None) -> None:
        self.use_c = HAVE_C if use_c is None else use_c
        if self.use_c and C is None:
            raise RuntimeError(NOT_BUILT)
        self._out: Any = ffi.new("struct mrc_parsed *") if self.use_c else None
        if self.use_c:
            self.parse = self._parse_c  # type: ignore[method-assign]

    def parse(self, buf: bytes | bytearray | memoryview, verify: bool = True) -> PyParsed:
        """Parse one frame (see the class docstring)."""
        return py_parse(buf, verify)

    def _parse_c(self, buf: bytes | bytearray | memoryview, verify: bool = True) -> PyParsed:
        out = self._out
        # bytes go to a const uint8_t * as they are; other buffers need a cdata view.
        if type(buf) is bytes:
            rc = C.mrc_parse(buf, len(buf), out, VERIFY_ALL if verify else 0)
        else:
            if type(buf) is memoryview and (buf.itemsize != 1 or buf.ndim != 1):
                buf = buf.cast("B")  # (_byte_view's work, inlined: runs per frame)
            rc = C.mrc_parse(ffi.from_buffer(buf), len(buf), out,
                              VERIFY_ALL if verify else 0)
        if rc:
            raise MalformedFrame(PARSE_REASONS[rc], ffi.string(out.why).decode())
        return out  # type: ignore[no-any-return]  # the C struct has PyParsed's fields



def parsed_to_frame(buf: bytes | bytearray | memoryview, p: PyParsed | Any) -> Frame:
    """The :class:`mrcnet.wire.Frame` a parsed record describes: header fields from the
    record, addresses, MACs and SRH segments from ``buf`` at the record's offsets. Equal
    to ``parse_frame(buf)`` for the same frame (the differential tests check it)."""
    mv = _byte_view(buf)

    def b(off: int, n: int = 16) -> bytes:
        return bytes(mv[off : off + n])

    eth = Ethernet(b(0, 6), b(6, 6), ETH_P_IPV6)
    outer = IPv6(b(_SRC_OFF_OUTER), b(_SRC_OFF_OUTER + 16), p.outer_next_header,
                 p.outer_payload_length, p.outer_hop_limit, p.outer_dscp, p.outer_ecn,
                 p.outer_flow_label)
    srh = None
    if p.srh_off:
        segs = tuple(b(p.srh_off + SRH_FIXED_LEN + 16 * i) for i in range(p.srh_last_entry + 1))
        srh = SRH(p.srh_next_header, segs, p.srh_segments_left, p.srh_flags, p.srh_tag,
                  b(p.srh_tlv_off, p.srh_tlv_len))
    inner = None
    if p.inner_off:
        inner = IPv6(b(p.inner_off + 8), b(p.inner_off + 24), p.inner_next_header,
                     p.inner_payload_length, p.inner_hop_limit, p.inner_dscp, p.inner_ecn,
                     p.inner_flow_label)
    udp = UDP(p.sport, p.dport, p.udp_length, p.udp_checksum)
    bth = BTH(p.opcode, p.dest_qp, p.psn, ack_req=bool(p.ack_req), rtx=bool(p.rtx),
              ts=bool(p.ts), r=bool(p.r), se=bool(p.se), migreq=bool(p.migreq), pad=p.pad,
              tver=p.tver, pkey=p.pkey)
    end = p.end
    f = Frame(eth, outer, srh, inner, udp, bth,
              mv[:end][p.payload_off : p.payload_off + p.payload_len] if p.is_data
              else mv[0:0], trimmed=bool(p.trimmed), trim_lasthop=bool(p.trim_lasthop))
    if p.is_data:
        f.meth = METH(p.rqmsn, p.msn)
        if p.has_tseth:
            f.tseth = TSETH(p.timestamp, bool(p.tsr), p.ftype)
        f.reth = RETH(p.va, p.rkey, p.length)
        if p.has_imm:
            f.immdt = ImmDt(p.imm)
    if p.has_aeth:
        f.aeth = AETH(p.aeth_syndrome, p.aeth_msn)
    if p.has_seth:
        f.seth = SETH(p.cack_psn, p.sack_ev, p.ack_offset, p.sack_offset, p.bitmap, p.mode,
                      bool(p.pr), p.spdcid, p.dpdcid, p.cc_type, p.cc_flags, p.mpr)
        f.cc = CCState(p.ts_echo, p.ooo_count, bool(p.restore_cwnd), p.window_penalty,
                       p.rcvd_bytes)
    if p.has_neth:
        f.neth = NETH(p.nack_reason, p.nack_ev, p.nack_psn, p.nack_ts_echo, p.nack_vendor,
                      p.nack_spdcid, p.nack_dpdcid, p.nack_cc_type, p.nack_cc_flags)
    if p.has_probe:
        f.peth = PETH(p.probe_id, p.probe_timestamp, p.probe_vendor, p.probe_spdcid,
                      p.probe_dpdcid, bool(p.probe_tsr), p.probe_ftype)
    if p.has_erth:
        f.erth = ERTH(p.ep_op, p.ep_port_mask, p.ep_timestamp, p.ep_vendor, bool(p.ep_tsr),
                      p.ep_ftype)
        # An endpoint request ends with its ERTH and the ICRC (parse_frame checks it).
        f.endpoint_token = erth_token(mv, end - ICRC_LEN - ERTH.LEN)
    if p.has_eeth:
        f.eeth = EETH(p.ep_op, p.ep_timestamp)
    return f

