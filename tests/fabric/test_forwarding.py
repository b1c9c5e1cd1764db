"""Real fabrics: uSID and SRH forwarding through every spine, plain IPv6, host drop."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from mrcnet.constants import ETH_P_IPV6
from mrcnet.fabric import probe
from mrcnet.fabric.fabric import Fabric

pytestmark = pytest.mark.root

N = 30  # frames per path; background noise (MLD) stays well below this
NOISE = 5


def _delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, int]:
    return {k: after[k]["pkts"] - before[k]["pkts"] for k in after}


def _send_and_count(
    fab: Fabric, src: str, dst: str, plane: int, spine: int
) -> tuple[int, dict[str, int]]:
    d = fab.description
    frame = probe.build_frame(d, src, dst, plane, spine, size=600)
    dport = d.host(dst).port(plane)
    before = fab.counters()
    got = 0
    with probe.packet_socket(d.host(dst).netns, dport.ifname) as rx:
        rx.settimeout(0.3)
        probe.send_frames(d, src, plane, [frame] * N)
        try:
            while got < N:
                data, addr = rx.recvfrom(65535)
                incoming = addr[2] != socket.PACKET_OUTGOING
                if incoming and data[12:14] == b"\x86\xdd" and len(data) == 600:
                    got += 1
        except TimeoutError:
            pass
    time.sleep(0.05)
    return got, _delta(before, fab.counters())


def _check_every_spine(fab: Fabric) -> None:
    d = fab.description
    src, dst = d.hosts[0].name, d.hosts[-1].name
    for pl in d.planes:
        src_leaf = pl.leaves[d.host(src).leaf_index].name
        dst_leaf = pl.leaves[d.host(dst).leaf_index].name
        for sp in pl.spines:
            got, delta = _send_and_count(fab, src, dst, pl.index, sp.index)
            assert got == N, f"plane {pl.index} spine {sp.name}: {got}/{N} frames arrived"
            assert delta[f"{src_leaf}->{sp.name}"] >= N
            assert delta[f"{sp.name}->{dst_leaf}"] >= N
            assert delta[f"{dst_leaf}->{dst}"] >= N
            # ... and no other spine (of any plane) carried them.
            for other in d.switches():
                if other.role == "spine" and other is not sp:
                    for ln in d.links_of(other.name):
                        for k in (f"{ln.a.node}->{ln.b.node}", f"{ln.b.node}->{ln.a.node}"):
                            assert delta[k] < NOISE, f"{k} carried {delta[k]} frames"


def test_usid_every_spine_every_plane(usid_fabric: Fabric) -> None:
    _check_every_spine(usid_fabric)


def test_srh_every_spine_every_plane(srh_fabric: Fabric) -> None:
    _check_every_spine(srh_fabric)


def test_seg6local_routes_in_kernel(usid_fabric: Fabric, srh_fabric: Fabric) -> None:
    for fab, want in ((usid_fabric, "flavors next-csid lblen 32 nflen 16"), (srh_fabric, "")):
        for sw in fab.description.switches():
            out = subprocess.run(
                ["ip", "-n", sw.netns, "-6", "route", "show", sw.locator],
                capture_output=True, text=True, check=True,
            ).stdout
            assert "encap seg6local action End" in out
            assert want in out
            assert "dev sid0" in out


def _host_drops(fab: Fabric) -> dict[str, int]:
    nodes = fab.status()["nodes"]
    return {n["name"]: n["mrc_ingress_dropped"] for n in nodes if n["role"] == "host"}


def test_host_drop_after_packet_tap(usid_fabric: Fabric) -> None:
    """ETH_P_ALL packet sockets see MRC frames; the kernel then drops them at tc ingress.

    A socket bound to ETH_P_IPV6 sits after tc ingress, so it must NOT see them: mrcd has
    to use ETH_P_ALL (plus a classic BPF filter).
    """
    fab = usid_fabric
    d = fab.description
    h0, h1 = d.hosts[0], d.hosts[-1]
    frame = probe.build_frame(d, h0.name, h1.name, 0, 0, size=300)
    before = _host_drops(fab)
    c0 = fab.counters()
    with probe.packet_socket(h1.netns, "p0") as all_rx, probe.packet_socket(
        h1.netns, "p0", ETH_P_IPV6
    ) as v6_rx:
        all_rx.settimeout(0.3)
        v6_rx.settimeout(0.3)
        probe.send_frames(d, h0.name, 0, [frame] * 10)
        seen_all = 0
        try:
            while True:
                if len(all_rx.recv(65535)) == 300:
                    seen_all += 1
        except TimeoutError:
            pass
        seen_v6 = 0
        try:
            while True:
                if len(v6_rx.recv(65535)) == 300:
                    seen_v6 += 1
        except TimeoutError:
            pass
    after = _host_drops(fab)
    c1 = fab.counters()
    assert seen_all == 10
    # The destination kernel answered nothing (no ICMP errors back out of its port).
    back = f"{h1.name}->{h1.port(0).leaf}"
    assert c1[back]["pkts"] - c0[back]["pkts"] < 3
    assert seen_v6 == 0
    assert after[h1.name] - before[h1.name] == 10


UDP_ECHO = r"""
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(("::", 7777))
print("ready", flush=True)
for _ in range(int(sys.argv[1])):
    data, addr = s.recvfrom(100)
    s.sendto(data, addr)
"""


def test_plain_ipv6_between_hosts_every_plane(usid_fabric: Fabric) -> None:
    fab = usid_fabric
    d = fab.description
    h0, h1 = d.hosts[0], d.hosts[-1]
    srv = fab.popen(h1.name, [sys.executable, "-c", UDP_ECHO, str(len(d.planes))],
                    stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"
        for p in h1.ports:
            client = (
                "import socket; s=socket.socket(socket.AF_INET6, socket.SOCK_DGRAM);"
                f"s.settimeout(2); s.sendto(b'hi', ('{p.address}', 7777));"
                "print(s.recvfrom(100)[0].decode())"
            )
            out = fab.exec(h0.name, [sys.executable, "-c", client], capture_output=True,
                           text=True, timeout=10)
            assert out.stdout.strip() == "hi", out.stderr
    finally:
        srv.kill()
        srv.wait()


def test_tcp_between_hosts(usid_fabric: Fabric) -> None:
    fab = usid_fabric
    d = fab.description
    h0, h1 = d.hosts[0], d.hosts[-1]
    server = (
        "import socket; s=socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET,"
        " socket.SO_REUSEADDR, 1); s.bind(('::', 7778)); s.listen(); print('ready', flush=True);"
        " c,_=s.accept(); n=0\nwhile True:\n d=c.recv(65536)\n if not d: break\n n+=len(d)\n"
        "print(n)"
    )
    srv = fab.popen(h1.name, [sys.executable, "-c", server], stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"
        addr = h1.port(0).address
        client = (
            "import socket; c=socket.create_connection(('" + addr + "', 7778), timeout=5);"
            "c.sendall(b'x' * 1000000); c.close()"
        )
        fab.exec(h0.name, [sys.executable, "-c", client], check=True, timeout=20)
        out, _ = srv.communicate(timeout=20)
        assert out.strip() == "1000000"
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()


def test_seg6nl_install_matches_iproute2(usid_fabric: Fabric) -> None:
    """A route installed by our own netlink encoder reads back with its flavours."""
    from mrcnet.fabric import seg6nl

    sw = usid_fabric.description.switches()[0]
    prefix = f"{usid_fabric.description.block.network_address}".rstrip(":") + ":fffe::/48"
    seg6nl.install_end_route(sw.netns, prefix, "sid0", next_csid=True, lblen=32, nflen=16)
    try:
        out = subprocess.run(["ip", "-n", sw.netns, "-6", "route", "show", prefix],
                             capture_output=True, text=True, check=True).stdout
        assert "encap seg6local action End flavors next-csid lblen 32 nflen 16" in out
        [r] = [r for r in seg6nl.seg6local_routes(sw.netns) if str(r.dst) == prefix]
        assert r.next_csid and (r.lblen, r.nflen) == (32, 16)
    finally:
        subprocess.run(["ip", "-n", sw.netns, "-6", "route", "del", prefix], check=True)
