"""The simulated network in C (``mrcnet/_csrc/simnet.c``), with the run's one event queue.

Most of a large run's events are the network's: a frame reaching a switch, its egress
port's queues, trimming, ECN marking and serialisation. :class:`NativeSimulator` is a
:class:`~mrcnet.sim.engine.Simulator` whose event queue and network live in C: the
fabric builds its ports and switches as usual (:mod:`mrcnet.sim.net`, the reference),
then :meth:`NativeSimulator.mirror` copies them into C, where frames go through switches
and ports with no Python call. Python runs what it always ran (hosts' stacks, timers,
flow starts, failures) when the C loop hands it an event or a frame reaching a host, in
the same (time, sequence) order as the pure-Python simulator: both make the same
decisions, event for event (``tests/sim/test_sim_simnet.py`` compares them).

The Python objects stay the fabric's handles: a port's or switch's ``counters``, ``up``
(``set_up``) and ``blackhole`` read and write the C state. Random loss draws from the
simulation's Python generator, so a port with ``loss`` needs the Python network
(:func:`native_ok` says whether a run can use this one).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from mrcnet.native import HAVE_C, NOT_BUILT, C, ffi
from mrcnet.sim.engine import Callback, Simulator
from mrcnet.sim.errors import SimError
from mrcnet.sim.net import (
    EgressPort,
    HostNode,
    PortCounters,
    Switch,
    SwitchCounters,
    restore_frame,
)


class _Fabric(Protocol):
    """What :meth:`NativeSimulator.mirror` reads of a fabric (mrcnet.sim.topology.Fabric,
    which calls it: a protocol, not an import, keeps the two modules out of a circle)."""

    hosts: list[HostNode]

    def switches(self) -> Iterable[Switch]: ...

    def egress_ports(self) -> Iterable[EgressPort]: ...

#: Bytes of the buffer a frame reaching a host is restored into (any MTU fits).
_FRAME_BUF = 1 << 16


def native_ok(actions: Iterable[str] = ()) -> bool:
    """True when the C network can run a simulation whose failures do ``actions``
    (the C module is built and no failure is random loss)."""
    return HAVE_C and "loss" not in set(actions)


class NativeSimulator(Simulator):
    """A :class:`Simulator` whose event queue and network are in C (see the module)."""

    __slots__ = ("_buf", "_cbuf", "_fbuf", "_hosts", "_items", "_net", "_out")

    def __init__(self, seed: int = 1) -> None:
        if not HAVE_C:
            raise SimError(f"the C network needs the C module ({NOT_BUILT})")
        super().__init__(seed)
        self._net = ffi.gc(C.simnet_new(), C.simnet_free)
        if self._net == ffi.NULL:
            raise MemoryError("simnet_new")
        #: Python events by key: (callback, argument)
        self._items: dict[int, tuple[Callback, Any]] = {}
        self._out = ffi.new("struct simnet_out *")
        self._buf = bytearray(_FRAME_BUF)
        self._cbuf = ffi.from_buffer(self._buf)
        # a frame reaching a host is a slice of this: bytes, which the host's receive
        # lane takes as they are (a bytearray needs an ffi.from_buffer per frame)
        self._fbuf = ffi.buffer(self._cbuf)
        self._hosts: Sequence[HostNode] = ()

    def at(self, when: float, fn: Callback, arg: Any = None) -> None:
        """Run ``fn(arg)`` at virtual time ``when`` (never earlier than now)."""
        if when < self.now:
            when = self.now
        key = C.simnet_push_py(self._net, when)
        if not key:
            raise MemoryError("the simulator's event queue is out of memory")
        self._items[key] = (fn, arg)

    @property
    def pending(self) -> int:
        """Events still queued (Python's and the network's)."""
        return int(C.simnet_pending(self._net))

    def run(self, until: float | None = None, max_events: int | None = None) -> None:
        """As :meth:`Simulator.run`: the C loop runs the network's events and hands back
        each Python event and each frame reaching a host, in order."""
        self._stopped = False
        net, out, buf, cbuf, items, hosts = (self._net, self._out, self._fbuf, self._cbuf,
                                             self._items, self._hosts)
        step = C.simnet_run
        # (the stop codes as locals: a cffi lib attribute costs more than a local)
        HOST, PY, LIMIT = C.SIMNET_HOST, C.SIMNET_PY, C.SIMNET_LIMIT
        WHY, HPORT, HPORT_MASK, HOST_SHIFT = (C.SIMNET_WHY_MASK, C.SIMNET_HPORT_SHIFT,
                                              C.SIMNET_HPORT_MAX - 1, C.SIMNET_HOST_SHIFT)
        limit = math.inf if until is None else until
        budget = -1 if max_events is None else max_events
        ran0 = out.total  # (the events run are read once, at the end, without a budget)
        start = time.perf_counter()
        cpu_start = time.process_time()
        # (no other thread runs while it does: every C call keeps the GIL meanwhile)
        C.simnet_keep_gil(1)
        try:
            while True:
                r = step(net, limit, budget - (out.total - ran0) if budget >= 0 else -1,
                         cbuf, _FRAME_BUF, out)
                why = r & WHY
                self.now = t = out.t
                if why == HOST:  # (the host and its port in the return value; the
                    # frame left in cbuf, copied out only where it is kept)
                    hosts[r >> HOST_SHIFT].arrive_at(cbuf, out.len, buf,
                                                     (r >> HPORT) & HPORT_MASK, t)
                elif why == PY:
                    fn, arg = items.pop(out.key)
                    fn(arg)
                elif why == LIMIT:
                    self.now = limit
                    break
                elif why == C.SIMNET_ERROR:
                    raise SimError(f"a {out.len}-byte frame is larger than the simulator "
                                   f"hands a host ({_FRAME_BUF} bytes)")
                elif why == C.SIMNET_NOMEM:
                    raise MemoryError("the simulated network is out of memory")
                else:  # SIMNET_EMPTY, SIMNET_BUDGET
                    break
                if self._stopped:
                    break
            if until is not None and self.now < until and not C.simnet_pending(net):
                self.now = until
        finally:
            C.simnet_keep_gil(-1)
            self.events += out.total - ran0
            self.wall_seconds += time.perf_counter() - start
            self.cpu_seconds += time.process_time() - cpu_start

    # --- the fabric, copied into C ------------------------------------------------------

    def mirror(self, fabric: _Fabric) -> None:
        """Copy ``fabric``'s ports, switches and routes into C and make its Python
        objects handles of the C ones. Called by the fabric once built, before any frame."""
        net = self._net
        for sw in fabric.switches():
            sw._cid = C.simnet_add_switch(net, sw.locator)
            if sw._cid < 0:
                raise MemoryError("simnet_add_switch")
            sw._cnet = self
            sw.__class__ = CSwitch
        ports = list(fabric.egress_ports())
        tables: dict[tuple[tuple[int, bool], ...], Any] = {}  # (most ports share one)
        for p in ports:
            key = tuple(sorted(p._data_dscps.items()))
            table = tables.get(key)
            if table is None:
                table = tables[key] = ffi.new("int8_t[64]", [-1] * 64)
                for d, no_trim in key:
                    table[d] = 1 if no_trim else 0
            mac = p.mac_rewrite if p.mac_rewrite is not None else ffi.NULL
            p._cid = C.simnet_add_port(
                net, p._s_per_byte, p.delay, p.queue_bytes, p.prio_queue_bytes, p.trim,
                p.trim_size, p.ecn_bytes, mac, p._trim_hi, p._trim_lo, table)
            if p._cid < 0:
                raise MemoryError("simnet_add_port")
            p._cnet = self
            p.__class__ = CEgressPort
        for p in ports:
            dst = p.dst
            if isinstance(dst, Switch):
                C.simnet_connect(net, p._cid, 0, dst._cid, p.dst_port)
            elif isinstance(dst, HostNode):
                if dst.index >= C.SIMNET_HOST_MAX or p.dst_port >= C.SIMNET_HPORT_MAX:
                    raise SimError(f"port {p.name}: the C network hands frames to at most "
                                   f"{C.SIMNET_HOST_MAX} hosts of {C.SIMNET_HPORT_MAX} "
                                   "ports each")
                C.simnet_connect(net, p._cid, 1, dst.index, p.dst_port)
            else:
                raise SimError(f"port {p.name}: the C network connects switches and hosts")
            if not p.up:
                C.simnet_set_up(net, p._cid, 0, self.now)
            if p.blackhole:
                C.simnet_set_port_blackhole(net, p._cid, 1)
        sets: dict[frozenset[bytes], int] = {}
        for sw in fabric.switches():
            for routes, size in ((sw.routes48, 6), (sw.routes128, 16)):
                if not routes:
                    continue
                keys = b"".join(routes)
                if len(keys) != size * len(routes):
                    raise SimError(f"{sw.name}: a /{size * 8} route's key is not {size} bytes")
                if C.simnet_routes(net, sw._cid, keys, size, len(routes),
                                   ffi.new("int32_t[]", [p._cid for p in routes.values()])):
                    raise MemoryError("simnet_routes")
            if sw.fallback128 is not None:
                addrs, port = sw.fallback128
                sid = sets.get(addrs)
                if sid is None:
                    sid = sets[addrs] = len(sets)
                    if C.simnet_set_add(net, sid, b"".join(addrs), len(addrs)):
                        raise MemoryError("simnet_set_add")
                C.simnet_fallback(net, sw._cid, sid, port._cid)
            if sw.blackhole:
                C.simnet_set_switch_blackhole(net, sw._cid, 1)
        for node in fabric.hosts:
            node._cnet = self
            node._nic_ids = [p._cid for p in node.nics]
        self._hosts = fabric.hosts

    def send_frames(self, nic_ids: list[int], out: Sequence[tuple[int, Any]], keep: int) -> None:
        """A host's frames onto its NICs (``keep``: net.HostNode.elide)."""
        send, net, now, view = C.simnet_send, self._net, self.now, ffi.from_buffer
        for port, frame in out:
            # (as_ptr, inlined: bytes pass as they are, other buffers as a cdata view)
            if send(net, nic_ids[port], frame if type(frame) is bytes else view(frame),
                    len(frame), keep, now):
                raise MemoryError("the simulated network is out of memory")


def _c_flag(base: type, name: str, setter: str, doc: str) -> Any:
    """A property over ``base``'s slot ``name`` that also sets the C object's flag with
    ``C.<setter>(net, index, on)`` (the slot keeps the value Python reads)."""
    slot = base.__dict__[name]

    def get(self: Any) -> bool:
        return bool(slot.__get__(self))

    def put(self: Any, on: bool) -> None:
        slot.__set__(self, on)
        getattr(C, setter)(self._cnet._net, self._cid, int(on))

    return property(get, put, doc=doc)


class CEgressPort(EgressPort):
    """An :class:`EgressPort` whose queues and counters are in C (the same slots: the
    fabric's ports become these once mirrored)."""

    __slots__ = ()

    @property
    def _c(self) -> Any:
        return self._cnet._net

    def send(self, frame: bytearray) -> None:
        """Queue a frame (an elided one travels whole from here: same wire length)."""
        if type(frame) is not bytearray:
            frame = restore_frame(frame)
        assert isinstance(self._cnet, NativeSimulator)
        self._cnet.send_frames([self._cid], [(0, frame)], 0)

    def set_up(self, up: bool) -> None:
        """Carrier up/down (queues flushed in C)."""
        assert isinstance(self._cnet, NativeSimulator)
        if not up and self.up:
            self._last_down = self._cnet.now
        self.up = up
        C.simnet_set_up(self._c, self._cid, int(up), self._cnet.now)

    @property
    def counters(self) -> PortCounters:  # type: ignore[override]
        """A snapshot of the C port's counters."""
        c = ffi.new("struct simnet_port_counters *")
        C.simnet_port_counters(self._c, self._cid, c)
        return PortCounters(c.tx_frames, c.tx_bytes, c.trimmed, c.ecn_marked, c.drop_queue,
                            c.drop_down, c.drop_blackhole, 0, c.max_queue_bytes)

    @property
    def queued_bytes(self) -> int:  # type: ignore[override]
        """Bytes waiting in both queues."""
        c = ffi.new("struct simnet_port_counters *")
        C.simnet_port_counters(self._c, self._cid, c)
        return int(c.data_bytes + c.prio_bytes)

    blackhole = _c_flag(EgressPort, "blackhole", "simnet_set_port_blackhole",
                        "One-way blackhole: frames are sent (counted) and discarded.")

    @property
    def loss(self) -> float:  # type: ignore[override]
        """Always 0: random loss needs the Python network (simnet.native_ok)."""
        return 0.0

    @loss.setter
    def loss(self, value: float) -> None:
        if value:
            raise SimError("random loss needs the Python network (the C network has no "
                           "access to the simulation's random generator)")


class CSwitch(Switch):
    """A :class:`Switch` whose forwarding and counters are in C."""

    __slots__ = ()

    @property
    def counters(self) -> SwitchCounters:  # type: ignore[override]
        """A snapshot of the C switch's counters."""
        c = ffi.new("struct simnet_switch_counters *")
        C.simnet_switch_counters(self._cnet._net, self._cid, c)
        return SwitchCounters(c.rx_frames, c.drop_no_route, c.drop_hop_limit,
                              c.drop_bad_sid, c.drop_blackhole)

    blackhole = _c_flag(Switch, "blackhole", "simnet_set_switch_blackhole",
                        "Links up, nothing forwarded.")
