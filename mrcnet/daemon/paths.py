"""Where mrcd's paths come from: the fabric description, or statically cabled peers.

Both classes implement the core's ``PathProvider`` protocol (``routes(peer, plane)``,
``planes(peer)``): one :class:`~mrcnet.wire.Route` per distinct path to the peer in a
plane, in a stable order (the index is the EV's path index).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from mrcnet.daemon.config import PeerConfig
from mrcnet.io import NeighbourError, neighbour_mac
from mrcnet.topology.description import FabricDescription
from mrcnet.topology.description import Host as FabricHost
from mrcnet.topology.routes import build_route
from mrcnet.wire import Route, mac_to_bytes

__all__ = ["FabricPaths", "LocalPort", "StaticPaths", "UnknownPeer"]


class UnknownPeer(NeighbourError):
    """A peer name that neither the fabric description nor [peers] knows."""


@dataclass
class LocalPort:
    """A port of this host as mrcd resolved it at start."""

    index: int
    plane: int
    ifname: str
    mac: bytes
    ip: bytes  #: 16-byte unicast IPv6 address (inner source, control channel)
    next_hop_mac: bytes | None = None  #: None: resolve per peer (direct cabling)


def _ip(text: str) -> bytes:
    return ipaddress.IPv6Address(text).packed


class FabricPaths:
    """Paths through an mrc-fabric (or any fabric described the same way).

    In ``usid`` mode a path is one uSID container ``block:srcleaf:spine:dstleaf:dsthost::``;
    in ``srh`` mode a segment list. One path per spine of the plane.
    """

    def __init__(self, desc: FabricDescription, host: str, ports: Sequence[LocalPort]) -> None:
        self.desc = desc
        self.host = desc.host(host).name
        self.ports = {p.plane: p for p in ports}
        self._cache: dict[tuple[str, int], list[Route]] = {}

    def planes(self, peer: str) -> Sequence[int]:
        """Planes where both this host and ``peer`` have a port."""
        theirs = {p.plane for p in self._peer(peer).ports}
        return sorted(p for p in self.ports if p in theirs)

    def _peer(self, peer: str) -> FabricHost:
        try:
            return self.desc.host(peer)
        except Exception as e:  # FabricError: the message names the fabric
            raise UnknownPeer(str(e)) from e

    def routes(self, peer: str, plane: int) -> Sequence[Route]:
        """One route per spine of ``plane`` towards ``peer``."""
        key = (peer, plane)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        self._peer(peer)
        port = self.ports[plane]
        fport = self.desc.host(self.host).port(plane)
        dst_ip = _ip(self.desc.host(peer).port(plane).address)
        dst_mac = port.next_hop_mac or mac_to_bytes(fport.neighbor_mac)
        block = self.desc.block.network_address.packed[:4]
        routes = [
            build_route(self.desc.srv6, block, self.desc.path_usids(self.host, peer, plane, spine),
                        src_mac=port.mac, dst_mac=dst_mac, src_ip=port.ip, dst_ip=dst_ip)
            for spine in range(len(self.desc.planes[plane].spines))
        ]
        self._cache[key] = routes
        return routes

    def port_rate(self) -> float:
        """Bytes/s this host's ports can carry by the fabric's shaping (the slowest
        link at the host), or 0.0 if the fabric is unshaped."""
        rates = [ln.rate_bps for ln in self.desc.links
                 if ln.rate_bps and self.host in (ln.a.node, ln.b.node)]
        return min(rates) / 8 if rates else 0.0

    def control_address(self, peer: str) -> str:
        """Where ``peer``'s mrcd listens: its port address in the lowest shared plane."""
        planes = self.planes(peer)
        if not planes:
            raise UnknownPeer(f"{peer} shares no plane with {self.host}")
        return self.desc.host(peer).port(planes[0]).address


class StaticPaths:
    """Directly cabled peers (no switches): one plain-IPv6 path per plane.

    The destination MAC is the peer's own, learnt from the kernel neighbour table by
    :meth:`resolve` (which may block up to a second: call it off the event loop).
    """

    def __init__(self, peers: dict[str, PeerConfig], ports: Sequence[LocalPort]) -> None:
        self.peers = peers
        self.ports = {p.plane: p for p in ports}
        self._macs: dict[tuple[str, int], bytes] = {}

    def _peer(self, peer: str) -> PeerConfig:
        try:
            return self.peers[peer]
        except KeyError:
            raise UnknownPeer(f"no peer {peer!r} in the configuration's [peers]") from None

    def planes(self, peer: str) -> Sequence[int]:
        """Planes where ``peer`` has an address and this host a port."""
        n = len(self._peer(peer).addresses)
        return sorted(p for p in self.ports if p < n)

    def resolve(self, peer: str) -> None:
        """Learn the peer's MAC on every shared plane (blocking)."""
        cfg = self._peer(peer)
        for plane in self.planes(peer):
            port = self.ports[plane]
            if port.next_hop_mac is None and (peer, plane) not in self._macs:
                self._macs[(peer, plane)] = neighbour_mac(port.ifname, cfg.addresses[plane])

    def routes(self, peer: str, plane: int) -> Sequence[Route]:
        """The single direct route to ``peer`` in ``plane``."""
        cfg = self._peer(peer)
        port = self.ports[plane]
        mac = port.next_hop_mac or self._macs.get((peer, plane))
        if mac is None:
            self.resolve(peer)
            mac = self._macs[(peer, plane)]
        return [Route(port.mac, mac, port.ip, _ip(cfg.addresses[plane]))]

    def control_address(self, peer: str) -> str:
        """Where ``peer``'s mrcd listens."""
        return self._peer(peer).control
