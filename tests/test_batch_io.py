"""Batched packet I/O (sendmmsg/recvmmsg) on a real veth pair in a private netns.

Both implementations (:class:`CBatchIO` and the one-syscall-per-frame :class:`PyBatchIO`)
run the same tests. The fixture creates one netns named ``fp<random>`` with a veth pair in
it, and deletes exactly that netns afterwards (its veth pair goes with it).
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mrcnet.constants import Opcode
from mrcnet.io.batch import PACKET_OUTGOING, CBatchIO, PyBatchIO, recv_batch, send_batch
from mrcnet.native import HAVE_C
from mrcnet.wire import Route, parse_frame, usid_container
from mrcnet.wire.checksum import c_udp6_checksum_ok
from mrcnet.wire.template import CTemplate, DataTemplate

# in_netns is tests/daemon's (mdnsutil): pytest puts that folder on sys.path only when it
# collects it, so a run of this module alone adds it (appended: it shadows nothing).
sys.path.append(str(Path(__file__).resolve().parent / "daemon"))
from mdnsutil import in_netns

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, AF_PACKET)"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2"),
]

ETH_P_TEST = 0x88B5  # IEEE local experimental EtherType: nothing else on the link uses it
ETH_P_IPV6 = 0x86DD
ETH_P_ALL = 0x0003
MTU = 9000  # as mrc-fabric's links
PACKET_HOST = 0
def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


@dataclass
class VethPair:
    netns: str
    a: str
    b: str
    mac_a: bytes
    mac_b: bytes

    def socket(self, ifname: str, proto: int = ETH_P_TEST) -> socket.socket:
        """A packet socket bound to ``ifname`` inside the netns (sockets keep their netns)."""
        with in_netns(self.netns):
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(proto))
            s.bind((ifname, proto))
        s.setblocking(False)
        return s


@pytest.fixture
def veth() -> Iterator[VethPair]:
    name = "fp" + secrets.token_hex(4)
    ip("netns", "add", name)
    try:
        # No IPv6 on the pair: no router/neighbour solicitations among our frames.
        subprocess.run(["ip", "netns", "exec", name, "sysctl", "-qw",
                        "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1"], check=True)
        ip("-n", name, "link", "add", "fpa", "mtu", str(MTU), "type", "veth", "peer", "name",
           "fpb", "mtu", str(MTU))
        ip("-n", name, "link", "set", "fpa", "up")
        ip("-n", name, "link", "set", "fpb", "up")
        macs = {link["ifname"]: bytes.fromhex(link["address"].replace(":", ""))
                for link in json.loads(ip("-n", name, "-j", "link", "show"))
                if link["ifname"] in ("fpa", "fpb")}
        yield VethPair(name, "fpa", "fpb", macs["fpa"], macs["fpb"])
    finally:
        ip("netns", "del", name)  # exactly the netns we made; the veth pair goes with it


IMPLS = ["py", "c"]


def batch(kind: str, fd: int, max_batch: int = 64, bufsize: int = 2048) -> Any:
    if kind == "c":
        if not HAVE_C:
            pytest.skip("C fast path off (not built, or MRCNET_NO_FASTPATH=1)")
        return CBatchIO(fd, max_batch, bufsize)
    return PyBatchIO(fd, max_batch, bufsize)


def test_frames(dst: bytes, src: bytes, n: int) -> list[bytes]:
    hdr = dst + src + ETH_P_TEST.to_bytes(2, "big")
    return [hdr + i.to_bytes(4, "big") + os.urandom(i * 23 % 1400 + (i & 1)) for i in range(n)]


test_frames.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def poll(step: Callable[[], object], done: Callable[[], bool], timeout: float = 5.0) -> None:
    """Call ``step`` until ``done()``: frames cross a veth in softirq context, which a
    loaded machine may run late, so receivers poll with a deadline, never a fixed count."""
    deadline = time.monotonic() + timeout
    while True:
        step()
        if done() or time.monotonic() > deadline:
            return
        time.sleep(0.0005)


def recv_all(b: Any, want: int) -> list[tuple[bytes, int, int]]:
    got: list[tuple[bytes, int, int]] = []
    poll(lambda: got.extend((bytes(v), pt, ifx) for v, pt, ifx in b.recv()),
         lambda: len(got) >= want)
    return got


@pytest.mark.parametrize("tx", IMPLS)
@pytest.mark.parametrize("rx", IMPLS)
def test_batch_roundtrip_on_veth(veth: VethPair, tx: str, rx: str) -> None:
    sa, sb = veth.socket(veth.a), veth.socket(veth.b)
    with sa, sb:
        btx, brx = batch(tx, sa.fileno()), batch(rx, sb.fileno(), 64, 2048)
        frames = test_frames(veth.mac_b, veth.mac_a, 50)
        assert btx.send(frames) == 50
        got = recv_all(brx, 50)
        assert [g[0] for g in got] == frames  # same bytes, same order
        ifindex = json.loads(ip("-n", veth.netns, "-j", "link", "show", veth.b))[0]["ifindex"]
        assert {(pt, ifx) for _, pt, ifx in got} == {(PACKET_HOST, ifindex)}
        assert brx.recv() == []  # nothing left: EAGAIN gives an empty batch


@pytest.mark.parametrize("kind", IMPLS)
def test_recv_skips_own_outgoing_frames(veth: VethPair, kind: str) -> None:
    # A second socket on the sending port sees the frames leave as PACKET_OUTGOING (only
    # ETH_P_ALL sockets see outgoing frames, which is what mrcd's taps may use).
    sa, tap = veth.socket(veth.a), veth.socket(veth.a, ETH_P_ALL)
    with sa, tap:
        b = batch(kind, tap.fileno())
        frames = test_frames(veth.mac_b, veth.mac_a, 10)
        assert send_batch(sa.fileno(), frames) == 10
        seen: list[Any] = []
        received = [0]

        def step() -> None:
            seen.extend(b.recv())
            received[0] += b.last_received  # taken from the socket, then dropped

        poll(step, lambda: received[0] >= 10)
        assert (received[0], seen) == (10, [])
        assert send_batch(sa.fileno(), frames) == 10
        got: list[tuple[bytes, int]] = []
        ours = ETH_P_TEST.to_bytes(2, "big")
        poll(lambda: got.extend((bytes(v), pt) for v, pt, _ in b.recv(skip_outgoing=False)
                                if v[12:14] == ours),
             lambda: len(got) >= 10)
        assert [g[0] for g in got] == frames
        assert {g[1] for g in got} == {PACKET_OUTGOING}


@pytest.mark.parametrize("kind", IMPLS)
def test_recv_in_small_batches_and_wait(veth: VethPair, kind: str) -> None:
    sa, sb = veth.socket(veth.a), veth.socket(veth.b)
    with sa, sb:
        frames = test_frames(veth.mac_b, veth.mac_a, 20)
        assert send_batch(sa.fileno(), frames) == 20
        b = batch(kind, sb.fileno(), max_batch=8, bufsize=2048)
        sb.setblocking(True)  # wait=True blocks for the first frame only on a blocking fd
        got = [bytes(v) for v, _, _ in b.recv(wait=True)]
        sb.setblocking(False)
        assert 1 <= len(got) <= 8

        def step() -> None:
            more = b.recv(3)
            assert len(more) <= 3
            got.extend(bytes(v) for v, _, _ in more)

        poll(step, lambda: len(got) >= 20)
        assert got == frames


@pytest.mark.parametrize("kind", IMPLS)
def test_truncates_to_bufsize(veth: VethPair, kind: str) -> None:
    sa, sb = veth.socket(veth.a), veth.socket(veth.b)
    with sa, sb:
        frame = test_frames(veth.mac_b, veth.mac_a, 1)[0] + bytes(500)
        assert send_batch(sa.fileno(), [frame]) == 1
        b = batch(kind, sb.fileno(), 4, 100)
        got = recv_all(b, 1)
        assert [g[0] for g in got] == [frame[:100]]


@pytest.mark.parametrize("kind", IMPLS)
def test_error_after_some_frames_gives_partial_count_then_raises(veth: VethPair,
                                                                 kind: str) -> None:
    sa = veth.socket(veth.a)
    with sa:
        b = batch(kind, sa.fileno())
        ok, too_big = test_frames(veth.mac_b, veth.mac_a, 1)[0], bytes(MTU + 100)
        assert b.send([ok, ok, too_big, ok]) == 2  # like sendmmsg: what went before
        with pytest.raises(OSError) as ei:
            b.send([too_big, ok])
        assert ei.value.errno == errno.EMSGSIZE


@pytest.mark.parametrize("kind", IMPLS)
def test_errors_raise_oserror_with_errno(kind: str) -> None:
    fd = os.open("/dev/null", os.O_RDWR)
    try:
        with pytest.raises(OSError) as ei:  # PyBatchIO already refuses in its constructor
            batch(kind, fd).send([b"x" * 60])
        assert ei.value.errno == errno.ENOTSOCK
        with pytest.raises(OSError) as ei:
            batch(kind, fd).recv()
        assert ei.value.errno == errno.ENOTSOCK
    finally:
        os.close(fd)


def test_patched_mrc_frames_cross_the_veth(veth: VethPair) -> None:
    """The zero-copy path mrcd uses: C template patch into send slots, sendmmsg, recvmmsg,
    then a strict parse with the C checksum on the far side."""
    if not HAVE_C:
        pytest.skip("C fast path off (not built, or MRCNET_NO_FASTPATH=1)")
    route = Route(veth.mac_a, veth.mac_b, bytes.fromhex("fd00" + "00" * 13 + "01"),
                  bytes.fromhex("fd00" + "00" * 13 + "02"), usid=usid_container(
                      bytes.fromhex("fc000000"), [0x10, 0x20, 0x30]))
    t = CTemplate(DataTemplate.for_route(route, dest_qp=0x77, rkey=0x55))
    sa, sb = veth.socket(veth.a, ETH_P_IPV6), veth.socket(veth.b, ETH_P_IPV6)
    with sa, sb:
        tx = CBatchIO(sa.fileno(), 32, 9216)
        rx = CBatchIO(sb.fileno(), 32, 9216)
        lens = [t.patch(tx.slot_ptr(i), cap=tx.bufsize, opcode=Opcode.WRITE_MIDDLE, psn=i,
                        ev=0x10000 * i + 7, va=4096 * i, payload=bytes([i]) * (100 * i + 1))
                for i in range(32)]
        assert tx.send_slots(lens) == 32
        frames: list[Any] = []
        poll(lambda: frames.extend(parse_frame(v, checksum_ok=c_udp6_checksum_ok)
                                   for v, _, _ in rx.recv()),
             lambda: len(frames) >= 32)
        assert [(f.bth.psn, f.ev, len(f.payload)) for f in frames] == [
            (i, 0x10000 * i + 7, 100 * i + 1) for i in range(32)]


def test_stateless_helpers(veth: VethPair) -> None:
    sa, sb = veth.socket(veth.a), veth.socket(veth.b)
    with sa, sb:
        frames = test_frames(veth.mac_b, veth.mac_a, 100)  # more than one batch of 64
        assert send_batch(sa.fileno(), frames) == 100
        got: list[bytes] = []
        poll(lambda: got.extend(f for f, _, _ in recv_batch(sb.fileno(), 64, 2048)),
             lambda: len(got) >= 100)
        assert got == frames
