"""``mrc-sim collective``: the collectives of ``mrc-coll`` in the simulator, step by step,
running the real protocol core (spray) or its single-path ECMP profile.

Each iteration (a collective step) is a set of writes with dependencies:

- ``allreduce``: the ring (reduce-scatter then all-gather), ``2(n-1)`` writes of
  ``size/n`` per rank; rank r's write s goes out once rank r-1's write s-1 completed
  (its data reached r);
- ``allgather``: the ring, ``n-1`` writes of ``size/n`` per rank, same dependencies;
- ``alltoall``: one matrix, every rank writes ``size/n`` to every other rank at once.

Every write is a write with immediate, as mrc-coll's: a ring step goes on when the
receiver has the data (its ``ImmediateReceived``, the write complete and in order
there), not when the sender learns it (``signal="completion"``, the model before: a
SACK later, and that SACK may wait the receiver's ``ack_delay``). The next iteration
starts when every write of this one is complete at both ends (mrc-coll's
``wait_sent``). Step times (P50/P99/P100), algbw and busbw follow mrc-coll's
(nccl-tests) definitions; the
ideal busbw is the hosts' bandwidth over all planes. One QP pair per (sender, receiver)
is reused by every iteration. Failures use ``mrc-sim run``'s grammar, times from the
first step (the first warm-up iteration starts at 0).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mrcnet.coll.algorithms import bus_factor
from mrcnet.coll.errors import CollError
from mrcnet.coll.options import CollOptions, add_collective_options, collective_options
from mrcnet.coll.report import Row
from mrcnet.core import ImmediateReceived, PathStateChanged, QPError, WriteCompleted
from mrcnet.core.config import TUNINGS, tuning_overrides
from mrcnet.errors import InvalidAttribute
from mrcnet.sim.errors import SimError, SpecError
from mrcnet.sim.failures import parse_failure
from mrcnet.sim.matrix import Flow
from mrcnet.sim.net import HostNode
from mrcnet.sim.overrides import parse_set
from mrcnet.sim.runner import SimRun
from mrcnet.sim.topology import LeafSpineSpec, parse_topology

__all__ = ["SIGNALS", "CollectiveRun", "add_collective_parser", "default_topology",
           "run_collective"]

#: What releases a ring's next write (:class:`CollectiveRun`'s ``signal``).
SIGNALS = ("arrival", "completion")


@dataclass
class _Write:
    """One write of an iteration: ``src`` -> ``dst``, waiting on ``deps`` others."""

    src: int
    dst: int
    size: int
    deps: int = 0
    then: list[int] = field(default_factory=list)  #: writes this one releases


def plan(op: str, size: int, world: int) -> list[_Write]:
    """The writes of one iteration of ``op`` and their dependencies."""
    part = max(1, size // world)
    if op == "alltoall":
        return [_Write(s, d, part) for s in range(world) for d in range(world) if s != d]
    steps = 2 * (world - 1) if op == "allreduce" else world - 1
    ws = [_Write(r, (r + 1) % world, part) for _ in range(steps) for r in range(world)]
    # Write (s, r) is ws[s * world + r]; it waits for (s-1, r-1).
    for s in range(1, steps):
        for r in range(world):
            ws[s * world + r].deps = 1
            ws[(s - 1) * world + (r - 1) % world].then.append(s * world + r)
    return ws


class CollectiveRun(SimRun):
    """A :class:`SimRun` whose traffic is ``iters`` collective iterations (``warmup``
    more first); :attr:`steps` holds each timed iteration's duration."""

    def __init__(self, spec: LeafSpineSpec, op: str, size: int, *, iters: int,
                 warmup: int = 1, ranks: int | None = None, signal: str = "arrival",
                 trace: bool = False, **kw: Any) -> None:
        world = ranks or spec.n_hosts
        if not 2 <= world <= spec.n_hosts:
            raise SpecError(f"{world} ranks on a fabric of {spec.n_hosts} hosts")
        if signal not in SIGNALS:
            raise SpecError(f"unknown signal {signal!r}: {' or '.join(SIGNALS)}")
        #: what releases a ring's next write: the data's arrival at the receiver
        #: (mrc-coll's) or the sender's completion (a SACK later)
        self.signal = signal
        self.op, self.size, self.world = op, size, world
        self.writes = plan(op, size, world)
        self._dep = [-1] * len(self.writes)  # the write each one waits for (-1: none)
        for i, w in enumerate(self.writes):
            for j in w.then:
                self._dep[j] = i
        #: with ``trace``: per timed iteration, write index -> [posted, through (by
        #: signal), the posting QP's window then (bytes)] (:meth:`critical_chain`)
        self.traces: list[dict[int, list[float]]] | None = [] if trace else None
        self._trace: dict[int, list[float]] = {}
        pairs = sorted({(w.src, w.dst) for w in self.writes})
        # One "flow" per QP pair: SimRun connects it; the writes are posted here.
        flows = [Flow(i, s, d, 0.0, self.writes[0].size) for i, (s, d) in enumerate(pairs)]
        self._pair = {p: i for i, p in enumerate(pairs)}
        super().__init__(spec, flows, **kw)
        self._pending = 1  # SimRun's loop runs while this is positive
        self.total = warmup + iters
        self.warmup = warmup
        self.iteration = -1
        self.t_iter = 0.0  #: when the current iteration started
        self._left = 0
        self._waiting: list[int] = []
        self.steps: list[float] = []  #: timed iterations' durations (virtual seconds)
        self.step_start: list[float] = []
        self.worst: list[int] = []  #: each timed iteration's slowest rank
        self._last_dst = -1  # the rank the latest completed write went to
        self.error: str | None = None
        self._wr: dict[tuple[int, int], int] = {}  # (host, wr_id) -> write index
        self._arrivals = 0  # writes of this iteration whose data reached the receiver
        # Receives for the immediates, as mrc-coll posts them: as many per QP as writes
        # go over it in an iteration, one posted again for each one consumed.
        per_pair: dict[tuple[int, int], int] = {}
        for w in self.writes:
            per_pair[(w.src, w.dst)] = per_pair.get((w.src, w.dst), 0) + 1
        for (src, dst), fid in self._pair.items():
            for k in range(per_pair[(src, dst)]):
                self.hosts[dst].post_recv(self.qps[fid][1], k)
        self.sim.at(0.0, self._next_iteration)

    def _start_flow(self, f: Flow) -> None:
        """Connections only: the writes follow the collective's plan."""

    def _next_iteration(self, _: object = None) -> None:
        now = self.sim.now
        if self.iteration >= self.warmup:
            self.steps.append(now - self.t_iter)
            self.step_start.append(self.t_iter)
            self.worst.append(self._last_dst)
            if self.traces is not None:
                self.traces.append(self._trace)
        self._trace = {}
        self.iteration += 1
        if self.iteration >= self.total:
            self._pending = 0
            self.sim.stop()
            return
        self.t_iter = now
        self._left = len(self.writes)
        self._arrivals = 0
        self._waiting = [w.deps for w in self.writes]
        for i, w in enumerate(self.writes):
            if not w.deps:
                self._post(i)

    def _post(self, i: int) -> None:
        w = self.writes[i]
        fid = self._pair[(w.src, w.dst)]
        wr_id = self.iteration * len(self.writes) + i
        self._wr[(w.src, wr_id)] = i
        mr = self._mrs[w.dst]
        if self.traces is not None:
            cwnd = self.hosts[w.src].qp_stats(self.qps[fid][0])["cwnd"]
            self._trace[i] = [self.sim.now, math.nan, cwnd]
        self.hosts[w.src].post_write(self.qps[fid][0], wr_id, self._mrs[w.src], 0, w.size,
                                     mr.addr, mr.rkey, imm=i)
        self.fabric.hosts[w.src].kick()

    def _drain_events(self, node: HostNode) -> None:
        host = self.hosts[node.index]
        while (ev := host.next_event()) is not None:
            if isinstance(ev, ImmediateReceived):
                host.post_recv(ev.qpn, ev.wr_id)
                self._arrivals += 1
                if self.signal == "arrival":
                    self._release(ev.imm)
                self._maybe_done()
            elif isinstance(ev, WriteCompleted):
                i = self._wr.pop((node.index, ev.wr_id), None)
                if i is None:
                    continue
                if self.signal == "completion":
                    self._release(i)
                self._left -= 1
                self._last_dst = self.writes[i].dst
                self._maybe_done()
            elif isinstance(ev, QPError) and self.error is None:
                self.error = f"{host.name}: QP {ev.qpn} failed: {ev.reason}"
                self._pending = 0
                self.sim.stop()
            elif isinstance(ev, PathStateChanged):
                self.path_events.append((self.sim.now, host.name, ev))

    def _release(self, i: int) -> None:
        """Write ``i`` is through (by :attr:`signal`): post the writes waiting on it."""
        if self.traces is not None:
            self._trace[i][1] = self.sim.now
        for j in self.writes[i].then:
            self._waiting[j] -= 1
            if not self._waiting[j]:
                self._post(j)

    def _maybe_done(self) -> None:
        """The iteration ends when every write is complete at both ends."""
        if not self._left and self._arrivals == len(self.writes):
            self._left = -1  # (once)
            self.sim.at(self.sim.now, self._next_iteration)

    def critical_chain(self, step: int) -> list[tuple[int, int, int, float, float]]:
        """Timed step ``step``'s critical chain (needs ``trace``): from its last write
        through (by :attr:`signal`) back along the writes each waited for, in order;
        per write (ring step, sender, receiver, post to through in seconds, the sender
        QP's window in bytes when it was posted). A ring's step time is the sum of its
        chain's hops."""
        if self.traces is None:
            raise SpecError("critical_chain needs a run made with trace=True")
        tr = self.traces[step]
        i = max(tr, key=lambda k: tr[k][1])
        chain = []
        while i >= 0:
            posted, through, cwnd = tr[i]
            w = self.writes[i]
            chain.append((i // self.world, w.src, w.dst, through - posted, cwnd))
            i = self._dep[i]
        return chain[::-1]

    def row(self) -> Row:
        """The timed steps as mrc-coll's row. Every rank starts a step together, so the
        slowest rank (``worst_rank``) is the one that finished last: the receiver of the
        step's last write to complete (its data came last; its sender learnt of it half
        a round trip later, the same instant for both here)."""
        return Row(self.op, self.size, self.world, list(self.steps), list(self.step_start),
                   list(self.worst), self.error is None and len(self.steps) > 0)


def default_topology(hosts: int) -> str:
    """The shape MRC deploys, 8 planes, sized for ``hosts``: 8 hosts per leaf (fewer on
    small runs) and as many spines per plane as hosts per leaf (non-blocking)."""
    per_leaf = 8 if hosts % 8 == 0 and hosts >= 16 else max(1, hosts // 2)
    if hosts % per_leaf:
        raise SpecError(f"--hosts {hosts}: give an even number (or --topology)")
    return (f"leafspine:planes=8,spines={per_leaf},leaves={hosts // per_leaf},"
            f"hosts={per_leaf}")


def run_collective(topology: str, opts: CollOptions, transport: str = "mrc", *,
                   ranks: int | None = None, seed: int = 1,
                   until: float | None = None,
                   host_config: dict[str, Any] | None = None, tuning: str = "collective",
                   signal: str = "arrival", trace: bool = False) -> dict[str, Any]:
    """One collective run per size of ``opts``; mrc-coll's JSON shape plus the
    simulator's figures (``counters``: the core's, summed over the hosts).
    ``tuning`` names the :data:`mrcnet.core.config.TUNINGS` set the hosts run with
    (``collective`` by default, ``default`` for the host defaults); ``host_config``
    overrides :class:`mrcnet.core.HostConfig` fields on top of it; ``signal``: see
    :class:`CollectiveRun`. With ``trace`` each row has ``chains``: per timed step, its
    critical chain's length, median hop and slow hops (over twice the median: ring
    step, sender, receiver, hop seconds, the sender's window in bytes at the post)."""
    spec = parse_topology(topology)
    failures = [parse_failure(f) for f in opts.fail]
    try:
        host_config = tuning_overrides(tuning, host_config)
    except InvalidAttribute as e:
        raise SimError(str(e)) from None
    rows: list[Row] = []
    extra: list[dict[str, Any]] = []
    cpu0 = time.process_time()
    for size in opts.sizes:
        run = CollectiveRun(spec, opts.op, size, iters=opts.iters, warmup=opts.warmup,
                            ranks=ranks, transport=transport, failures=failures, seed=seed,
                            host_config=host_config, signal=signal, trace=trace)
        res = run.run(until=until)
        row = run.row()
        rows.append(row)
        counters: dict[str, int] = {}
        for per_host in res.hosts.values():  # the core's counters, summed over hosts
            for k, v in per_host.items():
                counters[k] = counters.get(k, 0) + v
        extra.append({"error": run.error, "sim_time": res.sim_time, "events": res.events,
                      "cpu_seconds": res.cpu, "counters": counters,
                      "iterations_done": max(0, run.iteration - run.warmup)})
        if trace:
            extra[-1]["chains"] = [_chain_summary(run.critical_chain(k))
                                   for k in range(len(run.steps))]
    ideal = spec.host_bandwidth_bps / 1e9
    out_rows = []
    for row, ex in zip(rows, extra, strict=True):
        d = row.as_dict()
        d.update(ex)
        d["busbw_of_ideal"] = d["busbw_gbps"] / ideal if ideal else None
        d["p100_over_p50"] = d["p100_s"] / d["p50_s"] if d["p50_s"] else None
        out_rows.append(d)
    last = out_rows[-1]
    return {
        "op": opts.op, "transport": transport, "topology": spec.to_line(), "signal": signal,
        "tuning": tuning, "host_config": host_config,
        "ranks": rows[-1].ranks, "failures": [f.describe() for f in failures],
        "ideal_gbps": ideal, "bus_factor": bus_factor(opts.op, rows[-1].ranks),
        "rows": out_rows,
        "verified": None,  # the simulator moves time, not data
        "completed": all(r["error"] is None and r["iterations_done"] == opts.iters
                         for r in out_rows),
        **{k: last.get(k) for k in ("steps_s", "p50_s", "p99_s", "p100_s", "algbw_gbps",
                                    "busbw_gbps", "busbw_of_ideal", "p100_over_p50",
                                    "worst", "error")},
        "cpu_seconds": time.process_time() - cpu0,
    }


def _chain_summary(chain: list[tuple[int, int, int, float, float]]) -> dict[str, Any]:
    """A critical chain in brief: its length, its median hop and its slow hops."""
    hops = sorted(h[3] for h in chain)
    median = hops[len(hops) // 2]
    return {"hops": len(chain), "sum_s": sum(hops), "median_s": median,
            "slow": [list(h) for h in chain if h[3] > 2 * median]}


def _fmt(res: dict[str, Any]) -> str:
    lines = [f"# {res['op']} over {res['transport']} on {res['ranks']} ranks, "
             f"{res['topology']} (ideal {res['ideal_gbps']:.0f} Gb/s per host), "
             f"tuning {res['tuning']}"]
    lines += [f"# failure {f}" for f in res["failures"]]
    lines.append(f"{'size(B)':>12} {'time(us)':>10} {'algbw(Gb/s)':>12} {'busbw(Gb/s)':>12} "
                 f"{'/ideal':>7} {'p50(us)':>10} {'p99(us)':>10} {'p100(us)':>10} "
                 f"{'p100/p50':>8} {'worst':>5} {'steps':>5}  status")
    for r in res["rows"]:
        status = "ok" if r["error"] is None else f"FAILED: {r['error']}"
        lines.append(
            f"{r['size']:>12} {r['time_s'] * 1e6:>10.1f} {r['algbw_gbps']:>12.2f} "
            f"{r['busbw_gbps']:>12.2f} {r['busbw_of_ideal'] or 0:>7.3f} "
            f"{r['p50_s'] * 1e6:>10.1f} {r['p99_s'] * 1e6:>10.1f} {r['p100_s'] * 1e6:>10.1f} "
            f"{r['p100_over_p50'] or math.nan:>8.3f} {r['worst']:>5} "
            f"{len(r['steps_s']):>5}  {status}")
    return "\n".join(lines)


def cmd_collective(a: argparse.Namespace) -> int:
    """``mrc-sim collective``."""
    try:
        opts = collective_options(a, default_size="1M")
    except CollError as e:
        raise SimError(str(e)) from None
    if a.topology is None and a.hosts is None:
        raise SimError("give --hosts N (8 planes) or --topology SPEC")
    topology = a.topology or default_topology(a.hosts)
    ranks = a.hosts if a.topology else None
    results = []
    for transport in a.transport.split(","):
        if transport not in ("mrc", "ecmp"):
            raise SimError(f"unknown transport {transport!r}: mrc, ecmp or mrc,ecmp")
        res = run_collective(topology, opts, transport, ranks=ranks, seed=a.seed,
                             host_config=parse_set(a.set), tuning=a.tuning)
        results.append(res)
        if not a.json:
            print(_fmt(res), flush=True)
    if a.json:
        print(json.dumps(results[0] if len(results) == 1 else results))
    return 0 if all(r["completed"] for r in results) else 1


def add_collective_parser(sub: Any) -> None:
    """Add ``collective`` to mrc-sim's subcommands (``sub``: its subparsers)."""
    c = sub.add_parser(
        "collective", help="run mrc-coll's collectives (all-reduce, all-to-all, ...)",
        description="Simulate collective steps (mrc-coll's algorithms and options): "
        "P50/P99/P100 step times and busbw, MRC spray or single-path ECMP, with failures.")
    c.add_argument("--hosts", type=int, metavar="N",
                   help="ranks; without --topology, an 8-plane fabric of N hosts")
    c.add_argument("--topology", "-t", metavar="SPEC", help="the fabric (mrc-sim specs)")
    add_collective_options(c, iters=10, warmup=1)
    c.add_argument("--transport", default="mrc", metavar="mrc|ecmp|mrc,ecmp",
                   help="mrc (spray, default), ecmp (one path per QP), or both in turn")
    c.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    c.add_argument("--tuning", choices=sorted(TUNINGS), default="collective",
                   help="the protocol core's settings: collective (default: the rules that "
                   "keep a failure's step near the P100 without one, at the cost of spurious "
                   "tail probes; docs/COLLECTIVES.md) or default (the host defaults, as "
                   "mrc-sim run and mrcd use); the same applies to both transports")
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a protocol-core HostConfig field on top of the tuning, "
                   "as mrc-sim run's (repeatable)")
    c.add_argument("--json", action="store_true", help="one JSON object (a list for both)")
    c.set_defaults(fn=cmd_collective)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mrcnet.sim.collective ...`` (the same as ``mrc-sim collective``)."""
    p = argparse.ArgumentParser(prog="mrc-sim")
    add_collective_parser(p.add_subparsers(dest="command", required=True))
    a = p.parse_args(["collective", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(a.fn(a))
    except (SimError, SpecError) as e:
        print(f"mrc-sim: error: {e}", file=sys.stderr)
        return 2
