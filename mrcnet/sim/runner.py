"""Run a traffic matrix over a simulated fabric with the real protocol core.

One :class:`mrcnet.core.Host` per simulated host, driven exactly as mrcd drives it
(receive / frames_to_send / next_timer / handle_timer / next_event). Every flow gets its
own QP pair, connected at time 0 (connection setup is not what is being measured, as in
htsim); its write is posted at the flow's start time and its completion time is when the
requester sees ``WriteCompleted``.

Transports: ``mrc`` (the core's ``spray`` EV profile) and ``ecmp`` (its ``ecmp`` profile:
one EV per QP by hash, no spraying, no retirement: the single-path RoCE-like baseline
running the same code).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import math
import random
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ParamSpec, TypeVar

from mrcnet.constants import MPR_MAX, MPR_UNIT, PSN_MASK
from mrcnet.core import (
    EV_PROFILE_ECMP,
    EV_PROFILE_SPRAY,
    Access,
    Host,
    HostConfig,
    MemoryRegion,
    PathStateChanged,
    Port,
    QPAttrs,
    QPError,
    QPState,
    WriteCompleted,
)
from mrcnet.sim.engine import Simulator
from mrcnet.sim.errors import SimError, SpecError
from mrcnet.sim.failures import Failure, expand_failure, schedule_failure
from mrcnet.sim.matrix import Flow
from mrcnet.sim.net import HostJitter, HostNode
from mrcnet.sim.simnet import NativeSimulator, native_ok
from mrcnet.sim.topology import Fabric, LeafSpineSpec, leaf_name

TRANSPORTS = {"mrc": EV_PROFILE_SPRAY, "ecmp": EV_PROFILE_ECMP}

_P = ParamSpec("_P")
_R = TypeVar("_R")

# Headers a data frame carries around its payload, worst case (SRH with four segments):
# Ethernet 14, outer IPv6 40, SRH 72, inner IPv6 40, UDP 8, BTH 12, RETH 16, METH 4,
# ImmDt 4, TSETH 4, ICRC 4.
_MAX_DATA_HEADERS = 218


# Header bytes an elided data frame keeps (mrcnet.sim.net.ElidedFrame): every header
# fits (_MAX_DATA_HEADERS), whatever the SRv6 mode.
_ELIDE_KEEP = 256


def payload_for_mtu(mtu: int) -> int:
    """The largest power-of-two payload whose frame fits ``mtu`` (9000 -> 8192)."""
    room = mtu - _MAX_DATA_HEADERS
    if room < 256:
        raise SpecError(f"mtu {mtu} leaves no room for a payload")
    return 1 << (room.bit_length() - 1)


def base_rtt(spec: LeafSpineSpec, payload: int) -> float:
    """Unloaded RTT through a spine: a full data frame out over 4 hops, a SACK back."""
    frame = payload + _MAX_DATA_HEADERS
    hops = 2 * (frame * 8 / spec.edge_rate_bps) + 2 * (frame * 8 / spec.rate_bps)
    return hops + 8 * spec.delay + 4 * 200 * 8 / spec.rate_bps


@dataclass
class FlowResult:
    """How one flow went."""

    flow: Flow
    ideal: float  #: size / the flow's bottleneck rate (its hosts' NIC bandwidth)
    finish: float | None = None  #: virtual time of WriteCompleted, None if it never came
    error: str | None = None  #: QPError reason, if the QP failed

    @property
    def fct(self) -> float | None:
        """Flow completion time (finish - start), or None."""
        return None if self.finish is None else self.finish - self.flow.start

    @property
    def slowdown(self) -> float | None:
        """FCT over ideal."""
        fct = self.fct
        return None if fct is None else fct / self.ideal

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        f = self.flow
        return {
            "id": f.id, "src": f"h{f.src}", "dst": f"h{f.dst}", "size": f.size,
            "start": f.start, "finish": self.finish, "fct": self.fct, "ideal": self.ideal,
            "slowdown": self.slowdown, "error": self.error,
        }


@dataclass
class RunResult:
    """Everything a run measured."""

    topology: str
    transport: str
    flows: list[FlowResult]
    sim_time: float  #: virtual seconds simulated
    events: int  #: simulator events run
    wall: float  #: wall-clock seconds spent running events
    cpu: float  #: CPU seconds spent running events
    makespan_ideal: float  #: the busiest host's bytes (sent or received) / its bandwidth
    failures: list[str] = field(default_factory=list)
    ports: dict[str, dict[str, Any]] = field(default_factory=dict)
    switches: dict[str, dict[str, int]] = field(default_factory=dict)
    hosts: dict[str, dict[str, int]] = field(default_factory=dict)  #: core counters
    #: (time, bytes delivered per flow id) every sample interval, when sampling was asked
    samples: list[tuple[float, dict[int, int]]] = field(default_factory=list)

    def goodput_series(self) -> list[tuple[float, float]]:
        """(interval end, aggregate goodput in bit/s over the interval) from the samples."""
        out = []
        for (t0, a), (t1, b) in zip(self.samples, self.samples[1:], strict=False):
            if t1 > t0:
                out.append((t1, (sum(b.values()) - sum(a.values())) * 8 / (t1 - t0)))
        return out

    @property
    def events_per_second(self) -> float:
        """Simulator throughput: events per CPU second (wall time on a shared machine
        measures the neighbours too)."""
        return self.events / self.cpu if self.cpu > 0 else 0.0

    @property
    def makespan(self) -> float | None:
        """First start to last finish, or None if a flow never finished."""
        if any(r.finish is None for r in self.flows):
            return None
        return max(r.finish or 0.0 for r in self.flows) - min(r.flow.start for r in self.flows)

    @property
    def completed(self) -> list[FlowResult]:
        """Flows that finished."""
        return [r for r in self.flows if r.finish is not None]

    def slowdown_percentile(self, q: float) -> float:
        """Nearest-rank percentile (0 < q <= 100) of FCT/ideal; inf if a flow never
        finished (an unfinished flow is the slowest one)."""
        vals = sorted(r.slowdown if r.slowdown is not None else math.inf for r in self.flows)
        if not vals:
            return math.nan
        k = max(1, math.ceil(q / 100 * len(vals)))
        return vals[k - 1]

    def summary(self) -> dict[str, Any]:
        """Headline figures."""
        done = [r.slowdown for r in self.flows if r.slowdown is not None]
        fin = [r.finish for r in self.flows if r.finish is not None]
        return {
            "flows": len(self.flows),
            "completed": len(done),
            "errors": sum(1 for r in self.flows if r.error),
            "p50_slowdown": self.slowdown_percentile(50),
            "p99_slowdown": self.slowdown_percentile(99),
            "p100_slowdown": self.slowdown_percentile(100),
            "mean_slowdown": statistics.fmean(done) if done else math.nan,
            "last_finish": max(fin) if fin else None,
            "makespan": self.makespan,
            "makespan_ideal": self.makespan_ideal,
            "makespan_ratio": (self.makespan / self.makespan_ideal
                               if self.makespan is not None else None),
            "sim_time": self.sim_time,
            "events": self.events,
            "wall_seconds": self.wall,
            "cpu_seconds": self.cpu,
            "events_per_second": self.events_per_second,
        }

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "topology": self.topology,
            "transport": self.transport,
            "failures": self.failures,
            "summary": self.summary(),
            "flows": [r.as_dict() for r in self.flows],
            "ports": self.ports,
            "switches": self.switches,
            "hosts": self.hosts,
            "goodput": [{"t": t, "bps": g} for t, g in self.goodput_series()],
        }


#: Allocations of container objects between two young collections during set-up and a
#: run (the interpreter's default: 700; mrcd's, once it serves: 20,000).
GC_YOUNG_THRESHOLD = 20_000
#: Young collections between two collections of the middle generation (the default: 10).
GC_MIDDLE_THRESHOLD = 100


def _no_full_gc(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``fn`` with the collector's oldest generation left alone and its young
    collections rarer.

    A large run holds tens of millions of long-lived objects (8192 hosts' QPs, routes,
    ports), and each full collection walks them all, many times during set-up and the
    run, and frees nothing (the run makes no cycles that outlive the young generations,
    which are still collected: peak memory is unchanged). A young collection walks every
    container object made since the last one that is still alive: every 700 allocations
    (the default) it walks the frames, tuples and records in flight many times over;
    every :data:`GC_YOUNG_THRESHOLD` most of those have died (freed by their reference
    counts, never walked). What a young collection leaves alive (the run's long-lived
    records) is walked again by the middle generation's collection, every
    :data:`GC_MIDDLE_THRESHOLD` young ones instead of 10: at the default one took about
    2 % of a 256-host permutation's loop, for nothing freed. The thresholds are
    restored afterwards; decisions do not depend on the collector.
    """
    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        t = gc.get_threshold()
        # (a young threshold of 0 is the collector switched off: left so)
        gc.set_threshold(t[0] and max(t[0], GC_YOUNG_THRESHOLD),
                         max(t[1], GC_MIDDLE_THRESHOLD), 1 << 30)
        try:
            return fn(*args, **kwargs)
        finally:
            gc.set_threshold(*t)

    return wrapper


class SimRun:
    """A fabric, one core Host per simulated host, a traffic matrix and failures.

    Build it, optionally inspect or instrument it (``fabric``, ``hosts``, ``qps``), then
    :meth:`run`. ``host_config`` overrides :class:`mrcnet.core.HostConfig` fields. With
    ``sample_interval`` the bytes each flow's responder has received (new data only) are
    recorded every interval (:attr:`RunResult.samples`, :meth:`RunResult.goodput_series`).
    ``host_jitter`` (:class:`mrcnet.sim.net.HostJitter`) makes every host's stack react
    late and serially, like mrcd in Python on a busy machine. ``native``: the network
    in C (:mod:`mrcnet.sim.simnet`, same decisions) or in Python; None (default) takes C
    whenever it can run the failures asked.
    """

    @_no_full_gc
    def __init__(
        self,
        spec: LeafSpineSpec,
        flows: Sequence[Flow],
        *,
        transport: str = "mrc",
        failures: Iterable[Failure] = (),
        seed: int = 1,
        host_config: dict[str, Any] | None = None,
        sample_interval: float | None = None,
        host_jitter: HostJitter | None = None,
        native: bool | None = None,
    ) -> None:
        if transport not in TRANSPORTS:
            raise SpecError(f"unknown transport {transport!r}: use {' or '.join(TRANSPORTS)}")
        if not flows:
            raise SpecError("no flows to run")
        self.spec = spec
        self.transport = transport
        self.flows = list(flows)
        self.failures = list(failures)  # (random: ones drawn once the fabric exists)
        # The network in C when it can run this (mrcnet.sim.simnet): the same decisions.
        ok = native_ok(f.action for f in self.failures)
        if native and not ok:
            raise SpecError("the C network needs the C module and no random loss")
        self.native = ok if native is None else native
        self.sim = NativeSimulator(seed) if self.native else Simulator(seed)
        # Initial PSNs are random per QP, as mrcd draws them at connect (from their own
        # generator: the network's random choices stay what they were)
        self._psn_rng = random.Random(seed * 7919 + 24)
        self.fabric = Fabric(self.sim, spec)
        self.failures = [g for f in self.failures
                         for g in expand_failure(self.fabric, f, seed)]
        n = len(self.fabric.hosts)
        for f in self.flows:
            if f.src >= n or f.dst >= n:
                raise SpecError(f"flow {f.id} uses h{max(f.src, f.dst)}, the fabric has "
                                f"h0..h{n - 1}")
        self.config = self._config(host_config or {})
        # Every payload is zeros (one zero buffer, below): frames travel without them,
        # their headers kept whole (a trim keeps at most trim_size bytes of them).
        keep = max(_ELIDE_KEEP, spec.trim_size)
        for node in self.fabric.hosts:
            node.jitter = host_jitter
            node.elide = keep
        self.hosts: list[Host] = []
        for node in self.fabric.hosts:
            ports = [Port(p, p, node.macs[p], node.addresses[p]) for p in range(spec.planes)]
            host = Host(node.name, ports, self.fabric.paths_for(node.index),
                        dataclasses.replace(self.config))
            self.hosts.append(host)
        #: flow id -> (requester qpn, responder qpn)
        self.qps: dict[int, tuple[int, int]] = {}
        self.results = {
            f.id: FlowResult(f, f.size * 8 / spec.host_bandwidth_bps) for f in self.flows
        }
        #: (time, host name, event) of every PathStateChanged, in order
        self.path_events: list[tuple[float, str, PathStateChanged]] = []
        self._pending = len(self.flows)
        self._by_qp: dict[tuple[int, int], int] = {}  # (host, requester qpn) -> flow id
        self._setup()
        for fl in self.failures:
            schedule_failure(self.fabric, fl)
        self.samples: list[tuple[float, dict[int, int]]] = []
        if sample_interval is not None:
            if sample_interval <= 0:
                raise SpecError("the sample interval must be positive")
            self._interval = sample_interval
            self.sim.at(0.0, self._sample)

    def _sample(self, _: object) -> None:
        delivered = {
            f.id: self.hosts[f.dst].qp(self.qps[f.id][1]).rcvd_bytes for f in self.flows
        }
        self.samples.append((self.sim.now, delivered))
        if self._pending > 0:
            self.sim.after(self._interval, self._sample)

    def _config(self, overrides: dict[str, Any]) -> HostConfig:
        spec = self.spec
        payload = payload_for_mtu(spec.mtu)
        cfg: dict[str, Any] = {
            "mtu_payload": payload,
            "ev_profile": TRANSPORTS[self.transport],
            "link_rate": spec.edge_rate_bps / 8,
            "base_rtt_hint": base_rtt(spec, payload),
            # Every path goes up to a spine and back down (4 links each way): no SACK
            # can come back sooner than the propagation alone (forged.early_floor).
            "ack_rtt_floor": 8 * spec.delay,
            # The simulator corrupts nothing (tests prove the switches keep checksums
            # valid); skipping verification makes the run faster.
            "verify_checksums": False,
        }
        names = {f.name for f in dataclasses.fields(HostConfig)}
        bad = set(overrides) - names
        if bad:
            raise SpecError(f"unknown host config option {sorted(bad)[0]!r} "
                            f"(known: {', '.join(sorted(names))})")
        cfg.update(overrides)
        return HostConfig(**cfg)

    def _setup(self) -> None:
        # One buffer serves every host as source and destination: the simulator measures
        # time, not data, and one shared buffer keeps memory flat for big matrices.
        size = max(f.size for f in self.flows)
        self._buffer = bytearray(size)
        self._mrs: list[MemoryRegion] = []
        self._cqs = []
        for h in self.hosts:
            self._mrs.append(h.register_mr(self._buffer, Access.LOCAL_WRITE | Access.REMOTE_WRITE))
            self._cqs.append(h.create_cq())
        for f in self.flows:
            src, dst = self.hosts[f.src], self.hosts[f.dst]
            sq = src.create_qp(self._cqs[f.src], QPAttrs(mpr=self._requester_mpr(f)))
            rq = dst.create_qp(self._cqs[f.dst], QPAttrs(mpr=self._responder_mpr()))
            ps = self._psn_rng.randrange(PSN_MASK + 1)
            pr = self._psn_rng.randrange(PSN_MASK + 1)
            for host, qpn, peer, other, mine, theirs in ((src, sq, dst, rq, ps, pr),
                                                         (dst, rq, src, sq, pr, ps)):
                host.modify_qp(qpn, QPState.INIT)
                host.modify_qp(qpn, QPState.RTR, peer=peer.name, dest_qp_num=other,
                               rq_psn=theirs)
                host.modify_qp(qpn, QPState.RTS, sq_psn=mine)
            self.qps[f.id] = (sq, rq)
            self._by_qp[(f.src, sq)] = f.id
            self.sim.at(f.start, self._start_flow, f)
        for node, host in zip(self.fabric.hosts, self.hosts, strict=True):
            node.on_activity = self._drain_events
            if self._pending > 0:  # (_drain_events returns at once while both are empty)
                node.activity_if = (host._events, host.path_events)
            node.attach(host)
            # A NIC reports carrier changes to its driver: the core stops using the plane
            # and tells its peers (PORT_STATUS); a switch-side failure it must discover.
            for plane in range(self.spec.planes):
                link = self.fabric.link(node.name, leaf_name(plane, node.leaf_index))
                link.on_carrier.append(partial(self._carrier, node, plane))

    def _requester_mpr(self, f: Flow) -> int | None:
        """The requester's PSN range (MPR, units of 128) sized to the flow.

        A QP's table of packets in flight is as large as its send window (4096 PSNs by
        default: 380 kB in C). A flow of k packets never has more than k outstanding, so
        a window of k (rounded up to 128) decides exactly what the default one does, in
        a table the flow's size: 1 MiB flows on 8192 hosts need 3 GB less. None (the
        host's window) when the flow is longer than that window.
        """
        cfg = self.config
        packets = math.ceil(f.size / cfg.mtu_payload)
        units = math.ceil(packets / MPR_UNIT)
        if units * MPR_UNIT > cfg.rx_window or units > MPR_MAX:
            return None
        return max(1, units)

    def _responder_mpr(self) -> int:
        """A responder QP sends no data: the smallest table (its receive window,
        ``mpr_dest``, is untouched)."""
        return 1

    def _carrier(self, node: HostNode, plane: int, up: bool) -> None:
        self.hosts[node.index].set_port_state(plane, up, self.sim.now)
        node.kick()

    def _start_flow(self, f: Flow) -> None:
        mr = self._mrs[f.dst]
        self.hosts[f.src].post_write(self.qps[f.id][0], f.id, self._mrs[f.src], 0, f.size,
                                     mr.addr, mr.rkey)
        self.fabric.hosts[f.src].kick()

    def _drain_events(self, node: HostNode) -> None:
        host = self.hosts[node.index]
        if not host._events and self._pending > 0:
            # (after most frames a host has no event: nothing to drain, no flow finished;
            # else mostly path events alone, an ECN echo's or a trim's skip: recorded in
            # take_events' order without its calls and the type tests below)
            pev = host.path_events
            if pev:
                now, name = self.sim.now, host.name
                self.path_events += [(now, name, ev) for ev in pev]
                pev.clear()
            return
        now = self.sim.now
        for ev in host.take_events():  # (nothing below makes a host event)
            if isinstance(ev, WriteCompleted):
                fid = self._by_qp.get((node.index, ev.qpn))
                if fid is not None and self.results[fid].finish is None:
                    self.results[fid].finish = now
                    self._pending -= 1
            elif isinstance(ev, QPError):
                fid = self._by_qp.get((node.index, ev.qpn))
                if fid is not None and self.results[fid].error is None:
                    self.results[fid].error = ev.reason
                    if self.results[fid].finish is None:
                        self._pending -= 1
            elif isinstance(ev, PathStateChanged):
                self.path_events.append((now, host.name, ev))
        if self._pending <= 0:
            for n in self.fabric.hosts:  # (from now on it stops the run at every input)
                n.activity_if = None
            if self.samples and self.samples[-1][0] < now:
                self._sample(None)  # the last interval ends when the last flow does
            self.sim.stop()

    def progress_line(self) -> str:
        """One line on how far the run is: simulated time, events per CPU second, flows
        done, data delivered and an ETA (wall time so far x data left / data delivered)."""
        sim = self.sim
        done = sum(1 for r in self.results.values() if r.finish is not None or r.error)
        total = sum(f.size for f in self.flows)
        got = 0
        for f in self.flows:
            got += f.size if self.results[f.id].finish is not None else min(
                f.size, self.hosts[f.dst].qp(self.qps[f.id][1]).rcvd_bytes)
        frac = got / total if total else 1.0
        eta = sim.wall_seconds * (1 - frac) / frac if frac > 0 else math.inf
        eta_s = f"ETA ~{eta:.0f}s" if math.isfinite(eta) else "ETA ?"
        return (f"t={sim.now * 1e6:.1f}us events={sim.events} "
                f"({sim.events_per_second:,.0f}/CPU-s) flows done={done}/{len(self.flows)} "
                f"data {frac:.1%} wall {sim.wall_seconds:.0f}s {eta_s}")

    @_no_full_gc
    def run(self, until: float | None = None, max_events: int | None = None,
            progress: Callable[[SimRun], None] | None = None) -> RunResult:
        """Run until every flow completed or failed (or ``until`` / ``max_events``).

        ``progress``, if given, is called about every 100k events.
        """
        chunk = 100_000 if progress is not None else max_events
        while self._pending > 0:
            before = self.sim.events
            budget = chunk if max_events is None or chunk is None else min(
                chunk, max_events - self.sim.events)
            self.sim.run(until=until, max_events=budget)
            if progress is not None:
                progress(self)
            ran = self.sim.events - before
            if (self.sim.pending == 0 or (until is not None and self.sim.now >= until)
                    or (max_events is not None and self.sim.events >= max_events)
                    or (budget is not None and ran < budget)):
                break
        for h in self.hosts:
            if h.last_internal_error is not None:
                raise SimError(f"{h.name}: the protocol core hit an internal error: "
                               f"{h.last_internal_error!r}") from h.last_internal_error
        return self.result()

    def _makespan_ideal(self) -> float:
        load: dict[tuple[str, int], int] = {}
        for f in self.flows:
            load[("tx", f.src)] = load.get(("tx", f.src), 0) + f.size
            load[("rx", f.dst)] = load.get(("rx", f.dst), 0) + f.size
        return max(load.values()) * 8 / self.spec.host_bandwidth_bps

    def result(self) -> RunResult:
        """The measurements so far."""
        fab = self.fabric
        ports: dict[str, dict[str, Any]] = {}
        for p in fab.egress_ports():
            d: dict[str, Any] = p.counters.as_dict()
            d["rate_bps"] = p.rate_bps
            ports[p.name] = d
        return RunResult(
            topology=self.spec.to_line(),
            transport=self.transport,
            flows=[self.results[f.id] for f in self.flows],
            sim_time=self.sim.now,
            events=self.sim.events,
            wall=self.sim.wall_seconds,
            cpu=self.sim.cpu_seconds,
            makespan_ideal=self._makespan_ideal(),
            failures=[f.describe() for f in self.failures],
            ports=ports,
            switches={s.name: s.counters.as_dict() for s in fab.switches()},
            hosts={h.name: h.counters() for h in self.hosts},
            samples=list(self.samples),
        )
