"""scapy layers for MRC, so captures decode in scapy (a test oracle, never the data path).

Importing this module registers the layers: UDP destination port 4791 dissects as
:class:`MRC_BTH` (instead of scapy's RoCE BTH, whose byte after DestQP has different
bits), then the extension headers each opcode carries (see :mod:`mrcnet.wire.frame`)::

    data (WRITE_*):        METH [TSETH if BTH.ts] RETH [ImmDt if *_IMM] payload
    ACK:                   AETH
    SACK:                  SETH CCState
    NACK:                  NETH
    RELIABILITY_PROBE:     PETH
    ENDPOINT_REQ:          ERTH
    ENDPOINT_RESP:         EETH

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
    StrFixedLenField,
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
    "MRC_AETH",
    "MRC_BTH",
    "MRC_EETH",
    "MRC_ERTH",
    "MRC_METH",
    "MRC_NETH",
    "MRC_PETH",
    "MRC_RETH",
    "MRC_SETH",
    "MRC_TSETH",
    "MRC_CCState",
    "MRC_ImmDt",
    "mrc_icrc",
    "register",
]

def _names(enum: type[IntEnum]) -> dict[int, str]:
    """Value -> name of an enum, as scapy's enum fields show them."""
    return {int(m): m.name for m in enum}


def _psn24(name: str, reserved: str) -> list[AnyField]:
    """A 24-bit PSN (or QPN) behind a reserved byte: MRC's usual 32-bit word."""
    return [XByteField(reserved, 0), BitField(name, 0, 24)]


def _ts_format(prefix: str = "") -> list[AnyField]:
    """The half-word after a 16-bit timestamp: TSR(1), reserved(11), format type(4)."""
    return [BitField(prefix + "tsr", 0, 1), BitField(prefix + "ts_reserved", 0, 11),
            BitField(prefix + "ftype", 1, 4)]


_OPCODE_NAMES = _names(Opcode)
_ICRC_PREFIX = b"\xff" * 8  # RoCEv2: stands for the InfiniBand LRH the CRC once covered


def _bth_of(pkt: Packet) -> MRC_BTH | None:
    """The MRC_BTH below ``pkt`` (extension headers decide what follows from it)."""
    u = pkt.underlayer
    while u is not None and not isinstance(u, MRC_BTH):
        u = u.underlayer
    return u


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
            return MRC_METH
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


class MRC_METH(Packet):
    """Message extended header, in every data packet: RQMSN and MSN."""

    name = "MRC METH"
    fields_desc = [ShortField("rqmsn", 0), ShortField("msn", 0)]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        """TSETH when BTH.ts, else RETH."""
        bth = _bth_of(self)
        return MRC_TSETH if bth is not None and bth.ts else MRC_RETH


class MRC_TSETH(Packet):
    """Send timestamp (microseconds mod 2**16), present when BTH.ts is set."""

    name = "MRC TSETH"
    fields_desc = [ShortField("timestamp", 0), *_ts_format()]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        """RETH follows."""
        return MRC_RETH


class MRC_RETH(Packet):
    """RDMA Extended Transport Header, in every data packet: VA, rkey, this packet's length."""

    name = "MRC RETH"
    fields_desc = [
        XLongField("va", 0),
        XIntField("rkey", 0),
        IntField("dma_len", 0),
    ]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        """ImmDt for *_IMM opcodes, else the payload."""
        bth = _bth_of(self)
        return MRC_ImmDt if bth is not None and bth.opcode in IMM_OPCODES else Raw


class MRC_ImmDt(Packet):
    """The 32-bit immediate value, last before the payload."""

    name = "MRC ImmDt"
    fields_desc = [XIntField("imm", 0)]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        """The payload follows."""
        return Raw


class MRC_AETH(Packet):
    """ACK extended header: syndrome and MSN (BTH.psn is the cumulative ACK)."""

    name = "MRC AETH"
    fields_desc = [XByteField("syndrome", 0x1F), BitField("msn", 0, 24)]


class MRC_SETH(Packet):
    """SACK extended header."""

    name = "MRC SETH"
    fields_desc = [
        BitField("type_next", 0, 9),
        BitEnumField("m", 0, 2, _names(SackMode)),
        BitField("flags_reserved", 0, 3),
        BitField("pr", 0, 1),
        BitField("flags_reserved2", 0, 1),
        SignedShortField("ack_psn_offset", 0),
        XIntField("entropy", 0),
        ShortField("spdcid", 0),
        ShortField("dpdcid", 0),
        *_psn24("cack_psn", "reserved"),
        BitField("cc_type", 0, 4),
        BitField("cc_flags", 0, 4),
        ByteField("mpr", 0),
        SignedShortField("sack_offset", 0),
        XLongField("sack_bitmap", 0),
    ]


class MRC_CCState(Packet):
    """CC_STATE after the SETH."""

    name = "MRC CC_STATE"
    fields_desc = [
        ShortField("timestamp", 0),
        BitField("reserved", 0, 1),
        BitField("ooo_count", 0, 15),
        BitField("restore_cwnd", 0, 1),
        BitField("rcv_cwnd_pen", 0, 7),
        BitField("rcvd_bytes", 0, 24),
    ]


class MRC_NETH(Packet):
    """NACK extended header."""

    name = "MRC NETH"
    fields_desc = [
        XShortField("type_next", 0),
        ByteEnumField("reason", NackReason.TRIMMED, _names(NackReason)),
        XByteField("vendor", 0),
        XIntField("entropy", 0),
        ShortField("spdcid", 0),
        ShortField("dpdcid", 0),
        *_psn24("nack_psn", "reserved"),
        BitField("cc_type", 2, 4),
        BitField("cc_flags", 0, 4),
        XByteField("reserved2", 0),
        ShortField("timestamp", 0),
    ]


class MRC_PETH(Packet):
    """Reliability probe extended header."""

    name = "MRC PETH"
    fields_desc = [
        XShortField("type_next", 0),
        XByteField("reserved", 0),
        XByteField("vendor", 0),
        ShortField("probe_id", 0),
        XShortField("reserved2", 0),
        ShortField("spdcid", 0),
        ShortField("dpdcid", 0),
        ShortField("timestamp", 0),
        *_ts_format(),
    ]


class MRC_ERTH(Packet):
    """Endpoint operation request header (EV probe, port status), to the reserved QPN;
    the request id is BTH.psn."""

    name = "MRC ERTH"
    fields_desc = [
        XByteField("type_next", 0),
        BitField("reserved", 0, 6),
        BitEnumField("op", EndpointOp.EV_PROBE, 2, _names(EndpointOp)),
        XByteField("reserved2", 0),
        XByteField("vendor", 0),
        XIntField("port_status_mask", 0),
        XIntField("reserved3", 0),
        ShortField("timestamp", 0),
        *_ts_format(),
    ]


class MRC_EETH(Packet):
    """Endpoint operation response header (36 bytes): op and echoed timestamp."""

    name = "MRC EETH"
    fields_desc = [
        XByteField("type_next", 0),
        BitField("reserved", 0, 2),
        BitEnumField("op", EndpointOp.EV_PROBE, 2, _names(EndpointOp)),
        BitField("reserved2", 0, 4),
        StrFixedLenField("reserved3", b"\0" * 26, 26),
        ShortField("timestamp", 0),
        StrFixedLenField("reserved4", b"\0" * 6, 6),
    ]


_EXT_BY_OPCODE: dict[int, type[Packet]] = {
    Opcode.ACK: MRC_AETH,
    Opcode.SACK: MRC_SETH,
    Opcode.NACK: MRC_NETH,
    Opcode.RELIABILITY_PROBE: MRC_PETH,
    Opcode.ENDPOINT_REQ: MRC_ERTH,
    Opcode.ENDPOINT_RESP: MRC_EETH,
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
    # Building BTH()/SETH() etc. picks an opcode that carries that header.
    for op, layer in ((Opcode.ACK, MRC_AETH), (Opcode.SACK, MRC_SETH),
                      (Opcode.NACK, MRC_NETH), (Opcode.RELIABILITY_PROBE, MRC_PETH)):
        bind_top_down(MRC_BTH, layer, opcode=op)
    bind_top_down(MRC_BTH, MRC_ERTH, opcode=Opcode.ENDPOINT_REQ, dqpn=ENDPOINT_QPN)
    bind_top_down(MRC_BTH, MRC_EETH, opcode=Opcode.ENDPOINT_RESP, dqpn=ENDPOINT_QPN)
    bind_top_down(MRC_BTH, MRC_METH, opcode=Opcode.WRITE_ONLY)


register()
