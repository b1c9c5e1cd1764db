"""mrcd's Prometheus metrics: one snapshot of its ports, planes, QPs and EVs, rendered in
the text exposition format.

The snapshot is made of the operator requests mrcctl sends (``admin_qps``,
``admin_ports``, ``admin_planes``, ``admin_evs`` per QP), so ``/metrics`` (served by
:mod:`mrcnet.daemon.metrics_http`, the requests answered inside mrcd) and ``mrcctl
metrics`` (the same requests over mrcd's socket) print the same families from the same
data. Nothing is counted per packet for it: the counters are the ones the core and the
ports keep anyway, read when someone asks.

prometheus-client is an optional extra (``pip install 'mrcnet[metrics]'``), imported
only when metrics are rendered (:func:`require`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

from mrcnet.core import EVState
from mrcnet.errors import MrcError

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["MetricsUnavailable", "Snapshot", "add_command", "render", "require",
           "run_command", "snapshot"]

#: A snapshot: the answers of the admin requests (``qps``, ``ports``, ``planes``) and
#: ``evs``: QPN -> its EVs.
Snapshot = dict[str, Any]
#: ``admin(op, params)``: an operator request's answer (raises MrcError on refusal).
Admin = Callable[[str, dict[str, Any]], dict[str, Any]]

#: Port counters (mrcnet.io.PortStats) -> help text; metric mrc_port_<name>_total.
PORT_COUNTERS: Final = {
    "rx_frames": "MRC frames received on the port (after the BPF filter)",
    "tx_frames": "frames the kernel accepted for sending on the port",
    "tx_backlogged": "frames that waited for socket space",
    "tx_dropped": "frames dropped because the port's send backlog was full",
    "rx_batches": "receive calls that returned frames",
    "tx_batches": "send calls",
    "rx_link_down": "receive calls that found the link down",
    "rx_kernel_dropped": "frames the kernel dropped: mrcd fell behind (PACKET_STATISTICS)",
}
#: Well-known per-QP counters of the core -> (metric name, help). Every core counter of
#: the QP is also in mrc_qp_counter_total{counter=...}.
QP_COUNTERS: Final = {
    "tx_data": ("mrc_qp_tx_packets", "data packets the QP sent (first sends and resends)"),
    "rx_data": ("mrc_qp_rx_packets", "data packets the QP received"),
    "tx_retransmit": ("mrc_qp_retransmissions", "data packets the QP sent again"),
    "tx_sack": ("mrc_qp_sacks_sent", "SACKs the QP sent"),
    "tx_nack": ("mrc_qp_nacks_sent", "NACKs the QP sent"),
    "rx_trimmed": ("mrc_qp_trimmed_received", "trimmed packets the QP received"),
    "rx_trimmed_lasthop": ("mrc_qp_trimmed_lasthop_received",
                           "packets the QP received trimmed at the last hop (DSCP)"),
    "tx_nack_lasthop": ("mrc_qp_nacks_lasthop_sent", "NACKs TRIMMED_LASTHOP the QP sent"),
    "rto_rounds": ("mrc_qp_timeouts", "retransmission timeouts of the QP"),
}
#: Per-EV counters summed per (QP, plane): metric mrc_qp_ev_<name>_total.
EV_COUNTERS: Final = {
    "sent": "packets sent on the QP's EVs in the plane",
    "acked": "packets acknowledged on the QP's EVs in the plane",
    "lost": "packets lost on the QP's EVs in the plane",
    "trimmed": "trimmed packets on the QP's EVs in the plane",
    "ecn": "ECN-marked packets on the QP's EVs in the plane",
    "probes_sent": "EV probes sent on the QP's EVs in the plane",
}
EV_STATES: Final = tuple(s.value for s in EVState)


def _sentence(doc: str) -> str:
    return doc[0].upper() + doc[1:] + "."


class MetricsUnavailable(MrcError):
    """prometheus-client is not installed."""


def require() -> None:
    """Raise :class:`MetricsUnavailable` (saying how to install it) unless
    prometheus-client can be imported."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise MetricsUnavailable(
            "metrics need the Python package prometheus-client, which is not installed: "
            "pip install 'mrcnet[metrics]' (or remove metrics_listen from the "
            "configuration)") from None


def snapshot(admin: Admin) -> Snapshot:
    """Everything the metrics show, by the operator requests ``admin`` answers. A QP that
    goes between the requests is left out."""
    qps = admin("qps", {})
    snap: Snapshot = {"host": qps["host"], "qps": qps["qps"], "ports": admin("ports", {}),
                      "planes": admin("planes", {})["planes"], "evs": {}}
    for q in qps["qps"]:
        try:
            snap["evs"][q["qpn"]] = admin("evs", {"qpn": q["qpn"]})["evs"]
        except MrcError:
            continue
    return snap


def _families(snap: Snapshot) -> Iterator[Metric]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    host = str(snap["host"])
    planes = snap["planes"]
    plane_of = {p["ifname"]: str(p["plane"]) for p in planes}
    ports = snap["ports"]

    pl = ["host", "port", "plane"]
    for key, doc in PORT_COUNTERS.items():
        f = CounterMetricFamily(f"mrc_port_{key}", _sentence(doc), labels=pl)
        for p in ports["ports"]:
            f.add_metric([host, p["ifname"], plane_of.get(p["ifname"], "")], p.get(key, 0))
        yield f
    up = GaugeMetricFamily("mrc_port_up", "1 if the port's link is up (its plane in use).",
                           labels=pl)
    qps_in = GaugeMetricFamily("mrc_plane_qps", "QPs with EVs in the plane.",
                               labels=["host", "plane"])
    for p in planes:
        up.add_metric([host, p["ifname"], str(p["plane"])], 1 if p["link"] == "up" else 0)
        qps_in.add_metric([host, str(p["plane"])], p["qps"])
    yield up
    yield qps_in

    hc = CounterMetricFamily("mrc_host_counter", "The core's host counters by name (frames, "
                             "drops by reason, probes...; mrcctl ports).",
                             labels=["host", "counter"])
    for name, value in sorted(ports["host"].items()):
        hc.add_metric([host, name], value)
    yield hc
    errors = CounterMetricFamily("mrc_mrcd_internal_errors", "Internal errors mrcd caught "
                                 "(a bug if not 0; see its log).", labels=["host"])
    errors.add_metric([host], ports["mrcd_internal_errors"])
    yield errors

    ql = ["host", "qp"]
    info = GaugeMetricFamily("mrc_qp_info", "One per QP: its state, peer and profiles.",
                             labels=["host", "qp", "state", "peer", "peer_qp", "pid",
                                     "ev_profile", "cc_profile"])
    by_state = GaugeMetricFamily("mrc_qps", "QPs by state.", labels=["host", "state"])
    gauges = {
        "cwnd": GaugeMetricFamily("mrc_qp_cwnd_bytes", "Congestion window.", labels=ql),
        "srtt": GaugeMetricFamily("mrc_qp_srtt_seconds", "Smoothed RTT.", labels=ql),
        "inflight": GaugeMetricFamily("mrc_qp_inflight_packets", "Packets in flight.",
                                      labels=ql),
        "inflight_bytes": GaugeMetricFamily("mrc_qp_inflight_bytes", "Bytes in flight.",
                                            labels=ql),
    }
    named = {k: CounterMetricFamily(n, _sentence(doc), labels=ql)
             for k, (n, doc) in QP_COUNTERS.items()}
    every = CounterMetricFamily("mrc_qp_counter", "Every core counter of the QP, by name.",
                                labels=["host", "qp", "counter"])
    states: dict[str, int] = {}
    for q in snap["qps"]:
        qpn = str(q["qpn"])
        states[q["state"]] = states.get(q["state"], 0) + 1
        info.add_metric([host, qpn, q["state"], q.get("peer") or "",
                         "" if q.get("dest_qp_num") is None else str(q["dest_qp_num"]),
                         str(q.get("owner_pid", "")), q.get("ev_profile", ""),
                         q.get("cc_profile", "")], 1)
        for key, fam in gauges.items():
            v = q.get(key)
            if v is not None:
                fam.add_metric([host, qpn], v)
        counters = q.get("counters", {})
        for key, counter in named.items():
            counter.add_metric([host, qpn], counters.get(key, 0))
        for name, value in sorted(counters.items()):
            every.add_metric([host, qpn, name], value)
    for state, n in sorted(states.items()):
        by_state.add_metric([host, state], n)
    yield info
    yield by_state
    yield from gauges.values()
    yield from named.values()
    yield every

    evs = GaugeMetricFamily("mrc_evs", "EVs (paths) of the QP in the plane, by state "
                            "(sum by plane and state for the plane's picture).",
                            labels=["host", "qp", "plane", "state"])
    sums = {k: CounterMetricFamily(f"mrc_qp_ev_{k}", _sentence(doc),
                                   labels=["host", "qp", "plane"])
            for k, doc in EV_COUNTERS.items()}
    for qpn, ev_list in sorted(snap["evs"].items()):
        per_plane: dict[int, dict[str, int]] = {}
        for e in ev_list:
            row = per_plane.setdefault(int(e["plane"]), dict.fromkeys(
                (*EV_STATES, *EV_COUNTERS), 0))
            row[str(e["state"])] = row.get(str(e["state"]), 0) + 1
            for k in EV_COUNTERS:
                row[k] += int(e.get(k) or 0)
        for plane, row in sorted(per_plane.items()):
            labels = [host, str(qpn), str(plane)]
            for state in EV_STATES:
                evs.add_metric([*labels, state], row[state])
            for k, ev_sum in sums.items():
                ev_sum.add_metric(labels, row[k])
    yield evs
    yield from sums.values()


class _Fixed:
    """A collector of one snapshot (made when the scrape came)."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        return _families(self.snap)


def render(snap: Snapshot) -> bytes:
    """The snapshot in Prometheus' text exposition format (version 0.0.4)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(snap))  # type: ignore[arg-type]
    return bytes(generate_latest(registry))


# --- mrcctl metrics ----------------------------------------------------------------------

def add_command(parser: argparse.ArgumentParser) -> None:
    """Add ``metrics`` to mrcctl's subcommands."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    m = sub.add_parser(
        "metrics", help="mrcd's Prometheus metrics in the text format (node_exporter's "
        "textfile collector)",
        description="Print what mrcd's /metrics serves (ports, planes, QPs, EV states; "
        "docs/DEPLOY.md), read over mrcd's socket: for node_exporter's textfile "
        "collector, write it to a file and rename it into the collector's directory.")
    m.add_argument("--socket", metavar="PATH", default=argparse.SUPPRESS,
                   help="mrcd's socket (default: $MRCD_SOCKET)")


def run_command(args: argparse.Namespace) -> int:
    """``mrcctl metrics``: the snapshot by admin requests, printed; 1 on an error."""
    import sys

    from mrcnet.api import Context

    try:
        require()
        with Context(getattr(args, "socket", None), timeout=10.0) as ctx:
            snap = snapshot(lambda op, params: ctx.admin(op, **params))
    except (MrcError, OSError) as e:
        print(f"mrcctl: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(render(snap).decode())
    return 0
