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
    IPV6_HEADER_LEN,
    SRH_FIXED_LEN,
    UDP_HEADER_LEN,
)
from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.native import HAVE_C, NOT_BUILT, C, ffi
from mrcnet.wire import (
    BTH,
    METH,
    NETH,
    RETH,
    SETH,
    SRH,
    TSETH,
    UDP,
    CCState,
    EndpointHeader,
    Ethernet,
    Frame,
    ImmDt,
    IPv6,
    ProbeHeader,
    parse_frame,
)
from mrcnet.wire.checksum import fast_udp6_checksum_ok
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
        "ev", "ce", "trimmed", "is_data",
        "va", "rkey", "length", "has_imm", "msn", "imm", "has_tseth", "timestamp",
        "has_seth", "sack_ev", "cack_psn", "ack_offset", "sack_offset", "max_psn_range",
        "mode", "ece", "bitmap", "imm_credit", "ts_echo", "ooo_count", "window_penalty",
        "rcvd_bytes",
        "has_neth", "nack_reason", "nack_ev", "nack_psn", "nack_cack_psn", "nack_ts_echo",
        "has_probe", "probe_id", "probe_ev", "probe_psn", "probe_timestamp",
        "has_endpoint", "ep_op", "ep_status", "ep_request_id", "ep_ev", "ep_timestamp",
        "ep_port_mask",
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
    is_data: int
    va: int
    rkey: int
    length: int
    has_imm: int
    msn: int
    imm: int
    has_tseth: int
    timestamp: int
    has_seth: int
    sack_ev: int
    cack_psn: int
    ack_offset: int
    sack_offset: int
    max_psn_range: int
    mode: int
    ece: int
    bitmap: int
    imm_credit: int
    ts_echo: int
    ooo_count: int
    window_penalty: int
    rcvd_bytes: int
    has_neth: int
    nack_reason: int
    nack_ev: int
    nack_psn: int
    nack_cack_psn: int
    nack_ts_echo: int
    has_probe: int
    probe_id: int
    probe_ev: int
    probe_psn: int
    probe_timestamp: int
    has_endpoint: int
    ep_op: int
    ep_status: int
    ep_request_id: int
    ep_ev: int
    ep_timestamp: int
    ep_port_mask: int

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
    off += UDP_HEADER_LEN + BTH_LEN
    if f.reth is not None:
        p.va, p.rkey, p.length = f.reth.va, f.reth.rkey, f.reth.length
        off += RETH.LEN
        if f.meth is not None and f.immdt is not None:
            p.has_imm, p.msn, p.imm = 1, f.meth.msn, f.immdt.imm
            off += METH.LEN + ImmDt.LEN
        if f.tseth is not None:
            p.has_tseth, p.timestamp = 1, f.tseth.timestamp
            off += TSETH.LEN
        p.payload_off, p.payload_len = off, len(f.payload)
    if f.seth is not None and f.cc is not None:
        s2, c = f.seth, f.cc
        p.has_seth = 1
        (p.sack_ev, p.cack_psn, p.ack_offset, p.sack_offset, p.max_psn_range, p.mode, p.ece,
         p.bitmap, p.imm_credit) = (s2.ev, s2.cack_psn, s2.ack_offset, s2.sack_offset,
                                    s2.max_psn_range, s2.mode, int(s2.ece), s2.bitmap,
                                    s2.imm_credit)
        p.ts_echo, p.ooo_count, p.window_penalty, p.rcvd_bytes = (
            c.ts_echo, c.ooo_count, c.window_penalty, c.rcvd_bytes)
    if f.neth is not None:
        n = f.neth
        p.has_neth = 1
        p.nack_reason, p.nack_ev, p.nack_psn, p.nack_cack_psn, p.nack_ts_echo = (
            n.reason, n.ev, n.psn, n.cack_psn, n.ts_echo)
    if f.probe is not None:
        pr = f.probe
        p.has_probe = 1
        p.probe_id, p.probe_ev, p.probe_psn, p.probe_timestamp = (
            pr.probe_id, pr.ev, pr.psn, pr.timestamp)
    if f.endpoint is not None:
        e = f.endpoint
        p.has_endpoint = 1
        (p.ep_op, p.ep_status, p.ep_request_id, p.ep_ev, p.ep_timestamp,
         p.ep_port_mask) = (e.op, e.status, e.request_id, e.ev, e.timestamp, e.port_mask)
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
              else mv[0:0], trimmed=bool(p.trimmed))
    if p.is_data:
        f.reth = RETH(p.va, p.rkey, p.length)
        if p.has_imm:
            f.meth, f.immdt = METH(p.msn), ImmDt(p.imm)
        if p.has_tseth:
            f.tseth = TSETH(p.timestamp)
    if p.has_seth:
        f.seth = SETH(p.sack_ev, p.cack_psn, p.ack_offset, p.sack_offset, p.max_psn_range,
                      p.mode, bool(p.ece), p.bitmap, p.imm_credit)
        f.cc = CCState(p.ts_echo, p.ooo_count, p.window_penalty, p.rcvd_bytes)
    if p.has_neth:
        f.neth = NETH(p.nack_reason, p.nack_ev, p.nack_psn, p.nack_cack_psn, p.nack_ts_echo)
    if p.has_probe:
        f.probe = ProbeHeader(p.probe_id, p.probe_ev, p.probe_psn, p.probe_timestamp)
    if p.has_endpoint:
        f.endpoint = EndpointHeader(p.ep_op, p.ep_request_id, p.ep_ev, p.ep_timestamp,
                                    p.ep_port_mask, p.ep_status)
    return f

