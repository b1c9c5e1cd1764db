#!/usr/bin/env python3
"""Analysis: where a simulated collective's steps go through a spine link failure.

Runs one ``mrc-sim collective`` (64 hosts x 8 planes by default, the shape of
``tools/bench_sim_coll.py``) with ``link:L0.0-S0.1`` going down at ``--fail-at`` and
prints, per step (warm-up steps included, numbered from the first timed one as 0):

- the step's duration and the core's counters that moved in it (summed over hosts);
- the losses declared in it, by cause, and how many of those were real (the packet never
  arrived) or spurious (it arrived after it was declared lost: queue reordering);
- for losses of packets that crossed the dead link, the detection wait (declared lost
  minus sent) and the shortest and longest;
- the step's last write to arrive: its QP, when it was posted and arrived, when its
  host first held a route across the dead link failing (a shared verdict after the
  failure), and the losses of that QP in the step (sent, found after, how), so a step's
  extra time reads as detection wait, the retransmission's trip and what came before;
- over the run: how late spurious losses arrived after they were declared (what a
  shorter RACK wait would have blamed) against the detection waits of real ones.

It wraps ``Recovery._mark_lost``, ``TailLoss._late_arrival`` and ``PathVerdicts.failed``
(the records the core's counters summarise); the simulation itself is unchanged
(virtual time, so the figures repeat for a seed).

    .venv/bin/python tools/sim_coll_steps.py --op alltoall --fail-at 2692.673us --iters 12
    .venv/bin/python tools/sim_coll_steps.py --op allreduce --fail-at none --json
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from typing import Any

from mrcnet.core import recovery as recmod
from mrcnet.core import tailloss as tlmod
from mrcnet.core import verdicts as vmod
from mrcnet.core.config import TUNINGS, tuning_overrides
from mrcnet.core.evs import ev_path
from mrcnet.sim.collective import CollectiveRun, default_topology
from mrcnet.sim.failures import parse_failure
from mrcnet.sim.overrides import parse_set
from mrcnet.sim.topology import parse_topology
from mrcnet.topology.errors import SpecError
from mrcnet.topology.units import parse_bytes, parse_time

LINK = "L0.0-S0.1"
DEAD = (0, 0, 1)  # LINK's plane, leaf and spine (L<plane>.<leaf>-S<plane>.<spine>)
KEYS = ("lost_trim", "lost_loss", "lost_tlp", "lost_timeout", "loss_spurious", "tlp_spurious",
        "loss_confirmed", "loss_rack_tie", "tlp_path_retired", "cc_quick_adapt")


class Recorder:
    """The per-loss records of one run: who lost what when, and which arrived after all."""

    def __init__(self, run: CollectiveRun, dead: tuple[int, int, int], spec_hosts: int) -> None:
        self.run = run
        self.dead_plane, self.dead_leaf, self.dead_spine = dead
        self.per_leaf = spec_hosts
        self.losses: list[dict[str, Any]] = []
        self.open: dict[tuple[int, int], dict[str, Any]] = {}
        self.qp_pair: dict[int, tuple[int, int]] = {}
        self.evm_pair: dict[int, tuple[int, int]] = {}
        for (src, dst), fid in run._pair.items():
            qp = run.hosts[src].qp(run.qps[fid][0])
            self.qp_pair[id(qp)] = (src, dst)
            self.evm_pair[id(qp.evm)] = (src, dst)
        # a host's shared verdicts on routes across the dead link: (when, src, dst)
        self.verdicts: list[tuple[float, int, int]] = []
        self.snaps: list[tuple[float, collections.Counter[str]]] = []

    def crosses(self, src: int, dst: int, ev: int) -> bool:
        """Whether a packet from ``src`` to ``dst`` on ``ev`` crosses the dead link."""
        plane, spine, _ = ev_path(ev)
        # (every route goes up to a spine, a leaf's own hosts' too)
        return (plane == self.dead_plane and spine == self.dead_spine
                and self.dead_leaf in (src // self.per_leaf, dst // self.per_leaf))

    def mark(self, rec: Any, seq: int, now: float, cause: str) -> None:
        """Before ``Recovery._mark_lost``: note the loss (not trims, RNR, access)."""
        if cause not in ("loss", "timeout", "tlp"):
            return
        e = rec.txt.get(seq)
        if e is None:
            return
        src, dst = self.qp_pair.get(id(rec.qp), (-1, -1))
        ev, sent = e[recmod.E_EV], e[recmod.E_SENT]
        d = {"t": now, "sent": sent, "wait": now - sent, "cause": cause, "src": src,
             "dst": dst, "dead": self.crosses(src, dst, ev), "spurious": None,
             "rack_rtt": rec.txt.rack_rtt, "allow": rec._reorder_allowance()}
        self.losses.append(d)
        self.open[(id(rec), seq)] = d

    def verdict(self, key: Any, by: Any, now: float) -> None:
        """Before ``PathVerdicts.failed``: a host learns a route failing; note it if the
        route crosses the dead link (its QP, by the view's EV manager)."""
        if key in by.table.bad:
            return
        src, dst = self.evm_pair.get(id(by.evm), (-1, -1))
        at = by.last_with(key)
        if at is not None and at[0] == self.dead_plane and at[1] == self.dead_spine and (
                self.dead_leaf in (src // self.per_leaf, dst // self.per_leaf)):
            self.verdicts.append((now, src, dst))

    def learnt(self, host: int, after: float) -> float | None:
        """When ``host`` first held a route across the dead link failing after ``after``."""
        return min((t for t, s, _ in self.verdicts if s == host and t >= after), default=None)

    def late(self, rec: Any, seq: int, late: float) -> None:
        """Before ``TailLoss._late_arrival``: the transmission declared lost came."""
        d = self.open.get((id(rec), seq))
        if d is not None:
            d["spurious"] = late

    def snap(self) -> None:
        tot: collections.Counter[str] = collections.Counter()
        for h in self.run.hosts:
            tot.update(h.counters())
        self.snaps.append((self.run.sim.now, tot))


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def analyse(a: argparse.Namespace) -> dict[str, Any]:
    """Run the collective and return the per-step records (see the module docstring)."""
    spec = parse_topology(a.topology or default_topology(a.hosts))
    fails = ([] if a.fail_at == "none"
             else [parse_failure(f"link:{LINK}@{a.fail_at}:down")])
    fail_t = None if a.fail_at == "none" else parse_time(a.fail_at)
    run = CollectiveRun(spec, a.op, parse_bytes(a.size), iters=a.iters, warmup=a.warmup,
                        transport="mrc", failures=fails, seed=a.seed,
                        host_config=tuning_overrides(a.tuning, parse_set(a.set)),
                        trace=True)
    recd = Recorder(run, DEAD, spec.hosts)
    orig_mark, orig_late = recmod.Recovery._mark_lost, tlmod.TailLoss._late_arrival
    orig_failed = vmod.PathVerdicts.failed

    def failed(self: Any, key: Any, by: Any, now: float) -> None:
        recd.verdict(key, by, now)
        orig_failed(self, key, by, now)

    def mark(self: Any, seq: int, now: float, cause: str) -> None:
        recd.mark(self, seq, now, cause)
        orig_mark(self, seq, now, cause)

    def late(self: Any, seq: int, lateness: float, allowance: float) -> bool:
        recd.late(self, seq, lateness)
        return orig_late(self, seq, lateness, allowance)

    orig_next = run._next_iteration

    def nxt(_: object = None) -> None:
        recd.snap()
        orig_next(_)

    recmod.Recovery._mark_lost = mark  # type: ignore[method-assign]
    tlmod.TailLoss._late_arrival = late  # type: ignore[method-assign]
    vmod.PathVerdicts.failed = failed  # type: ignore[method-assign]
    run._next_iteration = nxt  # type: ignore[method-assign]
    t0 = time.process_time()
    try:
        run.run()
    finally:
        recmod.Recovery._mark_lost = orig_mark  # type: ignore[method-assign]
        tlmod.TailLoss._late_arrival = orig_late  # type: ignore[method-assign]
        vmod.PathVerdicts.failed = orig_failed  # type: ignore[method-assign]
    steps: list[dict[str, Any]] = []
    snaps = recd.snaps
    for i in range(1, len(snaps)):
        (t_a, c_a), (t_b, c_b) = snaps[i - 1], snaps[i]
        # (the first snapshot is the first warm-up step's end: the run scheduled its own
        # first _next_iteration before the wrapper was in place)
        k = i - a.warmup
        ls = [x for x in recd.losses if t_a <= x["t"] < t_b]
        dead_ls = [x for x in ls if x["dead"] and x["spurious"] is None]
        st: dict[str, Any] = {
            "step": k, "start_us": t_a * 1e6, "dur_us": (t_b - t_a) * 1e6,
            "counters": {n: c_b.get(n, 0) - c_a.get(n, 0) for n in KEYS
                         if c_b.get(n, 0) - c_a.get(n, 0)},
            "losses": dict(collections.Counter(x["cause"] for x in ls)),
            "spurious": sum(1 for x in ls if x["spurious"] is not None),
            "dead_link": len(dead_ls),
            "dead_wait_us": [round(min(x["wait"] for x in dead_ls) * 1e6, 1),
                             round(max(x["wait"] for x in dead_ls) * 1e6, 1)] if dead_ls else None,
        }
        if k >= 0 and run.traces is not None and k < len(run.traces):
            tr = run.traces[k]
            w = max(tr, key=lambda j: tr[j][1])
            wr = run.writes[w]
            mine = [x for x in ls if x["src"] == wr.src and x["dst"] == wr.dst]
            knew = recd.learnt(wr.src, fail_t) if fail_t is not None else None
            st["last"] = {"src": wr.src, "dst": wr.dst, "posted_us": (tr[w][0] - t_a) * 1e6,
                          "src_learnt_us": None if knew is None else (knew - t_a) * 1e6,
                          "arrived_us": (tr[w][1] - t_a) * 1e6,
                          "losses": [{"cause": x["cause"], "sent_us": (x["sent"] - t_a) * 1e6,
                                      "found_after_us": x["wait"] * 1e6,
                                      "rack_rtt_us": x["rack_rtt"] * 1e6,
                                      "allowance_us": x["allow"] * 1e6, "dead": x["dead"],
                                      "spurious": x["spurious"] is not None} for x in mine]}
            if a.op == "allreduce":  # a ring: the step is its critical chain's hops
                hops = run.critical_chain(k)
                med = statistics.median(h[3] for h in hops)
                st["chain_slow"] = [
                    {"src": src, "dst": dst, "hop_us": hop * 1e6, "median_us": med * 1e6,
                     "found_after_us": [round(x["wait"] * 1e6, 1) for x in ls
                                        if x["src"] == src and x["dst"] == dst]}
                    for _, src, dst, hop, _ in hops if hop > 2 * med]
        steps.append(st)
    real = [x["wait"] * 1e6 for x in recd.losses if x["dead"] and x["spurious"] is None
            and x["cause"] == "loss"]
    spur = [x["spurious"] * 1e6 for x in recd.losses if x["spurious"] is not None]
    spur_need = [(x["wait"] + x["spurious"] - x["rack_rtt"]) * 1e6 for x in recd.losses
                 if x["spurious"] is not None and x["cause"] == "loss"]
    return {"op": a.op, "seed": a.seed, "fail_at_s": fail_t, "set": a.set,
            "first_verdict_us": (None if not recd.verdicts or fail_t is None
                                 else (min(recd.verdicts)[0] - fail_t) * 1e6),
            "steps_us": [round(s * 1e6, 1) for s in run.steps], "error": run.error,
            "cpu_s": time.process_time() - t0, "per_step": steps,
            "dead_link_rack_wait_us": {"n": len(real), "min": min(real, default=None),
                                       "median": statistics.median(real) if real else None,
                                       "max": max(real, default=None)},
            "spurious": {"n": len(spur), "late_p50_us": _pct(spur, 0.5),
                         "late_p90_us": _pct(spur, 0.9), "late_max_us": max(spur, default=None),
                         "needed_allowance_p50_us": _pct(spur_need, 0.5),
                         "needed_allowance_p90_us": _pct(spur_need, 0.9),
                         "needed_allowance_max_us": max(spur_need, default=None)}}


def _print(r: dict[str, Any]) -> None:
    print(f"# {r['op']}, seed {r['seed']}, failure at {r['fail_at_s']}, set {r['set']}; "
          f"cpu {r['cpu_s']:.0f} s; error: {r['error']}")
    print("steps us", r["steps_us"])
    for st in r["per_step"]:
        print(f"step {st['step']:3d} @{st['start_us']:9.1f} {st['dur_us']:7.1f} us "
              f"losses {st['losses']} spurious {st['spurious']} dead-link {st['dead_link']} "
              f"wait {st['dead_wait_us']} {st['counters']}")
        last = st.get("last")
        if last:
            print(f"      last write h{last['src']}->h{last['dst']} posted "
                  f"{last['posted_us']:.1f} arrived {last['arrived_us']:.1f} us; its host "
                  f"first held a dead-link route failing at {last['src_learnt_us']} us")
            for x in last["losses"]:
                print(f"        {x['cause']:<7} sent {x['sent_us']:7.1f} found after "
                      f"{x['found_after_us']:6.1f} (rack_rtt {x['rack_rtt_us']:.1f}, "
                      f"allowance {x['allowance_us']:.1f}) dead={x['dead']} "
                      f"spurious={x['spurious']}")
        for h in st.get("chain_slow", []):
            print(f"      chain hop h{h['src']}->h{h['dst']} {h['hop_us']:.1f} us (median "
                  f"{h['median_us']:.2f}); its losses found after {h['found_after_us']} us")
    print("dead-link RACK waits us", r["dead_link_rack_wait_us"])
    print("first dead-link verdict, us after the failure", r["first_verdict_us"])
    print("spurious", r["spurious"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", default="alltoall", choices=("alltoall", "allreduce", "allgather"))
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--topology", help="instead of the 8-plane shape for --hosts")
    ap.add_argument("--size", default="4M")
    ap.add_argument("--iters", type=int, default=12, help="timed steps (default 12)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    ap.add_argument("--fail-at", default="2692.673us",
                    help=f"when {LINK} goes down ('none': no failure)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tuning", choices=sorted(TUNINGS), default="collective",
                    help="the protocol core's named settings, as mrc-sim collective's "
                    "(default collective; default: the host defaults)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a protocol-core HostConfig field on top of the tuning "
                    "(repeatable)")
    ap.add_argument("--json", action="store_true", help="one JSON object")
    a = ap.parse_args(argv)
    try:
        r = analyse(a)
    except SpecError as e:
        print(f"sim_coll_steps: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(r))
    else:
        _print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
