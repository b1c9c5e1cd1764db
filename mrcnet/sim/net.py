"""Network elements: egress ports (queue + one direction of a link), switches, hosts.

Frames are real bytes, carried as ``bytearray`` and patched in place. The per-hop work
is kept to what a switch ASIC does: read the outer IPv6 destination at a fixed offset,
match the switch's own locator, shift the uSID container (or step the SRH), look the
result up in a static table, rewrite the MACs. Nothing parses the whole frame.

Byte offsets used on the hot path (Ethernet + outer IPv6, optional SRH right after)::

    0..12   destination + source MAC         rewritten by every switch egress
    14, 15  version | traffic class | ...    DSCP and ECN live in these two bytes
    20      outer next header                43 = routing header (SRH)
    21      hop limit                        decremented by every switch
    38..54  outer destination address        block(4) + six 16-bit uSIDs
    57      SRH segments left
    62..    SRH segment list (16 bytes each, list[0] = final segment)
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sized
from dataclasses import dataclass
from heapq import heappush
from typing import Any, Protocol

from mrcnet.constants import ECN, IPPROTO_ROUTING
from mrcnet.sim.engine import Simulator
from mrcnet.sim.errors import SimError
from mrcnet.wire.dscp import DscpClasses, dscp_classes

# Offsets into a frame (see the module docstring).
_TC_HI = 14  # low nibble: DSCP bits 5..2
_TC_LO = 15  # bits 7..6: DSCP bits 1..0; bits 5..4: ECN
_NEXT_HEADER = 20
_HOP_LIMIT = 21
_DA = 38
_DA_LOC_END = _DA + 6  # block (4 bytes) + the active uSID (2 bytes): a /48 locator
_DA_END = _DA + 16
_SRH_SL = 54 + 3
_SRH_SEGS = 54 + 8

_ECN_SHIFT = 4
_ECN_MASK = 0x3 << _ECN_SHIFT
_CE = int(ECN.CE) << _ECN_SHIFT
_TIE = 1e-15  # seconds: "at the same time" for back-to-back frames


def frame_dscp(frame: bytes | bytearray) -> int:
    """The outer DSCP of a frame."""
    return ((frame[_TC_HI] & 0x0F) << 2) | (frame[_TC_LO] >> 6)


def frame_ecn(frame: bytes | bytearray) -> int:
    """The outer ECN field of a frame."""
    return (frame[_TC_LO] & _ECN_MASK) >> _ECN_SHIFT


class ElidedFrame(bytearray):
    """A data frame whose all-zero payload is not carried: its first ``keep`` bytes (every
    header) and its last 4 (the ICRC), and ``gap``, the bytes left out between them.

    Ports time, queue, count and trim it by its wire length (``len + gap``); the
    receiving host puts the zeros back (:func:`restore_frame`), so the stack sees the
    very bytes that were sent. The runner's data are zeros (one shared buffer: it
    measures time, not data), so a packet in flight costs a few hundred bytes instead of
    a payload's worth: what lets 8192 hosts start 1 MiB flows at once.
    """

    __slots__ = ("gap",)

    gap: int


_ICRC = 4  # the trailer an elided frame keeps


def elide_frame(frame: bytes | bytearray | memoryview, keep: int) -> bytearray:
    """The frame as it travels: an :class:`ElidedFrame` of its first ``keep`` bytes and
    trailer when its payload region (all zeros: the caller's promise) is larger than
    that, else a plain copy."""
    n = len(frame)
    gap = n - keep - _ICRC
    if gap <= keep:  # (small frames: not worth it)
        return bytearray(frame)
    out = ElidedFrame(frame[:keep])
    out += frame[n - _ICRC :]
    out.gap = gap
    return out


def restore_frame(frame: bytearray) -> bytearray:
    """The frame with its zeros back (a plain bytearray is returned as it is)."""
    if type(frame) is bytearray:
        return frame
    gap = frame.gap  # type: ignore[attr-defined]
    if not gap:
        return bytearray(frame)
    keep = len(frame) - _ICRC
    out = bytearray(frame[:keep])
    out += bytes(gap)
    out += frame[keep:]
    return out


def wire_len(frame: bytearray) -> int:
    """Bytes a frame takes on the wire (an elided frame's payload counts)."""
    return len(frame) if type(frame) is bytearray else len(frame) + frame.gap  # type: ignore[attr-defined]


class Receiver(Protocol):
    """Whatever sits at the far end of a link: a switch or a host."""

    name: str

    def receive(self, frame: bytearray, port: int) -> None:
        """Take a frame that arrived on local port ``port``."""


@dataclass
class PortCounters:
    """What happened at one egress port (one direction of one link)."""

    tx_frames: int = 0  #: frames put on the wire (including ones then lost on it)
    tx_bytes: int = 0
    trimmed: int = 0  #: data frames cut to a header because the data queue was full
    ecn_marked: int = 0  #: ECT frames marked CE
    drop_queue: int = 0  #: dropped at admission: queue full (drop-tail, or header queue full)
    drop_down: int = 0  #: dropped because the link was down
    drop_blackhole: int = 0  #: sent but silently discarded (one-way blackhole)
    drop_loss: int = 0  #: sent but lost at random
    max_queue_bytes: int = 0  #: high-water mark of the data queue

    def as_dict(self) -> dict[str, int]:
        """Plain dict for JSON output."""
        return dict(self.__dict__)


class EgressPort:
    """An output queue and the one-way link it feeds.

    Two FIFOs: a strict-priority one for control frames and trimmed headers (NDP style,
    served first) and a data one of ``queue_bytes``. A data frame (DSCP TRIMMABLE or
    TRIMMABLE_RETX, :mod:`mrcnet.wire.dscp`) that does not fit is trimmed to ``trim_size``
    bytes and re-marked TRIMMED (TRIMMED_LASTHOP at a ``last_hop`` port: a leaf's port to a
    host) when trimming is on, else dropped (drop-tail); NO_TRIM frames are dropped. ECT
    frames are marked CE when the data queue holds more than ``ecn_bytes`` (0 = never) as
    they join it.

    A frame leaving an idle port costs one event (its arrival at the far end); a busy port
    adds one wake-up event per frame it dequeues.
    """

    __slots__ = (
        "_arrive_cb",
        "_cid",
        "_cnet",
        "_data_bytes",
        "_data_dscps",
        "_data_q",
        "_dst_receive",
        "_heap",
        "_last_down",
        "_prio_bytes",
        "_prio_q",
        "_s_per_byte",
        "_seq",
        "_trim_hi",
        "_trim_lo",
        "_wake_cb",
        "_waking",
        "blackhole",
        "busy_until",
        "counters",
        "delay",
        "dst",
        "dst_port",
        "ecn_bytes",
        "last_hop",
        "loss",
        "mac_rewrite",
        "name",
        "prio_queue_bytes",
        "queue_bytes",
        "rate_bps",
        "sim",
        "trim",
        "trim_size",
        "up",
    )

    def __init__(
        self,
        sim: Simulator,
        name: str,
        *,
        rate_bps: float,
        delay: float,
        queue_bytes: int,
        prio_queue_bytes: int,
        trim: bool,
        trim_size: int,
        ecn_bytes: int,
        mac_rewrite: bytes | None,
        last_hop: bool = False,
        dscp: DscpClasses | None = None,
    ) -> None:
        self.sim = sim
        self.name = name
        self.rate_bps = rate_bps
        self._s_per_byte = 8.0 / rate_bps
        self.delay = delay
        self.queue_bytes = queue_bytes  #: data queue capacity; 0 = unbounded (host NIC)
        self.prio_queue_bytes = prio_queue_bytes
        self.trim = trim
        self.trim_size = trim_size
        self.ecn_bytes = ecn_bytes
        #: a leaf's port to a host: its trims are marked TRIMMED_LASTHOP
        self.last_hop = last_hop
        c = dscp or dscp_classes()
        # Data code points -> "never trim" (NO_TRIM), and the trim mark's traffic-class
        # bits (byte 14's low nibble, byte 15's top two bits).
        self._data_dscps = {d: d == c.no_trim for d in (c.trimmable, c.trimmable_retx,
                                                         c.no_trim)}
        mark = c.trimmed_lasthop if last_hop else c.trimmed
        self._trim_hi = mark >> 2
        self._trim_lo = (mark & 3) << 6
        #: dst MAC + src MAC written into every frame leaving (a router's L2 rewrite)
        self.mac_rewrite = mac_rewrite
        self.dst: Receiver | None = None
        self.dst_port = 0
        self.up = True
        self.blackhole = False
        self.loss = 0.0
        self.busy_until = 0.0
        self.counters = PortCounters()
        self._data_q: deque[bytearray] = deque()
        self._prio_q: deque[bytearray] = deque()
        self._data_bytes = 0
        self._prio_bytes = 0
        self._waking = False
        self._last_down = -1.0  # virtual time of the last carrier loss (-1: never)
        self._heap = sim.queue  # pushed onto directly: one call less per frame and hop
        self._seq = sim.seq
        # Bound methods made once: the hot path schedules them per frame.
        self._arrive_cb = self._arrive
        self._wake_cb = self._wake
        #: this port's index in the C network and that network (mrcnet.sim.simnet), if any
        self._cid = -1
        self._cnet: Any = None

    def connect(self, dst: Receiver, dst_port: int) -> None:
        """Attach the far end of the link."""
        self.dst = dst
        self.dst_port = dst_port
        self._dst_receive = dst.receive  # (bound once: called per frame)

    @property
    def queued_bytes(self) -> int:
        """Bytes waiting in both queues (not counting the frame on the wire)."""
        return self._data_bytes + self._prio_bytes

    def send(self, frame: bytearray) -> None:
        """Queue a frame for transmission (admission, trimming and ECN happen here)."""
        if not self.up:
            self.counters.drop_down += 1
            return
        if self.mac_rewrite is not None:
            frame[0:12] = self.mac_rewrite
        # (the wire length inline, not through wire_len: this runs per frame and hop)
        size = len(frame) if type(frame) is bytearray else len(frame) + frame.gap  # type: ignore[attr-defined]
        now = self.sim.now
        # Idle port, empty queues: straight onto the wire. The femtosecond of slack absorbs
        # float rounding when a frame arrives exactly as the previous one finishes (back to
        # back at line rate), which would otherwise cost a queue round trip and an event.
        if now + _TIE >= self.busy_until and not self._waking:
            self._transmit(frame, now, size)
            return
        lo = frame[_TC_LO]
        no_trim = self._data_dscps.get(((frame[_TC_HI] & 0x0F) << 2) | (lo >> 6))
        if no_trim is not None:  # data: TRIMMABLE, TRIMMABLE_RETX or NO_TRIM
            cap = self.queue_bytes
            if cap and self._data_bytes + size > cap:
                if not self.trim or no_trim or size <= self.trim_size:
                    self.counters.drop_queue += 1
                    return
                del frame[self.trim_size :]
                if type(frame) is not bytearray:  # (the elided part went with the rest)
                    frame.gap = 0  # type: ignore[attr-defined]
                frame[_TC_HI] = (frame[_TC_HI] & 0xF0) | self._trim_hi
                frame[_TC_LO] = (lo & 0x3F) | self._trim_lo
                self.counters.trimmed += 1
                self._enqueue_prio(frame, self.trim_size)
            else:
                # ECT(0)/ECT(1) -> CE past the threshold; Not-ECT and CE stay as they are.
                ect = lo & _ECN_MASK
                if self.ecn_bytes and self._data_bytes > self.ecn_bytes and ect and ect != _CE:
                    frame[_TC_LO] = lo | _CE
                    self.counters.ecn_marked += 1
                self._data_q.append(frame)
                self._data_bytes += size
                if self._data_bytes > self.counters.max_queue_bytes:
                    self.counters.max_queue_bytes = self._data_bytes
        else:
            # Control frames (and anything not marked as data) take the priority queue.
            self._enqueue_prio(frame, size)
        if not self._waking:
            self._waking = True
            heappush(self._heap, (self.busy_until, next(self._seq), self._wake_cb, None))

    def _enqueue_prio(self, frame: bytearray, size: int) -> None:
        if self.prio_queue_bytes and self._prio_bytes + size > self.prio_queue_bytes:
            self.counters.drop_queue += 1
            return
        self._prio_q.append(frame)
        self._prio_bytes += size

    def _wake(self, _: object) -> None:
        """The wire is free: send the next frame, priority queue first."""
        self._waking = False
        if self._prio_q:
            frame = self._prio_q.popleft()
            size = len(frame) if type(frame) is bytearray else len(frame) + frame.gap  # type: ignore[attr-defined]
            self._prio_bytes -= size
        elif self._data_q:
            frame = self._data_q.popleft()
            size = len(frame) if type(frame) is bytearray else len(frame) + frame.gap  # type: ignore[attr-defined]
            self._data_bytes -= size
        else:
            return
        self._transmit(frame, self.sim.now, size)
        if self._prio_q or self._data_q:
            self._waking = True
            heappush(self._heap, (self.busy_until, next(self._seq), self._wake_cb, None))

    def _transmit(self, frame: bytearray, now: float, size: int) -> None:
        done = now + size * self._s_per_byte
        self.busy_until = done
        c = self.counters
        c.tx_frames += 1
        c.tx_bytes += size
        if self.blackhole:
            c.drop_blackhole += 1
            return
        if self.loss and self.sim.rng.random() < self.loss:
            c.drop_loss += 1
            return
        heappush(self._heap, (done + self.delay, next(self._seq), self._arrive_cb, frame))

    def _arrive(self, frame: bytearray) -> None:
        # A frame on the wire when the link went down is lost with it, even if the link
        # is up again by the time the frame would have arrived (a short flap).
        ld = self._last_down
        if not self.up or (
            ld >= 0.0 and ld >= self.sim.now - self.delay - wire_len(frame) * self._s_per_byte
        ):
            self.counters.drop_down += 1
            return
        self._dst_receive(frame, self.dst_port)

    def set_up(self, up: bool) -> None:
        """Carrier up/down. Going down flushes both queues (counted as drop_down)."""
        if not up and self.up:
            self._last_down = self.sim.now
        self.up = up
        if not up:
            self.counters.drop_down += len(self._data_q) + len(self._prio_q)
            self._data_q.clear()
            self._prio_q.clear()
            self._data_bytes = self._prio_bytes = 0


@dataclass
class SwitchCounters:
    """What a switch dropped, and why (forwarded frames are counted at its ports)."""

    rx_frames: int = 0
    drop_no_route: int = 0  #: no static route for the destination
    drop_hop_limit: int = 0
    drop_bad_sid: int = 0  #: End with nothing left to do (no next uSID, SRH exhausted)
    drop_blackhole: int = 0  #: switch blackhole failure: links up, nothing forwarded

    def as_dict(self) -> dict[str, int]:
        """Plain dict for JSON output."""
        return dict(self.__dict__)


class Switch:
    """A leaf or spine: SRv6 End with the NEXT-C-SID flavor, static routes, no ECMP.

    Exactly the kernel's ``seg6local action End flavors next-csid lblen 32 nflen 16`` on
    the switch's /48 locator: if the destination matches the locator and the next uSID is
    non-zero, shift the container left by one uSID; if it is zero, do classic SRH End
    (segments left - 1, destination = the next segment). Then decrement the hop limit
    and look the destination up: /48 locator routes first, then /128 host routes.
    """

    __slots__ = (
        "_by_usid", "_cid", "_cnet", "_n48", "blackhole", "counters", "fallback128",
        "locator", "name", "plane", "ports", "role", "routes48", "routes128", "usid",
    )

    def __init__(self, name: str, role: str, plane: int, usid: int, locator: bytes) -> None:
        self.name = name
        self.role = role  #: "leaf" or "spine"
        self.plane = plane
        self.usid = usid
        self.locator = locator  #: 6 bytes: uSID block + this switch's uSID
        self.ports: list[EgressPort] = []
        self.routes48: dict[bytes, EgressPort] = {}
        self.routes128: dict[bytes, EgressPort] = {}
        self.blackhole = False
        self.counters = SwitchCounters()
        #: /128 routes shared by many switches (a leaf's plain IPv6 to every host of its
        #: plane through spine 0): addresses and the port, after ``routes128``
        self.fallback128: tuple[frozenset[bytes], EgressPort] | None = None
        self._by_usid: dict[int, EgressPort] | None = None
        self._n48 = 0
        self._cid = -1
        self._cnet: Any = None

    def receive(self, frame: bytearray, port: int) -> None:
        """Forward one frame (``port``, the ingress, does not matter to static routing)."""
        c = self.counters
        c.rx_frames += 1
        if self.blackhole:
            c.drop_blackhole += 1
            return
        out = None
        if frame.startswith(self.locator, _DA):
            nxt = (frame[_DA_LOC_END] << 8) | frame[_DA_LOC_END + 1]
            if nxt:
                # NEXT-C-SID: shift the remaining uSIDs left by 16 bits, zero-fill.
                frame[_DA + 4 : _DA_END] = frame[_DA_LOC_END:_DA_END] + b"\0\0"
                # The new locator is the uSID block (the one this switch's locator just
                # matched) and ``nxt``: looked up by ``nxt`` alone, no slice or bytes made.
                by_usid = self._by_usid
                if by_usid is None or self._n48 != len(self.routes48):
                    by_usid = self._usid_routes()
                out = by_usid.get(nxt)
            elif frame[_NEXT_HEADER] == IPPROTO_ROUTING and frame[_SRH_SL] > 0:
                sl = frame[_SRH_SL] - 1
                frame[_SRH_SL] = sl
                seg = _SRH_SEGS + 16 * sl
                frame[_DA:_DA_END] = frame[seg : seg + 16]
            else:
                c.drop_bad_sid += 1
                return
        hl = frame[_HOP_LIMIT]
        if hl <= 1:
            c.drop_hop_limit += 1
            return
        frame[_HOP_LIMIT] = hl - 1
        if out is None:
            out = self.routes48.get(bytes(frame[_DA:_DA_LOC_END]))
            if out is None:
                key = bytes(frame[_DA:_DA_END])
                out = self.routes128.get(key)
                if out is None:
                    fb = self.fallback128
                    if fb is None or key not in fb[0]:
                        c.drop_no_route += 1
                        return
                    out = fb[1]
        out.send(frame)

    def _usid_routes(self) -> dict[int, EgressPort]:
        """The /48 routes inside this switch's uSID block, keyed by their uSID (rebuilt
        when a route is added: the fabric adds them all before the first frame)."""
        block = self.locator[:4]
        self._by_usid = {int.from_bytes(k[4:6], "big"): p for k, p in self.routes48.items()
                         if k[:4] == block}
        self._n48 = len(self.routes48)
        return self._by_usid


class Endpoint(Protocol):
    """The network side of a host stack (sans-I/O, like :class:`mrcnet.core.Host`)."""

    def receive(self, frame: bytearray, port: int, now: float) -> None:
        """A frame arrived on NIC port ``port``."""

    def frames_to_send(self, now: float) -> list[tuple[int, bytes]]:
        """Frames ready to leave, each with the NIC port to send it on."""

    def next_timer(self) -> float | None:
        """When :meth:`handle_timer` wants to run next (absolute virtual time)."""

    def handle_timer(self, now: float) -> None:
        """The time from :meth:`next_timer` has come."""


@dataclass
class HostCounters:
    """Frames a host's stack exchanged with the network."""

    rx_frames: int = 0
    tx_frames: int = 0
    timer_fires: int = 0

    def as_dict(self) -> dict[str, int]:
        """Plain dict for JSON output."""
        return dict(self.__dict__)


@dataclass(frozen=True, slots=True)
class HostJitter:
    """Endpoint processing model: a user-space stack (mrcd: Python on asyncio/uvloop) on
    a busy host, not a NIC.

    The stack runs one event loop per host. A frame or timer expiry does not reach the
    core at once: the loop wakes ``wake`` later, drawn log-uniformly from
    ``[wake_min, wake_max]`` (most wake-ups short, some long), plus ``spike`` with
    probability ``spike_prob`` (GC, a neighbour's process, a page fault). It then handles
    *everything* that queued up meanwhile as one batch, all at that instant (the core's
    ``now``), and its frames leave after ``per_frame`` CPU seconds per frame handled (in
    and out): the host is one CPU, so a busy host delays everything after it. Timers wake
    on multiples of ``timer_resolution`` (epoll: 1 ms), never early, then queue like a
    frame.
    """

    wake_min: float = 50e-6
    wake_max: float = 2e-3
    spike_prob: float = 0.0
    spike: float = 0.0
    per_frame: float = 0.0
    timer_resolution: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.wake_min <= self.wake_max:
            raise SimError("host jitter: need 0 < wake_min <= wake_max")
        if not 0 <= self.spike_prob <= 1 or self.spike < 0 or self.per_frame < 0 \
                or self.timer_resolution < 0:
            raise SimError("host jitter: spike_prob in [0, 1], times >= 0")

    def draw(self, rng: _Rng) -> float:
        """One wake-up delay."""
        lo, hi = self.wake_min, self.wake_max
        d = lo if hi == lo else math.exp(rng.uniform(math.log(lo), math.log(hi)))
        if self.spike_prob and rng.random() < self.spike_prob:
            d += self.spike
        return d


class _Rng(Protocol):
    def uniform(self, a: float, b: float) -> float: ...

    def random(self) -> float: ...


class HostNode:
    """A simulated machine: one NIC port per plane, and the stack that drives them.

    After every input (frame or timer) the host drains ``frames_to_send`` onto its NIC
    queues and re-arms one timer, exactly like mrcd's event loop; ``on_activity`` (if set)
    runs after each of those so a runner can poll completions.
    """

    #: A stack whose timer fires this often at one instant without moving is broken;
    #: stop the run with an error instead of spinning forever.
    MAX_FIRES_PER_INSTANT = 10_000

    def __init__(self, sim: Simulator, name: str, index: int, usid: int, leaf_index: int) -> None:
        self.sim = sim
        self.name = name
        self.index = index
        self.usid = usid
        self.leaf_index = leaf_index  #: its leaf's index in every plane
        self.nics: list[EgressPort] = []  #: index = port = plane
        self.macs: list[bytes] = []  #: per port
        self.addresses: list[bytes] = []  #: per port (a plane's unicast address)
        self.endpoint: Endpoint | None = None
        self.on_activity: Callable[[HostNode], None] | None = None
        #: None: ``on_activity`` runs after every input; else only after an input that
        #: left one of these two containers non-empty (a runner that waits for its
        #: stack's events gives their queues: no call after the many inputs that make none)
        self.activity_if: tuple[Sized, Sized] | None = None
        self.counters = HostCounters()
        self._armed: float | None = None
        self._same_instant = 0
        self._last_fire = -1.0
        #: endpoint processing model (None: the stack reacts at once, zero CPU time)
        self.jitter: HostJitter | None = None
        self._rxq: list[tuple[bytearray, int]] = []
        self._wake_at: float | None = None
        self._busy_until = 0.0
        self._timer_due = False
        #: > 0: the stack's data payloads are all zeros; frames travel as
        #: :class:`ElidedFrame` keeping this many header bytes (0: frames travel whole)
        self.elide = 0
        #: the C network (mrcnet.sim.simnet) its NICs are in, and their indices there
        self._cnet: Any = None
        self._nic_ids: list[int] = []
        #: the attached stack's one-frame entry for :meth:`arrive`
        #: (mrcnet.core.Host.receive_one, or a batch of one of its receive_batch: whose
        #: ``receive`` is one frame of it), and that stack (an endpoint put in its place
        #: later, a test's tap, gets ``receive``); None: frame by frame
        self._rx_one: Callable[[bytes, int, float], None] | None = None
        #: its entry for a frame left in the C network's buffer (Host.receive_at), for
        #: :meth:`arrive_at`; None: :meth:`arrive` of the frame's bytes
        self._rx_at: Callable[[Any, int, int, float, Any], None] | None = None
        self._rx_of: Endpoint | None = None

    def attach(self, endpoint: Endpoint) -> None:
        """Plug a stack into this host and let it send whatever it has ready."""
        self.endpoint = self._rx_of = endpoint
        self._rx_one = getattr(endpoint, "receive_one", None)
        self._rx_at = getattr(endpoint, "receive_at", None)
        batch = getattr(endpoint, "receive_batch", None)
        if self._rx_one is None and batch is not None:
            self._rx_one = lambda frame, port, now: batch((frame,), port, now)
        self.sim.at(self.sim.now, self._kick_cb)

    def receive(self, frame: bytearray, port: int) -> None:
        """A frame arrived on NIC port ``port``: hand it to the stack."""
        self.counters.rx_frames += 1
        ep = self.endpoint
        if ep is None:
            return
        if type(frame) is not bytearray:
            frame = restore_frame(frame)
        if self.jitter is not None:
            self._rxq.append((frame, port))
            self._schedule_wake()
            return
        ep.receive(frame, port, self.sim.now)
        self.kick()

    def arrive(self, frame: bytes, port: int, now: float) -> None:
        """:meth:`receive` then :meth:`kick` in one call, for the C network's frames
        (whole, as bytes, at ``now``, the simulator's time): the same calls into the
        stack in the same order, without the hops between them (once per frame that
        reaches a host, the most common Python event of a large run)."""
        rx, ep = self._rx_one, self.endpoint
        if rx is None or ep is None or ep is not self._rx_of or self.jitter is not None:
            self.receive(bytearray(frame), port)
            return
        self.counters.rx_frames += 1
        rx(frame, port, now)
        self._output(ep, now)

    def arrive_at(self, ptr: Any, size: int, buf: Any, port: int, now: float) -> None:
        """:meth:`arrive` of the ``size``-byte frame the C network left at ``ptr`` (a
        ``uint8_t *`` into its buffer, ``buf`` the same memory as a cffi buffer): the
        stack's lane reads it there (Host.receive_at), and a copy (``buf[:size]``) is made
        only for a path that keeps the frame."""
        rx, ep = self._rx_at, self.endpoint
        if rx is None or ep is None or ep is not self._rx_of or self.jitter is not None:
            self.arrive(buf[:size], port, now)
            return
        self.counters.rx_frames += 1
        rx(ptr, size, port, now, buf)
        self._output(ep, now)

    # --- endpoint processing model (HostJitter) -----------------------------------------

    def _schedule_wake(self) -> None:
        if self._wake_at is not None:
            return
        jit = self.jitter
        assert jit is not None
        sim = self.sim
        self._wake_at = t = max(sim.now, self._busy_until) + jit.draw(sim.rng)
        sim.at(t, self._wake)

    def _wake(self, _: object) -> None:
        self._wake_at = None
        ep, jit = self.endpoint, self.jitter
        if ep is None or jit is None:
            return
        now = self.sim.now
        q, self._rxq = self._rxq, []
        for frame, port in q:
            ep.receive(frame, port, now)
        if self._timer_due:
            self._timer_due = False
            t = ep.next_timer()
            if t is not None and t <= now:
                self.counters.timer_fires += 1
                ep.handle_timer(now)
        out = ep.frames_to_send(now)
        cost = jit.per_frame * (len(q) + len(out))
        self._busy_until = now + cost
        if out:
            self.counters.tx_frames += len(out)
            if cost > 0:
                self.sim.at(now + cost, self._transmit, out)
            else:
                self._transmit(out)
        self._arm(ep.next_timer())
        act_if = self.activity_if
        if self.on_activity is not None and (act_if is None or act_if[0] or act_if[1]):
            self.on_activity(self)

    def _transmit(self, out: list[tuple[int, bytes]]) -> None:
        """Put the stack's frames on their NICs."""
        if self._cnet is not None:
            self._cnet.send_frames(self._nic_ids, out, self.elide)
            return
        nics, keep = self.nics, self.elide
        for port, frame in out:
            nics[port].send(elide_frame(frame, keep) if keep else bytearray(frame))

    def _arm(self, t: float | None) -> None:
        if t is None or t == self._armed:
            return
        self._armed = t
        res = self.jitter.timer_resolution if self.jitter is not None else 0.0
        when = math.ceil(t / res - 1e-9) * res if res > 0 else t
        self.sim.at(max(when, t), self._timer, t)

    def _kick_cb(self, _: object) -> None:
        self.kick()

    def kick(self) -> None:
        """Drain the stack's output onto the NICs and re-arm its timer."""
        ep = self.endpoint
        if ep is None:
            return
        if self.jitter is not None:
            self._schedule_wake()
            return
        self._output(ep, self.sim.now)

    def _output(self, ep: Endpoint, now: float) -> None:
        """After an input: the stack's frames onto the NICs, its timer re-armed, the
        runner told (``on_activity``)."""
        out = ep.frames_to_send(now)
        if out:
            self.counters.tx_frames += len(out)
            cnet = self._cnet
            if cnet is not None:
                cnet.send_frames(self._nic_ids, out, self.elide)
            else:
                self._transmit(out)
        t = ep.next_timer()
        if t is not None and t != self._armed:
            self._armed = t
            self.sim.at(t, self._timer, t)
        act = self.on_activity
        if act is not None:
            q = self.activity_if
            if q is None or q[0] or q[1]:
                act(self)

    def _timer(self, token: float) -> None:
        # Stale wake-ups (the stack moved its timer since) are ignored, not cancelled:
        # a heap has no cheap delete.
        if token != self._armed or self.endpoint is None:
            return
        self._armed = None
        if self.jitter is not None:
            self._timer_due = True
            self._schedule_wake()
            return
        now = self.sim.now
        if now == self._last_fire:
            self._same_instant += 1
            if self._same_instant > self.MAX_FIRES_PER_INSTANT:
                raise SimError(
                    f"{self.name}: the stack's timer fired {self._same_instant} times at "
                    f"t={now!r} without moving (next_timer() never advances)"
                )
        else:
            self._last_fire = now
            self._same_instant = 0
        self.counters.timer_fires += 1
        self.endpoint.handle_timer(now)
        self.kick()
