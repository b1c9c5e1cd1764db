"""What mrc-fabric builds from a topology spec: its switch model and the fabric's layout.

The spec itself (grammar, units, shape) is :mod:`mrcnet.topology.spec`, shared with
mrc-sim. :func:`resolve` reads the options mrc-fabric emulates, with mrc-fabric's defaults
(docs/TOPOLOGY.md), into a :class:`FabricSpec`; :func:`allocate` lays the fabric out as a
:class:`~mrcnet.topology.description.FabricDescription` (names, uSIDs, locators, addresses,
MACs, interface and netns names) with the shared naming and addressing plan. Pure
computation, no root needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

from mrcnet.constants import USID_BITS, USID_BLOCK_BITS
from mrcnet.topology import addressing, naming
from mrcnet.topology.description import (
    DESCRIPTION_VERSION,
    FabricDescription,
    Host,
    Link,
    LinkEnd,
    Plane,
    Port,
    Switch,
)
from mrcnet.topology.errors import SpecError
from mrcnet.topology.spec import (
    FABRIC,
    KEYS,
    WHY_NOT,
    TopologySpec,
    check_shape,
    shape_parts,
)
from mrcnet.topology.spec import parse_spec as parse_topology
from mrcnet.topology.units import format_rate, parse_rate
from mrcnet.wire.dscp import DEFAULT_DSCP, DscpClasses

__all__ = ["DEFAULT_VQ_DRAIN", "FabricSpec", "allocate", "format_rate", "parse_rate",
           "parse_spec", "resolve", "validate_name"]

#: Fabric names: short, so that "<name>-p15s255" style netns names stay readable.
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,9}$")

#: The virtual queue drains at this fraction of the link rate unless the spec says
#: ``vq_drain``. Below 1 it leaves a margin for a shaper that falls behind its nominal
#: rate on a busy machine, at the price of trimming earlier and carrying less; with the
#: shaper charging trimmed frames their real length (plan.py, stab) the real queue stayed
#: within the virtual one at 1 (docs/INCAST.md), so no margin by default.
DEFAULT_VQ_DRAIN = 1.0

#: mrc-fabric's link rate unless the spec says ``rate``: what this machine's veths carry
#: with room to spare (mrc-sim's default is 100gbit, docs/TOPOLOGY.md).
DEFAULT_RATE_BPS = 1_000_000_000

#: Above this rate a veth on this machine is the bottleneck, not the shaper: the rate is
#: recorded, not emulated faithfully (reported by :meth:`FabricSpec.notes`).
FAITHFUL_RATE_BPS = 10_000_000_000


@dataclass(frozen=True)
class FabricSpec:
    """A multi-plane leaf-spine fabric as mrc-fabric builds it (effective values)."""

    planes: int = TopologySpec.planes
    spines: int = TopologySpec.spines  #: spines per plane
    leaves: int = TopologySpec.leaves  #: leaves per plane
    hosts: int = TopologySpec.hosts  #: hosts per leaf
    rate_bps: int = DEFAULT_RATE_BPS  #: every link; 0 = unshaped
    mtu: int = TopologySpec.mtu
    srv6: str = TopologySpec.srv6  #: "usid" or "srh"
    trim_size: int = TopologySpec.trim_size  #: bytes a trimmed frame keeps (from Ethernet)
    trim_thresh: int = -1  #: virtual-queue bytes before trimming; -1 = 8 x MTU, 0 = off
    ecn_thresh: int = -1  #: virtual-queue bytes before CE marking; -1 = 3 x MTU, 0 = off
    drop_thresh: int = -1  #: virtual-queue bytes before dropping; -1 = 4 x trim, 0 = never
    ecn_last_hop: bool = False  #: mark CE on leaf -> host links too
    host_drop: bool = True  #: hosts' kernels drop MRC frames after the packet-socket tap
    host_shaping: bool = False  #: shape host egress too (a NIC never sends above line rate)
    host_rate_bps: int = -1  #: host <-> leaf links; -1 = same as rate_bps
    delay_s: float = 0.0  #: recorded, NOT emulated (veth latency is what the CPU gives)
    #: virtual queue drain rate as a fraction of the link rate; -1 = DEFAULT_VQ_DRAIN
    vq_drain: float = -1.0
    #: frames per pfifo_fast band on shaped ports (the device txqueuelen); 0 = the kernel's
    txqueuelen: int = 0
    burst: int = -1  #: tbf burst in bytes on shaped ports; -1 = derived from rate and MTU
    #: the code points the switches mark and read (the hosts' mrcds take them from the
    #: fabric description)
    dscp: DscpClasses = DEFAULT_DSCP

    #: the spec as written, for :meth:`notes` (None when built field by field)
    source: TopologySpec | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_shape(self.planes, self.spines, self.leaves, self.hosts, self.mtu, self.srv6,
                    self.trim_size)
        checks = [
            (self.vq_drain == -1.0 or 0 < self.vq_drain <= 1, "vq_drain must be in (0, 1]"),
            (self.txqueuelen == 0 or self.txqueuelen >= 2, "txqueuelen must be >= 2"),
            (self.burst == -1 or self.burst >= self.mtu + 14,
             "burst must hold at least one full frame (mtu + 14 bytes)"),
        ]
        for ok, msg in checks:
            if not ok:
                raise SpecError(f"topology: {msg}")

    # Effective thresholds (the -1 defaults scale with the MTU, NDP-like shallow queue).
    @property
    def trim_bytes(self) -> int:
        """Trim threshold in bytes (0 = trimming off)."""
        return 8 * self.mtu if self.trim_thresh < 0 else self.trim_thresh

    @property
    def ecn_bytes(self) -> int:
        """ECN threshold in bytes (0 = marking off)."""
        return 3 * self.mtu if self.ecn_thresh < 0 else self.ecn_thresh

    @property
    def drop_bytes(self) -> int:
        """Drop threshold in bytes (0 = never)."""
        if self.drop_thresh >= 0:
            return self.drop_thresh
        return 4 * max(self.trim_bytes, self.ecn_bytes, 8 * self.mtu)

    @property
    def vq_drain_frac(self) -> float:
        """Drain rate of the virtual queue over the link rate."""
        return DEFAULT_VQ_DRAIN if self.vq_drain < 0 else self.vq_drain

    @property
    def host_link_rate(self) -> int:
        """Rate of host <-> leaf links in bit/s (0 = unshaped)."""
        return self.rate_bps if self.host_rate_bps < 0 else self.host_rate_bps

    def to_line(self) -> str:
        """The one-line form of this spec (the shape, rate, MTU and SRv6 mode)."""
        parts = shape_parts(self.planes, self.spines, self.leaves, self.hosts)
        parts += [f"rate={format_rate(self.rate_bps)}", f"mtu={self.mtu}", f"srv6={self.srv6}"]
        return "leafspine:" + ",".join(parts)

    def effective(self) -> str:
        """Every value mrc-fabric builds with, defaults included (for ``up`` and ``status``)."""
        def size(n: int) -> str:
            return "off" if n == 0 else str(n)
        return ",".join([
            self.to_line(),
            f"host_rate={format_rate(self.host_link_rate)}",
            f"trim_size={self.trim_size}",
            f"trim={size(self.trim_bytes)}",
            f"ecn={size(self.ecn_bytes)}",
            f"drop={self.drop_bytes or 'never'}",
            f"ecn_last_hop={'on' if self.ecn_last_hop else 'off'}",
            f"vq_drain={self.vq_drain_frac:g}",
        ] + ([] if self.dscp == DEFAULT_DSCP else [f"dscp={KEYS['dscp'].show(self.dscp)}"]))

    def notes(self) -> list[str]:
        """What the spec asks for that mrc-fabric records but does not emulate."""
        out = []
        if self.source is not None:
            out += [f"{kv}: recorded, not emulated ({WHY_NOT[FABRIC]})"
                    if kv.split("=")[0] in ("delay", "skew") else
                    f"{kv}: recorded, not emulated" for kv in self.source.not_emulated(FABRIC)]
        fast = [r for r in (self.rate_bps, self.host_link_rate) if r > FAITHFUL_RATE_BPS]
        if fast:
            out.append(f"rate={format_rate(max(fast))}: recorded, not emulated faithfully "
                       f"(a veth on this machine carries less than "
                       f"{format_rate(FAITHFUL_RATE_BPS)}: the CPU, not the shaper, sets the "
                       "rate)")
        return out


def resolve(spec: TopologySpec) -> FabricSpec:
    """The spec as mrc-fabric builds it: its options with mrc-fabric's defaults.

    mrc-sim's queue keys map onto the switch model: ``queue`` is the data queue (the trim
    threshold; drop-tail there with ``trim=off``), ``hdr_queue`` is room for trimmed
    headers above it (drop threshold = queue + hdr_queue), ``trim=SIZE`` sets the trim
    threshold and ``ecn=SIZE`` the marking one.
    """
    mtu = spec.mtu
    kw: dict[str, Any] = {f: getattr(spec, f) for f in
                          ("planes", "spines", "leaves", "hosts", "mtu", "srv6", "trim_size")}
    for key, attr in (("rate", "rate_bps"), ("host_rate", "host_rate_bps"),
                      ("delay", "delay_s"), ("ecn_last_hop", "ecn_last_hop"),
                      ("host_drop", "host_drop"), ("host_shaping", "host_shaping"),
                      ("vq_drain", "vq_drain"), ("txqueuelen", "txqueuelen"),
                      ("burst", "burst"), ("dscp", "dscp")):
        if spec.given(key):
            kw[attr] = spec.get(key)
    trim = spec.get("trim")  # None: not given; True: on (default threshold); int: bytes
    queue = spec.get("queue")
    hdr_queue = spec.get("hdr_queue")
    drop = spec.get("drop")
    ecn = spec.get("ecn")
    trim_off = trim is not True and trim == 0
    if trim_off:
        kw["trim_thresh"] = 0
        if drop is None and queue is not None:
            drop = queue  # no trimming: the data queue is drop-tail
    elif trim is not None and trim is not True:
        kw["trim_thresh"] = trim
    elif queue is not None:
        kw["trim_thresh"] = queue
    if drop is None and hdr_queue is not None and not trim_off:
        base = kw.get("trim_thresh", -1)
        drop = (base if base > 0 else 8 * mtu) + hdr_queue
    if drop is not None:
        kw["drop_thresh"] = drop
    if ecn is not None and ecn is not True:
        kw["ecn_thresh"] = ecn
    known = {f.name for f in fields(FabricSpec)}
    assert set(kw) <= known, set(kw) - known
    return FabricSpec(**kw, source=spec)


def parse_spec(text: str) -> FabricSpec:
    """Parse a one-line spec or TOML file (:mod:`mrcnet.topology.spec`) for mrc-fabric."""
    return resolve(parse_topology(text))


def validate_name(name: str) -> None:
    """Fabric names are 1-10 characters, [a-z0-9], starting with a letter."""
    if not NAME_RE.match(name):
        raise SpecError(
            f"bad fabric name {name!r}: use 1-10 characters a-z 0-9, starting with a letter"
        )


# Link-local addresses: lower end ::1, upper end ::2 on every cable (scope is the link).
LL_LOWER = "fe80::1"
LL_UPPER = "fe80::2"


def netns_name(fabric: str, node: str) -> str:
    """``<fabric>-<node>``, the node in its ``[a-z0-9]`` spelling (``lab-p0l1``, ``lab-h3``)."""
    return f"{fabric}-{naming.compact(node)}"


def allocate(spec: FabricSpec, name: str, fabric_id: int) -> FabricDescription:
    """Lay the fabric out: every name, uSID, address and MAC, deterministically."""
    validate_name(name)
    addressing.check_fabric_id(fabric_id)
    blk = addressing.usid_block(fabric_id)
    mac_n = 0

    def next_mac() -> str:
        nonlocal mac_n
        mac_n += 1
        return addressing.mac_text(fabric_id, mac_n)

    planes: list[Plane] = []
    for p in range(spec.planes):

        def switch(role: str, i: int, p: int = p) -> Switch:
            usid = addressing.switch_usid(role, p, i)
            sname = naming.switch_name(role, p, i)
            return Switch(sname, role, p, i, usid, netns_name(name, sname),
                          addressing.locator(blk, usid))

        planes.append(
            Plane(
                index=p,
                host_prefix=str(addressing.plane_prefix(fabric_id, p)),
                leaves=[switch("leaf", i) for i in range(spec.leaves)],
                spines=[switch("spine", i) for i in range(spec.spines)],
            )
        )

    links: list[Link] = []
    hosts: list[Host] = []
    for h in range(spec.leaves * spec.hosts):
        leaf_index = h // spec.hosts
        usid = addressing.host_usid(h)
        hname = naming.host_name(h)
        netns = netns_name(name, hname)
        ports = []
        for pl in planes:
            leaf = pl.leaves[leaf_index]
            host_end = LinkEnd(hname, netns, f"p{pl.index}", next_mac(), LL_LOWER)
            leaf_end = LinkEnd(leaf.name, leaf.netns, hname, next_mac(), LL_UPPER)
            links.append(
                Link(naming.link_name(hname, leaf.name), pl.index, "host-leaf",
                     spec.host_link_rate, host_end, leaf_end)
            )
            ports.append(
                Port(
                    plane=pl.index,
                    ifname=host_end.ifname,
                    mac=host_end.mac,
                    address=str(addressing.port_address(fabric_id, pl.index, usid)),
                    ll=host_end.ll,
                    leaf=leaf.name,
                    neighbor_ifname=leaf_end.ifname,
                    neighbor_mac=leaf_end.mac,
                    neighbor_ll=leaf_end.ll,
                )
            )
        hosts.append(Host(hname, h, usid, netns, leaf_index, ports))

    for pl in planes:
        for leaf in pl.leaves:
            for sp in pl.spines:
                links.append(
                    Link(
                        naming.link_name(leaf.name, sp.name), pl.index, "leaf-spine",
                        spec.rate_bps,
                        LinkEnd(leaf.name, leaf.netns, f"s{sp.index}", next_mac(), LL_LOWER),
                        LinkEnd(sp.name, sp.netns, f"l{leaf.index}", next_mac(), LL_UPPER),
                    )
                )

    options = {
        "spec": spec.to_line(),
        "rate_bps": spec.rate_bps,
        "trim_size": spec.trim_size,
        "trim_thresh": spec.trim_bytes,
        "ecn_thresh": spec.ecn_bytes,
        "drop_thresh": spec.drop_bytes,
        "ecn_last_hop": spec.ecn_last_hop,
        "host_drop": spec.host_drop,
        "host_shaping": spec.host_shaping,
        "control_plane_spine": 0,
        "host_rate_bps": spec.host_link_rate,
        "delay_s_not_emulated": spec.delay_s,
        "vq_drain": spec.vq_drain_frac,
        "txqueuelen": spec.txqueuelen,
        "burst": spec.burst,
        "effective": spec.effective(),
        "not_emulated": spec.notes(),
        # The DSCP classes the switches mark and hosts read (mrcd takes them from here).
        "dscp": spec.dscp.to_dict(),
    }
    paths = {
        # How to build a path; FabricDescription.path_container / path_segments do it.
        "usid_container": "<block>:<src leaf usid>:<spine usid>:<dst leaf usid>:<dst host usid>::",
        "srh_segments": ["<block>:<src leaf usid>::", "<block>:<spine usid>::",
                         "<block>:<dst leaf usid>::", "<block>:<dst host usid>::"],
        "same_leaf_container": "<block>:<leaf usid>:<dst host usid>::",
        "spines_per_plane": spec.spines,
    }
    return FabricDescription(
        version=DESCRIPTION_VERSION,
        name=name,
        fabric_id=fabric_id,
        srv6=spec.srv6,
        usid_block=str(blk),
        lblen=USID_BLOCK_BITS,
        nflen=USID_BITS,
        host_prefix=str(addressing.host_prefix(fabric_id)),
        mtu=spec.mtu,
        planes=planes,
        hosts=hosts,
        links=links,
        options=options,
        paths=paths,
    )
