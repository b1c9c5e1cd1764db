"""mrcctl: look at and steer a running mrcd (QPs, EVs, ports, planes; deny / allow an EV;
set a QP's CC / EV profile; EV probes to a host).

Talks to mrcd over its client socket (the ``admin_*`` requests of docs/MRCD.md); whoever
may open the socket may administer every QP of that mrcd. Changes act on live QPs.
Exit status: 0 done, 1 error (one line on stderr), 2 ``probe`` saw unanswered probes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from mrcnet.api import Context
from mrcnet.api.client import default_socket_path
from mrcnet.api.errors import DaemonNotRunning
from mrcnet.cliutil import add_version, both_sides, not_running, survive_pipe
from mrcnet.errors import MrcError

__all__ = ["main"]

#: Seconds mrcctl waits for mrcd's answer to a request.
REQUEST_TIMEOUT = 10.0
#: A probe takes longer: a control-channel hello to the peer's mrcd (at most 2 s per
#: plane), the rounds (20 ms apart in mrcd, daemon/verbs.py) and up to 1 s of waiting for
#: answers.
PROBE_TIMEOUT = 30.0
PROBE_TIMEOUT_PER_ROUND = 0.05
#: Exit status of ``probe`` when some probe went unanswered (as ``mrc-fabric probe``).
EXIT_PROBES_LOST = 2


#: Columns holding a time in seconds (shown in milliseconds).
_SECONDS = {"srtt", "min_rtt"}


def ev_text(ev: int) -> str:
    """An EV as captures and the decoder show it: ``0x%08x``."""
    return f"0x{ev:08x}"


def _ev(text: str) -> int:
    """An EV on the command line: hex (``0x80001000``, as tables show it) or decimal."""
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an EV: {text!r} (e.g. 0x80001000)") from None


def _fmt(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if key == "ev" and isinstance(v, int):
        return ev_text(v)
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
                         ("ev_profile", "EV_PROFILE"), ("cc_profile", "CC_PROFILE"),
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
                                ("rx_link_down", "LINK_DOWN"),
                                ("rx_kernel_dropped", "RX_KDROP")])
    host = _table([{"counter": k, "value": v} for k, v in sorted(r["host"].items())],
                  [("counter", "HOST COUNTER"), ("value", "VALUE")])
    return f"{ports}\n\n{host}\nmrcd internal errors: {r['mrcd_internal_errors']}"


def _show_profiles(r: dict[str, Any]) -> str:
    def mark(names: list[str], default: str) -> str:
        return ", ".join(f"{n} (default)" if n == default else n for n in names)
    return (f"EV profiles: {mark(r['ev_profiles'], r['default_ev_profile'])}\n"
            f"CC profiles: {mark(r['cc_profiles'], r['default_cc_profile'])}")


def _show_ev_change(r: dict[str, Any]) -> str:
    return f"QP {r['qpn']} EV {ev_text(r['ev'])}: {r['state']}"


def _show_set_profile(r: dict[str, Any]) -> str:
    return (f"QP {r['qpn']} ({r['state']}): EV profile {r['ev_profile']} ({r['evs']} EVs), "
            f"CC profile {r['cc_profile']}")


def _show_planes(r: dict[str, Any]) -> str:
    if not r["planes"]:
        return f"no ports on {r['host']}"
    return _table(r["planes"], [
        ("plane", "PLANE"), ("ifname", "IFNAME"), ("link", "LINK"),
        ("tx_frames", "TX_FRAMES"), ("rx_frames", "RX_FRAMES"), ("tx_dropped", "TX_DROP"),
        ("qps", "QPS"), ("evs", "EVS"), ("good", "GOOD"), ("skip", "SKIP"),
        ("assumed_bad", "BAD"), ("denied", "DENIED"), ("sent", "SENT"), ("acked", "ACKED"),
        ("lost", "LOST"), ("trimmed", "TRIMMED"), ("ecn", "ECN")])


def _show_probe(r: dict[str, Any]) -> str:
    head = (f"{r['host']} -> {r['peer']}: {r['count']} EV probe(s) down each of "
            f"{len(r['paths'])} paths")
    if r["hello"] != "ok":
        head += f"\n(the hello to {r['peer']}'s mrcd failed: {r['hello']}; it may not answer)"
    table = _table(r["paths"], [
        ("plane", "PLANE"), ("path", "PATH"), ("ev", "EV"), ("sent", "SENT"),
        ("answered", "ANSWERED"), ("lost", "LOST"), ("rtt_min_us", "RTT_MIN_US"),
        ("rtt_avg_us", "RTT_AVG_US"), ("rtt_max_us", "RTT_MAX_US"), ("port", "PORT")])
    return f"{head}\n{table}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mrcctl", description="Inspect and steer a running mrcd: QPs, EVs (paths), "
        "ports, planes; deny or allow an EV and set the CC/EV profile of a live QP; send "
        "EV probes to a host. Exit status: 0 done, 1 error, 2 probe answers missing.")
    add_version(p)
    # --json and --socket go before or after the command.
    common = argparse.ArgumentParser(add_help=False)
    _common(common, argparse.SUPPRESS)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    sub.add_parser("qps", parents=[common], help="every QP: state, peer, window, counters")
    e = sub.add_parser("evs", parents=[common],
                       help="the EVs of one QP: plane, path, state, RTT, counters")
    e.add_argument("qpn", type=int, nargs="?", default=None,
                   help="the QP number (see mrcctl qps; default: the newest QP)")
    sub.add_parser("ports", parents=[common], help="per-port and host counters")
    sub.add_parser("profiles", parents=[common],
                   help="the EV and CC profiles a QP may ask for, and mrcd's defaults")
    sub.add_parser(
        "planes", parents=[common], help="per-plane summary: port link and counters, "
        "and every QP's EVs in the plane (states, sent, acked, lost, trimmed, ECN)",
        description="One row per plane (one NIC port each): the port's link and frame "
        "counters, then the EVs of every QP on this mrcd that use the plane: how many, "
        "how many GOOD / SKIP / ASSUMED_BAD (BAD) / DENIED, and their packet counters "
        "summed.")
    for name, what in (("deny", "stop sending on an EV of a live QP"),
                       ("allow", "let a QP use a denied EV again")):
        d = sub.add_parser(name, parents=[common], help=what)
        d.add_argument("qpn", type=int, help="the QP number")
        d.add_argument("ev", type=_ev, help="the EV, hex as mrcctl evs QPN shows it (or "
                       "decimal)")
    sp = sub.add_parser(
        "set-profile", parents=[common],
        help="give a live QP another CC and/or EV profile (takes effect at once)",
        description="Change the congestion control (--cc) and/or EV (--ev) profile of a "
        "QP of this mrcd, also while it moves data: a connected QP gets a new CC instance "
        "(starting from its initial window) or a new EV set at once (spray: the configured "
        "EVs over every plane; ecmp: a single EV). Only this end changes. See mrcctl "
        "profiles for the names and mrcctl qps for the result.")
    sp.add_argument("qpn", type=int, help="the QP number (see mrcctl qps)")
    sp.add_argument("--cc", metavar="NAME", help="CC profile, e.g. nscc or fixed")
    sp.add_argument("--ev", metavar="NAME", help="EV profile, e.g. spray or ecmp")
    pr = sub.add_parser(
        "probe", parents=[common],
        help="EV probes from mrcd to a host down every path; per-path answers and RTT",
        description="mrcd sends MRC EV probes (endpoint requests) to HOST down every "
        "(plane, path) it knows, COUNT rounds 20 ms apart, and reports per path: sent, "
        "answered, lost and the round-trip time (min/avg/max, microseconds, through both "
        "mrcds). No QP is needed; the peer's mrcd is told first over the control channel "
        "so that it answers. Exit status 2 when a probe went unanswered.")
    pr.add_argument("host", help="a host name of mrcd's fabric description (or [peers]), "
                    "or one of its port addresses")
    pr.add_argument("--count", "-c", type=int, default=None,
                    help="probe rounds (default: mrcd's, 5; at most 1000)")
    pr.add_argument("--plane", type=int, default=None, help="only this plane")
    both_sides(_common, p)
    return p


def _common(p: argparse.ArgumentParser, default: Any) -> None:
    """The options every command takes (before or after it)."""
    p.add_argument("--json", action="store_true", default=False if default is None
                   else default, help="print JSON, not a table (EVs as numbers)")
    p.add_argument("--socket", metavar="PATH", default=default,
                   help=f"mrcd's socket (default: $MRCD_SOCKET or {default_socket_path()})")


def _request(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The admin request (op, arguments) a command sends."""
    if args.cmd == "evs":
        return "evs", {"qpn": args.qpn}
    if args.cmd in ("deny", "allow"):
        return f"{args.cmd}_ev", {"qpn": args.qpn, "ev": args.ev}
    if args.cmd == "set-profile":
        return "set_profile", {"qpn": args.qpn, "cc_profile": args.cc, "ev_profile": args.ev}
    if args.cmd == "probe":
        return "probe", {"host": args.host, "count": args.count, "plane": args.plane}
    return args.cmd, {}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mrcctl`` command."""
    return survive_pipe(lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    from mrcnet.daemon import metrics  # `mrcctl metrics`: the rendering mrcd serves

    parser = _parser()
    metrics.add_command(parser)
    args = parser.parse_args(argv)
    if args.cmd == "metrics":
        return metrics.run_command(args)
    show = {"qps": _show_qps, "evs": _show_evs, "ports": _show_ports, "profiles": _show_profiles,
            "planes": _show_planes, "deny": _show_ev_change, "allow": _show_ev_change,
            "set-profile": _show_set_profile, "probe": _show_probe}[args.cmd]
    if args.cmd == "set-profile" and args.cc is None and args.ev is None:
        print("mrcctl: set-profile needs --cc NAME, --ev NAME or both", file=sys.stderr)
        return 1
    timeout = REQUEST_TIMEOUT
    if args.cmd == "probe":
        timeout = PROBE_TIMEOUT + (args.count or 0) * PROBE_TIMEOUT_PER_ROUND
    op, params = _request(args)
    try:
        with Context(args.socket, timeout=timeout) as ctx:
            if op == "evs" and params["qpn"] is None:
                qpns = [q["qpn"] for q in ctx.admin("qps")["qps"]]
                if not qpns:
                    print("mrcctl: no QPs on this host", file=sys.stderr)
                    return 1
                params["qpn"] = max(qpns)
            result = ctx.admin(op, **params)
    except DaemonNotRunning:
        print(f"mrcctl: {not_running(args.socket)}", file=sys.stderr)
        return 1
    except (MrcError, OSError) as e:
        print(f"mrcctl: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else show(result))
    if args.cmd == "probe" and any(p["lost"] for p in result["paths"]):
        return EXIT_PROBES_LOST
    return 0


if __name__ == "__main__":
    sys.exit(main())
