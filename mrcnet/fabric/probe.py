"""Test frames through a fabric: build MRC-shaped frames with scapy and send them raw.

A test oracle and a debugging aid (``mrc-fabric probe``), never a data path: scapy builds
a few thousand frames per second. Frames are Ethernet / outer IPv6 (+SRH) / inner IPv6 /
UDP 4791 / payload, exactly the shape mrcd sends, so the switches treat them the same.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import time
from collections.abc import Iterator

from mrcnet.constants import DSCP_DATA, ECN, ETH_P_IPV6, MRC_UDP_PORT
from mrcnet.fabric.nsutil import in_netns
from mrcnet.topology.description import FabricDescription

ETH_P_ALL = 0x0003


def build_frame(
    desc: FabricDescription,
    src: str | int,
    dst: str | int,
    plane: int,
    spine: int | None,
    size: int = 200,
    dscp: int = DSCP_DATA,
    ecn: int = ECN.ECT0,
    srv6: str | None = None,
    sport: int = 0xC000,
) -> bytes:
    """One frame from ``src``'s port in ``plane`` to ``dst`` through ``spine``.

    ``size`` is the whole frame length in bytes (padded with zeros).
    ``srv6`` overrides the fabric's mode ("usid" or "srh").
    """
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    mode = srv6 or desc.srv6
    sport_ = desc.host(src).port(plane)
    inner_src, inner_dst = desc.inner_addresses(src, dst, plane)
    tclass = (dscp << 2) | int(ecn)
    inner = IPv6(src=str(inner_src), dst=str(inner_dst)) / UDP(sport=sport, dport=MRC_UDP_PORT)
    if mode == "usid":
        outer = IPv6(
            src=str(inner_src), dst=str(desc.path_container(src, dst, plane, spine)),
            tc=tclass, nh=41,
        )
        pkt = outer / inner
    else:
        segs = desc.path_segments(src, dst, plane, spine)
        srh = IPv6ExtHdrSegmentRouting(
            addresses=[str(s) for s in reversed(segs)], segleft=len(segs) - 1, nh=41
        )
        outer = IPv6(src=str(inner_src), dst=str(segs[0]), tc=tclass, nh=43)
        pkt = outer / srh / inner
    frame = Ether(src=sport_.mac, dst=sport_.neighbor_mac, type=ETH_P_IPV6) / pkt
    raw = bytes(frame)
    if len(raw) < size:
        raw = bytes(frame / Raw(b"\0" * (size - len(raw))))
    return raw


@contextlib.contextmanager
def packet_socket(netns: str, ifname: str, proto: int = ETH_P_ALL) -> Iterator[socket.socket]:
    """An AF_PACKET socket bound to ``ifname`` inside ``netns``."""
    with in_netns(netns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(proto))
    try:
        s.bind((ifname, proto))
        yield s
    finally:
        s.close()


def send_frames(
    desc: FabricDescription, src: str | int, plane: int, frames: list[bytes],
    pace_s: float = 0.0,
) -> None:
    """Send raw frames out of ``src``'s port in ``plane``."""
    host = desc.host(src)
    port = host.port(plane)
    with packet_socket(host.netns, port.ifname) as s:
        for f in frames:
            s.send(f)
            if pace_s:
                time.sleep(pace_s)


def parse_tclass(frame: bytes) -> tuple[int, int]:
    """(DSCP, ECN) of the outer IPv6 header of an Ethernet frame."""
    tc = ((frame[14] & 0x0F) << 4) | (frame[15] >> 4)
    return tc >> 2, tc & 3


def deliver(
    desc: FabricDescription,
    src: str | int,
    dst: str | int,
    plane: int,
    spine: int | None,
    count: int = 20,
    size: int = 600,
    timeout_s: float = 0.3,
    srv6: str | None = None,
) -> int:
    """Send ``count`` frames src -> dst on one path; return how many reached ``dst``.

    The receiver is an ETH_P_ALL packet socket on the destination port, which sees frames
    before the host's tc ingress drop, like mrcd.
    """
    frame = build_frame(desc, src, dst, plane, spine, size=size, srv6=srv6)
    dhost = desc.host(dst)
    got = 0
    with packet_socket(dhost.netns, dhost.port(plane).ifname) as rx:
        rx.settimeout(timeout_s)
        send_frames(desc, src, plane, [frame] * count)
        try:
            while got < count:
                data, addr = rx.recvfrom(65535)
                if addr[2] != socket.PACKET_OUTGOING and len(data) == size and data[12:14] == (
                    ETH_P_IPV6.to_bytes(2, "big")
                ):
                    got += 1
        except TimeoutError:
            pass
        except OSError as e:
            if e.errno != errno.ENETDOWN:  # the receiving port is down: nothing arrives
                raise
    return got
