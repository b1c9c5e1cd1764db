"""mrcd's configuration file (TOML) and its checks.

Example (every key but ``host`` and ``[[port]]`` is optional; with ``fabric`` the ports
default to every port the description gives this host)::

    host = "h0"                       # this host's name (as in the fabric description)
    socket = "/run/mrcd/h0.sock"      # Unix socket of the client API
    socket_mode = "0660"              # who may use mrcd: the socket file's permissions
    socket_group = "mrc"              # and its group (default: mrcd's own)
    fabric = "/var/lib/mrc-fabric/f1/description.json"   # paths, MACs and addresses
    control_port = 47910              # TCP port of the mrcd-to-mrcd control channel
    ev_profile = "spray"              # "spray" (MRC) or "ecmp" (RoCE-like baseline)
    cc_profile = "nscc"               # congestion control ("nscc", "fixed")
    kernel_drop = true                # nftables rule: the kernel must not answer MRC
    log_format = "console"            # or "json" (structlog)
    log_level = "info"
    metrics_listen = "127.0.0.1:9464" # Prometheus /metrics (HOST:PORT; off when absent;
                                      # needs the extra: pip install 'mrcnet[metrics]')

    [[port]]                          # one per NIC port = plane
    ifname = "eth0"
    plane = 0
    # address = "fd00::a"             # default: from the fabric, else the interface's
    # next_hop = "fd00::1"            # L2 next hop (default: fabric's leaf, or the peer)

    [core]                            # protocol knobs: any HostConfig field (see
    timeout_floor = 0.01              # mrcnet/core/config.py); mrcd's defaults suit a
                                      # Python event loop (ms timers), see DAEMON_CORE
    # tuning = "collective"           # a named set of them first (core.config.TUNINGS)

    [limits]                          # per client (each connection to the socket);
    max_qps = 1024                    # going over one is a LimitExceeded error naming
    max_cqs = 1024                    # the key that raises it
    max_mrs = 4096                    # registered memory regions
    max_mr_bytes = 17179869184        # registered bytes (16 GiB)
    max_recvs = 65536                 # posted receives waiting, all QPs together
    max_message = 65536               # bytes of one request (4 KiB .. 4 MiB)
    max_json_depth = 32               # nesting of a request's JSON (2 .. 500)

    [peers.h1]                        # only without a fabric: directly cabled peers
    control = "fd00::b"               # its control-channel address
    addresses = ["fd00::b"]           # its port address in plane 0, 1, ...

Every problem is reported as one :class:`ConfigError` naming the file and key.
"""

from __future__ import annotations

import ipaddress
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from mrcnet.core.config import TUNINGS, HostConfig
from mrcnet.core.recovery import retry_cnt_for
from mrcnet.daemon.busyports import ENTER_AFTER
from mrcnet.errors import MrcError
from mrcnet.wire.dscp import DscpClasses

__all__ = ["ClientLimits", "ConfigError", "DaemonConfig", "PeerConfig", "PortConfig",
           "load_config", "parse_listen"]

DEFAULT_CONTROL_PORT: Final = 47910
DEFAULT_SOCKET_DIR: Final = "/run/mrcd"
EV_PROFILES: Final = ("spray", "ecmp")
CC_PROFILES: Final = ("nscc", "fixed")
LOG_FORMATS: Final = ("console", "json")
LOG_LEVELS: Final = ("debug", "info", "warning", "error")


#: mrcd's defaults for the core, where they differ from HostConfig's. The core's defaults
#: suit a simulator or a NIC (RTO floor 200 us); a Python daemon on an asyncio loop sees
#: millisecond scheduling delays, and a timeout that fires before a SACK could be processed
#: retransmits spuriously and retires good EVs. Timers stay the backstop; SACK-based loss
#: detection (reorder_floor) reacts first.
#: Seconds of silence from a peer that is alive (its host stalled: nothing taken in or
#: sent) that mrcd's retry budget rides out. A 60 s run on a 2-core machine with a CPU hog
#: per core (tools/soak_loaded.py) saw wake-ups up to 0.35 s late and a 0.4 s silence that
#: took 6 of the 7 retry rounds mrcd had before; 1 s leaves a margin of 2.5.
STALL_TOLERANCE: Final = 1.0
_TIMEOUT_FLOOR: Final = 0.02
_RETRY_LINEAR: Final = 3

DAEMON_CORE: Final[dict[str, Any]] = {
    "timeout_floor": _TIMEOUT_FLOOR,
    # 9 rounds (3 at the base RTO, 6 doubling: mrc.h's retry_linear_cnt 3, retry_exp_cnt
    # 6): the last retransmission at 66 x 20 ms = 1.32 s, "peer unreachable" at
    # 130 x 20 ms = 2.6 s (docs/CORE.md, Retry budget and endpoint stalls).
    "retry_cnt": retry_cnt_for(_TIMEOUT_FLOOR, _RETRY_LINEAR, STALL_TOLERANCE),
    "retry_linear": _RETRY_LINEAR,
    "reorder_floor": 0.002,
    "ack_delay": 0.0005,
    # Probes of retired EVs: at 10 ms, 128 retired EVs made 12,800 probes/s, more than
    # a Python mrcd can answer in time, and late answers count as failures (measured).
    "probe_interval": 0.1,
    "base_rtt_hint": 0.0005,
    "link_rate": 10e9 / 8,
    # NSCC under a Python endpoint: mrcd's own scheduling adds 0.1-2 ms to RTT samples,
    # which NSCC read as queueing (window ~50-130 KB, 0.46 Gb/s on an unshaped fabric).
    # With these (core knobs made for this): 1.6-1.9 Gb/s and half the CPU per GB
    # (tools/bench_goodput.py, 3 runs of 256 MiB; docs/MRCD.md).
    "cc_target_floor": 0.001,
    "cc_rtt_floor": 0.0015,
    "cc_delay_filter": 0.5,
    # A SACK every 16 data packets (128 KiB at MTU 9000), not 4: each costs both mrcds
    # Python and the kernel a frame; on a busy endpoint the ACK clock is the batch anyway
    # (every burst's tail is SACKed at its end). 4 -> 8: 0.29 -> 0.17 SACKs per data
    # packet, mrcds 5.4-5.7 -> 4.2-4.5 CPU s/GB; 8 -> 16, once the SACK side was in C:
    # 0.21 -> 0.13, goodput +5 %, mrcds -7 % CPU per GB (two sets of interleaved pairs,
    # docs/PERFORMANCE.md). Not 32 with ack_span 64 (session 14): 0.088 -> 0.051 SACKs
    # per data frame, but no CPU per GB or goodput gain beyond the runs' spread, and a
    # 64 MiB transfer through 1 % loss on two links slower in 9 of 10 pairs (median
    # +12 %). ack_span stays the core's 32: at ack_every 16 a span of 64 changes nothing.
    "ack_every": 16,
    # No genuine SACK comes back sooner than the peer mrcd can answer (its event loop
    # alone takes more; smallest RTT measured on netns fabrics: see docs/SECURITY.md): a
    # SACK sooner than this is forged (forged.early_floor).
    "ack_rtt_floor": 20e-6,
    # A lone small message (a latency ping, a request) is acknowledged in the pass that
    # received it: its sender's completion does not wait for ack_delay (issue 15). On a
    # bulk flow it also SACKs every pass that read a frame (0.113 SACKs per data frame
    # against 0.090 without, tools/bench_goodput.py), yet without it 21 interleaved pairs
    # showed no CPU or goodput gain (the path's CPU per GB 1.36 -> 1.49, mrc / raw 0.65
    # -> 0.59, medians within the spread), a window's last frame read alone waiting for
    # the delayed-ACK timer (docs/PERFORMANCE.md, session 14).
    "ack_lone": True,
    # ... and the AckReq of a write-with-immediate waits for the answer its application
    # may post, to leave with it (at most ack_delay): the requester's mrcd then wakes
    # once for both, not for the ACK and again for the answer (issue 15).
    "ack_with_data": True,
    # A SACK per receive pass, not per AckReq: small writes arrive in bursts, and each
    # AckReq's own SACK cost the receiving mrcd ~11 us of system time per 64-byte write
    # (tools/bench_latency.py's rate table; docs/PERFORMANCE.md).
    "ack_req_burst": True,
    # No tail-loss probe yet (mrcnet/core/tailloss.py, issue 16): in the simulator with
    # mrcd's loop modelled (tests/sim/test_sim_detection.py, seed 2) its timer alone moved
    # the loop's wake-ups enough to raise SACKs from 0.25 to 0.40 per data packet (no
    # probe ever fired); to be measured on a fabric first.
    "tail_probe": False,
    # Nor RACK's tie-break for packets of one burst: every frame of an mrcd pass carries
    # the pass's timestamp and the planes' ports drain at their own pace, so the planes'
    # reordering read as losses, all spurious (10-100 per 512 MiB on bench_goodput's
    # fabric, goodput down 5-10 %; docs/CORE.md "Tail losses and shared verdicts").
    "rack_tie_break": False,
}


class ConfigError(MrcError):
    """The configuration file is missing, not TOML, or has a bad or missing key."""


#: ``answer_poll_us``'s default (us): a ping-pong's answer comes within it on an idle
#: host (docs/PERFORMANCE.md, "Session 18")
DEFAULT_ANSWER_POLL_US: Final = 100
#: ``idle_poll_us``'s default (us): a verbs round trip's other half (the peer's mrcd,
#: its application, the fabric both ways) comes within it (docs/PERFORMANCE.md,
#: "Session 19")
DEFAULT_IDLE_POLL_US: Final = 500
#: ``busy_ports``'s default and most: looks in a row that found a port readable (after
#: a batch) before the ports leave the loop's epoll set (mrcnet/daemon/busyports.py)
DEFAULT_BUSY_PORTS: Final = ENTER_AFTER
MAX_BUSY_PORTS: Final = 1000


@dataclass(frozen=True)
class PortConfig:
    """One NIC port mrcd drives."""

    ifname: str
    plane: int
    address: str | None = None  #: this port's unicast IPv6 address
    next_hop: str | None = None  #: IPv6 address of the L2 next hop (neighbour lookup)
    next_hop_mac: str | None = None  #: or its MAC, given outright


@dataclass(frozen=True)
class PeerConfig:
    """A peer reachable without a fabric description (back-to-back cabling, tests)."""

    name: str
    control: str  #: address of its control channel
    addresses: tuple[str, ...]  #: its port address per plane
    control_port: int = DEFAULT_CONTROL_PORT


@dataclass(frozen=True)
class ClientLimits:
    """What one client (one connection to mrcd's socket) may hold at once: the
    ``[limits]`` table. A request that would go over one gets
    :class:`~mrcnet.api.errors.LimitExceeded` naming the key (``limits.<field>``)."""

    max_qps: int = 1024
    max_cqs: int = 1024
    max_mrs: int = 4096
    max_mr_bytes: int = 16 << 30
    max_recvs: int = 65536
    max_message: int = 1 << 16
    max_json_depth: int = 32


#: Ranges of the limits that have one beyond "at least 1": a request must fit a hello
#: and stay a control message (mrcd reads each into a buffer of this size); the JSON
#: decoder must stay well inside Python's recursion limit.
LIMIT_RANGES: Final = {"max_message": (4096, 4 << 20), "max_json_depth": (2, 500)}


@dataclass(frozen=True)
class DaemonConfig:
    """Everything mrcd reads from its configuration file."""

    host: str
    ports: tuple[PortConfig, ...]
    socket: str
    socket_mode: int = 0o660
    socket_group: str | None = None
    fabric: str | None = None
    control_port: int = DEFAULT_CONTROL_PORT
    control_listen: tuple[str, ...] = ()  #: empty: the port addresses
    ev_profile: str = "spray"
    cc_profile: str = "nscc"
    kernel_drop: bool = True
    log_format: str = "console"
    log_level: str = "info"
    peers: dict[str, PeerConfig] = field(default_factory=dict)
    limits: ClientLimits = field(default_factory=ClientLimits)
    core: dict[str, Any] = field(default_factory=lambda: dict(DAEMON_CORE))
    metrics_listen: str | None = None  #: HOST:PORT of the Prometheus endpoint (None: off)
    #: After taking a client's posts, look again for this long (us) before going back to
    #: the loop (0: never; it holds the loop: only for latency on an idle host).
    busy_poll_us: int = 0
    #: After a port pass that woke a client for a receive, look at that client's send
    #: queue for up to this long (us) for the answer it is about to post, before going
    #: back to the loop (its post then needs no doorbell and no wake-up of mrcd):
    #: adaptive per client (mrcnet/daemon/posts.py Posts.await_answer). 0: never.
    answer_poll_us: int = DEFAULT_ANSWER_POLL_US
    #: At the end of a pass, look at the ports and the clients' sockets for up to this
    #: long (us) before the loop sleeps, returning to it as soon as one is readable (an
    #: idle vCPU's wake-up is tens of us): adaptive (mrcnet/daemon/idlepoll.py). 0: never.
    idle_poll_us: int = DEFAULT_IDLE_POLL_US
    #: After this many looks in a row that found a port readable, each after a port
    #: pass that read a batch (a transfer), the ports leave the loop's epoll set and the
    #: looks run their passes until one finds nothing: no kernel callback per frame
    #: (mrcnet/daemon/busyports.py). 0: the loop always watches them. Needs
    #: ``idle_poll_us``.
    busy_ports: int = DEFAULT_BUSY_PORTS
    #: Run under SCHED_BATCH: woken by a frame, mrcd does not preempt the process that
    #: sent it mid-batch; for mrcds that share CPUs with each other, as on a single-host
    #: netns fabric (mrcnet/daemon/sched.py says when it helps and when it hurts).
    #: ``"bulk"``: only while its port passes read many frames (a transfer), not for a
    #: round trip's (mrcnet/daemon/sched.py BulkBatch).
    sched_batch: bool | str = False
    source: str = "<memory>"  #: the file it came from (for messages)


def _want(d: dict[str, Any], key: str, typ: type | tuple[type, ...], where: str,
          default: Any = ..., choices: tuple[Any, ...] | None = None) -> Any:
    if key not in d:
        if default is ...:
            raise ConfigError(f"{where}: missing key {key!r}")
        return default
    value = d[key]
    # bool is an int in Python; a port number of `true` is still wrong.
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        names = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise ConfigError(f"{where}: {key} must be {names}, got {value!r}")
    if choices is not None and value not in choices:
        raise ConfigError(f"{where}: {key} = {value!r}, expected one of {', '.join(choices)}")
    return value


def _addr(value: str, where: str) -> str:
    try:
        return str(ipaddress.IPv6Address(value))
    except ValueError:
        raise ConfigError(f"{where}: {value!r} is not an IPv6 address") from None


def parse_config(data: dict[str, Any], source: str = "<memory>") -> DaemonConfig:
    """Check a parsed TOML document and build the configuration."""
    known = {"host", "socket", "socket_mode", "socket_group", "fabric", "control_port",
             "control_listen", "ev_profile", "cc_profile", "kernel_drop", "log_format",
             "log_level", "port", "peers", "core", "limits", "metrics_listen",
             "busy_poll_us", "answer_poll_us", "idle_poll_us", "busy_ports",
             "sched_batch"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {', '.join(unknown)}")
    host = _want(data, "host", str, source)
    fabric = _want(data, "fabric", str, source, None)
    # With a fabric description the ports may come from it (every port of this host).
    raw_ports = _want(data, "port", list, source, [] if fabric else ...)
    if not raw_ports and not fabric:
        raise ConfigError(f"{source}: at least one [[port]] is needed")
    ports = []
    for i, p in enumerate(raw_ports):
        where = f"{source}: port #{i + 1}"
        if not isinstance(p, dict):
            raise ConfigError(f"{where}: must be a table ([[port]])")
        extra = sorted(set(p) - {"ifname", "plane", "address", "next_hop", "next_hop_mac"})
        if extra:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(extra)}")
        addr = _want(p, "address", str, where, None)
        nh = _want(p, "next_hop", str, where, None)
        ports.append(PortConfig(
            ifname=_want(p, "ifname", str, where),
            plane=_want(p, "plane", int, where),
            address=_addr(addr, where) if addr else None,
            next_hop=_addr(nh, where) if nh else None,
            next_hop_mac=_want(p, "next_hop_mac", str, where, None),
        ))
    planes = [p.plane for p in ports]
    if ports and sorted(planes) != list(range(len(planes))):
        raise ConfigError(f"{source}: port planes must be 0..{len(planes) - 1}, one port "
                          f"each; got {planes}")
    mode_s = _want(data, "socket_mode", str, source, "0660")
    try:
        mode = int(mode_s, 8)
    except ValueError:
        raise ConfigError(f"{source}: socket_mode {mode_s!r} is not octal (e.g. \"0660\")")\
            from None
    peers: dict[str, PeerConfig] = {}
    for name, pd in _want(data, "peers", dict, source, {}).items():
        where = f"{source}: peers.{name}"
        if not isinstance(pd, dict):
            raise ConfigError(f"{where}: must be a table")
        addrs = _want(pd, "addresses", list, where)
        peers[name] = PeerConfig(
            name=name,
            control=_addr(_want(pd, "control", str, where), where),
            addresses=tuple(_addr(a, where) for a in addrs),
            control_port=_want(pd, "control_port", int, where, DEFAULT_CONTROL_PORT),
        )
    if fabric is None and not peers:
        raise ConfigError(f"{source}: give a fabric description (fabric = \"...\") or "
                          "directly cabled [peers]")
    control_port = _want(data, "control_port", int, source, DEFAULT_CONTROL_PORT)
    if not 0 < control_port < 65536:
        raise ConfigError(f"{source}: control_port {control_port} is not a TCP port")
    metrics_listen = _want(data, "metrics_listen", str, source, None)
    if metrics_listen is not None:
        parse_listen(metrics_listen, f"{source}: metrics_listen")
    core = dict(DAEMON_CORE)
    fields = HostConfig.__dataclass_fields__
    core_table = dict(_want(data, "core", dict, source, {}))
    tuning = core_table.pop("tuning", "default")
    if not isinstance(tuning, str) or tuning not in TUNINGS:
        raise ConfigError(f"{source}: core.tuning {tuning!r} unknown: use one of "
                          f"{', '.join(TUNINGS)}")
    core.update(TUNINGS[tuning])  # a named set first; the table's own keys override it
    for key, value in core_table.items():
        where = f"{source}: core.{key}"
        if key in ("ev_profile", "cc_profile", "completion_events", "mtu_payload"):
            raise ConfigError(f"{where}: set by mrcd itself (use the top-level key, or the "
                              "interface MTU)")
        if key not in fields:
            raise ConfigError(f"{where}: unknown core setting (see HostConfig in "
                              "mrcnet/core/config.py)")
        if key == "dscp":
            try:
                core[key] = DscpClasses.from_dict(value, where).to_dict()
            except ValueError as e:
                raise ConfigError(str(e)) from None
            continue
        default = getattr(HostConfig(), key)
        want: type = type(default)
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise ConfigError(f"{where} must be {want.__name__}, got {value!r}")
        core[key] = value
    return DaemonConfig(
        host=host,
        ports=tuple(ports),
        socket=_want(data, "socket", str, source, f"{DEFAULT_SOCKET_DIR}/{host}.sock"),
        socket_mode=mode,
        socket_group=_want(data, "socket_group", str, source, None),
        fabric=fabric,
        control_port=control_port,
        control_listen=tuple(_addr(a, source) for a in _want(data, "control_listen", list,
                                                               source, [])),
        ev_profile=_want(data, "ev_profile", str, source, "spray", EV_PROFILES),
        cc_profile=_want(data, "cc_profile", str, source, "nscc", CC_PROFILES),
        kernel_drop=_want(data, "kernel_drop", bool, source, True),
        log_format=_want(data, "log_format", str, source, "console", LOG_FORMATS),
        log_level=_want(data, "log_level", str, source, "info", LOG_LEVELS),
        peers=peers,
        limits=_limits(_want(data, "limits", dict, source, {}), source),
        core=core,
        metrics_listen=metrics_listen,
        busy_poll_us=_poll_us(data, source, "busy_poll_us", 0),
        answer_poll_us=_poll_us(data, source, "answer_poll_us", DEFAULT_ANSWER_POLL_US),
        idle_poll_us=_poll_us(data, source, "idle_poll_us", DEFAULT_IDLE_POLL_US),
        busy_ports=_busy_ports(data, source),
        sched_batch=_sched_batch(data, source),
        source=source,
    )


def _sched_batch(data: dict[str, Any], source: str) -> bool | str:
    value = data.get("sched_batch", False)
    if isinstance(value, bool):
        return value
    if value == "bulk":
        return "bulk"
    raise ConfigError(f"{source}: sched_batch must be bool or \"bulk\", not {value!r}")


#: The longest busy-poll mrcd takes (us): its loop serves every client and port.
MAX_BUSY_POLL_US: Final = 1000


def _busy_ports(data: dict[str, Any], source: str) -> int:
    n = _want(data, "busy_ports", int, source, DEFAULT_BUSY_PORTS)
    if not 0 <= n <= MAX_BUSY_PORTS:
        raise ConfigError(f"{source}: busy_ports {n}: give 0 (the loop always watches the "
                          f"ports) to {MAX_BUSY_PORTS} (looks in a row that found frames)")
    return int(n)


def _poll_us(data: dict[str, Any], source: str, key: str, default: int) -> int:
    us = _want(data, key, int, source, default)
    if not 0 <= us <= MAX_BUSY_POLL_US:
        raise ConfigError(f"{source}: {key} {us}: give 0..{MAX_BUSY_POLL_US}")
    return int(us)


def parse_listen(text: str, where: str = "metrics_listen") -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for an IPv6 address; an empty host: every address)
    as (host, port); :class:`ConfigError` naming ``where`` if it is not one."""
    host, sep, port_s = text.rpartition(":")
    if not sep or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise ConfigError(f"{where}: {text!r} is not HOST:PORT (e.g. \"127.0.0.1:9464\" or "
                          "\"[::1]:9464\")")
    if host.startswith("[") and host.endswith("]"):
        host = _addr(host[1:-1], where)
    elif ":" in host:
        raise ConfigError(f"{where}: {text!r}: write an IPv6 address in brackets, "
                          "\"[::1]:9464\"")
    return host, int(port_s)


def _limits(d: dict[str, Any], source: str) -> ClientLimits:
    known = ClientLimits.__dataclass_fields__
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) limits.{', limits.'.join(unknown)} "
                          f"(known: {', '.join(known)})")
    values: dict[str, int] = {}
    for key in d:
        value = _want(d, key, int, f"{source}: limits")
        low, high = LIMIT_RANGES.get(key, (1, None))
        if value < low or (high is not None and value > high):
            span = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise ConfigError(f"{source}: limits.{key} = {value}: must be {span}")
        values[key] = value
    return ClientLimits(**values)


def load_config(path: str | Path) -> DaemonConfig:
    """Read and check the configuration file at ``path``."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"cannot read configuration {path}: {e.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from None
    return parse_config(data, str(path))
