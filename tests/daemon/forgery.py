"""A forger on a real mrc-fabric: it sniffs a leaf port and sends frames from a host port.

The threat model of docs/SECURITY.md ("Frames from the network"): a host on the fabric
that can send any frame, with any source address, and that can see live traffic.
:class:`Sniffer` is the tap (an AF_PACKET socket in a leaf's netns, on the interface that
faces a host: every frame the host sends or gets on that plane); :class:`Forger` sends
from a host port, with a spoofed inner source address, along a uSID path of its choice.
:func:`counters` reads the drop counters mrcd exposes for a QP (what ``mrcctl qps``
shows, plus the host-wide ones).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from mdnsutil import in_netns

from mrcnet.api import Context, QueuePair
from mrcnet.constants import Opcode
from mrcnet.errors import MalformedFrame
from mrcnet.io import PacketPort
from mrcnet.topology.description import FabricDescription, Port
from mrcnet.wire import UDP, Ethernet, IPv6, Route, build_data, mac_to_bytes
from mrcnet.wire.checksum import udp6_checksum
from mrcnet.wire.parsed import PyParsed, py_parse

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # sll_pkttype of a frame the interface sent (linux/if_packet.h)


def counters(ctx: Context, qp: QueuePair) -> dict[str, int]:
    """A host's drop counters as its mrcd counts them: host-wide plus the QP's."""
    st = ctx.stats(qp)
    out = dict(st["host"])
    for k, v in st["qp"]["counters"].items():
        out[k] = out.get(k, 0) + v
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
    """A frame the tap saw: parsed, raw, and when (time.monotonic())."""

    f: PyParsed
    raw: bytes
    t: float


class Sniffer:
    """A tap on the leaf interface that faces ``host``'s port in ``plane``: keeps the
    newest data frame the host sent to ``peer_addr`` (its PSN, EV, stamp, rkey and
    address are live) and counts what it saw. Runs on a thread until :meth:`close`."""

    def __init__(self, desc: FabricDescription, host: str, plane: int = 0) -> None:
        port = desc.host(host).port(plane)
        leaf = desc.node_netns(port.leaf)
        with in_netns(leaf):
            self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                                       socket.htons(ETH_P_ALL))
            self._sock.bind((port.neighbor_ifname, 0))
        self._sock.settimeout(0.1)
        self._src = socket.inet_pton(socket.AF_INET6, port.address)
        self.lock = threading.Lock()
        self.newest: Seen | None = None
        self.data_frames = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                raw, addr = self._sock.recvfrom(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if addr[2] == PACKET_OUTGOING:
                continue  # towards the host: not what it sent
            try:
                f = py_parse(raw, False)
            except MalformedFrame:
                continue  # not an MRC frame (neighbour discovery, the control channel)
            if f.is_data and raw[f.src_off:f.src_off + 16] == self._src:
                with self.lock:
                    self.newest = Seen(f, raw, time.monotonic())
                    self.data_frames += 1

    def fresh(self, within: float = 0.05, wait: float = 5.0) -> Seen:
        """The newest data frame, seen at most ``within`` seconds ago (waits up to
        ``wait`` for one)."""
        deadline = time.monotonic() + wait
        while True:
            with self.lock:
                s = self.newest
            if s is not None and time.monotonic() - s.t <= within:
                return s
            if time.monotonic() > deadline:
                raise TimeoutError(f"the tap saw no data frame in the last {within} s")
            time.sleep(0.001)

    def close(self) -> None:
        self._stop = True
        self._thread.join(2)
        self._sock.close()

    def __enter__(self) -> Sniffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
