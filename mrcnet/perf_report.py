"""What ``mrc-perf`` prints (:mod:`mrcnet.perf`): the bandwidth and latency tables,
progress lines and JSON records, and ``--plot``'s picture."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from typing import Any, TextIO

from mrcnet.perf_proto import Latency, Progress, Result

__all__ = ["PlotUnavailable", "bw_header", "bw_row", "check_plot", "lat_table", "plot_run",
           "progress_printer", "tcp_line"]


def lat_table(rows: Sequence[Latency]) -> list[str]:
    lines = [f"{'#bytes':>10} {'#iterations':>12} {'t_min[us]':>10} {'t_typical[us]':>14} "
             f"{'t_avg[us]':>10} {'t_stdev[us]':>12} {'99%[us]':>10} {'99.9%[us]':>10} "
             f"{'t_max[us]':>10}"]
    for r in rows:
        lines.append(f"{r.size:>10} {r.iters:>12} {r.t_min:>10.1f} {r.t_typical:>14.1f} "
                     f"{r.t_avg:>10.1f} {r.t_stdev:>12.1f} {r.t_99:>10.1f} "
                     f"{r.t_999:>10.1f} {r.t_max:>10.1f}")
    return lines


def bw_header(bidir: bool = False) -> str:
    back = f" {'BW back[Gb/s]':>14}" if bidir else ""
    return (f"{'#bytes':>10} {'#iterations':>12} {'BW peak[Gb/s]':>14} "
            f"{'BW average[Gb/s]':>17}{back} {'MsgRate[Mpps]':>14} {'errors':>7} "
            f"{'verified':>9} {'rtx':>7} {'trims':>7} {'EV chg':>7}")


def bw_row(r: Result) -> str:
    verified = {True: "yes", False: "NO", None: "-"}[r.verified]
    back = f" {r.gbps_back:>14.3f}" if r.gbps_back is not None else ""
    line = (f"{r.size:>10} {r.iters:>12} {r.gbps_peak:>14.3f} {r.gbps:>17.3f}{back} "
            f"{r.mpps:>14.6f} {r.errors:>7} {verified:>9} {r.retransmissions:>7} "
            f"{r.trims:>7} {r.ev_changes:>7}")
    return line + (f"   (partial: {r.error})" if r.error else "")


def tcp_line(r: Result, results: Sequence[Result]) -> str:
    best = max((x.gbps for x in results if x.size > 0), default=0.0)
    return (f"kernel TCP, same hosts, same run: {r.gbps:.3f} Gb/s; best MRC size / TCP = "
            f"{best / r.gbps:.2f}")


def progress_printer(stream: TextIO | None, json_lines: bool,
                     keep: list[dict[str, Any]] | None = None) -> Progress:
    """Progress records: a human line on ``stream`` (overwritten in place on a
    terminal; None: no line), with ``json_lines`` also the record as a JSON line on
    stdout (``"type": "interval"``), and kept in ``keep`` when given."""
    tty = stream is not None and stream.isatty()

    def show(rec: dict[str, Any]) -> None:
        if keep is not None:
            keep.append(rec)
        if stream is not None:
            line = (f"[{rec['t']:6.1f} s] size {rec['size']}: "
                    f"{rec['bytes'] / (1 << 20):,.0f} MiB, {rec['gbps']:.3f} Gb/s, rtx "
                    f"{rec['retransmissions']}, trims {rec['trims']}, EV changes "
                    f"{rec['ev_changes']}")
            print(("\r" + line + "\x1b[K") if tty else line, end="" if tty else "\n",
                  file=stream, flush=True)
        if json_lines:
            print(json.dumps({"type": "interval", **rec}), flush=True)
    return show


class PlotUnavailable(Exception):
    """matplotlib is not installed."""


def check_plot() -> None:
    """Raise :class:`PlotUnavailable` unless matplotlib can be imported."""
    if importlib.util.find_spec("matplotlib") is None:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'mrcnet[plot]'")


def plot_run(path: str, intervals: Sequence[dict[str, Any]],
             events: Sequence[dict[str, Any]], title: str) -> None:
    """A PNG of the run: goodput per interval (top), each path's share of the packets
    sent per interval (bottom, stacked), EV failures as red lines and recoveries as
    green dotted ones on both."""
    check_plot()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min([r["clock"] for r in intervals] + [e["clock"] for e in events], default=0.0)
    ts = [r["clock"] - t0 for r in intervals]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    top.plot(ts, [r["gbps"] for r in intervals], marker=".", color="tab:blue")
    top.set_ylabel("goodput [Gb/s]")
    top.set_title(title)
    names = sorted({k for r in intervals for k in r.get("paths", {})})
    shares: dict[str, list[float]] = {k: [] for k in names}
    prev: dict[str, int] = {}
    for r in intervals:
        sent = {k: int(p["sent"]) for k, p in r.get("paths", {}).items()}
        delta = {k: max(0, sent.get(k, 0) - prev.get(k, 0)) for k in names}
        total = sum(delta.values())
        for k in names:
            shares[k].append(delta[k] / total if total else 0.0)
        prev = sent
    if names:
        bottom.stackplot(ts, [shares[k] for k in names], labels=names, step="pre")
        bottom.legend(loc="upper left", fontsize="small", ncol=min(4, len(names)))
    bottom.set_ylabel("share of packets per path")
    bottom.set_xlabel("seconds")
    bottom.set_ylim(0, 1)
    # One line per kind and pixel column (a long run under failures has 10^5 EV changes;
    # a line each took matplotlib minutes), drawn as one collection per kind and axis.
    span = max(ts + [e["clock"] - t0 for e in events], default=0.0) or 1.0
    res = span / 900
    cols: dict[bool, set[float]] = {True: set(), False: set()}
    for e in events:
        cols[e.get("new") != "GOOD"].add(round((e["clock"] - t0) / res) * res)
    marked: set[str] = set()
    for bad, xs in cols.items():
        if not xs:
            continue
        label = "EV failed" if bad else "EV back"
        for ax in (top, bottom):
            ax.vlines(sorted(xs), 0, 1, transform=ax.get_xaxis_transform(),
                      colors="tab:red" if bad else "tab:green",
                      linestyles="-" if bad else ":", linewidth=0.8, alpha=0.6,
                      label=label if ax is top else None)
        marked.add(label)
    if marked:
        top.legend(loc="lower left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)

