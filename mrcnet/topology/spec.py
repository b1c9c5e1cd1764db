"""The topology spec: one grammar and one parser for mrc-fabric and mrc-sim.

A spec is one line, ``leafspine:planes=2,spines=4,leaves=2,hosts=2,rate=1gbit``, or a
TOML file with the same keys (top level or under ``[fabric]``). Every key is optional.
The shape (planes, spines, leaves, hosts), the MTU, the SRv6 mode and the trim size have
one default for both tools; rates, delays and queues have a default per tool, because a
simulated 100 Gbit/s link is not a rate this machine's CPU can push through a veth
(docs/TOPOLOGY.md has the table). A key a tool cannot emulate is accepted, kept, and
reported as "recorded, not emulated" (:meth:`TopologySpec.not_emulated`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrcnet.constants import MAX_HOSTS, MAX_PER_PLANE, MAX_PLANES, MIN_TRIM
from mrcnet.topology.errors import SpecError
from mrcnet.topology.units import (
    format_rate,
    format_time,
    parse_bool,
    parse_bytes,
    parse_fraction,
    parse_int,
    parse_rate,
    parse_time,
)
from mrcnet.wire.dscp import DEFAULT_DSCP, DscpClasses

FABRIC = "fabric"  #: mrc-fabric: namespaces, veths, tc and BPF on this machine
SIM = "sim"  #: mrc-sim: the discrete-event simulator
BACKENDS = (FABRIC, SIM)

KIND = "leafspine"
EXAMPLE = "leafspine:planes=2,spines=4,leaves=2,hosts=2,rate=1gbit,mtu=9000"


def _switch(text: Any, mtu: int) -> bool | int:
    """``on`` (True: the tool's default threshold), ``off`` (0) or a size in bytes."""
    if isinstance(text, bool):
        return True if text else 0
    if isinstance(text, str) and text.strip().lower() in ("on", "true", "yes"):
        return True
    if isinstance(text, str) and text.strip().lower() in ("false", "no"):
        return 0
    return parse_bytes(text, packet=mtu)


def _srv6(text: Any, mtu: int) -> str:
    return str(text).strip().lower()


def _drain(text: Any, mtu: int) -> float:
    value = parse_fraction(text, what="fraction")
    if value == 0:
        raise SpecError("vq_drain must be in (0, 1]")
    return value


def _dscp(text: Any, mtu: int) -> DscpClasses:
    """``CLASS:N/CLASS:N...`` (or TOML's table ``{CLASS = N}``): the classes named get
    those code points, the others keep their defaults (:mod:`mrcnet.wire.dscp`)."""
    if isinstance(text, DscpClasses):
        return text
    if isinstance(text, Mapping):
        given = dict(text)
    else:
        given = {}
        for item in filter(None, (i.strip() for i in str(text).split("/"))):
            name, colon, value = item.partition(":")
            if not colon:
                raise SpecError(f"{item!r}: expected CLASS:N, e.g. trimmed:10/control:48")
            try:
                given[name.strip()] = int(value)
            except ValueError:
                raise SpecError(f"{item!r}: the code point must be an integer 0..63") from None
    try:
        return DscpClasses.from_dict(given, "dscp")
    except ValueError as e:
        raise SpecError(str(e)) from None


def _show_dscp(v: DscpClasses) -> str:
    default = DEFAULT_DSCP.to_dict()
    return "/".join(f"{k}:{n}" for k, n in v.to_dict().items() if n != default[k]) or \
        "/".join(f"{k}:{n}" for k, n in default.items())


@dataclass(frozen=True)
class Key:
    """One spec key: how its value is read and which tools emulate it."""

    parse: Callable[[Any, int], Any]  #: (value as written, mtu) -> value
    backends: tuple[str, ...]  #: the tools that emulate it; the others record it
    help: str
    show: Callable[[Any], str] = str  #: value -> text, for to_line and reports


def _show_bool(v: bool) -> str:
    return "on" if v else "off"


def _show_switch(v: bool | int) -> str:
    return "on" if v is True else ("off" if v == 0 else str(v))


_BOTH = BACKENDS
KEYS: dict[str, Key] = {
    "planes": Key(lambda v, m: parse_int(v), _BOTH, "network planes (one NIC port each)"),
    "spines": Key(lambda v, m: parse_int(v), _BOTH, "spines per plane (= paths per plane)"),
    "leaves": Key(lambda v, m: parse_int(v), _BOTH, "leaves per plane"),
    "hosts": Key(lambda v, m: parse_int(v), _BOTH, "hosts per leaf"),
    "mtu": Key(lambda v, m: parse_int(v), _BOTH, "largest frame (bytes)"),
    "srv6": Key(_srv6, _BOTH, "usid (F3216 containers) or srh (segment list)"),
    "trim_size": Key(lambda v, m: parse_bytes(v), _BOTH,
                     "bytes a trimmed frame keeps, from the Ethernet header on"),
    "rate": Key(lambda v, m: parse_rate(v), _BOTH, "every link's rate (none: unshaped)",
                format_rate),
    "host_rate": Key(lambda v, m: parse_rate(v), _BOTH, "host<->leaf links (default: rate)",
                     format_rate),
    "delay": Key(lambda v, m: parse_time(v), (SIM,), "propagation delay of every link",
                 format_time),
    "skew": Key(lambda v, m: parse_time(v), (SIM,),
                "extra delay of spine i's links: skew x i / (spines - 1)", format_time),
    "queue": Key(lambda v, m: parse_bytes(v, packet=m), _BOTH,
                 "data queue per switch port (bytes or Npkt)"),
    "hdr_queue": Key(lambda v, m: parse_bytes(v, packet=m), _BOTH,
                     "room for trimmed headers and control frames above the data queue"),
    "trim": Key(_switch, _BOTH, "trim above the data queue: on, off (drop-tail) or SIZE",
                _show_switch),
    "ecn": Key(_switch, _BOTH, "mark CE above this queue length: on, off or SIZE",
               _show_switch),
    "ecn_last_hop": Key(lambda v, m: parse_bool(v), _BOTH, "mark CE on leaf->host ports too",
                        _show_bool),
    "drop": Key(lambda v, m: parse_bytes(v, packet=m), (FABRIC,),
                "virtual-queue bytes before dropping (0: never)"),
    "host_drop": Key(lambda v, m: parse_bool(v), (FABRIC,),
                     "hosts' kernels drop MRC frames after the packet-socket tap", _show_bool),
    "host_shaping": Key(lambda v, m: parse_bool(v), (FABRIC,), "shape host egress too",
                        _show_bool),
    "vq_drain": Key(_drain, (FABRIC,), "virtual queue drain rate / link rate, (0, 1]"),
    "txqueuelen": Key(lambda v, m: parse_int(v), (FABRIC,),
                      "frames per pfifo_fast band on shaped ports"),
    "burst": Key(lambda v, m: parse_bytes(v, packet=m), (FABRIC,), "tbf burst in bytes"),
    "dscp": Key(_dscp, _BOTH, "DSCP code points, CLASS:N/...: trimmable, trimmable_retx, "
                "trimmed, trimmed_lasthop, no_trim, control", _show_dscp),
}

#: Other spellings accepted for a key.
ALIASES = {"trimsize": "trim_size"}

#: Why a tool only records a key (shown with "recorded, not emulated").
WHY_NOT = {
    FABRIC: "veth latency is whatever the CPU gives",
    SIM: "the simulated switches have no such knob",
}


def check_shape(planes: int, spines: int, leaves: int, hosts: int, mtu: int, srv6: str,
                trim_size: int) -> None:
    """The checks every tool makes on the shape and framing (raises :class:`SpecError`)."""
    checks = [
        (1 <= planes <= MAX_PLANES, f"planes must be 1..{MAX_PLANES}"),
        (1 <= spines <= MAX_PER_PLANE, f"spines must be 1..{MAX_PER_PLANE}"),
        (1 <= leaves <= MAX_PER_PLANE, f"leaves must be 1..{MAX_PER_PLANE}"),
        (hosts >= 1, "hosts (per leaf) must be >= 1"),
        (hosts * leaves <= MAX_HOSTS, f"at most {MAX_HOSTS} hosts in total"),
        (1280 <= mtu <= 65535, "mtu must be 1280..65535"),
        (srv6 in ("usid", "srh"), "srv6 must be usid or srh"),
    ]
    for ok, msg in checks:
        if not ok:
            raise SpecError(f"topology: {msg}")
    low = MIN_TRIM[srv6]
    if not low <= trim_size <= mtu:
        raise SpecError(f"topology: trim_size must be {low}..mtu in {srv6} mode (a trimmed "
                        "frame keeps every MRC header: Ethernet, IPv6 x2, SRH, UDP, BTH, "
                        "RETH, METH, ImmDt, TSETH)")


def shape_parts(planes: int, spines: int, leaves: int, hosts: int) -> list[str]:
    """``["planes=2", "spines=4", ...]``: how every tool writes a shape into a spec line."""
    return [f"planes={planes}", f"spines={spines}", f"leaves={leaves}", f"hosts={hosts}"]


@dataclass(frozen=True)
class TopologySpec:
    """A multi-plane, two-tier leaf-spine fabric, as the user wrote it.

    The fields have the one default both tools share; every other key the user gave is in
    :attr:`options` (parsed, in :data:`KEYS` order). A tool reads the options it emulates
    with its own defaults (``mrcnet.fabric.spec``, ``mrcnet.sim.topology``).
    """

    planes: int = 2
    spines: int = 2  #: per plane
    leaves: int = 2  #: per plane
    hosts: int = 1  #: per leaf
    mtu: int = 9000
    srv6: str = "usid"
    trim_size: int = 256
    options: tuple[tuple[str, Any], ...] = field(default=())

    def __post_init__(self) -> None:
        check_shape(self.planes, self.spines, self.leaves, self.hosts, self.mtu, self.srv6,
                    self.trim_size)

    @property
    def n_hosts(self) -> int:
        """Hosts in the whole fabric."""
        return self.leaves * self.hosts

    def get(self, key: str, default: Any = None) -> Any:
        """The parsed value of option ``key``, or ``default`` if the spec does not say."""
        for k, v in self.options:
            if k == key:
                return v
        return default

    def given(self, key: str) -> bool:
        """Whether the spec sets option ``key``."""
        return any(k == key for k, _ in self.options)

    def not_emulated(self, backend: str) -> list[str]:
        """``key=value`` of every option ``backend`` records but does not emulate."""
        return [f"{k}={KEYS[k].show(v)}" for k, v in self.options
                if backend not in KEYS[k].backends]

    def to_line(self) -> str:
        """The one-line form (parses back to an equal spec)."""
        parts = shape_parts(self.planes, self.spines, self.leaves, self.hosts)
        parts += [f"mtu={self.mtu}", f"srv6={self.srv6}", f"trim_size={self.trim_size}"]
        parts += [f"{k}={KEYS[k].show(v)}" for k, v in self.options]
        return f"{KIND}:" + ",".join(parts)


_FIELDS = ("planes", "spines", "leaves", "hosts", "mtu", "srv6", "trim_size")


def build(items: Mapping[str, Any], where: str = "topology") -> TopologySpec:
    """A spec from ``key -> value as written`` (strings, or TOML's ints and bools)."""
    named: dict[str, Any] = {}
    for key, value in items.items():
        k = ALIASES.get(key, key)
        if k not in KEYS:
            raise SpecError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(KEYS))})")
        if k in named:
            raise SpecError(f"{where}: {k} given twice")
        named[k] = value

    def conv(k: str, mtu: int) -> Any:
        try:
            return KEYS[k].parse(named[k], mtu)
        except SpecError as e:
            raise SpecError(f"{where}: bad value {named[k]!r} for {k} ({e})") from None
        except (ValueError, TypeError) as e:
            raise SpecError(f"{where}: bad value {named[k]!r} for {k}") from e

    # The MTU first: sizes may be written in MTU-sized packets ("8pkt").
    mtu = conv("mtu", 0) if "mtu" in named else TopologySpec.mtu
    kw: dict[str, Any] = {k: conv(k, mtu) for k in _FIELDS if k in named}
    options = tuple((k, conv(k, mtu)) for k in KEYS if k in named and k not in _FIELDS)
    return TopologySpec(**kw, options=options)


def parse_spec(text: str) -> TopologySpec:
    """Parse a one-line spec or, if ``text`` names an existing file, a TOML file."""
    t = text.strip()
    if t.endswith(".toml") or (("/" in t or Path(t).suffix) and Path(t).is_file()):
        return parse_toml(Path(t))
    kind, _, rest = t.partition(":")
    if kind != KIND:
        raise SpecError(f"bad topology {text!r}: expected {KIND}:key=value,... "
                        f"(e.g. {EXAMPLE}) or a .toml file")
    items: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not value.strip():
            raise SpecError(f"topology: bad item {part!r}: expected key=value")
        key = key.strip()
        if key in items:
            raise SpecError(f"topology: {key} given twice")
        items[key] = value.strip()
    return build(items)


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file's tables (SpecError if it cannot be read or is not TOML)."""
    try:
        return tomllib.loads(path.read_text())
    except OSError as e:
        raise SpecError(f"cannot read {path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path} is not valid TOML: {e}") from e


def parse_toml(path: Path) -> TopologySpec:
    """Read a TOML topology file (keys at top level or in a ``[fabric]`` table)."""
    data = read_toml(path)
    table = data.get("fabric", data)
    if not isinstance(table, dict):
        raise SpecError(f"{path}: [fabric] must be a table")
    table = dict(table)
    kind = table.pop("kind", KIND)
    if kind != KIND:
        raise SpecError(f"{path}: only kind = \"{KIND}\" is supported")
    return build(table, str(path))


def help_text() -> str:
    """Every key, one line each, with the tools that emulate it."""
    lines = [f"{KIND}:KEY=VALUE,... (every key optional; or a .toml file with the same keys)"]
    for k, key in KEYS.items():
        only = "" if key.backends == _BOTH else f"  [{'/'.join(key.backends)} only]"
        lines.append(f"  {k:<13} {key.help}{only}")
    return "\n".join(lines) + "\n"
