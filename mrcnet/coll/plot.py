"""``mrc-coll --plot``: step time over the run, failure events marked (matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mrcnet.coll.report import Row
from mrcnet.plots import _save, require_matplotlib

__all__ = ["step_plot"]


def step_plot(rows: Sequence[Row], events: Sequence[dict[str, Any]], t0: float | None,
              path: str | Path, *, title: str = "") -> Path:
    """Each step's time (the slowest rank's) at the time it started, one series per
    size; a vertical line per failure event. Returns the path written."""
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    zero = t0 if t0 is not None else min((r.step_clock[0] for r in rows if r.step_clock),
                                         default=0.0)
    for r in rows:
        xs = [c - zero for c in r.step_clock]
        ax.plot(xs, [s * 1e3 for s in r.steps_s], marker="o", markersize=3,
                label=f"{r.size} B: P50 {r.p50_s * 1e3:.0f} ms, P100 {r.p100_s * 1e3:.0f} ms")
    for i, e in enumerate(events):
        ax.axvline(e["clock"] - zero, color="red", alpha=0.5, linestyle="--",
                   label="failure events" if i == 0 else None)
        ax.annotate(e["what"], (e["clock"] - zero, 0), rotation=90, fontsize=6,
                    xytext=(2, 2), textcoords="offset points", color="red")
    ax.set_xlabel("time since the first timed step (s)")
    ax.set_ylabel("step time (ms, slowest rank)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    out = _save(fig, path)
    plt.close(fig)
    return out
