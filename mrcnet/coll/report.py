"""nccl-tests-style results: a row per size (time, algbw, busbw) plus the step-time
percentiles that matter for a collective in lockstep (P50, P99, P100) and the worst rank.

Definitions (nccl-tests, docs/PERFORMANCE.md there): ``time`` is the mean step time;
``algbw = size / time``; ``busbw = algbw x factor`` with factor ``2(n-1)/n`` for
all-reduce and ``(n-1)/n`` for all-gather and all-to-all, so busbw is comparable with
the hosts' link rate whatever n is. Bandwidths are in Gbit/s (nccl-tests prints GB/s).
A step's time is the longest of the ranks' times for that iteration (a collective in
lockstep lasts as long as its slowest rank); P-percentiles are nearest-rank over steps.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from mrcnet.coll.algorithms import bus_factor

__all__ = ["Row", "format_rows", "percentile", "row_from_ranks", "stall_note"]


def percentile(xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (0 < q <= 100)."""
    s = sorted(xs)
    if not s:
        return math.nan
    return s[max(1, math.ceil(q / 100 * len(s))) - 1]


@dataclass
class Row:
    """One size's result."""

    op: str
    size: int
    ranks: int
    steps_s: list[float]  #: every timed step (the slowest rank's time), seconds
    step_clock: list[float]  #: when each step started (earliest rank), monotonic
    worst_rank: list[int]  #: the slowest rank of each step
    verified: bool
    time_s: float = 0.0
    algbw_gbps: float = 0.0
    busbw_gbps: float = 0.0
    p50_s: float = 0.0
    p99_s: float = 0.0
    p100_s: float = 0.0
    worst: int = -1  #: the rank of the P100 step
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.steps_s:
            self.time_s = statistics.fmean(self.steps_s)
            self.algbw_gbps = self.size * 8 / self.time_s / 1e9
            self.busbw_gbps = self.algbw_gbps * bus_factor(self.op, self.ranks)
            self.p50_s = percentile(self.steps_s, 50)
            self.p99_s = percentile(self.steps_s, 99)
            self.p100_s = max(self.steps_s)
            self.worst = self.worst_rank[self.steps_s.index(self.p100_s)]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (the fields of ``--json``)."""
        d = asdict(self)
        d.update(d.pop("extra"))
        return d


def row_from_ranks(op: str, size: int, per_rank: dict[int, list[list[float]]],
                   verified: bool) -> Row:
    """Combine the ranks' ``[[start clock, seconds], ...]`` of one size into a row."""
    ranks = sorted(per_rank)
    n_steps = min((len(per_rank[r]) for r in ranks), default=0)
    steps, clocks, worst = [], [], []
    for i in range(n_steps):
        durs = [(per_rank[r][i][1], r) for r in ranks]
        d, r = max(durs)
        steps.append(d)
        worst.append(r)
        clocks.append(min(per_rank[r][i][0] for r in ranks))
    return Row(op, size, len(ranks), steps, clocks, worst, verified)


def stall_note(row: Row) -> str | None:
    """Plain words for a step far slower than the others (a stall), or None."""
    if len(row.steps_s) < 2 or row.p100_s <= 1.5 * row.p50_s or row.p100_s - row.p50_s < 0.25:
        return None
    i = row.steps_s.index(row.p100_s)
    return (f"stalled: step {i} took {row.p100_s:.3f} s against a median of "
            f"{row.p50_s:.3f} s ({row.p100_s - row.p50_s:.3f} s lost, slowest rank "
            f"{row.worst_rank[i]})")


def format_rows(rows: Sequence[Row]) -> str:
    """The nccl-tests-like table."""
    head = (f"{'size(B)':>12} {'op':>10} {'time(us)':>11} {'algbw(Gb/s)':>12} "
            f"{'busbw(Gb/s)':>12} {'p50(us)':>11} {'p99(us)':>11} {'p100(us)':>11} "
            f"{'worst':>6} {'steps':>6}  check")
    out = [head]
    for r in rows:
        out.append(f"{r.size:>12} {r.op:>10} {r.time_s * 1e6:>11.0f} {r.algbw_gbps:>12.4f} "
                   f"{r.busbw_gbps:>12.4f} {r.p50_s * 1e6:>11.0f} {r.p99_s * 1e6:>11.0f} "
                   f"{r.p100_s * 1e6:>11.0f} {r.worst:>6} {len(r.steps_s):>6}  "
                   f"{'ok' if r.verified else 'FAILED'}")
    return "\n".join(out)
