"""seg6local routes over raw rtnetlink, including the NEXT-C-SID flavours.

pyroute2 0.9.7 has no SEG6_LOCAL_FLAVORS in its seg6local attribute map: it drops the
attribute when it encodes a route and decodes it as ``UNKNOWN`` without its payload. This
module encodes and decodes those attributes itself (linux/seg6_local.h), so the fabric can
check the kernel's *structured* view of every switch's End route, and install one without
iproute2 if needed. Bring-up installs routes with ``ip`` batches and verifies them here.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from dataclasses import dataclass

from mrcnet.fabric.errors import FabricError
from mrcnet.fabric.nsutil import in_netns

NETLINK_ROUTE = 0
RTM_NEWROUTE = 24
RTM_GETROUTE = 26
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_REPLACE = 0x100
NLM_F_CREATE = 0x400
NLM_F_DUMP = 0x300
NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF

RTA_DST = 1
RTA_OIF = 4
RTA_TABLE = 15
RTA_ENCAP_TYPE = 21
RTA_ENCAP = 22
RT_TABLE_MAIN = 254
RTPROT_BOOT = 3
RT_SCOPE_UNIVERSE = 0
RTN_UNICAST = 1
LWTUNNEL_ENCAP_SEG6_LOCAL = 7

# linux/seg6_local.h
SEG6_LOCAL_ACTION = 1
SEG6_LOCAL_FLAVORS = 11
SEG6_LOCAL_ACTION_END = 1
SEG6_LOCAL_FLV_OPERATION = 1
SEG6_LOCAL_FLV_LCBLOCK_BITS = 2
SEG6_LOCAL_FLV_LCNODE_FN_BITS = 3
SEG6_LOCAL_FLV_OP_NEXT_CSID = 4

_RTMSG = struct.Struct("=BBBBBBBBI")
_NLMSGHDR = struct.Struct("=IHHII")


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def _attrs(data: bytes) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    pos = 0
    while pos + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, pos)
        if length < 4:
            break
        out[kind & NLA_TYPE_MASK] = data[pos + 4 : pos + length]
        pos += (length + 3) & ~3
    return out


@dataclass(frozen=True)
class Seg6LocalRoute:
    """A seg6local route as the kernel reports it."""

    dst: ipaddress.IPv6Network
    oif: int
    action: int  #: SEG6_LOCAL_ACTION_* (1 = End)
    next_csid: bool  #: NEXT-C-SID flavour set
    lblen: int  #: locator-block bits (0 when no flavour)
    nflen: int  #: locator-node + function bits (0 when no flavour)


def encode_end_route(
    prefix: ipaddress.IPv6Network, oif: int, next_csid: bool, lblen: int, nflen: int
) -> bytes:
    """The RTM_NEWROUTE body (rtmsg + attributes) of an End route, with flavours if asked."""
    encap = _attr(SEG6_LOCAL_ACTION, struct.pack("=I", SEG6_LOCAL_ACTION_END))
    if next_csid:
        flv = (
            _attr(SEG6_LOCAL_FLV_OPERATION, struct.pack("=I", 1 << SEG6_LOCAL_FLV_OP_NEXT_CSID))
            + _attr(SEG6_LOCAL_FLV_LCBLOCK_BITS, struct.pack("=B", lblen))
            + _attr(SEG6_LOCAL_FLV_LCNODE_FN_BITS, struct.pack("=B", nflen))
        )
        encap += _attr(SEG6_LOCAL_FLAVORS | NLA_F_NESTED, flv)
    rtm = _RTMSG.pack(socket.AF_INET6, prefix.prefixlen, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT,
                      RT_SCOPE_UNIVERSE, RTN_UNICAST, 0)
    return (
        rtm
        + _attr(RTA_DST, prefix.network_address.packed)
        + _attr(RTA_OIF, struct.pack("=I", oif))
        + _attr(RTA_ENCAP_TYPE, struct.pack("=H", LWTUNNEL_ENCAP_SEG6_LOCAL))
        + _attr(RTA_ENCAP | NLA_F_NESTED, encap)
    )


def decode_route(body: bytes) -> Seg6LocalRoute | None:
    """Parse an RTM_NEWROUTE body; None unless it is a seg6local route."""
    family, dst_len = body[0], body[1]
    if family != socket.AF_INET6:
        return None
    attrs = _attrs(body[_RTMSG.size :])
    enc_type = attrs.get(RTA_ENCAP_TYPE)
    if enc_type is None or struct.unpack("=H", enc_type[:2])[0] != LWTUNNEL_ENCAP_SEG6_LOCAL:
        return None
    encap = _attrs(attrs.get(RTA_ENCAP, b""))
    action = 0
    if SEG6_LOCAL_ACTION in encap:
        action = struct.unpack("=I", encap[SEG6_LOCAL_ACTION][:4])[0]
    next_csid, lblen, nflen = False, 0, 0
    if SEG6_LOCAL_FLAVORS in encap:
        flv = _attrs(encap[SEG6_LOCAL_FLAVORS])
        ops = struct.unpack("=I", flv.get(SEG6_LOCAL_FLV_OPERATION, b"\0\0\0\0")[:4])[0]
        next_csid = bool(ops & (1 << SEG6_LOCAL_FLV_OP_NEXT_CSID))
        lblen = flv.get(SEG6_LOCAL_FLV_LCBLOCK_BITS, b"\0")[0]
        nflen = flv.get(SEG6_LOCAL_FLV_LCNODE_FN_BITS, b"\0")[0]
    dst = attrs.get(RTA_DST, bytes(16))
    oif = struct.unpack("=I", attrs[RTA_OIF][:4])[0] if RTA_OIF in attrs else 0
    return Seg6LocalRoute(
        ipaddress.IPv6Network((ipaddress.IPv6Address(dst), dst_len)), oif, action, next_csid,
        lblen, nflen,
    )


def _request(sock: socket.socket, kind: int, flags: int, body: bytes) -> list[bytes]:
    seq = 1
    sock.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(body), kind, flags, seq, 0) + body)
    bodies: list[bytes] = []
    while True:
        data = sock.recv(1 << 20)
        pos = 0
        while pos + _NLMSGHDR.size <= len(data):
            length, mtype, _, _, _ = _NLMSGHDR.unpack_from(data, pos)
            if length < _NLMSGHDR.size:
                raise FabricError("malformed netlink reply")
            payload = data[pos + _NLMSGHDR.size : pos + length]
            pos += (length + 3) & ~3
            if mtype == NLMSG_DONE:
                return bodies
            if mtype == NLMSG_ERROR:
                err = struct.unpack_from("=i", payload)[0]
                if err:
                    raise OSError(-err, os.strerror(-err))
                return bodies  # an ACK
            bodies.append(payload)


def _socket(netns: str) -> socket.socket:
    with in_netns(netns):
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    s.bind((0, 0))
    return s


def seg6local_routes(netns: str) -> list[Seg6LocalRoute]:
    """Every seg6local route of the main IPv6 table in ``netns``, decoded."""
    s = _socket(netns)
    try:
        rtm = _RTMSG.pack(socket.AF_INET6, 0, 0, 0, 0, 0, 0, 0, 0)
        bodies = _request(s, RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, rtm)
    finally:
        s.close()
    return [r for r in (decode_route(b) for b in bodies) if r is not None]


def install_end_route(
    netns: str, prefix: str, ifname: str, next_csid: bool, lblen: int = 32, nflen: int = 16
) -> None:
    """``ip -6 route replace PREFIX encap seg6local action End [flavors next-csid ...] dev``."""
    net = ipaddress.IPv6Network(prefix)
    with in_netns(netns):
        oif = socket.if_nametoindex(ifname)
    s = _socket(netns)
    try:
        body = encode_end_route(net, oif, next_csid, lblen, nflen)
        _request(s, RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, body)
    finally:
        s.close()
