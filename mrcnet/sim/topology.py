"""Multi-plane leaf-spine fabrics: the one-line spec, the builder and its paths.

Spec: ``leafspine:planes=2,spines=8,leaves=4,hosts=2,rate=100gbit,delay=1us,queue=8pkt``
(every key optional, see :data:`SPEC_HELP`). The builder lays the fabric out with the same
addressing plan as mrc-fabric (uSID block ``fc00:1::/32``; spine uSID ``0x1PSS``, leaf
``0x2PLL``, host ``0x4HHH``; host port addresses ``fd00:1:<plane>::<host uSID>``), installs
static routes in every switch and answers "which routes lead from host A to host B in
plane P" (one per spine) for the transport's path manager.

Node names: hosts ``h0..h{N-1}``, leaves ``L<plane>.<i>``, spines ``S<plane>.<i>``.
Link names put the lower tier first: ``h3-L0.1``, ``L0.1-S0.3``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from mrcnet.constants import (
    HOST_USID_BASE,
    LEAF_USID_BASE,
    MAX_HOSTS,
    MAX_PER_PLANE,
    MAX_PLANES,
    MIN_TRIM,
    SPINE_USID_BASE,
    USID_BITS,
)
from mrcnet.sim.engine import Simulator
from mrcnet.sim.errors import SpecError
from mrcnet.sim.net import EgressPort, HostNode, Switch
from mrcnet.sim.units import (
    format_rate,
    format_time,
    parse_bool,
    parse_bytes,
    parse_rate,
    parse_time,
)
from mrcnet.wire import Route, usid_container

USID_BLOCK = bytes.fromhex("fc000001")  # fc00:1::/32
HOST_PREFIX = "fd00:1"  # + ":<plane>::<host uSID>"

SPEC_HELP = """\
leafspine:KEY=VALUE,... (every key optional):
  planes=2          network planes; every host has one NIC port per plane
  spines=4          spines per plane (= paths per plane between hosts on different leaves)
  leaves=2          leaves per plane
  hosts=2           hosts per leaf
  rate=100gbit      every link's rate (bit, kbit, mbit, gbit, tbit)
  host_rate=RATE    host<->leaf links only (default: rate)
  delay=1us         propagation delay of every link (s, ms, us, ns)
  skew=0            path skew: spine i's links get skew x i / (spines - 1) extra delay
  mtu=9000          largest frame the transport may send (bytes)
  queue=8pkt        data queue per switch port: bytes (64k) or MTU-sized packets (8pkt)
  hdr_queue=64k     strict-priority queue for control frames and trimmed headers
  trim=on           trim data frames that overflow the data queue (off: drop-tail)
  trim_size=256     bytes a trimmed frame keeps, from the Ethernet header on
                    (at least 144 in usid mode, 216 in srh mode: all headers)
  ecn=3pkt          mark CE on ECT frames joining a data queue longer than this (off)
  ecn_last_hop=off  also mark on leaf->host ports (off: ECN steers paths, not incast)
  srv6=usid         usid (F3216 containers, no SRH) or srh (classic segment list)
"""


@dataclass(frozen=True)
class LeafSpineSpec:
    """A multi-plane, two-tier leaf-spine fabric, as the user asked for it."""

    planes: int = 2
    spines: int = 4
    leaves: int = 2
    hosts: int = 2  #: per leaf
    rate_bps: float = 100e9
    host_rate_bps: float = 0.0  #: 0 = same as rate_bps
    delay: float = 1e-6
    skew: float = 0.0  #: extra one-way delay of spine i's links: skew x i / (spines - 1)
    mtu: int = 9000
    queue_bytes: int = 8 * 9000
    hdr_queue_bytes: int = 64 * 1024
    trim: bool = True
    trim_size: int = 256
    ecn_bytes: int = 3 * 9000
    ecn_last_hop: bool = False
    srv6: str = "usid"

    def __post_init__(self) -> None:
        checks = [
            (1 <= self.planes <= MAX_PLANES, f"planes must be 1..{MAX_PLANES}"),
            (1 <= self.spines <= MAX_PER_PLANE, f"spines must be 1..{MAX_PER_PLANE}"),
            (1 <= self.leaves <= MAX_PER_PLANE, f"leaves must be 1..{MAX_PER_PLANE}"),
            (self.hosts >= 1, "hosts (per leaf) must be >= 1"),
            (self.n_hosts <= MAX_HOSTS, f"at most {MAX_HOSTS} hosts in total"),
            (self.rate_bps > 0 and self.host_rate_bps >= 0, "rates must be positive"),
            (self.delay >= 0, "delay must be >= 0"),
            (self.skew >= 0, "skew must be >= 0"),
            (1280 <= self.mtu <= 65535, "mtu must be 1280..65535"),
            (self.queue_bytes >= self.mtu, "queue must hold at least one MTU-sized frame"),
            (self.hdr_queue_bytes >= self.trim_size, "hdr_queue must hold a trimmed header"),
            (self.ecn_bytes >= 0, "ecn must be >= 0 (0 = off)"),
            (self.srv6 in ("usid", "srh"), "srv6 must be usid or srh"),
        ]
        for ok, msg in checks:
            if not ok:
                raise SpecError(f"topology: {msg}")
        low = MIN_TRIM[self.srv6]
        if not low <= self.trim_size <= self.mtu:
            raise SpecError(f"topology: trim_size must be {low}..mtu in {self.srv6} mode "
                            "(a trimmed frame keeps all its headers)")

    @property
    def n_hosts(self) -> int:
        """Hosts in the whole fabric."""
        return self.leaves * self.hosts

    @property
    def edge_rate_bps(self) -> float:
        """Rate of host<->leaf links (one per host per plane)."""
        return self.host_rate_bps or self.rate_bps

    @property
    def host_bandwidth_bps(self) -> float:
        """What one host can send or receive across all its planes."""
        return self.edge_rate_bps * self.planes

    def to_line(self) -> str:
        """The one-line form of this spec (parses back to an equal spec)."""
        parts = [
            f"planes={self.planes}",
            f"spines={self.spines}",
            f"leaves={self.leaves}",
            f"hosts={self.hosts}",
            f"rate={format_rate(self.rate_bps)}",
        ]
        if self.host_rate_bps:
            parts.append(f"host_rate={format_rate(self.host_rate_bps)}")
        parts += [
            f"delay={format_time(self.delay)}",
        ]
        if self.skew:
            parts.append(f"skew={format_time(self.skew)}")
        parts += [
            f"mtu={self.mtu}",
            f"queue={self.queue_bytes}",
            f"hdr_queue={self.hdr_queue_bytes}",
            f"trim={'on' if self.trim else 'off'}",
            f"trim_size={self.trim_size}",
            f"ecn={self.ecn_bytes or 'off'}",
            f"ecn_last_hop={'on' if self.ecn_last_hop else 'off'}",
            f"srv6={self.srv6}",
        ]
        return "leafspine:" + ",".join(parts)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SpecError(f"bad integer {text!r}") from None


def parse_topology(text: str) -> LeafSpineSpec:
    """Parse ``leafspine:key=value,...`` (see :data:`SPEC_HELP`)."""
    kind, _, rest = text.strip().partition(":")
    if kind != "leafspine":
        raise SpecError(
            f"bad topology {text!r}: expected leafspine:key=value,... "
            "(e.g. leafspine:planes=2,spines=8,leaves=4,hosts=2,rate=100gbit,delay=1us)"
        )
    items: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not value.strip():
            raise SpecError(f"topology: bad item {part!r}: expected key=value")
        key = key.strip()
        if key in items:
            raise SpecError(f"topology: {key} given twice")
        items[key] = value.strip()
    known = {
        "planes", "spines", "leaves", "hosts", "rate", "host_rate", "delay", "skew", "mtu",
        "queue", "hdr_queue", "trim", "trim_size", "ecn", "ecn_last_hop", "srv6",
    }
    unknown = set(items) - known
    if unknown:
        raise SpecError(
            f"topology: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(known))})"
        )
    kw: dict[str, Any] = {}
    for key in ("planes", "spines", "leaves", "hosts", "mtu"):
        if key in items:
            kw[key] = _int(items[key])
    mtu = kw.get("mtu", LeafSpineSpec.mtu)
    if "rate" in items:
        kw["rate_bps"] = parse_rate(items["rate"])
    if "host_rate" in items:
        kw["host_rate_bps"] = parse_rate(items["host_rate"])
    if "delay" in items:
        kw["delay"] = parse_time(items["delay"])
    if "skew" in items:
        kw["skew"] = parse_time(items["skew"])
    kw["queue_bytes"] = parse_bytes(items.get("queue", "8pkt"), packet=mtu)
    kw["ecn_bytes"] = parse_bytes(items.get("ecn", "3pkt"), packet=mtu)
    if "hdr_queue" in items:
        kw["hdr_queue_bytes"] = parse_bytes(items["hdr_queue"], packet=mtu)
    if "trim" in items:
        kw["trim"] = parse_bool(items["trim"])
    if "trim_size" in items:
        kw["trim_size"] = parse_bytes(items["trim_size"])
    if "ecn_last_hop" in items:
        kw["ecn_last_hop"] = parse_bool(items["ecn_last_hop"])
    if "srv6" in items:
        kw["srv6"] = items["srv6"].lower()
    return LeafSpineSpec(**kw)


def with_options(spec: LeafSpineSpec, **changes: Any) -> LeafSpineSpec:
    """A copy of ``spec`` with some fields changed (e.g. ``trim=False`` from the CLI)."""
    names = {f.name for f in fields(LeafSpineSpec)}
    bad = set(changes) - names
    if bad:
        raise SpecError(f"topology: unknown option {sorted(bad)[0]!r}")
    return replace(spec, **changes)


def host_name(index: int) -> str:
    """``h<index>``."""
    return f"h{index}"


def leaf_name(plane: int, index: int) -> str:
    """``L<plane>.<index>``."""
    return f"L{plane}.{index}"


def spine_name(plane: int, index: int) -> str:
    """``S<plane>.<index>``."""
    return f"S{plane}.{index}"


class Link:
    """A cable: two egress ports, ``ab`` (lower tier -> upper tier) and ``ba``.

    ``on_carrier`` callbacks hear every carrier change (a host's NIC driver sees its
    port go down or up; switches need no notice: static routes do not react).
    """

    def __init__(self, name: str, kind: str, plane: int, ab: EgressPort, ba: EgressPort) -> None:
        self.name = name
        self.kind = kind  #: "host-leaf" or "leaf-spine"
        self.plane = plane
        self.ab = ab
        self.ba = ba
        self.on_carrier: list[Callable[[bool], None]] = []
        a, _, b = name.partition("-")
        self.a = a
        self.b = b

    def direction(self, src: str) -> EgressPort:
        """The egress port that sends away from node ``src``."""
        if src == self.a:
            return self.ab
        if src == self.b:
            return self.ba
        raise SpecError(f"link {self.name} does not touch {src}")

    def set_up(self, up: bool) -> None:
        """Carrier up/down, both directions (a cable pulled, a port shut)."""
        changed = self.ab.up != up or self.ba.up != up
        self.ab.set_up(up)
        self.ba.set_up(up)
        if changed:
            for cb in self.on_carrier:
                cb(up)


def _addr(text: str) -> bytes:
    return ipaddress.IPv6Address(text).packed


class Fabric:
    """A built leaf-spine fabric inside a :class:`~mrcnet.sim.engine.Simulator`."""

    def __init__(self, sim: Simulator, spec: LeafSpineSpec) -> None:
        self.sim = sim
        self.spec = spec
        self.hosts: list[HostNode] = []
        self.leaves: list[list[Switch]] = []  #: [plane][index]
        self.spines: list[list[Switch]] = []  #: [plane][index]
        self.links: dict[str, Link] = {}
        self._mac_n = 0
        self._build()

    # --- construction ---------------------------------------------------------------
    def _mac(self) -> bytes:
        # Locally administered unicast, "fb" like mrc-fabric, then a counter.
        self._mac_n += 1
        return bytes([0x02, 0xFB, 0x00, 0x01, self._mac_n >> 8 & 0xFF, self._mac_n & 0xFF])

    def _port(self, name: str, *, rate: float, last_hop: bool, src_mac: bytes | None,
              dst_mac: bytes, host_nic: bool, extra_delay: float = 0.0) -> EgressPort:
        s = self.spec
        if host_nic:
            # A NIC queue never drops or trims its own host's frames: the transport's
            # window is what bounds it. The stack writes the MACs itself.
            return EgressPort(
                self.sim, name, rate_bps=rate, delay=s.delay, queue_bytes=0,
                prio_queue_bytes=0, trim=False, trim_size=s.trim_size, ecn_bytes=0,
                mac_rewrite=None,
            )
        assert src_mac is not None
        return EgressPort(
            self.sim, name, rate_bps=rate, delay=s.delay + extra_delay,
            queue_bytes=s.queue_bytes,
            prio_queue_bytes=s.hdr_queue_bytes, trim=s.trim, trim_size=s.trim_size,
            ecn_bytes=0 if last_hop and not s.ecn_last_hop else s.ecn_bytes,
            mac_rewrite=dst_mac + src_mac,
        )

    def _build(self) -> None:
        s = self.spec
        for p in range(s.planes):
            self.leaves.append([
                self._switch(leaf_name(p, i), "leaf", p, LEAF_USID_BASE + (p << 8) + i)
                for i in range(s.leaves)
            ])
            self.spines.append([
                self._switch(spine_name(p, i), "spine", p, SPINE_USID_BASE + (p << 8) + i)
                for i in range(s.spines)
            ])
        for h in range(s.n_hosts):
            usid = HOST_USID_BASE + h
            node = HostNode(self.sim, host_name(h), h, usid, h // s.hosts)
            self.hosts.append(node)
            host_loc = USID_BLOCK + usid.to_bytes(2, "big")
            for p in range(s.planes):
                leaf = self.leaves[p][node.leaf_index]
                h_mac, l_mac = self._mac(), self._mac()
                up = self._port(f"{node.name}>{leaf.name}", rate=s.edge_rate_bps,
                                last_hop=False, src_mac=None, dst_mac=l_mac, host_nic=True)
                down = self._port(f"{leaf.name}>{node.name}", rate=s.edge_rate_bps,
                                  last_hop=True, src_mac=l_mac, dst_mac=h_mac, host_nic=False)
                up.connect(leaf, len(leaf.ports))
                down.connect(node, p)
                leaf.ports.append(down)
                node.nics.append(up)
                node.macs.append(h_mac)
                addr = _addr(f"{HOST_PREFIX}:{p:x}::{usid:x}")
                node.addresses.append(addr)
                leaf.routes48[host_loc] = down
                leaf.routes128[addr] = down
                name = f"{node.name}-{leaf.name}"
                self.links[name] = Link(name, "host-leaf", p, up, down)
        below: list[list[HostNode]] = [[] for _ in range(s.leaves)]
        for hn in self.hosts:
            below[hn.leaf_index].append(hn)
        for p in range(s.planes):
            for li, leaf in enumerate(self.leaves[p]):
                for si, spine in enumerate(self.spines[p]):
                    l_mac, s_mac = self._mac(), self._mac()
                    extra = s.skew * si / max(1, s.spines - 1)
                    up = self._port(f"{leaf.name}>{spine.name}", rate=s.rate_bps,
                                    last_hop=False, src_mac=l_mac, dst_mac=s_mac, host_nic=False,
                                    extra_delay=extra)
                    down = self._port(f"{spine.name}>{leaf.name}", rate=s.rate_bps,
                                      last_hop=False, src_mac=s_mac, dst_mac=l_mac,
                                      host_nic=False, extra_delay=extra)
                    up.connect(spine, len(spine.ports))
                    down.connect(leaf, len(leaf.ports))
                    leaf.ports.append(up)
                    spine.ports.append(down)
                    leaf.routes48[spine.locator] = up
                    spine.routes48[leaf.locator] = down
                    # Host locators and addresses below this leaf, reached via the spine.
                    for hn in below[li]:
                        spine.routes48[USID_BLOCK + hn.usid.to_bytes(2, "big")] = down
                        spine.routes128[hn.addresses[p]] = down
                    name = f"{leaf.name}-{spine.name}"
                    self.links[name] = Link(name, "leaf-spine", p, up, down)
            # Plain IPv6 to a host on another leaf goes up through spine 0 (static, like
            # mrc-fabric's control-plane spine): no ECMP anywhere.
            for li, leaf in enumerate(self.leaves[p]):
                up0 = leaf.routes48[self.spines[p][0].locator]
                for hn in self.hosts:
                    if hn.leaf_index != li:
                        leaf.routes128[hn.addresses[p]] = up0

    def _switch(self, name: str, role: str, plane: int, usid: int) -> Switch:
        return Switch(name, role, plane, usid, USID_BLOCK + usid.to_bytes(USID_BITS // 8, "big"))

    # --- lookups --------------------------------------------------------------------
    def switches(self) -> Iterator[Switch]:
        """Every switch, plane by plane, leaves first."""
        for p in range(self.spec.planes):
            yield from self.leaves[p]
            yield from self.spines[p]

    def switch(self, name: str) -> Switch:
        """A switch by name (``L0.1``, ``S1.3``)."""
        for sw in self.switches():
            if sw.name == name:
                return sw
        raise SpecError(f"no switch {name!r} in this fabric (leaves L<plane>.<i>, spines "
                        f"S<plane>.<i>; {self.spec.planes} planes, {self.spec.leaves} "
                        f"leaves, {self.spec.spines} spines)")

    def host(self, ref: str | int) -> HostNode:
        """A host by index (3) or name (``h3``)."""
        idx: int | None = None
        if isinstance(ref, int):
            idx = ref
        elif ref.isdigit():
            idx = int(ref)
        elif ref.startswith("h") and ref[1:].isdigit():
            idx = int(ref[1:])
        if idx is None or not 0 <= idx < len(self.hosts):
            raise SpecError(f"no host {ref!r} in this fabric (h0..h{len(self.hosts) - 1})")
        return self.hosts[idx]

    def link(self, a: str, b: str) -> Link:
        """The link between nodes ``a`` and ``b``, in either order."""
        for name in (f"{a}-{b}", f"{b}-{a}"):
            if name in self.links:
                return self.links[name]
        raise SpecError(f"no link between {a} and {b} (links join h<i>-L<p>.<leaf> and "
                        "L<p>.<leaf>-S<p>.<spine> in the same plane)")

    def egress_ports(self) -> Iterator[EgressPort]:
        """Every egress port: host NICs, then switch ports, link by link."""
        for link in self.links.values():
            yield link.ab
            yield link.ba

    # --- paths ------------------------------------------------------------------------
    def route(self, src: int, dst: int, plane: int, spine: int) -> Route:
        """The route from host ``src`` to host ``dst`` through ``spine`` of ``plane``.

        Hosts on the same leaf go up to the spine and back too (no direct path), so every
        pair of hosts has exactly ``spines`` paths per plane.
        """
        s, d = self.hosts[src], self.hosts[dst]
        usids = [
            self.leaves[plane][s.leaf_index].usid,
            self.spines[plane][spine].usid,
            self.leaves[plane][d.leaf_index].usid,
            d.usid,
        ]
        leaf_mac = self.links[f"{s.name}-{leaf_name(plane, s.leaf_index)}"].ba.mac_rewrite
        assert leaf_mac is not None
        common: dict[str, Any] = dict(
            src_mac=s.macs[plane], dst_mac=leaf_mac[6:12],
            src_ip=s.addresses[plane], dst_ip=d.addresses[plane],
        )
        if self.spec.srv6 == "srh":
            segs = tuple(usid_container(USID_BLOCK, [u]) for u in usids)
            return Route(**common, segments=segs)
        return Route(**common, usid=usid_container(USID_BLOCK, usids))

    def routes(self, src: int, dst: int, plane: int) -> list[Route]:
        """One route per spine of ``plane`` from ``src`` to ``dst``, spine order."""
        return [self.route(src, dst, plane, sp) for sp in range(self.spec.spines)]

    def paths_for(self, host: int) -> SimPaths:
        """The path provider a transport on host ``host`` uses."""
        return SimPaths(self, host)

    def host_by_address(self, addr: bytes) -> HostNode:
        """The host owning a port address."""
        for h in self.hosts:
            if addr in h.addresses:
                return h
        raise SpecError(f"no host has address {ipaddress.IPv6Address(addr)}")


class SimPaths:
    """Paths from one host to its peers: what the transport's EV manager sprays over.

    ``peer`` may be a host index, a host name (``h3``) or one of its port addresses.
    """

    def __init__(self, fabric: Fabric, host: int) -> None:
        self.fabric = fabric
        self.host = host
        self._cache: dict[tuple[int, int], list[Route]] = {}

    def _peer(self, peer: object) -> int:
        if isinstance(peer, bytes | bytearray) and len(peer) == 16:
            return self.fabric.host_by_address(bytes(peer)).index
        if isinstance(peer, int | str):
            return self.fabric.host(peer).index
        raise SpecError(f"unknown peer {peer!r}")

    def planes(self, peer: object) -> Sequence[int]:
        """Planes in which ``peer`` is reachable (every plane: each host has a port in each)."""
        self._peer(peer)
        return range(self.fabric.spec.planes)

    def routes(self, peer: object, plane: int) -> Sequence[Route]:
        """One :class:`~mrcnet.wire.Route` per spine of ``plane`` to ``peer``."""
        key = (self._peer(peer), plane)
        got = self._cache.get(key)
        if got is None:
            got = self._cache[key] = self.fabric.routes(self.host, key[0], plane)
        return got
