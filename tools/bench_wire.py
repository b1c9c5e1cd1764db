#!/usr/bin/env python3
"""Wire benchmark: frames/s to build and to parse MRC data frames, Python vs C, side by side.

Every implementation is measured in the same run, in interleaved rounds (A B C A B C ...),
and the best round of each is kept, so machine noise hits all of them alike and the
ratios mean something even when the absolute numbers drift (2 shared vCPUs here).

    build   py-ref       mrcnet.wire.build_data (the reference builder)
            py-template  mrcnet.wire.template.DataTemplate.patch into a reused buffer
            c-template   mrcnet.wire.template.CTemplate.patch (one C call) into a reused buffer
    parse   py-ref       mrcnet.wire.parse_frame, pure-Python checksum and ICRC
            c-checksum   the same parse with the checksum verified in C
            c-parse      mrcnet.wire.parsed.FrameParser (C mrc_parse: the whole parse, ICRC and
                         checksum verified, into a reused flat record; the core's path)
    udp6 checksum / icrc: the kernels alone, Python vs C

With ``--io`` (root), it also compares packet I/O on a veth pair in a private netns: one
sendmmsg/recvmmsg per 64 frames (CBatchIO, "mmsg") against one send()/recvfrom() per
frame (PyBatchIO, "per-frame"); send only, and send + receive on the far end.

Usage: tools/bench_wire.py [--json] [--duration S] [--rounds N] [--sizes 64,1024,8192] [--io]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import platform
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from mrcnet.constants import PSN_MASK, Opcode
from mrcnet.io.batch import CBatchIO, PyBatchIO
from mrcnet.native import HAVE_C
from mrcnet.wire import Route, build_data, ip6, parse_frame, usid_container
from mrcnet.wire.checksum import c_udp6_checksum, c_udp6_checksum_ok
from mrcnet.wire.checksum import udp6_checksum as ref_udp6_checksum
from mrcnet.wire.icrc import c_icrc, py_icrc
from mrcnet.wire.parsed import FrameParser
from mrcnet.wire.template import CTemplate, DataTemplate

BATCH = 64  # frames per timed call: amortizes the loop, like mrcd's batches
DEFAULT_SIZES = (64, 1024, 8192)


@dataclass
class Result:
    """One measured (operation, implementation, payload size)."""

    op: str
    impl: str
    payload: int
    frames_per_s: float
    us_per_frame: float


def measure(fns: dict[str, Callable[[], int]], duration: float, rounds: int) -> dict[str, float]:
    """Best frames/s of each function over interleaved rounds of ``duration`` seconds.

    Each function does a batch of work and returns how many frames it handled.
    """
    best = dict.fromkeys(fns, 0.0)
    for _ in range(rounds):
        for name, fn in fns.items():
            fn()  # warm (caches, lazy imports)
            n = 0
            t0 = time.perf_counter()
            deadline = t0 + duration
            while True:
                n += fn()
                t = time.perf_counter()
                if t >= deadline:
                    break
            best[name] = max(best[name], n / (t - t0))
    return best


def flow() -> tuple[Route, DataTemplate]:
    route = Route(
        src_mac=bytes.fromhex("020000000001"), dst_mac=bytes.fromhex("020000000002"),
        src_ip=ip6("fd00:0:1::1"), dst_ip=ip6("fd00:0:2::1"),
        usid=usid_container(bytes.fromhex("fc000000"), [0x101, 0x201, 0x102, 0x1]),
    )
    return route, DataTemplate.for_route(route, dest_qp=0x42, rkey=0x1234)


def bench_size(size: int, duration: float, rounds: int) -> list[Result]:
    route, tmpl = flow()
    payload = os.urandom(size)
    psns = [(PSN_MASK - 10 + i) & PSN_MASK for i in range(BATCH)]  # crosses wraparound
    evs = [(0x9E3779B9 * (i + 1)) & 0xFFFFFFFF for i in range(BATCH)]
    buf = bytearray(tmpl.max_frame_len(size))
    mid = Opcode.WRITE_MIDDLE

    def build_ref() -> int:
        for psn, ev in zip(psns, evs, strict=True):
            build_data(route, ev=ev, opcode=mid, dest_qp=0x42, psn=psn, va=psn << 12,
                       rkey=0x1234, payload=payload)
        return BATCH

    def build_py() -> int:
        patch = tmpl.patch
        for psn, ev in zip(psns, evs, strict=True):
            patch(buf, opcode=mid, psn=psn, ev=ev, va=psn << 12, payload=payload)
        return BATCH

    builds: dict[str, Callable[[], int]] = {"py-ref": build_ref, "py-template": build_py}
    if HAVE_C:
        ctmpl = CTemplate(tmpl)

        def build_c() -> int:
            patch = ctmpl.patch
            for psn, ev in zip(psns, evs, strict=True):
                patch(buf, opcode=mid, psn=psn, ev=ev, va=psn << 12, payload=payload)
            return BATCH

        builds["c-template"] = build_c

    frames = [build_data(route, ev=ev, opcode=mid, dest_qp=0x42, psn=psn, va=psn << 12,
                         rkey=0x1234, payload=payload) for psn, ev in zip(psns, evs, strict=True)]

    def parse_ref() -> int:
        for f in frames:
            parse_frame(f)
        return BATCH

    parses: dict[str, Callable[[], int]] = {"py-ref": parse_ref}
    if HAVE_C:
        c_ok = c_udp6_checksum_ok

        def parse_c() -> int:
            for f in frames:
                parse_frame(f, checksum_ok=c_ok)
            return BATCH

        parses["c-checksum"] = parse_c
        parser = FrameParser(use_c=True)

        def parse_cfull() -> int:
            parse = parser.parse
            for f in frames:
                parse(f)
            return BATCH

        parses["c-parse"] = parse_cfull

    # The kernels alone, on this frame's UDP datagram and ICRC-covered bytes.
    f0 = frames[0]
    udp = bytearray(f0[tmpl.off_udp :])
    udp[6:8] = b"\0\0"
    udp_b, cov = bytes(udp), f0[tmpl.off_inner : len(f0) - 4]
    src, dst = tmpl.pseudo_src, tmpl.pseudo_dst

    def kernel(fn: Callable[..., Any], *args: Any) -> Callable[[], int]:
        def run() -> int:
            for _ in range(BATCH):
                fn(*args)
            return BATCH
        return run

    sums: dict[str, Callable[[], int]] = {
        "py-ref": kernel(ref_udp6_checksum, src, dst, udp_b),
    }
    crcs: dict[str, Callable[[], int]] = {"py-ref": kernel(py_icrc, cov, True)}
    if HAVE_C:
        sums["c"] = kernel(c_udp6_checksum, src, dst, udp_b)
        crcs["c"] = kernel(c_icrc, cov, True)

    out = []
    for op, fns in (("build", builds), ("parse", parses), ("udp6-checksum", sums),
                    ("icrc", crcs)):
        for impl, rate in measure(fns, duration, rounds).items():
            out.append(Result(op, impl, size, rate, 1e6 / rate if rate else float("inf")))
    return out


# ---- optional: sendmmsg vs send() on a veth pair --------------------------------------------

CLONE_NEWNET = 0x40000000
ETH_P_TEST = 0x88B5  # local experimental EtherType: the peer has no handler, frames drop there


@contextmanager
def private_veth() -> Iterator[str]:
    """A netns ``fp<random>`` holding a veth pair; removes exactly that netns afterwards."""
    name = "fp" + secrets.token_hex(4)
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for cmd in (["link", "add", "fpa", "mtu", "9000", "type", "veth", "peer", "name", "fpb",
                     "mtu", "9000"], ["link", "set", "fpa", "up"], ["link", "set", "fpb", "up"]):
            subprocess.run(["ip", "-n", name, *cmd], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def packet_socket(netns: str, ifname: str) -> socket.socket:
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        try:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_TEST))
            s.bind((ifname, ETH_P_TEST))
        finally:
            libc.setns(home, CLONE_NEWNET)
    finally:
        os.close(target)
        os.close(home)
    s.setblocking(False)
    return s


def bench_io(sizes: tuple[int, ...], duration: float, rounds: int) -> list[Result]:
    """veth-send: frames/s leaving one port. veth-loop: frames/s sent on one end and
    received on the other by the same thread (what one mrcd port does, minus protocol)."""
    if os.geteuid() != 0:
        raise SystemExit("--io needs root (it makes a private netns with a veth pair)")
    out = []
    kinds: dict[str, type[Any]] = {"per-frame": PyBatchIO}
    if HAVE_C:
        kinds["mmsg"] = CBatchIO
    frames_by_size = {
        size: [b"\xff" * 6 + b"\x02" + bytes(5) + ETH_P_TEST.to_bytes(2, "big")
               + os.urandom(min(size, 8900))] * BATCH for size in sizes}
    with private_veth() as netns, packet_socket(netns, "fpa") as tx_sock:
        txs = {k: cls(tx_sock.fileno(), BATCH, 1) for k, cls in kinds.items()}
        for size in sizes:  # before any receiver exists: the peer drops the frames
            fns: dict[str, Callable[[], int]] = {
                k: functools.partial(io.send, frames_by_size[size]) for k, io in txs.items()}
            for impl, rate in measure(fns, duration, rounds).items():
                out.append(Result("veth-send", impl, size, rate, 1e6 / rate if rate else 0.0))
        with packet_socket(netns, "fpb") as rx_sock:
            # Room for whole batches of jumbo frames (SO_RCVBUFFORCE: root may exceed rmem_max).
            rx_sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)
            rxs = {k: cls(rx_sock.fileno(), BATCH, 9216) for k, cls in kinds.items()}

            def loop(k: str, frames: list[bytes]) -> int:
                sent = txs[k].send(frames)
                got = 0
                while got < sent:
                    batch = rxs[k].recv()
                    if not batch:
                        break
                    got += len(batch)
                return got

            for size in sizes:
                fns = {k: functools.partial(loop, k, frames_by_size[size]) for k in kinds}
                for impl, rate in measure(fns, duration, rounds).items():
                    out.append(Result("veth-loop", impl, size, rate,
                                      1e6 / rate if rate else 0.0))
            for io in rxs.values():
                io.close()
        for io in txs.values():
            io.close()
    return out


# ---- report ---------------------------------------------------------------------------------


def ratios(results: list[Result]) -> list[dict[str, Any]]:
    """Each implementation's rate over the first one of its (op, payload): the baseline."""
    out = []
    groups: dict[tuple[str, int], list[Result]] = {}
    for r in results:
        groups.setdefault((r.op, r.payload), []).append(r)
    for (op, size), rs in groups.items():
        base = rs[0]
        for r in rs[1:]:
            out.append({"op": op, "payload": size, "impl": r.impl, "vs": base.impl,
                        "ratio": r.frames_per_s / base.frames_per_s if base.frames_per_s else 0})
    return out


def table(results: list[Result]) -> str:
    """Aligned text table; the ratio column is against the first row of each group."""
    lines = [f"{'op':<14} {'payload':>7}  {'impl':<15} {'frames/s':>12} {'us/frame':>9}  ratio"]
    first: dict[tuple[str, int], Result] = {}
    for r in results:
        b = first.setdefault((r.op, r.payload), r)
        ratio = "(base)" if b is r else f"{r.frames_per_s / b.frames_per_s:.2f}x"
        lines.append(f"{r.op:<14} {r.payload:>7}  {r.impl:<15} {r.frames_per_s:>12,.0f} "
                     f"{r.us_per_frame:>9.2f}  {ratio}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--duration", type=float, default=0.12, help="seconds per round (0.12)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds, best kept (3)")
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                    help="payload sizes in bytes (64,1024,8192)")
    ap.add_argument("--io", action="store_true",
                    help="also sendmmsg vs send() on a veth pair (root; private netns)")
    args = ap.parse_args(argv)
    sizes = tuple(int(x) for x in args.sizes.split(","))
    t0 = time.perf_counter()
    results: list[Result] = []
    for size in sizes:
        results += bench_size(size, args.duration, args.rounds)
    results.sort(key=lambda r: ("build", "parse", "udp6-checksum", "icrc").index(r.op))
    if args.io:
        results += bench_io(sizes, args.duration, args.rounds)
    env = {
        "have_c": HAVE_C, "python": platform.python_version(),
        "cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0],
        "duration_s": args.duration, "rounds": args.rounds, "batch": BATCH,
        "elapsed_s": round(time.perf_counter() - t0, 2),
    }
    if args.json:
        json.dump({"env": env, "results": [asdict(r) for r in results],
                   "ratios": ratios(results)}, sys.stdout, indent=2)
        print()
    else:
        print(f"mrcnet wire benchmark: C fast path {'on' if HAVE_C else 'OFF'}, "
              f"Python {env['python']}, {env['cpus']} CPUs, load {env['loadavg_1m']:.2f}, "
              f"best of {args.rounds} interleaved rounds x {args.duration}s")
        print(table(results))
        print(f"({env['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
