"""PNG plots of runs: mrc-sim (goodput over time, FCT CDF) and the demo (goodput and
per-path share through a link failure).

matplotlib is an optional extra (``pip install 'mrcnet[plot]'``), imported only when a
plot is asked for; without it :func:`require_matplotlib` raises :class:`PlotUnavailable`
with that line. Plots are drawn with the non-interactive Agg backend (no display needed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PlotUnavailable", "demo_plot", "require_matplotlib", "sim_plot"]

INSTALL_HINT = "pip install 'mrcnet[plot]' (or: pip install matplotlib)"


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def require_matplotlib() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, or :class:`PlotUnavailable`."""
    try:
        import matplotlib
    except ImportError as e:
        raise PlotUnavailable(f"plots need matplotlib: {INSTALL_HINT}") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def sim_plot(res: Mapping[str, Any], path: str | Path) -> Path:
    """mrc-sim's result (``RunResult.as_dict()``) as a PNG: aggregate goodput over time
    (from ``--sample``) and the CDF of flow completion times."""
    plt = require_matplotlib()
    fig, (ax_g, ax_c) = plt.subplots(1, 2, figsize=(11, 4))
    try:
        series = res.get("goodput") or []
        if series:
            ts = [0.0] + [1e3 * g["t"] for g in series]
            gb = [series[0]["bps"] / 1e9] + [g["bps"] / 1e9 for g in series]
            ax_g.step(ts, gb, where="pre", color="tab:blue")
            ax_g.set_ylim(bottom=0)
        else:
            ax_g.text(0.5, 0.5, "no samples: run with --sample TIME", ha="center",
                      va="center", transform=ax_g.transAxes)
        ax_g.set_xlabel("time (ms)")
        ax_g.set_ylabel("goodput (Gb/s)")
        ax_g.set_title("aggregate goodput")
        fcts = sorted(1e3 * f["fct"] for f in res.get("flows", []) if f.get("fct") is not None)
        n_all = len(res.get("flows", []))
        if fcts:
            ys = [(i + 1) / n_all for i in range(len(fcts))]
            ax_c.step([0.0, *fcts], [0.0, *ys], where="post", color="tab:green")
            ax_c.set_ylim(0, 1.02)
        else:
            ax_c.text(0.5, 0.5, "no flow finished", ha="center", va="center",
                      transform=ax_c.transAxes)
        ax_c.set_xlabel("flow completion time (ms)")
        ax_c.set_ylabel("fraction of flows")
        ax_c.set_title(f"FCT CDF ({len(fcts)}/{n_all} flows finished)")
        topo = str(res.get("topology", ""))
        title = [f"mrc-sim {res.get('transport', '')}: "
                 + (topo if len(topo) <= 110 else topo[:107] + "...")]
        failures = [str(f) for f in res.get("failures", [])]
        if failures:
            title.append("failures: " + "; ".join(failures))
        fig.suptitle("\n".join(title), fontsize=8)
        return _save(fig, path)
    finally:
        plt.close(fig)


def demo_plot(series: Sequence[Mapping[str, Any]], path: str | Path, *,
              down_at: float | None, up_at: float | None, failed: str,
              link: str) -> Path:
    """The demo's transfer as a PNG: goodput per interval and each (plane, spine) path's
    share of the data packets, the failure's window shaded.

    ``series``: mrc-perf interval records in order, each ``{"t": seconds since the start,
    "bytes": completed so far, "sent": {"p0s1": data packets sent so far, ...}}``;
    ``down_at``/``up_at``: when the link went down and came back (same clock as ``t``).
    """
    plt = require_matplotlib()
    fig, (ax_g, ax_s) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    try:
        ts, gbps = [], []
        paths = sorted({k for r in series for k in r.get("sent", {})})
        shares: dict[str, list[float]] = {k: [] for k in paths}
        prev: Mapping[str, Any] = {"t": 0.0, "bytes": 0, "sent": {}}
        for r in series:
            dt = r["t"] - prev["t"]
            if dt <= 0:
                continue
            ts.append(r["t"])
            gbps.append(8 * (r["bytes"] - prev["bytes"]) / dt / 1e9)
            sent = {k: r["sent"].get(k, 0) - prev["sent"].get(k, 0) for k in paths}
            total = sum(sent.values()) or 1
            for k in paths:
                shares[k].append(100 * sent[k] / total)
            prev = r
        ax_g.step(ts, gbps, where="pre", color="tab:blue")
        ax_g.set_ylabel("goodput (Gb/s)")
        ax_g.set_ylim(bottom=0)
        ax_g.set_title(f"mrc-perf WRITEs through a failure of link {link}")
        if paths:
            ax_s.stackplot(ts, [shares[k] for k in paths],
                           labels=[f"path ({k[1]},{k[3:]})" + (" failed" if k == failed else "")
                                   for k in paths], step="pre", alpha=0.85)
            ax_s.legend(loc="lower left", fontsize=8, ncol=len(paths))
        ax_s.set_ylim(0, 100)
        ax_s.set_ylabel("share of data packets (%)")
        ax_s.set_xlabel("time (s)")
        for ax in (ax_g, ax_s):
            if down_at is not None:
                ax.axvspan(down_at, up_at if up_at is not None else (ts[-1] if ts else down_at),
                           color="tab:red", alpha=0.12, lw=0)
                ax.axvline(down_at, color="tab:red", lw=1)
            if up_at is not None:
                ax.axvline(up_at, color="tab:green", lw=1)
        if down_at is not None:
            ax_g.annotate(f"{link} down", xy=(down_at, 0), xytext=(3, 3),
                          textcoords="offset points", color="tab:red", fontsize=8)
        if up_at is not None:
            ax_g.annotate("up again", xy=(up_at, 0), xytext=(3, 3),
                          textcoords="offset points", color="tab:green", fontsize=8)
        return _save(fig, path)
    finally:
        plt.close(fig)
