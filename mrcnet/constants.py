"""Every MRC protocol constant, in one place.

Layouts and values marked [M] in ../shared/design/PROTOCOL-NOTES.md come from third-party
readings of the OCP MRC 1.0 specification; they live here (and in the one codec module that
uses each) so that a correction is a one-line change.
"""

from __future__ import annotations

import enum
from typing import Final

# --- Ethernet -------------------------------------------------------------------------
ETH_HEADER_LEN: Final = 14
ETH_P_IPV6: Final = 0x86DD
ETH_ALEN: Final = 6

# --- IPv6 -----------------------------------------------------------------------------
IPV6_HEADER_LEN: Final = 40
IPV6_VERSION: Final = 6
IPPROTO_ROUTING: Final = 43  # IPv6 routing header (SRH is routing type 4)
IPPROTO_IPV6: Final = 41  # IPv6-in-IPv6 encapsulation
IPPROTO_UDP: Final = 17
IPPROTO_NONE: Final = 59
DEFAULT_HOP_LIMIT: Final = 64
FLOW_LABEL_MASK: Final = 0xFFFFF

# --- SRv6 -----------------------------------------------------------------------------
SRH_ROUTING_TYPE: Final = 4  # RFC 8754
SRH_FIXED_LEN: Final = 8
SRH_TLV_PAD1: Final = 0
SRH_TLV_PADN: Final = 4
# Micro-SIDs, F3216 format (RFC 9800 NEXT-C-SID): 32-bit locator block + 16-bit uSIDs.
USID_BLOCK_BITS: Final = 32
USID_BITS: Final = 16
USID_MAX_PER_CONTAINER: Final = (128 - USID_BLOCK_BITS) // USID_BITS  # 6

# --- UDP / RoCEv2 ---------------------------------------------------------------------
UDP_HEADER_LEN: Final = 8
MRC_UDP_PORT: Final = 4791  # RoCEv2 destination port, shared by MRC
ICRC_LEN: Final = 4

# --- Differentiated services (IPv6 traffic class = DSCP << 2 | ECN) -------------------
# The code points are operator settings (UEC 1.0.3 section 4.1; the fabric description's
# "dscp" object, mrcd's "dscp" key, HostConfig.dscp, the simulator's spec): these are the
# defaults, the one place they are written (mrcnet.wire.dscp.DscpClasses reads them).
# The six classes must be distinct.
DSCP_TRIMMABLE: Final = 26  # AF31: ordinary data (a switch may trim it)
DSCP_TRIMMABLE_RETX: Final = 28  # AF32: retransmitted data (trimmable; same AF class)
DSCP_TRIMMED: Final = 40  # CS5: a switch trimmed the packet (not at the last hop)
DSCP_TRIMMED_LASTHOP: Final = 32  # CS4: the leaf's port to the receiver trimmed it (incast)
DSCP_NO_TRIM: Final = 0  # default/best effort: a switch drops, never trims, such packets
DSCP_CONTROL: Final = 46  # EF: SACK / NACK / probes (high priority, like trimmed headers)
DSCP_DATA: Final = DSCP_TRIMMABLE  # the older name of TRIMMABLE


class ECN(enum.IntEnum):
    """The two ECN bits of the IPv6 traffic class (RFC 3168)."""

    NOT_ECT = 0b00
    ECT1 = 0b01
    ECT0 = 0b10
    CE = 0b11


# --- Entropy values -------------------------------------------------------------------
# [M+] The 32-bit EV rides in the UDP source port and the low 16 bits of the flow label
# (inner and outer IPv6 header). By default its low 16 bits go in the source port and its
# high 16 bits in the flow label (PROTOCOL-NOTES section 8: the plane stays visible in the
# port); EV_ORDER_SPORT_HIGH is the other order, a setting (mrcnet.wire.udp.set_ev_order).
# The receiver reflects the EV in SACK/NACK so the sender learns which path a signal
# belongs to (the uSID destination is consumed hop by hop).
EV_BITS: Final = 32
EV_HALF_SHIFT: Final = 16
EV_HALF_MASK: Final = 0xFFFF
EV_FLOW_LABEL_MASK: Final = 0xFFFF  # the flow label bits that carry half of the EV
EV_ORDER_SPORT_LOW: Final = 0  # default: sport = EV low 16, flow label = EV high 16
EV_ORDER_SPORT_HIGH: Final = 1  # the other order: sport = EV high 16, flow label = low 16
# How mrcnet numbers its EVs (a local choice: peers only reflect EVs, never decode them):
# bit 31 set | plane (7 bits, 24-30) | path index within the plane (12 bits, 12-23) |
# instance (12 bits, 0-11). See mrcnet.core.evs.make_ev / ev_path.
EV_MARK: Final = 1 << 31
EV_PLANE_SHIFT: Final = 24
EV_PLANE_MASK: Final = 0x7F
EV_PATH_SHIFT: Final = 12
EV_PATH_MASK: Final = 0xFFF
EV_INSTANCE_MASK: Final = 0xFFF

# --- BTH ------------------------------------------------------------------------------
BTH_LEN: Final = 12
BTH_TVER: Final = 0  # transport header version; anything else is rejected
DEFAULT_PKEY: Final = 0xFFFF
PSN_BITS: Final = 24
PSN_MOD: Final = 1 << PSN_BITS
PSN_MASK: Final = PSN_MOD - 1
QPN_MASK: Final = (1 << 24) - 1
# Connectionless endpoint operations (EV probes, port status) use a reserved QPN [M+].
ENDPOINT_QPN: Final = 0x2
FIRST_QPN: Final = 0x1  # connected QPs are numbered from here, ENDPOINT_QPN skipped
# BTH byte 8 flags [L: only one public reading shows them]
BTH_F_ACKREQ: Final = 0x80
BTH_F_R: Final = 0x40
BTH_F_RTX: Final = 0x20
BTH_F_TS: Final = 0x10


class Opcode(enum.IntEnum):
    """BTH opcodes MRC uses [M] (RC-style WRITE family plus MRC's own control packets)."""

    WRITE_FIRST = 0xC6
    WRITE_MIDDLE = 0xC7
    WRITE_LAST = 0xC8
    WRITE_LAST_IMM = 0xC9
    WRITE_ONLY = 0xCA
    WRITE_ONLY_IMM = 0xCB
    ACK = 0xD1
    ENDPOINT_REQ = 0xD8
    ENDPOINT_RESP = 0xD9
    SACK = 0xDC
    NACK = 0xDD
    RELIABILITY_PROBE = 0xDE


DATA_OPCODES: Final = frozenset(
    {
        Opcode.WRITE_FIRST,
        Opcode.WRITE_MIDDLE,
        Opcode.WRITE_LAST,
        Opcode.WRITE_LAST_IMM,
        Opcode.WRITE_ONLY,
        Opcode.WRITE_ONLY_IMM,
    }
)
IMM_OPCODES: Final = frozenset({Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY_IMM})
# Opcodes that end a message (the responder may complete the work request after these).
LAST_OPCODES: Final = frozenset(
    {Opcode.WRITE_LAST, Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM}
)

# --- Extension headers [M+] (PROTOCOL-NOTES section 8) ---------------------------------
# Data: BTH · METH · [TSETH if BTH.TS] · RETH · [ImmDt with *_IMM] · payload · ICRC
METH_LEN: Final = 4  # RQMSN(16) MSN(16): in every request packet
TSETH_LEN: Final = 4  # timestamp(16) TSR(1) reserved(11) format type(4): when BTH.TS
RETH_LEN: Final = 16  # VA(64) rkey(32) DMA length(32): in every data packet
IMMDT_LEN: Final = 4  # immediate data (32): with *_IMM opcodes, last before the payload
TS_FORMAT_TYPE: Final = 1  # TSETH / PETH / ERTH format type
TS_TSR_BIT: Final = 0x8000  # timestamp resolution flag (bit 15 of the second half-word)
TS_FTYPE_MASK: Final = 0xF
# Which optional headers a data frame built by the C run builder carries (bits; the C
# side's MRC_EXT_* in mrcnet/_csrc/template.h)
DATA_EXT_IMM: Final = 1  # ImmDt follows the RETH
DATA_EXT_TSETH: Final = 2  # TSETH follows the METH
AETH_LEN: Final = 4  # ACK: syndrome(8) MSN(24)
AETH_SYNDROME_ACK: Final = 0x1F  # IBTA: ACK, credit field "invalid" (no end-to-end credits)
SETH_LEN: Final = 28  # SACK extended header
CCSTATE_LEN: Final = 8  # congestion-control state that follows SETH
NETH_LEN: Final = 20  # NACK extended header
PETH_LEN: Final = 16  # reliability probe extended header
ERTH_LEN: Final = 16  # endpoint operation request header
EETH_LEN: Final = 36  # endpoint operation response header
SACK_BITMAP_BITS: Final = 64
WINDOW_PENALTY_MAX: Final = 127
OOO_COUNT_MAX: Final = 0x7FFF  # CC_STATE out-of-order count: 15 bits
RCVD_BYTES_UNIT: Final = 256  # CC_STATE received bytes: 24 bits in units of 256 bytes
RCVD_BYTES_MOD: Final = 1 << 24
MPR_MAX: Final = 0xFF  # SETH maximum PSN range: 8 bits in units of MPR_UNIT PSNs
CC_TYPE_NSCC: Final = 0  # SETH CC type [L]
CC_TYPE_NACK: Final = 2  # NETH CC type (both public readings write 2)
TIMESTAMP_MOD: Final = 1 << 16  # TSETH and echoed timestamps: microseconds mod 2^16
MSN_BITS: Final = 16  # METH RQMSN and MSN
MSN_MOD: Final = 1 << MSN_BITS
AETH_MSN_MASK: Final = 0xFFFFFF


class SackMode(enum.IntEnum):
    """The SACK's 2-bit M field: what the sender should do with the reflected EV [M]."""

    NONE = 0
    SKIP_ONCE = 1
    ALWAYS_SKIP = 2


class NackReason(enum.IntEnum):
    """NACK reason codes, shared with Ultra Ethernet's transport [M]."""

    TRIMMED = 0x01
    TRIMMED_LASTHOP = 0x02
    NO_BITMAP = 0x06
    NO_PKT_BUFFER = 0x07
    NO_RESOURCE = 0x0A
    PSN_OOR_WINDOW = 0x0B
    UNEXP_EVENT = 0x19


class EndpointOp(enum.IntEnum):
    """Connectionless endpoint operations, ERTH/EETH op (2 bits) [L: the code readings'
    values; mrc.h's API enum orders them the other way]."""

    PORT_STATUS = 0
    EV_PROBE = 1


# --- QP defaults (mrc.h names) ----------------------------------------------------------
ACK_TIMEOUT_UNIT_S: Final = 1.024e-6  # QP ack timeout = 1.024 us x 2^t
ACK_TIMEOUT_MAX_EXP: Final = 24
DEFAULT_EVS_PER_QP: Final = 128
MPR_UNIT: Final = 128  # mrc.h: the max PSN range (MPR) is given in units of 128 PSNs
RETRY_LINEAR_MAX: Final = 7  # mrc.h: limit of the linear (fixed-interval) retry phase
RETRY_EXP_INFINITE: Final = 25  # mrc.h: an exponential retry count of 25 means "forever"


# --- Fabric plan (mrc-fabric and mrc-sim build the same leaf-spine fabrics) -------------
# uSID plan, readable in hex: spine 0x1PSS, leaf 0x2PLL, host 0x4HHH (P plane, S/L index).
SPINE_USID_BASE: Final = 0x1000
LEAF_USID_BASE: Final = 0x2000
HOST_USID_BASE: Final = 0x4000
MAX_PLANES: Final = 16
MAX_PER_PLANE: Final = 256  # spines or leaves per plane (one uSID byte)
# Host uSIDs run 0x4000..0x7FFF (clear of the switches' 0x1PSS and 0x2PLL): 16384 hosts,
# what the simulator's deployment-scale fabrics (8192 hosts per plane) need.
MAX_HOSTS: Final = 0x4000
# A trimmed frame must keep every header of the largest data frame (Ethernet, outer and
# inner IPv6, UDP, BTH, RETH, METH, ImmDt, TSETH), plus a 4-segment SRH in srh mode: a
# switch that trimmed less would cut into what the receiver needs to NACK it.
MIN_TRIM_USID: Final = (ETH_HEADER_LEN + 2 * IPV6_HEADER_LEN + UDP_HEADER_LEN + BTH_LEN
                        + METH_LEN + TSETH_LEN + RETH_LEN + IMMDT_LEN)
MIN_TRIM_SRH: Final = MIN_TRIM_USID + SRH_FIXED_LEN + 4 * 16
MIN_TRIM: Final = {"usid": MIN_TRIM_USID, "srh": MIN_TRIM_SRH}
