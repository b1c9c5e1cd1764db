"""Kernel conformance: Linux SRv6 forwarding does to mrcnet frames what mrcnet.wire predicts.

Topology (three network namespaces, made and removed by the ``topo`` fixture only)::

    A [wa] ---- [ss0] S [ss1] ---- [wb] B          S also has a dummy (or ifb) device

S routes ``<block>:<S uSID>::/48`` with ``seg6local action End flavors next-csid lblen 32
nflen 16`` and a classic ``seg6local action End`` on its SID, plus static routes to B.
A sends frames built by mrcnet through an AF_PACKET socket; B captures with another. The
test checks that the kernel shifted the uSID container exactly as ``usid_shift`` says (or
advanced the SRH by one segment), decremented the hop limit, and left everything else
byte-identical, so that ``parse_frame`` verifies ICRC and UDP checksum at B.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from mrcnet.constants import DSCP_TRIMMED, ETH_P_IPV6, NackReason, Opcode
from mrcnet.wire import (
    NETH,
    Route,
    build_data,
    build_nack,
    ip6,
    mac_to_bytes,
    parse_frame,
    usid_container,
    usid_shift,
)

# in_netns is tests/daemon's (mdnsutil): pytest puts that folder on sys.path only when it
# collects it, so a run of this module alone adds it (appended: it shadows nothing).
sys.path.append(str(Path(__file__).resolve().parent.parent / "daemon"))
from mdnsutil import in_netns

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces, raw sockets"),
]

BLOCK = ip6("fc00::")[:4]  # fc00:0000::/32 locator block
S_USID, B_USID = 0x0001, 0x0002
S_SID = ip6("fd00:5::1")  # S's classic SRv6 SID (SRH mode)
A_NET, B_NET = "fd00:a::", "fd00:b::"
B_ADDR = ip6("fd00:b::2")  # B's NIC address: final destination / inner destination
A_ADDR = ip6("fd00:a::2")
MAC_A, MAC_SA, MAC_SB, MAC_B = (
    mac_to_bytes(m) for m in ("02:a0:00:00:00:01", "02:5a:00:00:00:01",
                              "02:5b:00:00:00:01", "02:b0:00:00:00:01")
)

def ip(*args: str) -> str:
    """Run ``ip`` and return its output; raise with its stderr on failure."""
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")
    return res.stdout


def sysctl(ns: str, key: str, value: str) -> None:
    """Write a sysctl inside ``ns`` and read it back."""
    path = "/proc/sys/" + key.replace(".", "/")
    with in_netns(ns):
        with open(path, "w") as f:
            f.write(value)
        with open(path) as f:
            assert f.read().strip() == value, key


@dataclass
class Topo:
    """Names of everything the fixture made (namespaces hold all the links)."""

    a: str
    s: str
    b: str
    if_a: str
    if_sa: str
    if_sb: str
    if_b: str
    if_dummy: str
    usid_route: str
    tx: socket.socket
    rx: socket.socket


def _add_dummy(ns: str, dev: str) -> None:
    """A device of S's own to hang seg6local routes on (they must not sit on lo).

    ``dummy`` when the kernel has it, else ``ifb`` (also a device that goes nowhere).
    """
    try:
        ip("-n", ns, "link", "add", dev, "type", "dummy")
    except RuntimeError:
        ip("-n", ns, "link", "add", dev, "type", "ifb")


def _build(sfx: str, made: list[str]) -> Topo:
    a, s, b = f"wtA{sfx}", f"wtS{sfx}", f"wtB{sfx}"
    if_a, if_sa, if_sb, if_b, if_d = f"wa{sfx}", f"ws0{sfx}", f"ws1{sfx}", f"wb{sfx}", f"wd{sfx}"
    for ns in (a, s, b):
        ip("netns", "add", ns)
        made.append(ns)
    # A and B: no IPv6 stack chatter (RS, MLD) and B's kernel ignores what it captures.
    for ns in (a, b):
        sysctl(ns, "net.ipv6.conf.all.disable_ipv6", "1")
        sysctl(ns, "net.ipv6.conf.default.disable_ipv6", "1")
    for key in ("accept_dad", "router_solicitations"):
        sysctl(s, f"net.ipv6.conf.default.{key}", "0")
        sysctl(s, f"net.ipv6.conf.all.{key}", "0")
    ip("-n", a, "link", "add", if_a, "address", "02:a0:00:00:00:01", "type", "veth",
       "peer", "name", if_sa, "address", "02:5a:00:00:00:01", "netns", s)
    ip("-n", b, "link", "add", if_b, "address", "02:b0:00:00:00:01", "type", "veth",
       "peer", "name", if_sb, "address", "02:5b:00:00:00:01", "netns", s)
    _add_dummy(s, if_d)
    for ns, dev in ((a, if_a), (b, if_b), (s, if_sa), (s, if_sb), (s, if_d)):
        ip("-n", ns, "link", "set", dev, "up")
    sysctl(s, "net.ipv6.conf.all.forwarding", "1")
    for dev in ("all", "default", if_sa, if_sb, if_d):
        sysctl(s, f"net.ipv6.conf.{dev}.seg6_enabled", "1")
    ip("-n", s, "-6", "addr", "add", f"{A_NET}1/64", "dev", if_sa, "nodad")
    ip("-n", s, "-6", "addr", "add", f"{B_NET}1/64", "dev", if_sb, "nodad")
    ip("-n", s, "-6", "neigh", "replace", f"{B_NET}2", "lladdr", "02:b0:00:00:00:01",
       "dev", if_sb, "nud", "permanent")
    ip("-n", s, "-6", "route", "add", f"fc00:0:{B_USID:x}::/48", "via", f"{B_NET}2",
       "dev", if_sb)
    locator = f"fc00:0:{S_USID:x}::/48"
    try:
        ip("-n", s, "-6", "route", "add", locator, "encap", "seg6local", "action", "End",
           "flavors", "next-csid", "lblen", "32", "nflen", "16", "dev", if_d)
    except RuntimeError as e:
        pytest.skip(f"kernel/iproute2 cannot add a NEXT-C-SID route ({e})")
    shown = ip("-n", s, "-6", "route", "show", locator)
    if "next-csid" not in shown:
        pytest.skip(f"kernel dropped 'flavors next-csid' from the route: {shown.strip()!r}")
    ip("-n", s, "-6", "route", "add", "fd00:5::1/128", "encap", "seg6local", "action", "End",
       "dev", if_d)
    with in_netns(a):
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        tx.bind((if_a, 0))
    with in_netns(b):
        rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IPV6))
        rx.bind((if_b, ETH_P_IPV6))
    rx.setblocking(False)
    return Topo(a, s, b, if_a, if_sa, if_sb, if_b, if_d, shown.strip(), tx, rx)


@pytest.fixture(scope="module")
def topo() -> Iterator[Topo]:
    """A -- S -- B in three fresh namespaces; removes exactly those namespaces afterwards."""
    made: list[str] = []
    t: Topo | None = None
    try:
        t = _build(secrets.token_hex(3), made)
        yield t
    finally:
        if t is not None:
            t.tx.close()
            t.rx.close()
        for ns in reversed(made):
            with suppress(RuntimeError):
                ip("netns", "del", ns)


def exchange(t: Topo, frame: bytes, timeout: float = 2.0) -> bytes:
    """Send ``frame`` from A; return the frame B captured with the same length and tail.

    The tail (ICRC, or random payload bytes of a trimmed frame) identifies the frame; the
    outer header is what S changes, so it cannot be used to match.
    """
    with suppress(BlockingIOError):
        while True:
            t.rx.recv(65536)  # drain anything left over
    t.tx.send(frame)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = t.rx.recv(65536)
        except BlockingIOError:
            time.sleep(0.002)
            continue
        if len(got) == len(frame) and got[-32:] == frame[-32:]:
            return got
    raise AssertionError("frame did not arrive at B (S did not forward it)")


def route(encap: bool, *, usids: list[int] | None = None, srh: bool = False) -> Route:
    """A route from A through S to B: uSID container or SRH (S's SID, then B)."""
    common = dict(src_mac=MAC_A, dst_mac=MAC_SA, src_ip=A_ADDR, dst_ip=B_ADDR, encap=encap)
    if srh:
        return Route(**common, segments=(S_SID, B_ADDR))  # type: ignore[arg-type]
    assert usids is not None
    return Route(**common, usid=usid_container(BLOCK, usids))  # type: ignore[arg-type]


def frames(r: Route) -> list[bytes]:
    """A data frame (with immediate and timestamp, odd payload) and a NACK on ``r``."""
    nonce = secrets.randbits(24)
    return [
        build_data(r, ev=0xBEEF0000 | (nonce & 0xFFFF), opcode=Opcode.WRITE_ONLY_IMM,
                   dest_qp=0x42, psn=nonce, va=0x1000, rkey=9, payload=os.urandom(301),
                   rqmsn=1, msn=1, imm=2, timestamp=3),
        build_nack(r, ev=0x0001F00D, dest_qp=0x42,
                   neth=NETH(NackReason.TRIMMED, 0x1234, nonce)),
    ]


def test_route_has_next_csid(topo: Topo) -> None:
    """The kernel kept the NEXT-C-SID flavor and its lengths on S's locator route."""
    assert "flavors next-csid" in topo.usid_route
    assert "lblen 32" in topo.usid_route and "nflen 16" in topo.usid_route


@pytest.mark.parametrize("encap", [True, False], ids=["encap", "noencap"])
@pytest.mark.parametrize(
    "usids",
    [[S_USID, B_USID], [S_USID, B_USID, 0x33], [S_USID, B_USID, 3, 4, 5, 6]],
    ids=["2-usids", "3-usids", "6-usids"],
)
def test_usid_shift_matches_kernel(topo: Topo, encap: bool, usids: list[int]) -> None:
    """S shifts the container exactly as usid_shift; hop limit -1; the rest is untouched."""
    for tx in frames(route(encap, usids=usids)):
        rx = exchange(topo, tx)
        assert rx[0:6] == MAC_B and rx[6:12] == MAC_SB  # S forwarded it towards B
        assert rx[12:14] == tx[12:14]
        assert rx[14:21] == tx[14:21]  # version, traffic class, flow label, length, next hdr
        assert rx[21] == tx[21] - 1  # hop limit
        assert rx[22:38] == tx[22:38]  # source
        assert rx[38:54] == usid_shift(tx[38:54])  # destination: exactly one uSID shift
        assert rx[54:] == tx[54:]  # inner IPv6, UDP, BTH, ext headers, payload, ICRC
        f = parse_frame(rx)  # verifies ICRC and UDP checksum
        g = parse_frame(tx)
        assert f.outer.dst == usid_shift(g.outer.dst)
        assert (f.inner, f.udp, f.bth, f.reth, f.neth) == (g.inner, g.udp, g.bth, g.reth, g.neth)
        assert bytes(f.payload) == bytes(g.payload)
        assert f.ev == g.ev and not f.trimmed


@pytest.mark.parametrize("encap", [True, False], ids=["encap", "noencap"])
def test_srh_end_matches_kernel(topo: Topo, encap: bool) -> None:
    """S's classic End: segments left -1, DA = next segment, hop limit -1, rest identical."""
    r = route(encap, srh=True)
    for tx in frames(r):
        g = parse_frame(tx)
        assert g.srh is not None and g.srh.segments_left == 1 and g.outer.dst == S_SID
        rx = exchange(topo, tx)
        assert rx[0:6] == MAC_B and rx[6:12] == MAC_SB
        assert rx[14:21] == tx[14:21]
        assert rx[21] == tx[21] - 1
        assert rx[22:38] == tx[22:38]
        assert rx[38:54] == B_ADDR  # the next (and final) segment
        srh = 54
        assert rx[srh + 3] == tx[srh + 3] - 1  # segments left
        assert rx[srh : srh + 3] == tx[srh : srh + 3]
        assert rx[srh + 4 :] == tx[srh + 4 :]  # rest of the SRH and everything after it
        f = parse_frame(rx)
        assert f.srh is not None and f.srh.segments_left == 0
        assert f.srh.active_segment == f.outer.dst == f.srh.final_segment == B_ADDR
        assert (f.inner, f.udp, f.bth, f.reth, f.neth) == (g.inner, g.udp, g.bth, g.reth, g.neth)
        assert bytes(f.payload) == bytes(g.payload)


@pytest.mark.parametrize("encap", [True, False], ids=["encap", "noencap"])
def test_mrc_srh_form_matches_kernel(topo: Topo, encap: bool) -> None:
    """MRC's SRv6-with-SRH form: the destination a uSID container holding S's uSID only,
    a reduced one-segment SRH (segments left 1, last entry 0) holding the next container.
    S's NEXT-C-SID End finds no uSID left after its own, so it does SRH processing:
    segments left -1, DA = the second container, hop limit -1, the rest identical."""
    c2 = usid_container(BLOCK, [B_USID, 0x33])
    r = Route(src_mac=MAC_A, dst_mac=MAC_SA, src_ip=A_ADDR, dst_ip=B_ADDR, encap=encap,
              usid=usid_container(BLOCK, [S_USID]), usid_srh=c2)
    for tx in frames(r):
        g = parse_frame(tx)
        assert g.srh is not None and g.srh.segments_left == 1 and g.srh.last_entry == 0
        rx = exchange(topo, tx)
        assert rx[0:6] == MAC_B and rx[6:12] == MAC_SB  # S forwarded it towards B
        assert rx[14:21] == tx[14:21]
        assert rx[21] == tx[21] - 1  # hop limit
        assert rx[22:38] == tx[22:38]
        assert rx[38:54] == c2  # the SRH's container is the destination now
        srh = 54
        assert rx[srh + 3] == 0 and rx[srh : srh + 3] == tx[srh : srh + 3]
        assert rx[srh + 4 :] == tx[srh + 4 :]  # rest of the SRH and everything after it
        f = parse_frame(rx)  # verifies ICRC and UDP checksum
        assert f.srh is not None and f.srh.segments_left == 0 and f.outer.dst == c2
        assert (f.inner, f.udp, f.bth, f.reth, f.neth) == (g.inner, g.udp, g.bth, g.reth, g.neth)
        assert bytes(f.payload) == bytes(g.payload)


def test_usid_wrong_locator_not_forwarded(topo: Topo) -> None:
    """Negative control: a container whose active uSID is not S's is not shifted to B."""
    tx = frames(route(True, usids=[0x0077, B_USID]))[0]
    with pytest.raises(AssertionError, match="did not arrive"):
        exchange(topo, tx, timeout=0.3)


def test_netns_names_are_ours(topo: Topo) -> None:
    """The fixture's namespaces exist under unique wt-prefixed names."""
    listed = ip("netns", "list")
    for ns in (topo.a, topo.s, topo.b):
        assert ns.startswith("wt") and ns in listed


def _trim(frame: bytes, keep: int, fix_length: bool) -> bytes:
    """Cut ``frame`` to ``keep`` bytes and re-mark DSCP as a trimming switch does."""
    out = bytearray(frame[:keep])
    tc = ((out[14] & 0x0F) << 4) | (out[15] >> 4)
    tc = (DSCP_TRIMMED << 2) | (tc & 0b11)
    out[14] = 0x60 | (tc >> 4)
    out[15] = ((tc & 0x0F) << 4) | (out[15] & 0x0F)
    if fix_length:
        out[18:20] = (keep - 54).to_bytes(2, "big")
    return bytes(out)


@pytest.mark.parametrize("encap", [True, False], ids=["encap", "noencap"])
@pytest.mark.parametrize("srh", [False, True], ids=["usid", "srh"])
def test_trimmed_frame_through_kernel(topo: Topo, encap: bool, srh: bool) -> None:
    """A trimmed data frame with its outer length fixed crosses S and parses trimmed at B.

    With the outer length left as it was, Linux drops it (ip6_rcv: payload length beyond
    the packet): why the fabric's trimmer fixes the outer length.
    """
    r = route(encap, srh=True) if srh else route(encap, usids=[S_USID, B_USID, 0x33])
    full = frames(r)[0]
    g = parse_frame(full)
    keep = len(full) - 200
    rx = exchange(topo, _trim(full, keep, fix_length=True))
    f = parse_frame(rx)
    assert f.trimmed and f.outer.dscp == DSCP_TRIMMED
    assert (f.inner, f.udp, f.bth, f.reth, f.meth, f.immdt, f.tseth) == (
        g.inner, g.udp, g.bth, g.reth, g.meth, g.immdt, g.tseth)
    assert bytes(f.payload) == bytes(g.payload)[: len(f.payload)]
    assert len(f.payload) == len(g.payload) - 200 + 4
    with pytest.raises(AssertionError, match="did not arrive"):
        exchange(topo, _trim(full, keep, fix_length=False), timeout=0.3)
