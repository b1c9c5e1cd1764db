"""Multi-plane leaf-spine fabrics in the simulator: the sim's reading of a spec, the builder
and its paths.

The spec (grammar, units, shape, names, addressing plan) is :mod:`mrcnet.topology`, shared
with mrc-fabric: ``leafspine:planes=2,spines=8,leaves=4,hosts=2,rate=100gbit,delay=1us``.
:func:`resolve` reads the options the simulator emulates, with its own defaults for rates,
delays and queues (docs/TOPOLOGY.md). The builder lays the fabric out with the shared
addressing plan as fabric 1 (uSID block ``fc00:1::/32``), installs static routes in every
switch and answers "which routes lead from host A to host B in plane P" (one per spine)
for the transport's path manager.

Node names are the shared ones: hosts ``h0..h{N-1}``, leaves ``L<plane>.<i>``, spines
``S<plane>.<i>`` (``p0l1``/``p0s3`` are accepted where a name is typed). Link names put
the lower tier first: ``h3-L0.1``, ``L0.1-S0.3``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from mrcnet.constants import USID_BITS
from mrcnet.sim.engine import Simulator
from mrcnet.sim.net import EgressPort, HostNode, Switch
from mrcnet.sim.simnet import NativeSimulator
from mrcnet.topology import addressing, naming
from mrcnet.topology.errors import SpecError
from mrcnet.topology.naming import host_name, leaf_name, spine_name
from mrcnet.topology.routes import build_route
from mrcnet.topology.spec import SIM, TopologySpec, check_shape, help_text, shape_parts
from mrcnet.topology.spec import parse_spec as parse_spec_line
from mrcnet.topology.units import format_rate, format_time
from mrcnet.wire import Route
from mrcnet.wire.dscp import DEFAULT_DSCP, DscpClasses, set_dscp_classes

__all__ = [
    "SPEC_HELP",
    "USID_BLOCK",
    "Fabric",
    "LeafSpineSpec",
    "Link",
    "SimPaths",
    "host_name",
    "leaf_name",
    "parse_topology",
    "resolve",
    "spine_name",
    "with_options",
]

USID_BLOCK = addressing.usid_block(addressing.SIM_FABRIC_ID).network_address.packed[:4]

#: mrc-sim's defaults for what the spec leaves out, beyond the shared shape (docs/TOPOLOGY.md).
DEFAULT_RATE_BPS = 100e9
DEFAULT_DELAY_S = 1e-6
DEFAULT_QUEUE_PKTS = 8
DEFAULT_HDR_QUEUE = 64 * 1024
DEFAULT_ECN_PKTS = 3

SPEC_HELP = help_text() + (
    "mrc-sim's defaults: rate=100gbit, delay=1us, skew=0, queue=8pkt, hdr_queue=64k,\n"
    "trim=on, ecn=3pkt, ecn_last_hop=off; the shape, mtu, srv6 and trim_size defaults are\n"
    "mrc-fabric's too (docs/TOPOLOGY.md). [fabric only] keys are recorded, not emulated.\n"
)


@dataclass(frozen=True)
class LeafSpineSpec:
    """A multi-plane, two-tier leaf-spine fabric, as the user asked for it."""

    planes: int = TopologySpec.planes
    spines: int = TopologySpec.spines
    leaves: int = TopologySpec.leaves
    hosts: int = TopologySpec.hosts  #: per leaf
    rate_bps: float = DEFAULT_RATE_BPS
    host_rate_bps: float = 0.0  #: 0 = same as rate_bps
    delay: float = DEFAULT_DELAY_S
    skew: float = 0.0  #: extra one-way delay of spine i's links: skew x i / (spines - 1)
    mtu: int = TopologySpec.mtu
    queue_bytes: int = DEFAULT_QUEUE_PKTS * TopologySpec.mtu
    hdr_queue_bytes: int = DEFAULT_HDR_QUEUE
    trim: bool = True
    trim_size: int = TopologySpec.trim_size
    ecn_bytes: int = DEFAULT_ECN_PKTS * TopologySpec.mtu
    ecn_last_hop: bool = False
    srv6: str = TopologySpec.srv6
    #: the DSCP classes of the fabric: its switches' and (process-wide) its hosts'
    dscp: DscpClasses = DEFAULT_DSCP
    #: the spec as written, for :meth:`notes` (None when built field by field)
    source: TopologySpec | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_shape(self.planes, self.spines, self.leaves, self.hosts, self.mtu, self.srv6,
                    self.trim_size)
        checks = [
            (self.rate_bps > 0 and self.host_rate_bps >= 0, "rates must be positive"),
            (self.delay >= 0, "delay must be >= 0"),
            (self.skew >= 0, "skew must be >= 0"),
            (self.queue_bytes >= self.mtu, "queue must hold at least one MTU-sized frame"),
            (self.hdr_queue_bytes >= self.trim_size, "hdr_queue must hold a trimmed header"),
            (self.ecn_bytes >= 0, "ecn must be >= 0 (0 = off)"),
        ]
        for ok, msg in checks:
            if not ok:
                raise SpecError(f"topology: {msg}")

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
        parts = shape_parts(self.planes, self.spines, self.leaves, self.hosts)
        parts.append(f"rate={format_rate(self.rate_bps)}")
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


    def notes(self) -> list[str]:
        """What the spec asks for that the simulator records but does not emulate."""
        if self.source is None:
            return []
        return [f"{kv}: recorded, not emulated" for kv in self.source.not_emulated(SIM)]


def resolve(spec: TopologySpec) -> LeafSpineSpec:
    """The spec as the simulator builds it: its options with mrc-sim's defaults.

    ``trim=SIZE`` (mrc-fabric's trim threshold) is trimming on above a data queue of SIZE;
    ``rate=none`` is refused: every simulated link needs a rate.
    """
    mtu = spec.mtu
    kw: dict[str, Any] = {f: getattr(spec, f) for f in
                          ("planes", "spines", "leaves", "hosts", "mtu", "srv6", "trim_size")}
    if spec.given("rate"):
        kw["rate_bps"] = float(spec.get("rate"))
    if spec.given("host_rate"):
        kw["host_rate_bps"] = float(spec.get("host_rate"))
    for key in ("delay", "skew", "ecn_last_hop", "dscp"):
        if spec.given(key):
            kw[key] = spec.get(key)
    if spec.given("hdr_queue"):
        kw["hdr_queue_bytes"] = spec.get("hdr_queue")
    queue = spec.get("queue")
    trim = spec.get("trim")  # None: not given; True: on; 0: off; int: on above that queue
    if trim is not None:
        kw["trim"] = trim is True or trim > 0
        if trim is not True and trim > 0 and queue is None:
            queue = trim
    kw["queue_bytes"] = DEFAULT_QUEUE_PKTS * mtu if queue is None else queue
    ecn = spec.get("ecn")
    kw["ecn_bytes"] = DEFAULT_ECN_PKTS * mtu if ecn is None or ecn is True else ecn
    return LeafSpineSpec(**kw, source=spec)


def parse_topology(text: str) -> LeafSpineSpec:
    """Parse a spec line or TOML file (:mod:`mrcnet.topology.spec`) for the simulator."""
    return resolve(parse_spec_line(text))


def with_options(spec: LeafSpineSpec, **changes: Any) -> LeafSpineSpec:
    """A copy of ``spec`` with some fields changed (e.g. ``trim=False`` from the CLI)."""
    names = {f.name for f in fields(LeafSpineSpec)}
    bad = set(changes) - names
    if bad:
        raise SpecError(f"topology: unknown option {sorted(bad)[0]!r}")
    return replace(spec, **changes)


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
        self._mac_n += 1
        return addressing.mac(addressing.SIM_FABRIC_ID, self._mac_n)

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
            mac_rewrite=dst_mac + src_mac, last_hop=last_hop, dscp=s.dscp,
        )

    def _build(self) -> None:
        s = self.spec
        set_dscp_classes(s.dscp)  # the hosts' codecs (process-wide) mark as the switches read
        for p in range(s.planes):
            self.leaves.append([
                self._switch(leaf_name(p, i), "leaf", p, addressing.leaf_usid(p, i))
                for i in range(s.leaves)
            ])
            self.spines.append([
                self._switch(spine_name(p, i), "spine", p, addressing.spine_usid(p, i))
                for i in range(s.spines)
            ])
        for h in range(s.n_hosts):
            usid = addressing.host_usid(h)
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
                addr = addressing.port_address(addressing.SIM_FABRIC_ID, p, usid).packed
                node.addresses.append(addr)
                leaf.routes48[host_loc] = down
                leaf.routes128[addr] = down
                name = naming.link_name(node.name, leaf.name)
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
                    name = naming.link_name(leaf.name, spine.name)
                    self.links[name] = Link(name, "leaf-spine", p, up, down)
            # Plain IPv6 to a host on another leaf goes up through spine 0 (static, like
            # mrc-fabric's control-plane spine): no ECMP anywhere. One set of the plane's
            # addresses serves every leaf (its own hosts' routes come first): 8192 hosts
            # would otherwise need 16.7 M routes.
            plane_addrs = frozenset(hn.addresses[p] for hn in self.hosts)
            for leaf in self.leaves[p]:
                leaf.fallback128 = (plane_addrs, leaf.routes48[self.spines[p][0].locator])
        if isinstance(self.sim, NativeSimulator):
            self.sim.mirror(self)

    def _switch(self, name: str, role: str, plane: int, usid: int) -> Switch:
        return Switch(name, role, plane, usid, USID_BLOCK + usid.to_bytes(USID_BITS // 8, "big"))

    # --- lookups --------------------------------------------------------------------
    def switches(self) -> Iterator[Switch]:
        """Every switch, plane by plane, leaves first."""
        for p in range(self.spec.planes):
            yield from self.leaves[p]
            yield from self.spines[p]

    def switch(self, name: str) -> Switch:
        """A switch by name (``L0.1``, ``S1.3``; ``p0l1`` is read as ``L0.1``)."""
        name = naming.canonical(name)
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
        a, b = naming.canonical(a), naming.canonical(b)
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
        usids = addressing.path_usids(
            self.leaves[plane][s.leaf_index].usid,
            self.spines[plane][spine].usid,
            self.leaves[plane][d.leaf_index].usid,
            d.usid,
        )
        leaf = leaf_name(plane, s.leaf_index)
        leaf_mac = self.links[naming.link_name(s.name, leaf)].ba.mac_rewrite
        assert leaf_mac is not None
        return build_route(self.spec.srv6, USID_BLOCK, usids, src_mac=s.macs[plane],
                           dst_mac=leaf_mac[6:12], src_ip=s.addresses[plane],
                           dst_ip=d.addresses[plane])

    def routes(self, src: int, dst: int, plane: int) -> list[Route]:
        """One route per spine of ``plane`` from ``src`` to ``dst``, spine order."""
        if self.spec.srv6 != "usid":
            return [self.route(src, dst, plane, sp) for sp in range(self.spec.spines)]
        # The routes :meth:`route` builds, made at once: only the spine's uSID differs
        # between them (a QP asks for planes x spines routes: 256 at 8 planes of 32).
        s, d = self.hosts[src], self.hosts[dst]
        head = USID_BLOCK + self.leaves[plane][s.leaf_index].usid.to_bytes(2, "big")
        tail = (self.leaves[plane][d.leaf_index].usid.to_bytes(2, "big")
                + d.usid.to_bytes(2, "big") + bytes(16 - 4 - 8))
        leaf_mac = self.links[naming.link_name(s.name, leaf_name(plane, s.leaf_index))
                              ].ba.mac_rewrite
        assert leaf_mac is not None
        src_mac, dst_mac = s.macs[plane], leaf_mac[6:12]
        src_ip, dst_ip = s.addresses[plane], d.addresses[plane]
        return [Route(src_mac=src_mac, dst_mac=dst_mac, src_ip=src_ip, dst_ip=dst_ip,
                      usid=head + sp.usid.to_bytes(2, "big") + tail)
                for sp in self.spines[plane]]

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
