"""scapy layers for MRC, so captures decode in scapy (a test oracle, never the data path).

Importing this module registers the layers: UDP destination port 4791 dissects as
:class:`MRC_BTH` (instead of scapy's RoCE BTH, whose byte after DestQP has different
bits), then the extension headers each opcode carries (see :mod:`mrcnet.wire.frame`)::

    data (WRITE_*):        RETH [METH ImmDt if *_IMM] [TSETH if BTH.ts] payload
    SACK, ACK:             SETH CCState
    NACK:                  NETH
    RELIABILITY_PROBE:     ProbeHeader
    ENDPOINT_REQ / _RESP:  EndpointHeader

The 4-byte ICRC at the end of the frame is :class:`MRC_BTH`'s trailer field ``icrc``
(stored little-endian, so the field holds the CRC-32 value itself). Building a packet with
``icrc=None`` computes it the way MRC does (:mod:`mrcnet.wire.icrc`): RoCEv2's invariant CRC
over the *inner* IPv6 header onwards when the frame is encapsulated, over UDP onwards when
it is not, because every outer field changes in flight in SRv6 mode. That computation is
written here independently of :mod:`mrcnet.wire` on purpose: the tests use this module as
an oracle for the wire code, so it must not share its code.

The field layouts restate the module docstrings of :mod:`mrcnet.wire` (one layer per
codec module); when a layout there changes, change it here too and the oracle tests say
whether the two still agree.
"""

from __future__ import annotations

import socket
import struct
import zlib
from enum import IntEnum

import scapy.contrib.roce as scapy_roce
from scapy.fields import (
    AnyField,
    BitEnumField,
    BitField,
    ByteEnumField,
    ByteField,
    ConditionalField,
    FCSField,
    IntField,
    ShortField,
    SignedShortField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, _IPv6ExtHdr
from scapy.packet import Packet, Raw, bind_layers, bind_top_down, split_bottom_up

from mrcnet.constants import (
    DATA_OPCODES,
    DEFAULT_PKEY,
    ENDPOINT_QPN,
    IMM_OPCODES,
    MRC_UDP_PORT,
    EndpointOp,
    NackReason,
    Opcode,
    SackMode,
)

__all__ = [
    "MRC_BTH",
    "MRC_EPH",
    "MRC_METH",
    "MRC_NETH",
    "MRC_RETH",
    "MRC_SETH",
    "MRC_TSETH",
    "MRC_CCState",
    "MRC_ImmDt",
    "MRC_Probe",
    "mrc_icrc",
    "register",
]

def _names(enum: type[IntEnum]) -> dict[int, str]:
    """Value -> name of an enum, as scapy's enum fields show them."""
    return {int(m): m.name for m in enum}


def _psn24(name: str, reserved: str) -> list[AnyField]:
    """A 24-bit PSN (or MSN, QPN) behind a reserved byte: MRC's usual 32-bit word."""
    return [XByteField(reserved, 0), BitField(name, 0, 24)]


def _ev_psn(psn: str, reserved: str) -> list[AnyField]:
    """The entropy value (EV) and then a 24-bit PSN behind a reserved byte."""
    return [XIntField("ev", 0), *_psn24(psn, reserved)]


def _timestamp(reserved: str) -> list[AnyField]:
    """A 16-bit timestamp (microseconds mod 2**16) padded to 32 bits by reserved ones."""
    return [ShortField("timestamp", 0), XShortField(reserved, 0)]


_OPCODE_NAMES = _names(Opcode)
_ICRC_PREFIX = b"\xff" * 8  # RoCEv2: stands for the InfiniBand LRH the CRC once covered


def _bth_of(pkt: Packet) -> MRC_BTH | None:
    """The MRC_BTH below ``pkt`` (extension headers decide what follows from it)."""
    u = pkt.underlayer
    while u is not None and not isinstance(u, MRC_BTH):
        u = u.underlayer
    return u


def _after_fixed_headers(pkt: Packet) -> type[Packet]:
    """What follows the last fixed extension header of a data packet: TSETH or payload."""
    bth = _bth_of(pkt)
    if bth is not None and bth.ts:
        return MRC_TSETH
    return Raw


class MRC_BTH(scapy_roce.BTH):
    """MRC Base Transport Header (12 bytes) plus the frame's trailing ICRC.

    scapy's RoCE BTH with MRC's byte after DestQP: A(ck request), R, RTX (retransmission),
    TS (a TSETH follows), 4 reserved bits. The byte before DestQP is all reserved in MRC
    (RoCE's FECN/BECN are unused: MRC signals congestion with ECN, trims and NACKs).
    """

    name = "MRC BTH"
    fields_desc = [
        ByteEnumField("opcode", Opcode.WRITE_ONLY, _OPCODE_NAMES),
        BitField("solicited", 0, 1),
        BitField("migreq", 0, 1),
        BitField("padcount", 0, 2),
        BitField("version", 0, 4),
        XShortField("pkey", DEFAULT_PKEY),
        *_psn24("dqpn", "resv8"),
        BitField("ackreq", 0, 1),
        BitField("r", 0, 1),
        BitField("rtx", 0, 1),
        BitField("ts", 0, 1),
        BitField("resv4", 0, 4),
        BitField("psn", 0, 24),
        # The ICRC is the frame's last 4 bytes, after the payload: a trailer field. A
        # trimmed frame has lost it with the payload (see pre_dissect).
        ConditionalField(
            FCSField("icrc", None, fmt="<I"), lambda pkt: not pkt.__dict__.get("icrc_absent")
        ),
    ]

    def pre_dissect(self, s: bytes) -> bytes:
        """Note whether the frame was cut short (trimmed): then no ICRC ends it.

        UDP hands its layer only the bytes its length covers, so fewer means a cut frame;
        without this, scapy would take the last 4 header bytes of a trimmed frame as ICRC.
        """
        udp = self.underlayer
        if isinstance(udp, UDP) and udp.len is not None and len(s) < udp.len - 8:
            self.__dict__["icrc_absent"] = True
        return s

    def post_build(self, p: bytes, pay: bytes) -> bytes:
        """Append the payload; fill the ICRC (the trailer's last 4 bytes) when unset."""
        p += pay
        if self.icrc is None and not self.__dict__.get("icrc_absent"):
            p = p[:-4] + struct.pack("<I", mrc_icrc(self, p[:-4]))
        return p

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        """Extension headers by opcode; an unknown opcode leaves raw bytes."""
        op = self.opcode
        if op in DATA_OPCODES:
            return MRC_RETH
        return _EXT_BY_OPCODE.get(op, Raw)

    def mysummary(self) -> str:
        """One line as scapy prints it in ``summary()``."""
        op = _OPCODE_NAMES.get(self.opcode, f"{self.opcode:#04x}")
        return str(self.sprintf(f"MRC {op} qp=%MRC_BTH.dqpn% psn=%MRC_BTH.psn%"))


def mrc_icrc(bth: Packet, bth_bytes: bytes) -> int:
    """MRC's ICRC for the frame whose BTH is ``bth``: CRC-32 with in-flight fields masked.

    ``bth_bytes`` is the BTH, its extension headers and the payload (no ICRC). Covered: an
    *encapsulated* IPv6 header directly under UDP (traffic class, flow label and hop limit
    set to ones), UDP (checksum set to ones), the BTH (reserved byte set to ones) onwards.
    """
    udp = bth.underlayer
    if not isinstance(udp, UDP):
        raise ValueError("MRC_BTH computes its ICRC from the UDP header under it: build it as "
                         "UDP()/MRC_BTH(), or give icrc= explicitly")
    udp_len = udp.len if udp.len is not None else 8 + len(bth_bytes) + 4
    head = b""
    ip = udp.underlayer
    # Only an inner header is covered: one under another IPv6 header or extension header.
    if isinstance(ip, IPv6) and isinstance(ip.underlayer, IPv6 | _IPv6ExtHdr):
        plen = ip.plen if ip.plen is not None else udp_len
        nh = ip.nh if ip.nh is not None else socket.IPPROTO_UDP
        head = (
            struct.pack("!IHBB", (6 << 28) | 0x0FFFFFFF, plen, nh, 0xFF)
            + socket.inet_pton(socket.AF_INET6, ip.src)
            + socket.inet_pton(socket.AF_INET6, ip.dst)
        )
    head += struct.pack("!HHHH", udp.sport, udp.dport, udp_len, 0xFFFF)
    masked = bytearray(bth_bytes)
    if len(masked) > 4:
        masked[4] = 0xFF
    return zlib.crc32(_ICRC_PREFIX + head + bytes(masked)) & 0xFFFFFFFF


class MRC_RETH(Packet):
    """RDMA Extended Transport Header, in every data packet: VA, rkey, this packet's length."""

    name = "MRC RETH"
    fields_desc = [
        XLongField("va", 0),
        XIntField("rkey", 0),
        IntField("dma_len", 0),
    ]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        """METH after RETH for *_IMM opcodes; else TSETH when BTH.ts; else payload."""
        bth = _bth_of(self)
        if bth is not None and bth.opcode in IMM_OPCODES:
            return MRC_METH
        return _after_fixed_headers(self)


class MRC_METH(Packet):
    """Message sequence number of a write-with-immediate."""

    name = "MRC METH"
    fields_desc = _psn24("msn", "reserved")


class MRC_ImmDt(Packet):
    """The 32-bit immediate value."""

    name = "MRC ImmDt"
    fields_desc = [XIntField("imm", 0)]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        """TSETH when BTH.ts, else payload."""
        return _after_fixed_headers(self)


class MRC_TSETH(Packet):
    """Send timestamp (microseconds mod 2**16), present when BTH.ts is set."""

    name = "MRC TSETH"
    fields_desc = _timestamp("reserved")


class MRC_SETH(Packet):
    """SACK extended header (SACK and ACK opcodes)."""

    name = "MRC SETH"
    fields_desc = [
        *_ev_psn("cack_psn", "reserved"),
        SignedShortField("ack_offset", 0),
        SignedShortField("sack_offset", 0),
        ShortField("max_psn_range", 0),
        # flags(16): bits 0-1 the M field, bit 2 ECE, the rest reserved.
        BitField("flags_reserved", 0, 13),
        BitField("ece", 0, 1),
        BitEnumField("mode", 0, 2, _names(SackMode)),
        XLongField("bitmap", 0),
        IntField("imm_credit", 0),
    ]


class MRC_CCState(Packet):
    """Congestion-control state after the SETH."""

    name = "MRC CC state"
    fields_desc = [
        ShortField("ts_echo", 0),
        ByteField("ooo_count", 0),
        ByteField("window_penalty", 0),
        IntField("rcvd_bytes", 0),
    ]


class MRC_NETH(Packet):
    """NACK extended header."""

    name = "MRC NETH"
    fields_desc = [
        ByteEnumField("reason", NackReason.TRIMMED, _names(NackReason)),
        XByteField("reserved1", 0),
        ShortField("ts_echo", 0),
        *_ev_psn("psn", "reserved2"),
        *_psn24("cack_psn", "reserved3"),
        XIntField("reserved4", 0),
    ]


class MRC_Probe(Packet):
    """Reliability probe header."""

    name = "MRC probe"
    fields_desc = [
        IntField("probe_id", 0),
        *_ev_psn("psn", "reserved"),
        *_timestamp("reserved2"),
    ]


class MRC_EPH(Packet):
    """Endpoint operation header (EV probe, port status), to the reserved QPN."""

    name = "MRC endpoint"
    fields_desc = [
        ByteEnumField("op", EndpointOp.EV_PROBE, _names(EndpointOp)),
        ByteField("status", 0),
        XShortField("reserved", 0),
        IntField("request_id", 0),
        XIntField("ev", 0),
        ShortField("timestamp", 0),
        XShortField("port_mask", 0),
    ]


_EXT_BY_OPCODE: dict[int, type[Packet]] = {
    Opcode.SACK: MRC_SETH,
    Opcode.ACK: MRC_SETH,
    Opcode.NACK: MRC_NETH,
    Opcode.RELIABILITY_PROBE: MRC_Probe,
    Opcode.ENDPOINT_REQ: MRC_EPH,
    Opcode.ENDPOINT_RESP: MRC_EPH,
}


def register() -> None:
    """Make UDP port 4791 dissect as MRC; idempotent (import calls it once).

    Our binding goes to the *front* of UDP's guess list: scapy takes the first match, and
    an EV's high bits in the source port may equal another protocol's bound port.
    """
    split_bottom_up(UDP, scapy_roce.BTH, dport=MRC_UDP_PORT)
    split_bottom_up(UDP, MRC_BTH, dport=MRC_UDP_PORT)
    UDP.payload_guess = [({"dport": MRC_UDP_PORT}, MRC_BTH), *UDP.payload_guess]
    # Building: UDP()/MRC_BTH() gets dport 4791, sport/len/chksum filled by scapy.
    bind_top_down(UDP, MRC_BTH, dport=MRC_UDP_PORT)
    bind_layers(MRC_SETH, MRC_CCState)
    bind_layers(MRC_METH, MRC_ImmDt)
    # Building BTH()/SETH() etc. picks an opcode that carries that header.
    for op, layer in ((Opcode.SACK, MRC_SETH), (Opcode.NACK, MRC_NETH),
                      (Opcode.RELIABILITY_PROBE, MRC_Probe)):
        bind_top_down(MRC_BTH, layer, opcode=op)
    bind_top_down(MRC_BTH, MRC_EPH, opcode=Opcode.ENDPOINT_REQ, dqpn=ENDPOINT_QPN)
    bind_top_down(MRC_BTH, MRC_RETH, opcode=Opcode.WRITE_ONLY)


register()
