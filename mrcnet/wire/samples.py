"""Conformance vectors: one MRC frame of every kind, with fixed, documented addresses.

Every frame is built by :mod:`mrcnet.wire.frame`, so these are what mrcnet sends; they are
written to a pcap by ``python -m mrcnet.wire sample-pcap FILE`` so other decoders (scapy
with :mod:`mrcnet.scapy`, tshark) and other implementations can be checked against them.

Addresses (RFC 4193 ULA space fc00::/16, locally administered MACs)::

    sender NIC        02:00:00:00:01:01   fc00:1::1   its leaf: 02:00:00:00:10:01
    receiver NIC      02:00:00:00:02:01   fc00:2::1   its leaf: 02:00:00:00:10:02
    uSID block        fc00:0::/32 (F3216: 32-bit block, 16-bit uSIDs)
    uSIDs             1001, 1002 = the two leaves, 2001 = spine, e001 / e002 = the
                      sender's / receiver's own uSID (ends the path, decapsulates)
    forward path      uSID fc00:0:1001:2001:1002:e002::
                      SRH  fc00:0:1001:: > fc00:0:2001:: > fc00:0:1002:: > fc00:2::1
    reverse path      uSID fc00:0:1002:2001:1001:e001::
                      SRH  fc00:0:1002:: > fc00:0:2001:: > fc00:0:1001:: > fc00:1::1

Data, probes and endpoint requests travel forward (to QPN 0x123; endpoint operations to
the reserved QPN 0x2); SACK, ACK, NACK and endpoint responses travel back (to QPN 0x456),
SACK and NACK reflecting the forward EV they answer. EVs follow the default order: the
low 16 bits in the UDP source port, the high 16 in the flow labels.

Unless its name says otherwise a frame is in uSID mode with an inner IPv6 header
(``encap``); ``-srh`` frames carry a classic segment list, ``-usid-srh`` MRC's SRH form (the
first uSID container fc00:0:1001:2001:: in the destination, the next, fc00:0:1002:e002::, in a
reduced one-segment SRH), ``-noencap`` frames have no inner header,
``-plain`` frames go straight to the receiver. ``write-middle-trimmed`` is a 1024-byte-payload
data frame as a switch forwards it after trimming: cut to 256 bytes, outer DSCP re-marked
``DSCP_TRIMMED``, IP and UDP lengths and the checksum left as they were;
``write-middle-trimmed-lasthop`` the same cut at the port to the receiving host (an incast,
not a path problem: ``DSCP_TRIMMED_LASTHOP``, answered with that NACK reason); ``write-only-ce``
is a data frame a switch marked CE (outer ECN only).

Caveat for tools: in uSID mode without an inner header the UDP pseudo-header destination is
the *fully shifted* container (``fc00:0:e002::``), what the receiver sees; a tool reading
the frame as sent (unshifted) reports its checksum as bad. ``Sample.checksum_as_sent`` is
False for those.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from mrcnet.constants import (
    DSCP_TRIMMED,
    DSCP_TRIMMED_LASTHOP,
    ECN,
    ETH_HEADER_LEN,
    EndpointOp,
    NackReason,
    Opcode,
    SackMode,
)
from mrcnet.wire.aeth import AETH
from mrcnet.wire.eeth import EETH
from mrcnet.wire.erth import ERTH
from mrcnet.wire.ethernet import mac_to_bytes
from mrcnet.wire.frame import (
    Route,
    build_ack,
    build_data,
    build_endpoint,
    build_nack,
    build_probe,
    build_sack,
)
from mrcnet.wire.ipv6 import ip6
from mrcnet.wire.neth import NETH
from mrcnet.wire.peth import PETH
from mrcnet.wire.seth import SETH, CCState
from mrcnet.wire.usid import usid_container

SENDER_MAC = mac_to_bytes("02:00:00:00:01:01")
SENDER_LEAF_MAC = mac_to_bytes("02:00:00:00:10:01")
RECEIVER_MAC = mac_to_bytes("02:00:00:00:02:01")
RECEIVER_LEAF_MAC = mac_to_bytes("02:00:00:00:10:02")
SENDER_IP = ip6("fc00:1::1")
RECEIVER_IP = ip6("fc00:2::1")
USID_BLOCK = ip6("fc00::")[:4]
PATH_USIDS = (0x1001, 0x2001, 0x1002, 0xE002)
REVERSE_USIDS = (0x1002, 0x2001, 0x1001, 0xE001)
USID_PATH = usid_container(USID_BLOCK, PATH_USIDS)
REVERSE_USID_PATH = usid_container(USID_BLOCK, REVERSE_USIDS)
SRH_PATH = (ip6("fc00:0:1001::"), ip6("fc00:0:2001::"), ip6("fc00:0:1002::"), RECEIVER_IP)
REVERSE_SRH_PATH = (
    ip6("fc00:0:1002::"), ip6("fc00:0:2001::"), ip6("fc00:0:1001::"), SENDER_IP
)

QPN = 0x000123
PEER_QPN = 0x000456
TRIM_SIZE = 256

_FWD = (SENDER_MAC, SENDER_LEAF_MAC, SENDER_IP, RECEIVER_IP)
_REV = (RECEIVER_MAC, RECEIVER_LEAF_MAC, RECEIVER_IP, SENDER_IP)
USID = Route(*_FWD, usid=USID_PATH)
USID_NOENCAP = Route(*_FWD, usid=USID_PATH, encap=False)
SRH = Route(*_FWD, segments=SRH_PATH)
SRH_NOENCAP = Route(*_FWD, segments=SRH_PATH, encap=False)
PLAIN = Route(*_FWD, encap=False)
# MRC's SRv6-with-SRH form: the first container in the destination, the next in a reduced
# one-segment SRH (for paths longer than one container holds).
USID_SRH = Route(*_FWD, usid=usid_container(USID_BLOCK, PATH_USIDS[:2]),
                 usid_srh=usid_container(USID_BLOCK, PATH_USIDS[2:]))
REVERSE_USID = Route(*_REV, usid=REVERSE_USID_PATH)
REVERSE_SRH_NOENCAP = Route(*_REV, segments=REVERSE_SRH_PATH, encap=False)


@dataclass(frozen=True, slots=True)
class Sample:
    """One conformance frame and what it is."""

    name: str
    description: str
    frame: bytes
    mode: str  # "usid", "usid-srh" (MRC's SRH form), "srh" (classic) or "plain"
    encap: bool
    trimmed: bool = False

    @property
    def checksum_as_sent(self) -> bool:
        """True when the UDP checksum verifies against the frame's own outer header.

        False for a trimmed frame (its bytes are gone) and for uSID mode without an inner
        header (the pseudo-header destination is the container as it arrives, shifted).
        """
        return not self.trimmed and not (self.mode == "usid" and not self.encap)


def switch_trim(frame: bytes, size: int = TRIM_SIZE, dscp: int = DSCP_TRIMMED) -> bytes:
    """What a trimming switch forwards: the first ``size`` bytes, outer DSCP re-marked.

    ECN is kept; the IPv6 payload length, UDP length and checksum are left unfixed, as
    most switches do (see PROTOCOL-NOTES.md, section 6).
    """
    if size >= len(frame):
        raise ValueError(f"a {len(frame)}-byte frame is not longer than the trim size {size}")
    out = bytearray(frame[:size])
    tc_hi = ETH_HEADER_LEN  # version(4) | traffic class(8) | flow label(20)
    ecn = (out[tc_hi + 1] >> 4) & 0b11
    tc = (dscp << 2) | ecn
    out[tc_hi] = (out[tc_hi] & 0xF0) | (tc >> 4)
    out[tc_hi + 1] = (out[tc_hi + 1] & 0x0F) | ((tc & 0x0F) << 4)
    return bytes(out)


def switch_mark_ce(frame: bytes) -> bytes:
    """What an ECN-marking switch forwards: the outer ECN field set to CE, nothing else.

    The inner header keeps the sender's ECT(0); neither the ICRC nor the UDP checksum
    covers the outer traffic class, so the frame still verifies.
    """
    out = bytearray(frame)
    out[ETH_HEADER_LEN + 1] |= ECN.CE << 4  # ECN: the traffic class's low 2 bits
    return bytes(out)


def _payload(n: int, seed: int = 0) -> bytes:
    """A recognisable payload: byte i is (seed + i) mod 256."""
    return bytes((seed + i) % 256 for i in range(n))


def _data(
    route: Route,
    op: Opcode,
    psn: int,
    *,
    ev: int = 0x0001_1001,
    payload: bytes | None = None,
    imm: bool = False,
    timestamp: int | None = None,
    rtx: bool = False,
    ack_req: bool = False,
) -> bytes:
    """A data frame to QPN at VA 0x10000000 + 64 * psn carrying 64 bytes (unless given)."""
    return build_data(
        route, ev=ev, opcode=op, dest_qp=QPN, psn=psn, va=0x1000_0000 + 64 * psn,
        rkey=0xCAFE0001, payload=_payload(64, psn) if payload is None else payload,
        rqmsn=7, msn=psn - 90, imm=0xC0FFEE00 if imm else None, timestamp=timestamp,
        rtx=rtx, ack_req=ack_req,
    )


def _nack(reason: NackReason) -> bytes:
    neth = NETH(reason=reason, entropy=0x0001_1001, nack_psn=103, timestamp=0x1234,
                spdcid=0x456, dpdcid=0x123)
    return build_nack(REVERSE_USID, ev=0x0002_2001, dest_qp=PEER_QPN, neth=neth, psn=103)


def _sack(route: Route, *, probe: bool = False) -> bytes:
    """PSNs up to 100 in order, 102, 104 and 105 too (bits 0, 2, 3 from 102); answers 104
    (CE-marked: M = SKIP_ONCE), or probe 42 (PR)."""
    seth = SETH(
        cack_psn=100, entropy=0x0001_1001, ack_psn_offset=42 if probe else 4, sack_offset=2,
        sack_bitmap=0b1101, m=SackMode.NONE if probe else SackMode.SKIP_ONCE, pr=probe,
        spdcid=0x456, dpdcid=0x123, mpr=8,
    )
    cc = CCState(timestamp=0x1234, ooo_count=3, rcv_cwnd_pen=5, rcvd_bytes=6400 // 256)
    return build_sack(route, ev=0x0002_2001, dest_qp=PEER_QPN, seth=seth, cc=cc)


def _build() -> list[Sample]:
    """Build every sample (cheap: a few dozen frames)."""
    specs: list[tuple[str, str, Callable[[], bytes], Route, bool]] = [
        ("write-first", "RDMA WRITE first packet", lambda: _data(USID, Opcode.WRITE_FIRST, 100),
         USID, False),
        ("write-middle", "RDMA WRITE middle packet",
         lambda: _data(USID, Opcode.WRITE_MIDDLE, 101), USID, False),
        ("write-last", "RDMA WRITE last packet", lambda: _data(USID, Opcode.WRITE_LAST, 102),
         USID, False),
        ("write-last-imm", "WRITE last with immediate (ImmDt after RETH)",
         lambda: _data(USID, Opcode.WRITE_LAST_IMM, 103, imm=True), USID, False),
        ("write-only", "single-packet WRITE", lambda: _data(USID, Opcode.WRITE_ONLY, 104),
         USID, False),
        ("write-only-imm", "single-packet WRITE with immediate",
         lambda: _data(USID, Opcode.WRITE_ONLY_IMM, 105, imm=True), USID, False),
        ("write-only-ts", "WRITE with a send timestamp (BTH.TS, TSETH)",
         lambda: _data(USID, Opcode.WRITE_ONLY, 106, timestamp=0x1234), USID, False),
        ("write-last-imm-ts", "WRITE last with immediate and timestamp (TSETH after METH)",
         lambda: _data(USID, Opcode.WRITE_LAST_IMM, 107, timestamp=0x1235, imm=True), USID, False),
        ("write-only-rtx", "retransmission (BTH.RTX) on another EV, ack requested",
         lambda: _data(USID, Opcode.WRITE_ONLY, 104, ev=0x0001_1002, rtx=True, ack_req=True),
         USID, False),
        ("write-only-srh", "WRITE in SRH mode (segment list), inner header",
         lambda: _data(SRH, Opcode.WRITE_ONLY, 108), SRH, False),
        ("write-only-srh-noencap", "WRITE in SRH mode without inner header",
         lambda: _data(SRH_NOENCAP, Opcode.WRITE_ONLY, 109), SRH_NOENCAP, False),
        ("write-only-usid-noencap", "WRITE in uSID mode without inner header",
         lambda: _data(USID_NOENCAP, Opcode.WRITE_ONLY, 110), USID_NOENCAP, False),
        ("write-only-usid-srh", "WRITE in MRC's SRH form: uSID container + a reduced SRH "
         "holding the next container", lambda: _data(USID_SRH, Opcode.WRITE_ONLY, 115),
         USID_SRH, False),
        ("write-only-plain", "WRITE straight to the receiver (no SRv6, no inner header)",
         lambda: _data(PLAIN, Opcode.WRITE_ONLY, 111), PLAIN, False),
        ("write-middle-trimmed", "data frame trimmed by a switch to 256 bytes",
         lambda: switch_trim(_data(USID, Opcode.WRITE_MIDDLE, 112, payload=_payload(1024))),
         USID, True),
        ("write-middle-trimmed-lasthop", "data frame trimmed at the last hop (the port to the "
         "receiver: incast), re-marked DSCP_TRIMMED_LASTHOP",
         lambda: switch_trim(_data(USID, Opcode.WRITE_MIDDLE, 116, payload=_payload(1024)),
                             dscp=DSCP_TRIMMED_LASTHOP),
         USID, True),
        ("write-only-ce", "data frame a switch marked Congestion Experienced (outer ECN)",
         lambda: switch_mark_ce(_data(USID, Opcode.WRITE_ONLY, 114)), USID, False),
        ("sack", "selective ACK reflecting EV 0x00011001", lambda: _sack(REVERSE_USID),
         REVERSE_USID, False),
        ("sack-probe-response", "SACK answering reliability probe 42 (PR, probe id in "
         "ack_psn_offset)", lambda: _sack(REVERSE_USID, probe=True), REVERSE_USID, False),
        ("ack", "RoCE cumulative ACK: PSN 100 and all before it (AETH)",
         lambda: build_ack(REVERSE_USID, ev=0x0002_2001, dest_qp=PEER_QPN, psn=100,
                           aeth=AETH(msn=3)), REVERSE_USID, False),
        ("sack-srh-noencap", "SACK in SRH mode without inner header",
         lambda: _sack(REVERSE_SRH_NOENCAP), REVERSE_SRH_NOENCAP, False),
    ]
    specs += [
        (f"nack-{r.name.lower().replace('_', '-')}", f"NACK, reason {r.name} ({r.value:#04x})",
         partial(_nack, r), REVERSE_USID, False)
        for r in NackReason
    ]
    specs += [
        ("probe", "reliability probe 42 on EV 0x00011003 (PETH; BTH.PSN: the next PSN)",
         lambda: build_probe(
             USID, ev=0x0001_1003, dest_qp=QPN,
             peth=PETH(probe_id=42, timestamp=0x1236, spdcid=0x123, dpdcid=0x456), psn=113,
         ), USID, False),
        ("ep-ev-probe-req", "endpoint EV probe request 9 on EV 0x00011004 (ERTH)",
         lambda: build_endpoint(USID, ev=0x0001_1004, request_id=9,
                                erth=ERTH(EndpointOp.EV_PROBE, timestamp=0x1237)),
         USID, False),
        ("ep-ev-probe-resp", "endpoint EV probe response 9 on the same EV (EETH)",
         lambda: build_endpoint(REVERSE_USID, ev=0x0001_1004, request_id=9,
                                eeth=EETH(EndpointOp.EV_PROBE, timestamp=0x1237)),
         REVERSE_USID, False),
        ("ep-port-status", "endpoint port status: planes 0, 1 and 3 of 4 live (ERTH)",
         lambda: build_endpoint(USID, ev=0x0001_1005, request_id=10,
                                erth=ERTH(EndpointOp.PORT_STATUS, port_status_mask=0b1011,
                                          timestamp=0x1238)),
         USID, False),
        ("ep-port-status-resp", "endpoint port status response 10 (EETH)",
         lambda: build_endpoint(REVERSE_USID, ev=0x0002_2005, request_id=10,
                                eeth=EETH(EndpointOp.PORT_STATUS, timestamp=0x1238)),
         REVERSE_USID, False),
    ]
    out = []
    for name, desc, make, route, trimmed in specs:
        mode = ("usid-srh" if route.usid_srh else "usid" if route.usid else
                "srh" if route.segments else "plain")
        out.append(Sample(name, desc, make(), mode, route.encap, trimmed))
    return out


def samples() -> list[Sample]:
    """Every conformance sample, in a fixed order (the pcap's order)."""
    return _build()


def sample(name: str) -> Sample:
    """The sample called ``name``; ``KeyError`` lists the known names."""
    for s in _build():
        if s.name == name:
            return s
    raise KeyError(f"no sample {name!r}; known: {', '.join(s.name for s in _build())}")
