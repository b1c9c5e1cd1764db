"""``mrc-fabric``: build, break, observe and remove MRC test fabrics (network namespaces).

Every subcommand prints data to stdout (``--json`` where it prints data), progress to
stderr, and on failure one line ``mrc-fabric: error: ...`` with a non-zero exit status.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from mrcnet.fabric.errors import FabricError, SpecError

EPILOG = """\
examples:
  mrc-fabric up leafspine:planes=2,spines=4,leaves=2,hosts=2,rate=1gbit,mtu=9000 --name lab
  mrc-fabric status lab
  mrc-fabric exec lab h0 -- ip -6 addr
  mrc-fabric link lab L0.0 S0.1 blackhole        # one way: L0.0 -> S0.1
  mrc-fabric link lab L0.0 S0.1 loss 1.5 --both
  mrc-fabric link lab L0.0 S0.1 flap --period 500
  mrc-fabric link lab L0.0 S0.1 clear
  mrc-fabric node lab S1.0 blackhole
  mrc-fabric port lab h1 0 down
  mrc-fabric probe lab h0 h3                     # frames through every plane/spine
  mrc-fabric down lab
spec: the same grammar as mrc-sim (every key: mrc-sim specs; defaults per tool and what
  each emulates: docs/TOPOLOGY.md). Keys mrc-fabric cannot emulate (delay, skew) are
  recorded and reported by up and status. Switches are L<plane>.<i> / S<plane>.<i>
  (p0l0 / p0s1 are read the same).
state: $MRC_FABRIC_STATE_DIR (default /run/mrcnet/fabrics)
"""


def _emit(data: Any) -> None:
    print(json.dumps(data, indent=1))


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


def cmd_down(a: argparse.Namespace) -> int:
    from mrcnet.fabric.fabric import down, down_all

    if a.all:
        if a.name:
            raise FabricError("give a NAME or --all, not both")
        from mrcnet.fabric.mrcd import stop_mrcds
        from mrcnet.fabric.state import list_names

        for name in list_names():
            stop_mrcds(name)
        done = down_all()
        for name, ns in done.items():
            _progress(f"removed {name} ({len(ns)} netns)")
        return 0
    if not a.name:
        raise FabricError("give the NAME of the fabric to remove (or --all)")
    from mrcnet.fabric.mrcd import stop_mrcds

    stopped = stop_mrcds(a.name)  # by PID, before their namespaces go
    if stopped:
        _progress(f"stopped mrcd {', '.join(map(str, stopped))}")
    ns = down(a.name, force=a.force)
    _progress(f"removed {a.name} ({len(ns)} netns)")
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


def _flags(d: dict[str, Any]) -> str:
    out = []
    if d.get("oper") not in ("up", "unknown"):
        out.append(str(d.get("oper")))
    if d.get("blackhole"):
        out.append("blackhole")
    if d.get("loss_pct"):
        out.append(f"loss {d['loss_pct']:g}%")
    if "error" in d:
        out.append("error")
    return ",".join(out)


def cmd_status(a: argparse.Namespace) -> int:
    from mrcnet.fabric.fabric import Fabric
    from mrcnet.fabric.mrcd import mrcd_status

    st = Fabric.load(a.name).status()
    st["mrcd"] = mrcd_status(a.name)
    if a.json:
        _emit(st)
        return 0
    print(f"fabric {st['name']} ({st['status']}), srv6={st['srv6']}, block {st['usid_block']}")
    print(f"description: {st['description']}")
    for line in _spec_lines(Fabric.load(a.name).description.options):
        print(line)
    print(f"\n{'NODE':<6} {'ROLE':<6} {'USID':<7} NETNS")
    for n in st["nodes"]:
        extra = ""
        if n.get("blackhole"):
            extra = "  BLACKHOLE"
        if n["role"] == "host":
            extra = f"  mrc frames dropped after tap: {n['mrc_ingress_dropped']}"
        print(f"{n['name']:<6} {n['role']:<6} {n['usid']:#06x} {n['netns']}{extra}")
    print(
        f"\n{'LINK DIRECTION':<16} {'PKTS':>10} {'BYTES':>13} {'DROPS':>8} {'TRIMS':>8} "
        f"{'CE':>8}  STATE"
    )
    for ln in st["links"]:
        for dname, d in ln["directions"].items():
            print(
                f"{dname:<16} {d.get('pkts', 0):>10} {d.get('bytes', 0):>13} "
                f"{d.get('drops', 0):>8} {d.get('trims', 0):>8} {d.get('ce', 0):>8}  {_flags(d)}"
            )
    if st["failures"]:
        print("\nfailures:")
        for k, v in st["failures"].items():
            print(f"  {k}: {v}")
    for p in st["processes"]:
        print(f"process {p['pid']} ({p['what']}): {'running' if p['alive'] else 'gone'}")
    if st["mrcd"]:
        print(f"\n{'HOST':<6} {'MRCD PID':>9}  STATE    SOCKET")
        for host, m in st["mrcd"].items():
            print(f"{host:<6} {m['pid']:>9}  {'running' if m['running'] else 'GONE':<8} "
                  f"{m['socket']}")
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

    fab = Fabric.load(a.name)
    argv = list(a.cmd)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise FabricError("give a command after --, e.g. mrc-fabric exec lab h0 -- ip -6 addr")
    ns = fab.netns(a.node)
    os.execvp("ip", ["ip", "netns", "exec", ns, *argv])
    return 127  # pragma: no cover - execvp does not return


def cmd_link(a: argparse.Namespace) -> int:
    from mrcnet.fabric.fabric import Fabric

    ctl = Fabric.load(a.name).link(a.a, a.b)
    act = a.action
    if act == "loss":
        if a.value is None:
            raise FabricError("loss needs a percentage, e.g. link lab L0.0 S0.1 loss 1.5")
        try:
            pct = float(a.value)
        except ValueError as e:
            raise FabricError(f"loss percentage {a.value!r} is not a number") from e
        ctl.loss(pct, both=a.both)
    elif a.value is not None:
        raise FabricError(f"{act} takes no value")
    elif act == "down":
        ctl.down()
    elif act == "up":
        ctl.up()
    elif act == "blackhole":
        ctl.blackhole(both=a.both)
    elif act == "flap":
        if a.period is None:
            raise FabricError("flap needs --period MS")
        pid = ctl.flap(a.period)
        _progress(f"flapping {a.a}-{a.b} every {a.period} ms (pid {pid})")
    elif act == "clear":
        ctl.clear()
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
    else:
        ctl.restore()
    return 0


def cmd_port(a: argparse.Namespace) -> int:
    from mrcnet.fabric.fabric import Fabric

    ctl = Fabric.load(a.name).port(a.host, a.plane)
    if a.action == "down":
        ctl.down()
    else:
        ctl.up()
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
    s.add_argument("--all", action="store_true", help="remove every recorded fabric")
    s.add_argument("--force", action="store_true",
                   help="remove even while its builder still runs")
    s.set_defaults(fn=cmd_down)

    s = sub.add_parser("list", help="list recorded fabrics")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("status", help="per-link counters, netns names, failures")
    s.add_argument("name", metavar="NAME")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_status)

    s = sub.add_parser("describe", help="print the fabric description (JSON) mrcd reads")
    s.add_argument("name", metavar="NAME")
    s.add_argument("--path", action="store_true", help="print only its path")
    s.set_defaults(fn=cmd_describe)

    s = sub.add_parser("exec", help="run a command inside a node's netns")
    s.add_argument("name", metavar="NAME")
    s.add_argument("node", metavar="HOST", help="host (or switch) name, e.g. h0, L0.1")
    s.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD...")
    s.set_defaults(fn=cmd_exec)

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
        rc: int = args.fn(args)
        return rc
    except (FabricError, SpecError) as e:
        print(f"mrc-fabric: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # Output piped into head(1) and friends: not an error worth a message.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("mrc-fabric: interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        print(f"mrc-fabric: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
