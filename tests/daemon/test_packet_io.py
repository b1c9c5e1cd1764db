"""mrcnet.io: the BPF filter, PacketPort on a veth pair, the kernel drop rule, neighbours."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from mdnsutil import NsRegistry, VethPair, in_netns, needs_root, run

from mrcnet.constants import ETH_P_IPV6, MRC_UDP_PORT, Opcode
from mrcnet.io import CapabilityError, KernelDrop, PacketPort, neighbour_mac
from mrcnet.io.bpf import attach_filter, mrc_filter, run_filter
from mrcnet.wire import Route, build_data, ip6, mac_to_bytes, parse_frame

SEG_MID = ip6("fc00:0:1::")


def _route(v: VethPair, layout: str) -> Route:
    base = dict(src_mac=mac_to_bytes(v.mac_a), dst_mac=mac_to_bytes(v.mac_b),
                src_ip=ip6(v.ip_a), dst_ip=ip6(v.ip_b))
    if layout == "udp":
        return Route(**base, encap=False)  # type: ignore[arg-type]
    if layout == "encap":
        return Route(**base)  # type: ignore[arg-type]
    if layout == "srh":
        return Route(**base, segments=(ip6(v.ip_b),), encap=False)  # type: ignore[arg-type]
    if layout == "srh-encap":
        return Route(**base, segments=(SEG_MID, ip6(v.ip_b)))  # type: ignore[arg-type]
    if layout == "usid":
        return Route(**base, usid=ip6("fc00:0:1:2:3::"))  # type: ignore[arg-type]
    raise ValueError(layout)


LAYOUTS = ["udp", "encap", "srh", "srh-encap", "usid"]


def _frame(v: VethPair, layout: str, psn: int, payload: bytes = b"x" * 64) -> bytes:
    return build_data(_route(v, layout), ev=0x12345678 + psn, opcode=Opcode.WRITE_ONLY,
                      dest_qp=7, psn=psn, va=0x1000, rkey=0x55, payload=payload)


_FAKE = VethPair("a", "b", "eth0", "eth0", "fd00::a", "fd00::b",
                 "02:00:00:00:0a:01", "02:00:00:00:0b:01")


# --- the BPF program, interpreted in Python (no root) ------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_filter_accepts_every_mrc_layout(layout: str) -> None:
    assert run_filter(mrc_filter(), _frame(_FAKE, layout, 1)) > 0


def _udp6_frame(dport: int, nh_chain: list[int]) -> bytes:
    eth = b"\x02" * 6 + b"\x04" * 6 + ETH_P_IPV6.to_bytes(2, "big")
    ip = bytearray(40)
    ip[0] = 0x60
    ip[6] = nh_chain[0]
    udp = (1234).to_bytes(2, "big") + dport.to_bytes(2, "big") + bytes(4)
    return eth + bytes(ip) + udp + bytes(32)


def test_filter_rejects_other_traffic() -> None:
    prog = mrc_filter()
    good = _frame(_FAKE, "udp", 1)
    assert run_filter(prog, _udp6_frame(MRC_UDP_PORT, [17])) > 0
    assert run_filter(prog, _udp6_frame(4792, [17])) == 0  # another UDP port
    assert run_filter(prog, _udp6_frame(MRC_UDP_PORT, [6])) == 0  # TCP
    assert run_filter(prog, _udp6_frame(MRC_UDP_PORT, [58])) == 0  # ICMPv6
    arp = good[:12] + b"\x08\x06" + good[14:]
    assert run_filter(prog, arp) == 0
    assert run_filter(prog, good[:50]) == 0  # truncated inside the headers
    # inner IPv6 carrying TCP
    enc = bytearray(_frame(_FAKE, "encap", 1))
    enc[54 + 6] = 6
    assert run_filter(prog, bytes(enc)) == 0


def test_filter_follows_srh_length() -> None:
    # A longer SRH moves UDP further; the port must be read past it, not at a fixed spot.
    f = _frame(_FAKE, "srh-encap", 1)
    assert f[20] == 43 and run_filter(mrc_filter(), f) > 0
    bad = bytearray(f)
    srh_len = (bad[55] + 1) * 8
    bad[54 + srh_len + 40 + 2 : 54 + srh_len + 40 + 4] = (4792).to_bytes(2, "big")
    assert run_filter(mrc_filter(), bytes(bad)) == 0


# --- PacketPort on a veth pair -----------------------------------------------------------

def _drain(port: PacketPort, want: int, timeout: float = 2.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        frames = port.recv()
        if not frames:
            time.sleep(0.005)
        got += [bytes(f) for f in frames]
    return got


@needs_root
def test_frames_cross_the_veth_and_parse(veth: VethPair) -> None:
    with in_netns(veth.ns_a):
        pa = PacketPort(veth.if_a)
    with in_netns(veth.ns_b):
        pb = PacketPort(veth.if_b)
    with pa, pb:
        assert pa.mac == mac_to_bytes(veth.mac_a)
        assert min(pb.buffer_sizes) >= 8 << 20
        sent = [_frame(veth, layout, psn, payload=bytes([psn]) * (100 * psn))
                for psn, layout in enumerate(LAYOUTS * 4, start=1)]
        assert pa.send(sent) == len(sent)
        got = _drain(pb, len(sent))
        assert got == sent  # byte-exact, in order, nothing extra
        for raw, psn in zip(got, range(1, len(sent) + 1), strict=True):
            fr = parse_frame(raw)
            assert fr.bth.psn == psn and bytes(fr.payload) == bytes([psn]) * (100 * psn)
        # The sender never sees its own transmissions.
        time.sleep(0.05)
        assert pa.recv() == []
        assert pa.stats.tx_frames == len(sent) and pb.stats.rx_frames == len(sent)


@needs_root
def test_a_reader_that_falls_behind_sees_the_kernels_drops(veth: VethPair) -> None:
    # A small receive buffer that nobody reads: the kernel drops what does not fit, and
    # snapshot() reports it (PACKET_STATISTICS resets on read: the port adds it up).
    with in_netns(veth.ns_a):
        pa = PacketPort(veth.if_a)
    with in_netns(veth.ns_b):
        pb = PacketPort(veth.if_b, buffer_bytes=64 << 10)
    with pa, pb:
        frame = _frame(veth, "udp", 1, payload=bytes(1000))
        for _ in range(20):
            pa.send([frame] * 50)
        time.sleep(0.05)
        first = pb.snapshot()["rx_kernel_dropped"]
        assert first > 0
        assert pb.snapshot()["rx_kernel_dropped"] == first  # added up, not lost or doubled
        got = _drain(pb, 1)
        assert 0 < len(got) <= 1000 - first


@needs_root
def test_non_mrc_traffic_is_filtered(veth: VethPair) -> None:
    with in_netns(veth.ns_b):
        pb = PacketPort(veth.if_b)
    with pb:
        # Kernel traffic from a to b: pings (ICMPv6, plus neighbour discovery) and UDP to
        # other ports. None of it may reach the port.
        _ping(veth, 3)
        with in_netns(veth.ns_a), socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            for port in (4790, 4792, 53):
                s.sendto(b"not mrc", (veth.ip_b, port))
        time.sleep(0.1)
        assert pb.recv() == []
        # ...while an MRC frame right after does.
        with in_netns(veth.ns_a), PacketPort(veth.if_a) as pa:
            f = _frame(veth, "encap", 9)
            pa.send([f])
        assert _drain(pb, 1) == [f]


def _ping(v: VethPair, count: int) -> None:
    """Echo requests a -> b from a's kernel (no ping binary needed), answers awaited."""
    with in_netns(v.ns_a), socket.socket(socket.AF_INET6, socket.SOCK_RAW,
                                         socket.IPPROTO_ICMPV6) as s:
        s.settimeout(1.0)
        for seq in range(count):
            # type 128 echo request; the kernel fills in the ICMPv6 checksum
            s.sendto(bytes([128, 0, 0, 0, 0, 1, 0, seq]) + b"ping", (v.ip_b, 0))
            while s.recv(2048)[0] != 129:  # until the echo reply
                pass


def _icmp_errors(sock: socket.socket) -> list[int]:
    types: list[int] = []
    while True:
        try:
            data = sock.recv(2048)
        except BlockingIOError:
            return types
        if data[0] < 128:  # error messages only (not ND, MLD or echo)
            types.append(data[0])


@needs_root
def test_kernel_drop_stops_icmp_but_not_the_packet_tap(veth: VethPair) -> None:
    with in_netns(veth.ns_a):
        pa = PacketPort(veth.if_a)
        icmp = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        icmp.setblocking(False)
    with in_netns(veth.ns_b):
        pb = PacketPort(veth.if_b)
        drop = KernelDrop([veth.if_b])
    with pa, pb, icmp:
        # Control: without the rule, b's kernel answers a plain-UDP MRC frame.
        _ping(veth, 1)  # resolves neighbours both ways
        pa.send([_frame(veth, "udp", 1)])
        assert len(_drain(pb, 1)) == 1
        seen: list[int] = []
        deadline = time.monotonic() + 2.0
        while 1 not in seen and time.monotonic() < deadline:
            time.sleep(0.02)
            seen += _icmp_errors(icmp)
        assert 1 in seen  # destination unreachable (port)

        with in_netns(veth.ns_b):
            drop.install()
        try:
            time.sleep(1.1)  # past the ICMP rate limiter's 1 s bucket
            frames = [_frame(veth, layout, 10 + i) for i, layout in enumerate(LAYOUTS)]
            frames += [_frame(veth, "udp", 20 + i) for i in range(20)]
            pa.send(frames)
            assert _drain(pb, len(frames)) == frames  # the tap still sees every frame
            time.sleep(0.2)
            assert _icmp_errors(icmp) == []
            with in_netns(veth.ns_b):
                counters = drop.counters()
            # Every layout (plain UDP, UDP past an SRH, IPv6-in-IPv6 with or without SRH)
            # is caught by one of the two rules.
            assert sum(counters) == len(frames)
        finally:
            with in_netns(veth.ns_b):
                drop.remove()
                tables = run("nft", "list", "tables")
        assert drop.table not in tables


@needs_root
def test_neighbour_resolution(veth: VethPair) -> None:
    with in_netns(veth.ns_a):
        assert neighbour_mac(veth.if_a, veth.ip_b) == mac_to_bytes(veth.mac_b)


@needs_root
def test_missing_capability_gives_one_clear_error() -> None:
    code = ("from mrcnet.io import PacketPort, CapabilityError\n"
            "try:\n    PacketPort('lo')\n"
            "except CapabilityError as e:\n    print(e)\n")
    r = subprocess.run(["setpriv", "--bounding-set=-net_raw", "--inh-caps=-net_raw",
                        sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=30, check=False)
    assert "needs CAP_NET_RAW: run as root or grant the capability" in r.stdout, r.stderr
    assert CapabilityError.__mro__[1].__name__ == "IOSetupError"


def test_registry_names(nsreg: NsRegistry) -> None:
    assert nsreg.tag and not nsreg.made


@needs_root
def test_send_on_a_down_link_drops_and_counts(veth: VethPair) -> None:
    with in_netns(veth.ns_a):
        pa = PacketPort(veth.if_a)
    with pa:
        run("ip", "link", "set", veth.if_a, "down", ns=veth.ns_a)
        frames = [_frame(veth, "udp", i) for i in range(100)]
        assert pa.send(frames) == 100  # done with: dropped, never queued, no exception
        assert pa.stats.tx_dropped == 100 and pa.backlog == 0 and pa.stats.tx_frames == 0
        run("ip", "link", "set", veth.if_a, "up", ns=veth.ns_a)


@needs_root
def test_receive_after_the_link_went_down_returns_nothing(veth: VethPair) -> None:
    """The kernel reports a carrier loss once on a packet socket (ENETDOWN from
    recvmmsg); mrcd's port treats it as "no frames", not as an error, and works again
    once the link is back (found on a fabric: a NIC port down mid-transfer)."""
    with in_netns(veth.ns_b):
        pb = PacketPort(veth.if_b)
    with pb:
        run("ip", "link", "set", veth.if_b, "down", ns=veth.ns_b)
        assert pb.recv() == [] and pb.recv() == []
        assert pb.stats.rx_link_down == 1
        run("ip", "link", "set", veth.if_b, "up", ns=veth.ns_b)
        with in_netns(veth.ns_a), PacketPort(veth.if_a) as pa:
            deadline = time.monotonic() + 5
            got: list[bytes] = []
            while not got and time.monotonic() < deadline:  # until the carrier is back
                pa.send([_frame(veth, "udp", 1)])
                got = _drain(pb, 1, timeout=0.2)
        assert got == [_frame(veth, "udp", 1)]


@needs_root
def test_why_eth_p_all_an_ipv6_socket_misses_dropped_frames(veth: VethPair) -> None:
    # The reason PacketPort binds ETH_P_ALL: a socket bound to ETH_P_IPV6 is served after
    # the ingress hooks, so it never sees what the kernel drop rule drops.
    with in_netns(veth.ns_a):
        pa = PacketPort(veth.if_a)
    with in_netns(veth.ns_b):
        pb = PacketPort(veth.if_b)
        ipv6_only = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        attach_filter(ipv6_only)  # MRC frames only (not the link's ND/MLD traffic)
        ipv6_only.bind((veth.if_b, ETH_P_IPV6))
        ipv6_only.setblocking(False)
        drop = KernelDrop([veth.if_b])
        drop.install()
    try:
        with pa, pb, ipv6_only:
            frames = [_frame(veth, "encap", i) for i in range(10)]
            pa.send(frames)
            assert _drain(pb, 10) == frames
            time.sleep(0.1)
            with pytest.raises(BlockingIOError):
                ipv6_only.recv(9216)
    finally:
        with in_netns(veth.ns_b):
            drop.remove()
