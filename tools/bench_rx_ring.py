#!/usr/bin/env python3
"""Who pays for a receive ring on a netns fabric: the raw sender against two sinks.

    .venv/bin/python tools/bench_rx_ring.py [--rounds 3] [--seconds 3] [--json]

On tools/bench_goodput.py's fabric (one unshaped 2-plane, 2-spine leaf-spine), h0 ->
h1, ``mrc-perf raw-send`` against, alternately:

- **recvmmsg**: ``mrc-perf raw-sink`` (mrcd's way: packet sockets read with recvmmsg,
  the kernel copying each frame out in the reader's own syscall);
- **ring**: the same frames counted from a ``PACKET_RX_RING`` (TPACKET_V2) ring per
  port, read in place (this script's ``--ring-sink`` mode, run in h1's namespace): the
  kernel copies each frame into the ring when it reaches the socket.

On a single-host fabric the frames reach h1's socket inside the sender's ``sendmmsg``
(the fabric's forwarding runs in that syscall, up to the receiving socket), so a ring
moves the receive copy onto the sender. Prints, per round and as medians, goodput and
each side's CPU per frame that arrived (the sender's from its rusage: system time
holds the forwarding; start-up excluded on both sides).

Everything started is stopped by PID; the fabric is removed even on error.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import resource
import secrets
import select
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_goodput as bg  # (the fabric and the tools, as that bench runs them)

# <linux/if_packet.h>
SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_VERSION = 10
PACKET_IGNORE_OUTGOING = 23
TPACKET_V2 = 1
TP_STATUS_USER = 1
ETH_P_ALL = 3
#: Ring geometry: frames of 10 KiB (a 9014-byte frame behind the TPACKET_V2 header and
#: its sockaddr_ll), four to a block, 1024 in all (10 MiB, as the 8 MiB socket buffer).
FRAME = 10240
PER_BLOCK = 4
BLOCKS = 256
#: Frames shorter than this are not the sender's (neighbour discovery and the like).
MIN_LEN = 8000


def ring_sink(ifnames: list[str], idle: float = 1.0) -> dict[str, Any]:
    """Count the frames arriving on ``ifnames`` through one RX ring each, from the first
    until ``idle`` seconds pass without one; returns raw-sink's JSON fields."""
    nframes = PER_BLOCK * BLOCKS
    socks, rings = [], []
    for ifn in ifnames:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        s.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
        s.setsockopt(SOL_PACKET, PACKET_RX_RING,
                     struct.pack("IIII", FRAME * PER_BLOCK, BLOCKS, FRAME, nframes))
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        rings.append([mmap.mmap(s.fileno(), FRAME * nframes), 0])
        s.bind((ifn, ETH_P_ALL))
        socks.append(s)
    print(f"ring sink: listening on {', '.join(ifnames)}", file=sys.stderr, flush=True)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    poll = select.poll()
    for s in socks:
        poll.register(s, select.POLLIN)
    frames = nbytes = 0
    start = last = 0.0
    while True:
        got = 0
        for r in rings:
            ring, i = r
            while True:
                status, length = struct.unpack_from("II", ring, i * FRAME)
                if not status & TP_STATUS_USER:
                    break
                if length >= MIN_LEN:
                    got += 1
                    nbytes += length
                struct.pack_into("I", ring, i * FRAME, 0)  # back to the kernel
                i = (i + 1) % nframes
            r[1] = i
        now = time.monotonic()
        if got:
            start = start or now
            frames += got
            last = now
        elif frames and now - last > idle:
            break
        else:
            poll.poll(100)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"frames": frames, "bytes": nbytes, "seconds": max(last - start, 1e-9),
            "transfer_cpu_user": ru.ru_utime - ru0.ru_utime,
            "transfer_cpu_system": ru.ru_stime - ru0.ru_stime}


def one_round(fab: Any, kind: str, seconds: float) -> dict[str, float]:
    """raw-send h0 -> h1 for ``seconds`` against the ``kind`` sink; per frame arrived."""
    desc = str(fab.description_path)
    if kind == "recvmmsg":
        cmd = [bg.PERF, "raw-sink", "--fabric", desc, "--host", "h1", "--json"]
    else:
        ifs = [p.ifname for p in fab.description.host("h1").ports]
        cmd = [sys.executable, os.path.abspath(__file__), "--ring-sink", *ifs]
    sink = subprocess.Popen([*bg._ns(fab, "h1"), *cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert sink.stderr is not None
        sink.stderr.readline()  # listening
        send = subprocess.run([*bg._ns(fab, "h0"), bg.PERF, "raw-send", "--fabric", desc,
                               "--host", "h0", "h1", "--seconds", str(seconds), "--json"],
                              capture_output=True, text=True, timeout=seconds + 60, check=True)
        out, _ = sink.communicate(timeout=60)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait(5)
    r, s = json.loads(out), json.loads(send.stdout)
    n = max(1, r["frames"])
    return {"gbps": r["bytes"] * 8 / r["seconds"] / 1e9, "frames": r["frames"],
            "sent": s["frames"],
            "send_user_us": s["transfer_cpu_user"] / n * 1e6,
            "send_sys_us": s["transfer_cpu_system"] / n * 1e6,
            "sink_us": (r["transfer_cpu_user"] + r["transfer_cpu_system"]) / n * 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="raw-send's seconds")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--prefix", default="mf", help="fabric name prefix (as bench_goodput)")
    ap.add_argument("--ring-sink", nargs="+", metavar="IFNAME", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ring_sink:
        print(json.dumps(ring_sink(args.ring_sink)))
        return 0
    if os.geteuid() != 0:
        print("bench_rx_ring: needs root (network namespaces, packet sockets)",
              file=sys.stderr)
        return 1
    from mrcnet.fabric.fabric import Fabric

    rows: dict[str, list[dict[str, float]]] = {"recvmmsg": [], "ring": []}
    with tempfile.TemporaryDirectory(prefix="mfbench") as td:
        os.environ["MRC_FABRIC_STATE_DIR"] = str(Path(td) / "fabrics")
        with Fabric.up(bg.DEFAULT_SPEC, name=args.prefix + secrets.token_hex(3)) as fab:
            for i in range(args.rounds):
                order = ("recvmmsg", "ring") if i % 2 == 0 else ("ring", "recvmmsg")
                for kind in order:
                    r = one_round(fab, kind, args.seconds)
                    rows[kind].append(r)
                    print(f"round {i + 1} {kind:8}: {r['gbps']:5.2f} Gb/s, sender "
                          f"{r['send_user_us']:.2f} user + {r['send_sys_us']:.2f} system "
                          f"us/frame, sink {r['sink_us']:.2f} us/frame", file=sys.stderr,
                          flush=True)
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"median of {args.rounds} rounds, per frame that arrived:")
    print(f"{'sink':9} {'Gb/s':>6} {'sender user us':>15} {'sender sys us':>14} "
          f"{'sink us':>8}")
    for kind, rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs)
               for k in ("gbps", "send_user_us", "send_sys_us", "sink_us")}
        print(f"{kind:9} {med['gbps']:6.2f} {med['send_user_us']:15.2f} "
              f"{med['send_sys_us']:14.2f} {med['sink_us']:8.2f}")
    ring = statistics.median(r["send_sys_us"] for r in rows["ring"])
    plain = statistics.median(r["send_sys_us"] for r in rows["recvmmsg"])
    print(f"sender system CPU per frame, ring / recvmmsg: {ring / plain:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
