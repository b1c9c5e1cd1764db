"""``mrc-fabric``: build, break, observe and remove MRC test fabrics (network namespaces).

Every subcommand prints data and one-line confirmations to stdout (``--json`` where it
prints data), progress to stderr, and on failure one line ``mrc-fabric: error: ...``:
exit 1, or 2 when privileges are missing (checked before anything is touched) or
``down --all`` was not confirmed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from mrcnet.fabric.errors import FabricError, PermissionProblem, SpecError

EPILOG = """\
examples:
  mrc-fabric up leafspine:planes=2,spines=4,leaves=2,hosts=2,rate=1gbit,mtu=9000 --name lab
  mrc-fabric status lab --watch                  # table with rates, every 2 s
  mrc-fabric exec lab h0 -- ip -6 addr
  mrc-fabric exec lab h0 -- mrcctl qps           # MRCD_SOCKET = h0's mrcd (up --mrcd)
  mrc-fabric link lab L0.0 S0.1 blackhole        # one way: L0.0 -> S0.1
  mrc-fabric link lab L0.0 S0.1 loss 1.5 --both
  mrc-fabric link lab L0.0 S0.1 flap --period 500
  mrc-fabric link lab L0.0 S0.1 clear
  mrc-fabric node lab S1.0 blackhole
  mrc-fabric port lab h1 0 down
  mrc-fabric probe lab h0 h3                     # frames through every plane/spine
  mrc-fabric capture lab h0:p0 -w h0.pcapng -c 100
  mrc-fabric down lab
  mrc-fabric down --all --yes                    # every recorded fabric, without asking
spec: the same grammar as mrc-sim (every key: mrc-sim specs; defaults per tool and what
  each emulates: docs/TOPOLOGY.md). Keys mrc-fabric cannot emulate (delay, skew) are
  recorded and reported by up and status. Switches are L<plane>.<i> / S<plane>.<i>
  (p0l0 / p0s1 are read the same).
state: $MRC_FABRIC_STATE_DIR (default /run/mrcnet/fabrics)
"""


class Refused(FabricError):
    """The command was not confirmed (``down --all`` without ``--yes`` and no terminal)."""


#: Commands that work without privileges (they only read the state directory).
UNPRIVILEGED = {"list", "describe"}


def _need_root(command: str) -> None:
    """Refuse before touching anything when the caller cannot manage namespaces."""
    from mrcnet.fabric.nsutil import check_privileges

    try:
        check_privileges()
    except PermissionProblem as e:
        raise PermissionProblem(
            f"run as root: mrc-fabric {command} needs CAP_NET_ADMIN and CAP_SYS_ADMIN "
            "(network namespaces)") from e


def _emit(data: Any) -> None:
    print(json.dumps(data, indent=1))


def _done(line: str) -> None:
    """The one-line confirmation of a command that changed something."""
    print(line, flush=True)


def _progress(line: str) -> None:
    print(f"mrc-fabric: {line}", file=sys.stderr, flush=True)


def _spec_lines(options: dict[str, Any]) -> list[str]:
    """The effective spec and what it records without emulating (docs/TOPOLOGY.md)."""
    out = [f"effective spec: {options['effective']}"] if options.get("effective") else []
    return out + [f"note: {n}" for n in options.get("not_emulated", [])]


def cmd_up(a: argparse.Namespace) -> int:
    from mrcnet.fabric.fabric import Fabric

    fab = Fabric.up(a.spec, name=a.name, progress=None if a.quiet else _progress)
    if not a.quiet:
        for line in _spec_lines(fab.description.options):
            _progress(line)
    pids: dict[str, int] = {}
    if a.mrcd:
        from mrcnet.fabric.mrcd import mrcd_dir, start_mrcds

        if not a.quiet:
            _progress(f"starting mrcd on {len(fab.description.hosts)} hosts")
        try:
            pids = start_mrcds(fab)
        except BaseException:
            fab.down()
            raise
        if not a.quiet:
            _progress(f"mrcd running on every host: sockets in {mrcd_dir(fab.name)}")
    if a.json:
        _emit({"name": fab.name, "description": str(fab.description_path),
               **({"mrcd": pids} if a.mrcd else {})})
    else:
        print(fab.description_path)
    return 0


def _confirm_all(names: list[str], yes: bool) -> bool:
    """List what ``down --all`` removes and ask (``--yes`` skips the question)."""
    from mrcnet.fabric.fabric import list_fabrics
    from mrcnet.fabric.mrcd import mrcd_status

    rows = {r["name"]: r for r in list_fabrics()}
    print(f"down --all removes {len(names)} fabric{'s' if len(names) != 1 else ''} "
          f"recorded in {_state_root()}:", file=sys.stderr)
    for n in names:
        r = rows.get(n, {})
        m = mrcd_status(n)
        mrcds = f", mrcd on {len(m)} hosts" if m else ""
        print(f"  {n:<12} {r.get('status', '?')}, netns {r.get('netns', '?')}{mrcds}",
              file=sys.stderr)
    if yes:
        return True
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise Refused(f"down --all would remove {', '.join(names)}: nothing removed; "
                      "confirm with --yes (there is no terminal to ask on)")
    print("remove them? [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = sys.stdin.readline().strip().lower()
    except KeyboardInterrupt:
        answer = ""
    if answer in ("y", "yes"):
        return True
    print("mrc-fabric: nothing removed", file=sys.stderr)
    return False


def _state_root() -> str:
    from mrcnet.fabric.state import state_root

    return str(state_root())


def cmd_down(a: argparse.Namespace) -> int:
    from mrcnet.fabric.fabric import down
    from mrcnet.fabric.mrcd import stop_mrcds

    if a.all:
        if a.name:
            raise FabricError("give a NAME or --all, not both")
        from mrcnet.fabric.state import list_names

        names = list_names()
        if not names:
            _done(f"no fabrics recorded in {_state_root()}: nothing to remove")
            return 0
        if not _confirm_all(names, a.yes):
            return 1
        for name in names:
            stopped = stop_mrcds(name)
            ns = down(name, force=True)
            _done(f"removed {name} ({len(ns)} netns"
                  + (f", stopped mrcd {', '.join(map(str, stopped))})" if stopped else ")"))
        return 0
    if not a.name:
        raise FabricError("give the NAME of the fabric to remove (or --all)")
    from mrcnet.fabric.state import StateRecord

    StateRecord.load(a.name)  # "no fabric named ..." before anything is stopped
    stopped = stop_mrcds(a.name)  # by PID, before their namespaces go
    if stopped:
        _progress(f"stopped mrcd {', '.join(map(str, stopped))}")
    ns = down(a.name, force=a.force)
    _done(f"removed {a.name} ({len(ns)} netns)")
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    from mrcnet.fabric.fabric import list_fabrics

    rows = list_fabrics()
    if a.json:
        _emit(rows)
        return 0
    if not rows:
        print("no fabrics")
        return 0
    print(f"{'NAME':<12} {'STATUS':<34} {'NETNS':>7} {'FAILURES':>8}  DESCRIPTION")
    for r in rows:
        print(
            f"{r['name']:<12} {r['status']:<34} {r.get('netns', '-'):>7} "
            f"{r.get('failures', '-'):>8}  {r.get('description', '')}"
        )
    return 0


def _rates(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]],
           seconds: float) -> dict[str, tuple[float, float]]:
    """Per direction (packets/s, bits/s) between two counter snapshots."""
    out = {}
    for k, b in after.items():
        a = before.get(k)
        if a is not None and seconds > 0:
            out[k] = ((b["pkts"] - a["pkts"]) / seconds,
                      8 * (b["bytes"] - a["bytes"]) / seconds)
    return out


def cmd_status(a: argparse.Namespace) -> int:
    from mrcnet.fabric.fabric import Fabric
    from mrcnet.fabric.mrcd import mrcd_status
    from mrcnet.fabric.show import status_table

    fab = Fabric.load(a.name)
    spec_lines = _spec_lines(fab.description.options)
    interval = a.watch if a.watch is not None else a.interval
    if a.json and a.watch is None:
        st = fab.status()
        st["mrcd"] = mrcd_status(a.name)
        _emit(st)
        return 0
    clear = a.watch is not None and sys.stdout.isatty()
    before, t_before = fab.counters(), time.monotonic()
    try:
        while True:
            if interval > 0:
                time.sleep(max(0.0, t_before + interval - time.monotonic()))
            after, t_after = fab.counters(), time.monotonic()
            st = fab.status()
            st["mrcd"] = mrcd_status(a.name)
            if a.json:
                st["rates"] = {k: {"pps": round(p, 1), "bps": round(b)} for k, (p, b)
                               in _rates(before, after, t_after - t_before).items()}
                print(json.dumps(st), flush=True)
            else:
                text = status_table(st, spec_lines,
                                    _rates(before, after, t_after - t_before) if interval > 0
                                    else None, t_after - t_before if interval > 0 else None)
                if clear:
                    sys.stdout.write("\x1b[H\x1b[2J")
                    text += f"\n\nevery {interval:g} s, Ctrl-C to stop"
                print(text, flush=True)
            if a.watch is None:
                return 0
            before, t_before = after, t_after
    except KeyboardInterrupt:
        return 0


def cmd_describe(a: argparse.Namespace) -> int:
    from mrcnet.fabric.fabric import Fabric

    fab = Fabric.load(a.name)
    if a.path:
        print(fab.description_path)
    else:
        sys.stdout.write(fab.description.to_json())
    return 0


def cmd_exec(a: argparse.Namespace) -> int:
    from mrcnet.fabric.fabric import Fabric
    from mrcnet.fabric.mrcd import exec_env
    from mrcnet.fabric.nsutil import set_uts_hostname

    argv = list(a.cmd)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise FabricError("give a command after --, e.g. mrc-fabric exec lab h0 -- ip -6 addr")
    fab = Fabric.load(a.name)
    ns = fab.netns(a.node)
    env = exec_env(fab, a.node)
    set_uts_hostname(ns)  # `hostname` inside says lab-h0, not the machine's name
    sys.stdout.flush()
    os.execvpe("ip", ["ip", "netns", "exec", ns, *argv], env)
    return 127  # pragma: no cover - execvp does not return


def cmd_capture(a: argparse.Namespace) -> int:
    from mrcnet.fabric.capture import capture
    from mrcnet.fabric.fabric import Fabric

    fab = Fabric.load(a.name)
    got = capture(fab, a.target, a.write, fmt=a.format, count=a.count, seconds=a.seconds,
                  snaplen=a.snaplen, bpf=a.filter, say=None if a.quiet else _progress)
    _done(f"wrote {got.frames} frame{'s' if got.frames != 1 else ''} to {got.path} "
          f"({got.fmt}, {got.seconds:.1f} s on {','.join(got.interfaces)})")
    return 0


def cmd_link(a: argparse.Namespace) -> int:
    from mrcnet.fabric.fabric import Fabric

    ctl = Fabric.load(a.name).link(a.a, a.b)
    act = a.action
    fwd, back = f"{ctl.a}->{ctl.b}", f"{ctl.b}->{ctl.a}"
    dirs = f"{fwd} and {back}" if a.both else fwd
    what = f"link {ctl.link_.name}"
    if act == "loss":
        if a.value is None:
            raise FabricError("loss needs a percentage, e.g. link lab L0.0 S0.1 loss 1.5")
        try:
            pct = float(a.value)
        except ValueError as e:
            raise FabricError(f"loss percentage {a.value!r} is not a number") from e
        ctl.loss(pct, both=a.both)
        _done(f"{what}: {pct:g}% random loss {dirs}" if pct else f"{what}: no loss {dirs}")
    elif a.value is not None:
        raise FabricError(f"{act} takes no value")
    elif act == "down":
        ctl.down()
        _done(f"{what}: down (both ends admin down, like a pulled cable)")
    elif act == "up":
        ctl.up()
        _done(f"{what}: up (addresses, neighbours and routes re-installed)")
    elif act == "blackhole":
        ctl.blackhole(both=a.both)
        _done(f"{what}: blackhole {dirs} (the link stays up)")
    elif act == "flap":
        if a.period is None:
            raise FabricError("flap needs --period MS")
        pid = ctl.flap(a.period)
        _done(f"{what}: flapping, down {a.period} ms / up {a.period} ms (pid {pid}; "
              f"stop with: mrc-fabric link {a.name} {a.a} {a.b} clear)")
    elif act == "clear":
        ctl.clear()
        _done(f"{what}: cleared (up, no blackhole, no loss, no flap)")
    return 0


def cmd_probe(a: argparse.Namespace) -> int:
    from mrcnet.fabric import probe
    from mrcnet.fabric.fabric import Fabric

    d = Fabric.load(a.name).description
    planes = [a.plane] if a.plane is not None else [p.index for p in d.planes]
    rows = []
    for pl in planes:
        spines = (
            [a.spine] if a.spine is not None else [s.index for s in d.planes[pl].spines]
        )
        for sp in spines:
            got = probe.deliver(d, a.src, a.dst, pl, sp, count=a.count, size=a.size)
            rows.append({"plane": pl, "spine": sp, "sent": a.count, "received": got,
                         "container": str(d.path_container(a.src, a.dst, pl, sp))})
    if a.json:
        _emit(rows)
    else:
        print(f"{'PLANE':>5} {'SPINE':>5} {'RECV':>9}  PATH ({d.srv6})")
        for r in rows:
            print(f"{r['plane']:>5} {r['spine']:>5} {r['received']:>4}/{r['sent']:<4}  "
                  f"{r['container']}")
    return 0 if all(r["received"] == r["sent"] for r in rows) else 2


def cmd_node(a: argparse.Namespace) -> int:
    from mrcnet.fabric.fabric import Fabric

    ctl = Fabric.load(a.name).node(a.switch)
    if a.action == "blackhole":
        ctl.blackhole()
        _done(f"switch {ctl.switch}: blackholed (every egress drops; links stay up)")
    else:
        ctl.restore()
        _done(f"switch {ctl.switch}: forwarding again (link failures set separately stay)")
    return 0


def cmd_port(a: argparse.Namespace) -> int:
    from mrcnet.fabric.fabric import Fabric

    ctl = Fabric.load(a.name).port(a.host, a.plane)
    if a.action == "down":
        ctl.down()
        _done(f"port {ctl.host} plane {ctl.plane} ({ctl.ifname}): down")
    else:
        ctl.up()
        _done(f"port {ctl.host} plane {ctl.plane} ({ctl.ifname}): up (address and routes "
              "re-installed)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of ``mrc-fabric``."""
    p = argparse.ArgumentParser(
        prog="mrc-fabric",
        description="Multi-plane leaf-spine SRv6 (uSID) fabrics in network namespaces: "
        "Linux kernel switches with static routes, trimming and ECN in a tc BPF program, "
        "failure injection.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=sys.modules["mrcnet"].version_text())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("up", help="build a fabric and write its description file")
    s.add_argument("spec", metavar="SPEC|FILE",
                   help="leafspine:planes=2,spines=4,leaves=2,hosts=2,rate=1gbit,mtu=9000 "
                   "or a .toml file with the same keys")
    s.add_argument("--name", required=True, help="fabric name: 1-10 chars [a-z0-9]")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    s.add_argument("--mrcd", action="store_true",
                   help="also start mrcd on every host (configs, logs and sockets under the "
                   "fabric's state dir, mrcd/<host>.*; `down` stops them by PID)")
    s.set_defaults(fn=cmd_up)

    s = sub.add_parser("down", help="remove a fabric (exactly what it made)")
    s.add_argument("name", nargs="?", metavar="NAME")
    s.add_argument("--all", action="store_true",
                   help="remove every recorded fabric (lists them and asks first)")
    s.add_argument("-y", "--yes", action="store_true",
                   help="with --all: do not ask (needed when there is no terminal)")
    s.add_argument("--force", action="store_true",
                   help="remove even while its builder still runs")
    s.set_defaults(fn=cmd_down)

    s = sub.add_parser("list", help="list recorded fabrics")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("status", help="per-link counters and rates, netns names, failures")
    s.add_argument("name", metavar="NAME")
    s.add_argument("--json", action="store_true",
                   help="the whole status as JSON (with --watch: one line per refresh, "
                   "with rates)")
    s.add_argument("--watch", "-w", nargs="?", type=float, const=2.0, default=None,
                   metavar="SECS", help="refresh every SECS (default 2) until Ctrl-C")
    s.add_argument("--interval", type=float, default=0.5, metavar="SECS",
                   help="measure the rates over SECS before printing (default 0.5; "
                   "0 = no rates)")
    s.set_defaults(fn=cmd_status)

    s = sub.add_parser("describe", help="print the fabric description (JSON) mrcd reads")
    s.add_argument("name", metavar="NAME")
    s.add_argument("--path", action="store_true", help="print only its path")
    s.set_defaults(fn=cmd_describe)

    s = sub.add_parser(
        "exec", help="run a command inside a node's netns",
        description="Runs CMD inside the node's network namespace, with hostname = the "
        "netns name, MRC_FABRIC, MRC_NODE, and for a host MRC_HOST plus MRCD_SOCKET when "
        "the fabric runs an mrcd on it (up --mrcd): mrcctl and mrc-perf find that mrcd.")
    s.add_argument("name", metavar="NAME")
    s.add_argument("node", metavar="HOST", help="host (or switch) name, e.g. h0, L0.1")
    s.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD...")
    s.set_defaults(fn=cmd_exec)

    s = sub.add_parser(
        "capture", help="record a node's frames to a pcap or pcapng file",
        description="Runs dumpcap (or tcpdump, for one interface to a classic pcap) inside "
        "the node's netns until COUNT frames, --seconds, Ctrl-C or SIGTERM, stops it by "
        "PID and says how many frames the file holds. Read the file with "
        "'python -m mrcnet.wire decode FILE', tshark or Wireshark.")
    s.add_argument("name", metavar="NAME")
    s.add_argument("target", metavar="NODE[:IFACE]",
                   help="h0 (every port of the host: pcapng), h0:p1, L0.0:s1 ...")
    s.add_argument("-w", "--write", required=True, metavar="FILE",
                   help="output file; .pcap or .pcapng says the format")
    s.add_argument("-F", "--format", choices=["pcap", "pcapng"],
                   help="file format whatever the suffix")
    s.add_argument("-c", "--count", type=int, metavar="COUNT", help="stop after COUNT frames")
    s.add_argument("--seconds", type=float, metavar="S", help="stop after S seconds")
    s.add_argument("-s", "--snaplen", type=int, metavar="BYTES",
                   help="keep at most BYTES of each frame (default: whole frames)")
    s.add_argument("-f", "--filter", metavar="BPF",
                   help="capture filter in pcap syntax, e.g. 'udp port 4791 or ip6[6] = 41'")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    s.set_defaults(fn=cmd_capture)

    s = sub.add_parser("link", help="fail a link: down|up|blackhole|loss PCT|flap|clear",
                       description="Blackhole and loss act on the direction A -> B "
                       "(both with --both); down, up, flap and clear act on the cable.")
    s.add_argument("name", metavar="NAME")
    s.add_argument("a", metavar="A", help="node name, e.g. L0.0 or h0")
    s.add_argument("b", metavar="B", help="node name, e.g. S0.1 or L0.0")
    s.add_argument("action", choices=["down", "up", "blackhole", "loss", "flap", "clear"])
    s.add_argument("value", nargs="?", metavar="PCT", help="loss percentage (0-100)")
    s.add_argument("--period", type=int, metavar="MS",
                   help="flap: time between toggles (down for MS, up for MS)")
    s.add_argument("--both", action="store_true", help="blackhole/loss in both directions")
    s.set_defaults(fn=cmd_link)

    s = sub.add_parser(
        "probe", help="send test frames along paths and count arrivals (exit 2 on loss)",
        description="Sends MRC-shaped frames (scapy, raw socket) from SRC's port to DST "
        "through each (plane, spine) and counts what reaches DST's packet socket.")
    s.add_argument("name", metavar="NAME")
    s.add_argument("src", metavar="SRC", help="source host, e.g. h0")
    s.add_argument("dst", metavar="DST", help="destination host, e.g. h3")
    s.add_argument("--plane", type=int, help="only this plane (default: all)")
    s.add_argument("--spine", type=int, help="only this spine index (default: all)")
    s.add_argument("--count", type=int, default=10, help="frames per path (default 10)")
    s.add_argument("--size", type=int, default=600, help="frame bytes (default 600)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_probe)

    s = sub.add_parser("node", help="blackhole a switch (links stay up) or restore it")
    s.add_argument("name", metavar="NAME")
    s.add_argument("switch", metavar="SWITCH", help="e.g. S0.1")
    s.add_argument("action", choices=["blackhole", "restore"])
    s.set_defaults(fn=cmd_node)

    s = sub.add_parser("port", help="take a host NIC port down or up")
    s.add_argument("name", metavar="NAME")
    s.add_argument("host", metavar="HOST")
    s.add_argument("plane", metavar="PLANE", type=int)
    s.add_argument("action", choices=["down", "up"])
    s.set_defaults(fn=cmd_port)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mrc-fabric`` console script."""
    args = build_parser().parse_args(argv)
    try:
        if args.command not in UNPRIVILEGED:
            _need_root(args.command)
        rc: int = args.fn(args)
        sys.stdout.flush()
        return rc
    except (PermissionProblem, Refused) as e:
        print(f"mrc-fabric: error: {e}", file=sys.stderr)
        return 2
    except (FabricError, SpecError) as e:
        print(f"mrc-fabric: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # Output piped into head(1) and friends: not an error worth a message. Point
        # stdout at /dev/null so the interpreter's final flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("mrc-fabric: interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        print(f"mrc-fabric: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
