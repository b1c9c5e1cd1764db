"""Topology specs (one-line or TOML) and the automatic addressing plan.

A spec is ``leafspine:planes=2,spines=4,leaves=2,hosts=2,rate=1gbit,mtu=9000`` or a TOML
file with the same keys (top level or under ``[fabric]``). :func:`allocate` turns a spec
into a :class:`~mrcnet.fabric.describe.FabricDescription`: uSIDs, locators, addresses,
MACs, interface and netns names. Pure computation, no root needed.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
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
    USID_BLOCK_BITS,
)
from mrcnet.fabric.describe import (
    DESCRIPTION_VERSION,
    FabricDescription,
    Host,
    Link,
    LinkEnd,
    Plane,
    Port,
    Switch,
    usid_address,
)
from mrcnet.fabric.errors import SpecError

#: Fabric names: short, so that "<name>-p15s255" style netns names stay readable.
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,9}$")

#: The virtual queue drains at this fraction of the link rate unless the spec says
#: ``vq_drain``. Below 1 it leaves a margin for a shaper that falls behind its nominal
#: rate on a busy machine, at the price of trimming earlier and carrying less; with the
#: shaper charging trimmed frames their real length (plan.py, stab) the real queue stayed
#: within the virtual one at 1 (docs/INCAST.md), so no margin by default.
DEFAULT_VQ_DRAIN = 1.0

_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}


def parse_rate(text: str | int) -> int:
    """``"1gbit"`` -> 1_000_000_000 bits/s (tc units); 0 / "none" = unshaped."""
    if isinstance(text, int):
        if text < 0:
            raise SpecError(f"rate {text} is negative")
        return text
    t = text.strip().lower()
    if t in ("0", "none", "off", "unlimited"):
        return 0
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit|tbit)?", t)
    if not m:
        raise SpecError(f"bad rate {text!r}: use e.g. 100mbit, 1gbit, 10gbit, or none")
    return int(float(m.group(1)) * _RATE_UNITS[m.group(2) or "bit"])


def format_rate(bps: int) -> str:
    """Inverse of :func:`parse_rate` with the largest exact unit ("1gbit", "none")."""
    if not bps:
        return "none"
    for unit in ("tbit", "gbit", "mbit", "kbit"):
        if bps % _RATE_UNITS[unit] == 0:
            return f"{bps // _RATE_UNITS[unit]}{unit}"
    return f"{bps}bit"


def _parse_bool(text: str | bool) -> bool:
    if isinstance(text, bool):
        return text
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise SpecError(f"bad boolean {text!r}: use true or false")


def _parse_fraction(text: str | int | float) -> float:
    """A fraction of the link rate: ``0.9`` or ``90%``, in (0, 1]."""
    if isinstance(text, bool):
        raise SpecError(f"bad fraction {text!r}")
    if isinstance(text, str):
        t = text.strip()
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    else:
        value = float(text)
    if not 0 < value <= 1:
        raise SpecError(f"bad fraction {text!r}: use e.g. 0.9 or 90% (0 < f <= 1)")
    return value


@dataclass(frozen=True)
class _Size:
    """A byte count as written: plain bytes, or a number of MTU-sized packets ("8pkt")."""

    value: int
    pkts: bool = False

    def bytes(self, mtu: int) -> int:
        return self.value * mtu if self.pkts else self.value


def _parse_size(text: str | int) -> _Size:
    """Bytes with optional k/m suffix (1024-based) or ``Npkt`` (N x MTU); "off" = 0."""
    if isinstance(text, bool):
        raise SpecError(f"bad byte count {text!r}")
    if isinstance(text, int):
        return _Size(text)
    t = text.strip().lower()
    if t in ("off", "none", "0"):
        return _Size(0)
    m = re.fullmatch(r"(\d+)\s*(b|k|kb|m|mb|pkt)?", t)
    if not m:
        raise SpecError(f"bad byte count {text!r}: use e.g. 256, 64k, 1m, 8pkt, off")
    unit = m.group(2) or ""
    if unit == "pkt":
        return _Size(int(m.group(1)), pkts=True)
    mult = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1 << 20, "mb": 1 << 20}[unit]
    return _Size(int(m.group(1)) * mult)


def _parse_switch(text: str | int | bool) -> _Size | None:
    """``on`` (None: the default), ``off`` (0) or a size."""
    if isinstance(text, bool):
        return None if text else _Size(0)
    if isinstance(text, str) and text.strip().lower() in ("on", "true", "yes"):
        return None
    return _parse_size(text)


def _parse_delay(text: str | int | float) -> float:
    if isinstance(text, int | float):
        return float(text)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|ms|us|ns)?", text.strip().lower())
    if not m:
        raise SpecError(f"bad delay {text!r}: use e.g. 1us, 0.5ms")
    return float(m.group(1)) * {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[m.group(2) or "s"]


@dataclass(frozen=True)
class TopologySpec:
    """A multi-plane leaf-spine fabric, as the user asked for it."""

    planes: int = 2
    spines: int = 2  #: spines per plane
    leaves: int = 2  #: leaves per plane
    hosts: int = 1  #: hosts per leaf
    rate_bps: int = 1_000_000_000  #: every link; 0 = unshaped
    mtu: int = 9000
    srv6: str = "usid"  #: "usid" or "srh"
    trim_size: int = 256  #: bytes a trimmed frame keeps (from the Ethernet header)
    trim_thresh: int = -1  #: virtual-queue bytes before trimming; -1 = 8 x MTU, 0 = off
    ecn_thresh: int = -1  #: virtual-queue bytes before CE marking; -1 = 3 x MTU, 0 = off
    drop_thresh: int = -1  #: virtual-queue bytes before dropping; -1 = 4 x trim, 0 = never
    ecn_last_hop: bool = False  #: mark CE on leaf -> host links too
    host_drop: bool = True  #: hosts' kernels drop MRC frames after the packet-socket tap
    host_shaping: bool = False  #: shape host egress too (a NIC never sends above line rate)
    host_rate_bps: int = -1  #: host <-> leaf links; -1 = same as rate_bps
    delay_s: float = 0.0  #: accepted for mrc-sim spec compatibility; NOT emulated
    #: virtual queue drain rate as a fraction of the link rate; -1 = DEFAULT_VQ_DRAIN
    vq_drain: float = -1.0
    #: frames per pfifo_fast band on shaped ports (the device txqueuelen); 0 = the kernel's
    txqueuelen: int = 0
    burst: int = -1  #: tbf burst in bytes on shaped ports; -1 = derived from rate and MTU

    def __post_init__(self) -> None:
        checks = [
            (1 <= self.planes <= MAX_PLANES, f"planes must be 1..{MAX_PLANES}"),
            (1 <= self.spines <= MAX_PER_PLANE, f"spines must be 1..{MAX_PER_PLANE}"),
            (1 <= self.leaves <= MAX_PER_PLANE, f"leaves must be 1..{MAX_PER_PLANE}"),
            (self.hosts >= 1, "hosts (per leaf) must be >= 1"),
            (self.hosts * self.leaves <= MAX_HOSTS, f"at most {MAX_HOSTS} hosts in total"),
            (1280 <= self.mtu <= 65535, "mtu must be 1280..65535"),
            (self.srv6 in ("usid", "srh"), "srv6 must be usid or srh"),
            (self.vq_drain == -1.0 or 0 < self.vq_drain <= 1, "vq_drain must be in (0, 1]"),
            (self.txqueuelen == 0 or self.txqueuelen >= 2, "txqueuelen must be >= 2"),
            (self.burst == -1 or self.burst >= self.mtu + 14,
             "burst must hold at least one full frame (mtu + 14 bytes)"),
        ]
        for ok, msg in checks:
            if not ok:
                raise SpecError(msg)
        low = MIN_TRIM[self.srv6]
        if not low <= self.trim_size <= self.mtu:
            raise SpecError(
                f"trim_size must be {low}..mtu in {self.srv6} mode: a trimmed frame keeps "
                "every MRC header (Ethernet, IPv6 x2, SRH, UDP, BTH, RETH, METH, ImmDt, TSETH)"
            )

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
        """The one-line form of this spec."""
        parts = [
            f"planes={self.planes}",
            f"spines={self.spines}",
            f"leaves={self.leaves}",
            f"hosts={self.hosts}",
            f"rate={format_rate(self.rate_bps)}",
            f"mtu={self.mtu}",
            f"srv6={self.srv6}",
        ]
        return "leafspine:" + ",".join(parts)


_KEYS: dict[str, tuple[str, Any]] = {
    "planes": ("planes", int),
    "spines": ("spines", int),
    "leaves": ("leaves", int),
    "hosts": ("hosts", int),
    "rate": ("rate_bps", parse_rate),
    "host_rate": ("host_rate_bps", parse_rate),
    "mtu": ("mtu", int),
    "srv6": ("srv6", str),
    "trim_size": ("trim_size", _parse_size),
    "trimsize": ("trim_size", _parse_size),
    "trim": ("trim_thresh", _parse_switch),
    "queue": ("queue", _parse_size),
    "hdr_queue": ("hdr_queue", _parse_size),
    "ecn": ("ecn_thresh", _parse_switch),
    "drop": ("drop_thresh", _parse_size),
    "ecn_last_hop": ("ecn_last_hop", _parse_bool),
    "host_drop": ("host_drop", _parse_bool),
    "host_shaping": ("host_shaping", _parse_bool),
    "delay": ("delay_s", _parse_delay),
    "vq_drain": ("vq_drain", _parse_fraction),
    "txqueuelen": ("txqueuelen", int),
    "burst": ("burst", _parse_size),
}


def _build(items: dict[str, Any], where: str) -> TopologySpec:
    """Convert and resolve spec items.

    The keys of mrc-sim's spec are accepted too, so one spec drives both: ``queue`` (data
    queue: the trim threshold; drop-tail there with ``trim=off``), ``hdr_queue`` (room for
    trimmed headers above it: drop threshold = queue + hdr_queue), ``trim=on|off``,
    ``ecn=Npkt``, ``host_rate``, and ``delay`` (recorded, not emulated: veth latency is
    whatever the CPU gives).
    """
    raw: dict[str, Any] = {}
    for key, value in items.items():
        if key not in _KEYS:
            raise SpecError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(_KEYS))})")
        attr, conv = _KEYS[key]
        try:
            raw[attr] = conv(value)
        except (ValueError, TypeError) as e:
            raise SpecError(f"{where}: bad value {value!r} for {key}") from e
    mtu = int(raw.get("mtu", TopologySpec.mtu))

    def size(attr: str) -> int | None:
        v = raw.pop(attr, None)
        return None if v is None else int(v.bytes(mtu))

    trim_given = "trim_thresh" in raw
    trim = size("trim_thresh")  # None: "on" (default threshold)
    queue = size("queue")
    hdr_queue = size("hdr_queue")
    ecn_given = "ecn_thresh" in raw
    ecn = size("ecn_thresh")
    drop = size("drop_thresh")
    tsize = size("trim_size")
    burst = size("burst")
    if burst is not None:
        raw["burst"] = burst
    kwargs: dict[str, Any] = dict(raw)
    if tsize is not None:
        kwargs["trim_size"] = tsize
    trim_off = trim_given and trim == 0
    if trim_off:
        kwargs["trim_thresh"] = 0
        if drop is None and queue is not None:
            drop = queue  # no trimming: the data queue is drop-tail
    elif trim is not None:
        kwargs["trim_thresh"] = trim
    elif queue is not None:
        kwargs["trim_thresh"] = queue
    if drop is None and hdr_queue is not None and not trim_off:
        base = kwargs.get("trim_thresh", -1)
        drop = (base if base > 0 else 8 * mtu) + hdr_queue
    if drop is not None:
        kwargs["drop_thresh"] = drop
    if ecn_given and ecn is not None:
        kwargs["ecn_thresh"] = ecn
    known = {f.name for f in fields(TopologySpec)}
    assert set(kwargs) <= known, set(kwargs) - known
    return TopologySpec(**kwargs)


def parse_spec(text: str) -> TopologySpec:
    """Parse a one-line spec or, if ``text`` names an existing file, a TOML file."""
    t = text.strip()
    if t.endswith(".toml") or (("/" in t or Path(t).suffix) and Path(t).is_file()):
        return parse_toml(Path(t))
    kind, _, rest = t.partition(":")
    if kind != "leafspine":
        raise SpecError(
            f"bad spec {text!r}: expected leafspine:key=value,... "
            "(e.g. leafspine:planes=2,spines=4,leaves=2,hosts=2,rate=1gbit,mtu=9000) "
            "or a .toml file"
        )
    items: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        if not eq:
            raise SpecError(f"bad spec item {part!r}: expected key=value")
        items[key.strip()] = value.strip()
    return _build(items, "spec")


def parse_toml(path: Path) -> TopologySpec:
    """Read a TOML topology file (keys at top level or in a ``[fabric]`` table)."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise SpecError(f"cannot read {path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path} is not valid TOML: {e}") from e
    table = data.get("fabric", data)
    if not isinstance(table, dict):
        raise SpecError(f"{path}: [fabric] must be a table")
    kind = table.pop("kind", "leafspine")
    if kind != "leafspine":
        raise SpecError(f"{path}: only kind = \"leafspine\" is supported")
    return _build(table, str(path))


def validate_name(name: str) -> None:
    """Fabric names are 1-10 characters, [a-z0-9], starting with a letter."""
    if not NAME_RE.match(name):
        raise SpecError(
            f"bad fabric name {name!r}: use 1-10 characters a-z 0-9, starting with a letter"
        )


def _mac(fabric_id: int, n: int) -> str:
    # Locally administered unicast (0x02), "fb" for fabric, then fabric id and a counter:
    # unique across fabrics and readable in captures.
    b = [0x02, 0xFB, fabric_id >> 8, fabric_id & 0xFF, (n >> 8) & 0xFF, n & 0xFF]
    return ":".join(f"{x:02x}" for x in b)


# Link-local addresses: lower end ::1, upper end ::2 on every cable (scope is the link).
LL_LOWER = "fe80::1"
LL_UPPER = "fe80::2"


def allocate(spec: TopologySpec, name: str, fabric_id: int) -> FabricDescription:
    """Lay out the fabric: every name, uSID, address and MAC, deterministically."""
    validate_name(name)
    if not 0 < fabric_id < (1 << 16):
        raise SpecError(f"fabric id {fabric_id} must be a non-zero 16-bit value")
    block = f"fc00:{fabric_id:x}::/{USID_BLOCK_BITS}"
    host_prefix = f"fd00:{fabric_id:x}::/32"
    blk = ipaddress.IPv6Network(block)
    loc_len = USID_BLOCK_BITS + USID_BITS
    mac_n = 0

    def next_mac() -> str:
        nonlocal mac_n
        mac_n += 1
        return _mac(fabric_id, mac_n)

    planes: list[Plane] = []
    for p in range(spec.planes):

        def switch(role: str, i: int, p: int = p) -> Switch:
            base = SPINE_USID_BASE if role == "spine" else LEAF_USID_BASE
            usid = base + (p << 8) + i
            sname = f"p{p}{'s' if role == 'spine' else 'l'}{i}"
            loc = f"{usid_address(blk, [usid])}/{loc_len}"
            return Switch(sname, role, p, i, usid, f"{name}-{sname}", loc)

        planes.append(
            Plane(
                index=p,
                host_prefix=str(ipaddress.IPv6Network(f"fd00:{fabric_id:x}:{p:x}::/48")),
                leaves=[switch("leaf", i) for i in range(spec.leaves)],
                spines=[switch("spine", i) for i in range(spec.spines)],
            )
        )

    links: list[Link] = []
    hosts: list[Host] = []
    for h in range(spec.leaves * spec.hosts):
        leaf_index = h // spec.hosts
        usid = HOST_USID_BASE + h
        hname = f"h{h}"
        netns = f"{name}-{hname}"
        ports = []
        for pl in planes:
            leaf = pl.leaves[leaf_index]
            host_end = LinkEnd(hname, netns, f"p{pl.index}", next_mac(), LL_LOWER)
            leaf_end = LinkEnd(leaf.name, leaf.netns, hname, next_mac(), LL_UPPER)
            links.append(
                Link(f"{hname}-{leaf.name}", pl.index, "host-leaf", spec.host_link_rate,
                     host_end, leaf_end)
            )
            ports.append(
                Port(
                    plane=pl.index,
                    ifname=host_end.ifname,
                    mac=host_end.mac,
                    address=str(ipaddress.IPv6Address(f"fd00:{fabric_id:x}:{pl.index:x}::{usid:x}")),
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
                        f"{leaf.name}-{sp.name}", pl.index, "leaf-spine", spec.rate_bps,
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
        usid_block=block,
        lblen=USID_BLOCK_BITS,
        nflen=USID_BITS,
        host_prefix=host_prefix,
        mtu=spec.mtu,
        planes=planes,
        hosts=hosts,
        links=links,
        options=options,
        paths=paths,
    )
