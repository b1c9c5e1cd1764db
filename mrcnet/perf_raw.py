"""``mrc-perf raw-sink`` / ``raw-send``: the ceiling under MRC, MRC-shaped frames through
the packet sockets and the network on every path, no protocol and no mrcd (the frames
and the loops are :mod:`mrcnet.io.bench`; the rest of mrc-perf is :mod:`mrcnet.perf`).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import resource
import sys

from mrcnet.daemon.paths import LocalPort
from mrcnet.errors import MrcError
from mrcnet.io import IOSetupError, PacketPort
from mrcnet.io.bench import raw_send, raw_sink, routes_frames
from mrcnet.wire import Route, mac_to_bytes

__all__ = ["raw_main"]


def _raw_ports(args: argparse.Namespace) -> tuple[list[PacketPort], list[LocalPort]]:
    from mrcnet.fabric.describe import load

    if args.fabric:
        if not args.host:
            raise IOSetupError("--fabric needs --host (this host's name)")
        me = load(args.fabric).host(args.host)
        names = [(p.ifname, p.plane, p.address) for p in me.ports]
    else:
        if not args.ifname:
            raise IOSetupError("give --ifname (repeatable) or --fabric and --host")
        names = [(n, i, getattr(args, "src_ip", None) or "::") for i, n in
                 enumerate(args.ifname)]
    ports = [PacketPort(n) for n, _, _ in names]
    local = [LocalPort(i, plane, n, p.mac, ipaddress.IPv6Address(addr).packed)
             for i, ((n, plane, addr), p) in enumerate(zip(names, ports, strict=True))]
    return ports, local


def raw_main(args: argparse.Namespace) -> int:
    from mrcnet.daemon.paths import FabricPaths
    from mrcnet.fabric.describe import load

    try:
        ports, local = _raw_ports(args)
    except MrcError as e:
        print(f"mrc-perf: {e}", file=sys.stderr)
        return 1
    ru0 = resource.getrusage(resource.RUSAGE_SELF)  # (the transfer's CPU: from here)
    try:
        if args.mode == "raw-sink":
            print(f"mrc-perf raw-sink: listening on {', '.join(p.ifname for p in ports)}",
                  file=sys.stderr, flush=True)
            try:
                r = raw_sink(ports)
            except TimeoutError as e:
                print(f"mrc-perf: {e}", file=sys.stderr)
                return 1
        else:
            if args.fabric:
                if not args.peer:
                    print("mrc-perf: raw-send --fabric needs the destination host",
                          file=sys.stderr)
                    return 1
                paths = FabricPaths(load(args.fabric), args.host, local)
                frames = [routes_frames(paths.routes(args.peer, lp.plane), args.size)
                          for lp in local]
            else:
                if not (args.dst_mac and args.src_ip and args.dst_ip):
                    print("mrc-perf: raw-send needs --dst-mac, --src-ip and --dst-ip "
                          "(or --fabric)", file=sys.stderr)
                    return 1
                route = Route(local[0].mac, mac_to_bytes(args.dst_mac),
                              ipaddress.IPv6Address(args.src_ip).packed,
                              ipaddress.IPv6Address(args.dst_ip).packed)
                frames = [routes_frames([route], args.size) for _ in local]
            r = raw_send(ports, frames, args.seconds)
    finally:
        for p in ports:
            p.close()
    what = "received" if args.mode == "raw-sink" else "sent"
    if args.json:
        ru = resource.getrusage(resource.RUSAGE_SELF)  # (start-up included)
        print(json.dumps({"frames": r.frames, "bytes": r.nbytes, "seconds": r.seconds,
                          "kpps": r.kpps, "gbps": r.gbps, "trimmed": r.trimmed,
                          "cpu_user": ru.ru_utime, "cpu_system": ru.ru_stime,
                          # without the start-up (imports, ports opened)
                          "transfer_cpu_user": ru.ru_utime - ru0.ru_utime,
                          "transfer_cpu_system": ru.ru_stime - ru0.ru_stime}))
    else:
        trims = f" ({r.trimmed} trimmed by switches)" if r.trimmed else ""
        print(f"raw {what}: {r.frames} frames{trims} in {r.seconds:.2f} s: "
              f"{r.kpps:.1f} kframes/s, {r.gbps:.3f} Gb/s")
    return 0
