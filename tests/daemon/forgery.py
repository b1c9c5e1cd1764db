"""A forger on a real mrc-fabric: it sniffs a leaf port and sends frames from a host port.

The threat model of docs/SECURITY.md ("Frames from the network"): a host on the fabric
that can send any frame, with any source address, and that can see live traffic.
:class:`Sniffer` is the tap (an AF_PACKET socket in a leaf's netns, on the interface that
faces a host: every frame the host sends or gets on that plane); :class:`Forger` sends
from a host port, with a spoofed inner source address, along a uSID path of its choice.
:func:`counters` reads the drop counters an mrcd exposes (``mrcctl`` and the metrics
endpoint show the same).
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from mdnsutil import in_netns

from mrcnet.api import Context
from mrcnet.constants import Opcode
from mrcnet.io import PacketPort
from mrcnet.topology.description import FabricDescription, Port
from mrcnet.wire import UDP, Ethernet, IPv6, Route, build_data, mac_to_bytes
from mrcnet.wire.checksum import udp6_checksum
from mrcnet.wire.parsed import PyParsed, py_parse

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # sll_pkttype of a frame the interface sent (linux/if_packet.h)
RCVBUF = 64 << 10
OUTER_SRC = 14 + 8  # the outer IPv6 source address, after Ethernet
MIN_DATA = 300  # bytes: every data frame the tests send is longer (4 KiB or more)


def counters(ctx: Context) -> dict[str, int]:
    """The counters of the host whose mrcd ``ctx`` talks to (each QP's counts are in
    them too: a QP counts into its host)."""
    out: dict[str, int] = ctx.stats()["host"]
    return out


def udp_frame(src: Port, dst: str, container: bytes, payload: bytes) -> bytes:
    """Ethernet / outer IPv6 (uSID ``container``) / inner IPv6 / UDP to port 4791 from
    ``src`` (a fabric port) to ``dst``, valid lengths and checksum, ``payload`` after."""
    s_ip = socket.inet_pton(socket.AF_INET6, src.address)
    d_ip = socket.inet_pton(socket.AF_INET6, dst)
    length = 8 + len(payload)
    udp = UDP(sport=0xC000, length=length).pack() + payload
    csum = udp6_checksum(s_ip, d_ip, udp)
    udp = udp[:6] + csum.to_bytes(2, "big") + udp[8:]
    inner = IPv6(src=s_ip, dst=d_ip, next_header=17, payload_length=length).pack()
    outer = IPv6(src=s_ip, dst=container, next_header=41,
                 payload_length=len(inner) + length).pack()
    return Ethernet(mac_to_bytes(src.neighbor_mac), mac_to_bytes(src.mac), 0x86DD).pack() \
        + outer + inner + udp


def outer_len_fixed(frame: bytes) -> bytes:
    """``frame`` (cut short) with its outer IPv6 payload length made to match, as a
    trimming switch does (or the Linux leaf drops it itself: Ip6InTruncatedPkts)."""
    b = bytearray(frame)
    b[18:20] = (len(b) - 54).to_bytes(2, "big")
    return bytes(b)


class Forger:
    """Sends forged frames out of host ``me``'s port in ``plane`` (its own MAC, any
    inner source address), paced so that the fabric's shaped links do not trim them."""

    def __init__(self, desc: FabricDescription, me: str, plane: int = 0) -> None:
        self.desc, self.me, self.plane = desc, me, plane
        self.port = desc.host(me).port(plane)
        self._pp: PacketPort | None = None  # opened on the first send

    def close(self) -> None:
        if self._pp is not None:
            self._pp.close()
            self._pp = None

    def __enter__(self) -> Forger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def route(self, src: str, dst: str, spine: int = 0) -> Route:
        """From this port, claiming to be host ``src`` (its address in this plane), to
        host ``dst``, through ``spine``."""
        pl = self.plane
        return Route(src_mac=mac_to_bytes(self.port.mac),
                     dst_mac=mac_to_bytes(self.port.neighbor_mac),
                     src_ip=socket.inet_pton(socket.AF_INET6,
                                             self.desc.host(src).port(pl).address),
                     dst_ip=socket.inet_pton(socket.AF_INET6,
                                             self.desc.host(dst).port(pl).address),
                     usid=self.desc.path_container(self.me, dst, plane=pl, spine=spine).packed)

    def data(self, src: str, dst: str, *, qp: int, psn: int, va: int, rkey: int,
             body: bytes, spine: int = 0, ev: int | None = None,
             timestamp: int | None = None) -> bytes:
        """A WRITE_ONLY of ``body`` at ``va`` (rkey ``rkey``) as if from ``src``."""
        kw: dict[str, Any] = {} if timestamp is None else {"timestamp": timestamp}
        return build_data(self.route(src, dst, spine),
                          ev=(1 << 31) | (spine << 12) if ev is None else ev, dest_qp=qp,
                          opcode=Opcode.WRITE_ONLY, psn=psn & 0xFFFFFF, va=va, rkey=rkey,
                          payload=body, **kw)

    def send(self, frames: list[bytes], per_batch: int = 4, gap: float = 0.002) -> None:
        """Send ``frames``, ``per_batch`` at a time ``gap`` seconds apart (a burst would be
        trimmed or dropped by shaped links, and a trim is counted as a trim)."""
        if self._pp is None:
            with in_netns(self.desc.host(self.me).netns):
                self._pp = PacketPort(self.port.ifname)
        for i in range(0, len(frames), per_batch):
            self._pp.send(frames[i:i + per_batch])
            time.sleep(gap)


@dataclass
class Seen:
    """A data frame the tap saw: raw, when (time.monotonic()) and in which plane; parsed
    on first use (the tap itself only filters, so that it keeps up with line rate)."""

    raw: bytes
    t: float
    plane: int

    @cached_property
    def f(self) -> PyParsed:
        return py_parse(self.raw, False)


class Sniffer:
    """Taps on the leaf interfaces that face ``host``'s ports (one per plane in
    ``planes``): keeps the newest data frame the host sent (its PSN, EV, stamp, rkey and
    address are live), the last 64 per plane (``recent``), and counts them. One thread
    per tap, until :meth:`close`."""

    def __init__(self, desc: FabricDescription, host: str,
                 planes: Sequence[int] = (0,)) -> None:
        self.lock = threading.Lock()
        self.newest: Seen | None = None
        self.by_plane: dict[int, Seen] = {}
        self.recent: dict[int, deque[Seen]] = {p: deque(maxlen=64) for p in planes}
        self.data_frames = 0
        self._stop = False
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        try:
            for plane in planes:
                port = desc.host(host).port(plane)
                with in_netns(desc.node_netns(port.leaf)):
                    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                                         socket.htons(ETH_P_ALL))
                self._socks.append(sock)
                # A small buffer: what the tap keeps is the newest frame, and a deep
                # queue of frames the Python parser has not caught up with is stale.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
                sock.bind((port.neighbor_ifname, 0))
                sock.settimeout(0.1)
                src = socket.inet_pton(socket.AF_INET6, port.address)
                t = threading.Thread(target=self._run, args=(sock, src, plane), daemon=True)
                self._threads.append(t)
                t.start()
        except BaseException:
            self.close()
            raise

    def _run(self, sock: socket.socket, src: bytes, plane: int) -> None:
        while not self._stop:
            try:
                raw, addr = sock.recvfrom(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if addr[2] == PACKET_OUTGOING:
                continue  # towards the host: not what it sent
            # A data frame from the host: its outer source, and longer than any
            # acknowledgement or endpoint frame (checked again when parsed).
            if len(raw) > MIN_DATA and raw[OUTER_SRC:OUTER_SRC + 16] == src:
                seen = Seen(raw, time.monotonic(), plane)
                with self.lock:
                    self.newest = self.by_plane[plane] = seen
                    self.recent[plane].append(seen)
                    self.data_frames += 1

    def latest(self, plane: int | None = None, wait: float = 5.0) -> Seen:
        """The newest data frame the host sent (in ``plane``, or any): what is live now
        (waits up to ``wait`` seconds for a first one)."""
        deadline = time.monotonic() + wait
        while True:
            with self.lock:
                s = self.newest if plane is None else self.by_plane.get(plane)
            if s is not None:
                assert s.f.is_data, "the tap's filter let a frame that is not data through"
                return s
            if time.monotonic() > deadline:
                raise TimeoutError(f"the tap saw no data frame in {wait} s")
            time.sleep(0.001)

    def close(self) -> None:
        self._stop = True
        for t in self._threads:
            t.join(2)
        for sock in self._socks:
            sock.close()

    def __enter__(self) -> Sniffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
