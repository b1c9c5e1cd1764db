"""mrcctl: look at and steer a running mrcd (QPs, EVs, ports; deny / allow an EV).

Talks to mrcd over its client socket (the ``admin_*`` requests of docs/MRCD.md); whoever
may open the socket may administer every QP of that mrcd. Changes act on live QPs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from mrcnet.api import Context
from mrcnet.api.client import default_socket_path
from mrcnet.errors import MrcError

__all__ = ["main"]


#: Columns holding a time in seconds (shown in milliseconds).
_SECONDS = {"srtt", "min_rtt"}


def _fmt(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v * 1e3:.3f}ms" if key in _SECONDS else f"{v:.0f}"
    return str(v)


def _table(rows: list[dict[str, Any]], cols: Sequence[tuple[str, str]]) -> str:
    """Rows as an aligned text table; ``cols`` are (key, heading)."""
    cells = [[h for _, h in cols]] + [[_fmt(k, r.get(k)) for k, _ in cols] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(cols))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                     for line in cells)


def _show_qps(r: dict[str, Any]) -> str:
    rows = []
    for q in r["qps"]:
        c = q.get("counters", {})
        rows.append({**q, "tx_data": c.get("tx_data", 0), "rx_data": c.get("rx_data", 0),
                     "retx": c.get("tx_retransmit", 0)})
    if not rows:
        return f"no QPs on {r['host']}"
    return _table(rows, [("qpn", "QPN"), ("state", "STATE"), ("peer", "PEER"),
                         ("dest_qp_num", "PEER_QPN"), ("owner_pid", "PID"),
                         ("cwnd", "CWND"), ("srtt", "SRTT"), ("inflight", "INFLIGHT"),
                         ("tx_data", "TX_DATA"), ("rx_data", "RX_DATA"), ("retx", "RETX"),
                         ("error", "ERROR")])


def _show_evs(r: dict[str, Any]) -> str:
    if not r["evs"]:
        return f"QP {r['qpn']} has no EVs (not connected yet?)"
    return _table(r["evs"], [("ev", "EV"), ("plane", "PLANE"), ("path", "PATH"),
                             ("state", "STATE"), ("srtt", "SRTT"), ("min_rtt", "MIN_RTT"),
                             ("sent", "SENT"), ("acked", "ACKED"), ("lost", "LOST"),
                             ("trimmed", "TRIMMED"), ("ecn", "ECN"),
                             ("probes_sent", "PROBES")])


def _show_ports(r: dict[str, Any]) -> str:
    ports = _table(r["ports"], [("port", "PORT"), ("ifname", "IFNAME"),
                                ("tx_frames", "TX_FRAMES"), ("rx_frames", "RX_FRAMES"),
                                ("tx_backlogged", "TX_BACKLOG"), ("tx_dropped", "TX_DROP"),
                                ("rx_link_down", "LINK_DOWN")])
    host = _table([{"counter": k, "value": v} for k, v in sorted(r["host"].items())],
                  [("counter", "HOST COUNTER"), ("value", "VALUE")])
    return f"{ports}\n\n{host}\nmrcd internal errors: {r['mrcd_internal_errors']}"


def _show_profiles(r: dict[str, Any]) -> str:
    def mark(names: list[str], default: str) -> str:
        return ", ".join(f"{n} (default)" if n == default else n for n in names)
    return (f"EV profiles: {mark(r['ev_profiles'], r['default_ev_profile'])}\n"
            f"CC profiles: {mark(r['cc_profiles'], r['default_cc_profile'])}")


def _show_ev_change(r: dict[str, Any]) -> str:
    return f"QP {r['qpn']} EV {r['ev']}: {r['state']}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mrcctl", description="Inspect and steer a running mrcd: QPs, EVs (paths), "
        "ports; deny or allow an EV on a live QP.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON, not a table")
    common.add_argument("--socket", metavar="PATH", default=None,
                        help=f"mrcd's socket (default: $MRCD_SOCKET or "
                        f"{default_socket_path()})")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    sub.add_parser("qps", parents=[common], help="every QP: state, peer, window, counters")
    e = sub.add_parser("evs", parents=[common],
                       help="the EVs of one QP: plane, path, state, RTT, counters")
    e.add_argument("qpn", type=int, help="the QP number (see mrcctl qps)")
    sub.add_parser("ports", parents=[common], help="per-port and host counters")
    sub.add_parser("profiles", parents=[common],
                   help="the EV and CC profiles a QP may ask for, and mrcd's defaults")
    for name, what in (("deny", "stop sending on an EV of a live QP"),
                       ("allow", "let a QP use a denied EV again")):
        d = sub.add_parser(name, parents=[common], help=what)
        d.add_argument("qpn", type=int, help="the QP number")
        d.add_argument("ev", type=int, help="the EV (see mrcctl evs QPN)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    request: tuple[str, dict[str, Any]] = {
        "qps": ("qps", {}),
        "evs": ("evs", {"qpn": getattr(args, "qpn", None)}),
        "ports": ("ports", {}),
        "profiles": ("profiles", {}),
        "deny": ("deny_ev", {"qpn": getattr(args, "qpn", None), "ev": getattr(args, "ev", None)}),
        "allow": ("allow_ev", {"qpn": getattr(args, "qpn", None),
                               "ev": getattr(args, "ev", None)}),
    }[args.cmd]
    show = {"qps": _show_qps, "evs": _show_evs, "ports": _show_ports, "profiles": _show_profiles,
            "deny": _show_ev_change, "allow": _show_ev_change}[args.cmd]
    try:
        with Context(args.socket) as ctx:
            result = ctx.admin(request[0], **request[1])
    except (MrcError, OSError) as e:
        print(f"mrcctl: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else show(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
