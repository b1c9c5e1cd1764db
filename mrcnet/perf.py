"""``mrc-perf``: RDMA WRITE bandwidth between two mrcd hosts, like perftest's ib_write_bw.

::

    mrc-perf server                    # on host B (its mrcd at $MRCD_SOCKET)
    mrc-perf client hB --all           # on host A: a table of sizes and rates
    mrc-perf client hB --lat           # round trips instead (like ib_write_lat)

The server exposes one memory region and listens on a service; the client connects its
QP through mrcd (which exchanges QP attributes with the server's mrcd), then for each
size posts ``--iters`` RDMA WRITEs with at most ``--tx-depth`` outstanding. The last
write of each size carries an immediate, so the server knows a size is done (and can
check the bytes with ``--verify``). The client prints one row per size; ``--json``
prints the same as JSON lines for tools. ``--tcp`` adds a kernel TCP stream between the
same two hosts in the same run (the server's sink address travels as private data), so
the table ends with the ratio MRC / TCP.

``raw-sink`` / ``raw-send`` measure the ceiling under all of it: MRC-shaped frames through
the packet sockets and the network on every path, no protocol and no mrcd (run each
inside its host, as root: they open the ports themselves).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from mrcnet.api import (
    ApiError,
    CompletionQueue,
    Context,
    MemoryRegion,
    QueuePair,
    RemoteRegion,
    WorkCompletion,
)
from mrcnet.daemon.paths import LocalPort
from mrcnet.errors import MrcError
from mrcnet.io import IOSetupError, PacketPort
from mrcnet.io.bench import raw_send, raw_sink, routes_frames
from mrcnet.wire import Route, mac_to_bytes

__all__ = ["Latency", "Result", "main", "run_client", "run_latency", "run_server"]

DEFAULT_SERVICE = 18515  # perftest's port, as a service number
DEFAULT_SIZE = 65536
ALL_SIZES = [1 << k for k in range(6, 21, 2)]  # 64 B .. 1 MiB, x4 steps
END_IMM = 0xFFFFFFFF  # the last write: done
END_TCP_IMM = 0xFFFFFFFE  # the last write: done, a TCP baseline stream follows
PING_FLAG = 0x80000000  # latency mode: imm = PING_FLAG | size, the server writes it back
RECV_DEPTH = 64


@dataclass(frozen=True)
class Latency:
    """One row of the latency table (microseconds, one-way = half the round trip)."""

    size: int
    iters: int
    t_min: float
    t_typical: float
    t_avg: float
    t_99: float
    t_max: float


@dataclass(frozen=True)
class Result:
    """One row of the client's table."""

    size: int
    iters: int
    seconds: float
    gbps: float
    mpps: float
    errors: int


def _pattern(mr: MemoryRegion) -> None:
    # A non-repeating-at-small-scale pattern: byte i = (i * 7 + i >> 8) mod 256.
    n = mr.length
    block = bytes(((i * 7) + (i >> 8)) & 0xFF for i in range(min(n, 1 << 16)))
    for off in range(0, n, len(block)):
        mr.buf[off : off + len(block)] = block[: n - off]


def _wait(cq: CompletionQueue, timeout: float) -> list[WorkCompletion]:
    wcs = cq.wait(timeout=timeout, max_entries=256)
    if not wcs:
        raise TimeoutError(f"no completion in {timeout} s (is the peer alive?)")
    return wcs


def run_server(ctx: Context, size: int, service: int, verify: bool, timeout: float,
               say: Callable[[str], None] = print) -> int:
    """Serve one client run; returns the number of sizes whose bytes did not verify."""
    mr = ctx.alloc_mr(size)
    cq = ctx.create_cq()
    qp = ctx.create_qp(cq)
    # A kernel TCP sink on this host's plain address, for the client's side-by-side
    # baseline (--tcp); its address travels in the connection's private data.
    tcp = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    tcp.bind(("::", 0))
    tcp.listen(1)
    private = {"tcp": [ctx.addresses[0], tcp.getsockname()[1]]} if ctx.addresses else None
    ctx.listen(service, qp, expose=[mr], private=private)
    try:
        return _serve(ctx, qp, cq, mr, size, service, verify, timeout, say, tcp)
    finally:
        tcp.close()


def _serve(ctx: Context, qp: QueuePair, cq: CompletionQueue, mr: MemoryRegion, size: int,
           service: int, verify: bool, timeout: float, say: Callable[[str], None],
           tcp: socket.socket) -> int:
    for i in range(RECV_DEPTH):
        qp.post_recv(wr_id=i)
    say(f"mrc-perf server on {ctx.host}: waiting on service {service} "
               f"({size} bytes exposed)")
    peer = qp.accept(timeout=None)
    say(f"connected: {peer.host} QP {peer.qpn}")
    bad = 0
    expected = ctx.alloc_mr(size) if verify else None
    if expected is not None:
        _pattern(expected)
    while True:
        for wc in _wait(cq, timeout):
            if not wc.ok:
                say(f"error completion: {wc.status}")
                return bad + 1
            if wc.opcode != "RECV_RDMA_WITH_IMM":
                continue  # our own pong writes completing
            qp.post_recv(wr_id=wc.wr_id)
            if wc.imm in (END_IMM, END_TCP_IMM):
                if wc.imm == END_TCP_IMM:
                    _tcp_sink(tcp, timeout)
                return bad
            if wc.imm is not None and wc.imm & PING_FLAG and peer.regions:
                n = wc.imm & ~PING_FLAG  # ping: write the same size back, same immediate
                qp.post_write(mr, 0, n, peer.regions[0], imm=wc.imm)
                continue
            if expected is not None and wc.imm is not None:
                n = wc.imm  # the client sends the size it just wrote as the immediate
                if bytes(mr.buf[:n]) != bytes(expected.buf[:n]):
                    bad += 1
                    say(f"size {n}: bytes differ from the pattern")


def _tcp_sink(tcp: socket.socket, timeout: float) -> None:
    """Take one TCP stream (the client's baseline), until EOF."""
    tcp.settimeout(timeout)
    conn, _ = tcp.accept()
    with conn:
        conn.settimeout(timeout)
        while conn.recv(1 << 20):
            pass


def tcp_baseline(address: str, port: int, nbytes: int, timeout: float) -> float:
    """Gbit/s of one kernel TCP stream of ``nbytes`` to ``address``."""
    block = bytes(1 << 20)
    with socket.create_connection((address, port), timeout=timeout) as s:
        t0 = time.perf_counter()
        left = nbytes
        while left > 0:
            n = min(left, len(block))
            s.sendall(block[:n])
            left -= n
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # EOF: the sink has read everything
        dt = time.perf_counter() - t0
    return nbytes * 8 / dt / 1e9


def run_client(ctx: Context, peer: str, sizes: Sequence[int], iters: int, tx_depth: int,
               service: int, timeout: float, cc_profile: str | None = None,
               tcp: bool = False, warmup: int | None = None) -> list[Result]:
    """Run every size against ``peer``'s server; one :class:`Result` per size. With
    ``tcp``, a last row (``size`` = -1) is a kernel TCP stream of as many bytes as the
    largest size moved, to the server's host, measured in the same run."""
    biggest = max(sizes)
    mr = ctx.alloc_mr(biggest)
    _pattern(mr)
    cq = ctx.create_cq()
    qp = ctx.create_qp(cq, cc_profile=cc_profile)
    info = qp.connect(peer, service)
    if not info.regions or info.regions[0].length < biggest:
        raise ApiError(f"the server exposes {info.regions[0].length if info.regions else 0} "
                       f"bytes; run it with --size {biggest} or more")
    remote = info.regions[0]
    results = [_one_size(qp, cq, mr, remote, size, iters, tx_depth, timeout,
                         iters // 2 if warmup is None else warmup)
               for size in sizes]
    sink = info.private.get("tcp") if isinstance(info.private, dict) else None
    tcp = tcp and bool(sink)
    qp.post_write(mr, 0, 0, remote, imm=END_TCP_IMM if tcp else END_IMM, wr_id=1 << 40)
    _wait(cq, timeout)
    if tcp and sink:
        nbytes = biggest * iters
        gbps = tcp_baseline(sink[0], int(sink[1]), nbytes, timeout)
        results.append(Result(-1, 1, nbytes * 8 / gbps / 1e9, gbps, 0.0, 0))
    return results


def _one_size(qp: QueuePair, cq: CompletionQueue, mr: MemoryRegion, remote: RemoteRegion,
              size: int, iters: int, tx_depth: int, timeout: float,
              warmup: int = 0) -> Result:
    # Warm-up writes first (untimed), so the window has opened when the clock starts.
    posted = done = 0
    while done < warmup:
        while posted < warmup and posted - done < tx_depth:
            qp.post_write(mr, 0, size, remote, wr_id=posted)
            posted += 1
        done += len(_wait(cq, timeout))
    posted = done = errors = 0
    t0 = time.perf_counter()
    while done < iters:
        while posted < iters and posted - done < tx_depth:
            last = posted == iters - 1
            qp.post_write(mr, 0, size, remote, imm=size if last else None, wr_id=posted)
            posted += 1
        for wc in _wait(cq, timeout):
            done += 1
            errors += not wc.ok
    dt = time.perf_counter() - t0
    return Result(size, iters, dt, size * iters * 8 / dt / 1e9, iters / dt / 1e6, errors)


def run_latency(ctx: Context, peer: str, sizes: Sequence[int], iters: int, service: int,
                timeout: float, cc_profile: str | None = None) -> list[Latency]:
    """Ping-pong writes-with-immediate (like ib_write_lat): one :class:`Latency` per size."""
    biggest = max(sizes)
    mr = ctx.alloc_mr(biggest)
    cq = ctx.create_cq()
    qp = ctx.create_qp(cq, cc_profile=cc_profile)
    info = qp.connect(peer, service, expose=[mr])  # the server writes its pongs here
    remote = info.regions[0]
    for i in range(RECV_DEPTH):
        qp.post_recv(wr_id=i)
    rows = []
    for size in sizes:
        samples = []
        for _ in range(iters):
            t0 = time.perf_counter()
            qp.post_write(mr, 0, size, remote, imm=PING_FLAG | size)
            while True:
                pong = [w for w in _wait(cq, timeout) if w.opcode == "RECV_RDMA_WITH_IMM"]
                if pong:
                    break
            samples.append((time.perf_counter() - t0) / 2 * 1e6)
            for w in pong:
                qp.post_recv(wr_id=w.wr_id)
        samples.sort()
        rows.append(Latency(size, iters, samples[0], samples[len(samples) // 2],
                            sum(samples) / len(samples),
                            samples[min(len(samples) - 1, int(len(samples) * 0.99))],
                            samples[-1]))
    qp.post_write(mr, 0, 0, remote, imm=END_IMM, wr_id=1 << 40)
    _wait(cq, timeout)
    return rows


def _lat_table(rows: Sequence[Latency]) -> list[str]:
    lines = [f"{'#bytes':>10} {'#iterations':>12} {'t_min[us]':>10} {'t_typical[us]':>14} "
             f"{'t_avg[us]':>10} {'t_99[us]':>10} {'t_max[us]':>10}"]
    for r in rows:
        lines.append(f"{r.size:>10} {r.iters:>12} {r.t_min:>10.1f} {r.t_typical:>14.1f} "
                     f"{r.t_avg:>10.1f} {r.t_99:>10.1f} {r.t_max:>10.1f}")
    return lines


def _table(results: Sequence[Result]) -> list[str]:
    lines = [f"{'#bytes':>10} {'#iterations':>12} {'BW average[Gb/s]':>17} "
             f"{'MsgRate[Mpps]':>14} {'errors':>7}"]
    best = max((r.gbps for r in results if r.size > 0), default=0.0)
    for r in results:
        if r.size < 0:
            lines.append(f"kernel TCP, same hosts, same run: {r.gbps:.3f} Gb/s; best MRC "
                         f"size / TCP = {best / r.gbps:.2f}")
            continue
        lines.append(f"{r.size:>10} {r.iters:>12} {r.gbps:>17.3f} {r.mpps:>14.6f} "
                     f"{r.errors:>7}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mrc-perf`` command."""
    ap = argparse.ArgumentParser(prog="mrc-perf", description="RDMA WRITE bandwidth over "
                                 "MRC between two mrcd hosts (like ib_write_bw)")
    ap.add_argument("--socket", help="mrcd's socket (default $MRCD_SOCKET or "
                    "/run/mrcd/<hostname>.sock)")
    ap.add_argument("--service", type=int, default=DEFAULT_SERVICE)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds without progress "
                    "before giving up")
    sub = ap.add_subparsers(dest="mode", required=True)
    sv = sub.add_parser("server", help="wait for one client run")
    sv.add_argument("-s", "--size", type=int, default=max(ALL_SIZES),
                    help="bytes of memory to expose (the client's largest size)")
    sv.add_argument("--verify", action="store_true", help="check the written bytes")
    cl = sub.add_parser("client", help="measure against PEER's server")
    cl.add_argument("peer", help="host name of the server (as mrcd knows it)")
    cl.add_argument("-s", "--size", type=int, default=DEFAULT_SIZE)
    cl.add_argument("-a", "--all", action="store_true", help=f"sizes {ALL_SIZES[0]} .. "
                    f"{ALL_SIZES[-1]}")
    cl.add_argument("-n", "--iters", type=int, default=200)
    cl.add_argument("-t", "--tx-depth", type=int, default=16)
    cl.add_argument("-w", "--warmup", type=int, help="untimed writes before each size "
                    "(default: half of --iters)")
    cl.add_argument("--cc", help="congestion control profile of the QP (default: mrcd's)")
    cl.add_argument("--tcp", action="store_true", help="also measure one kernel TCP stream "
                    "to the server's host (side by side, same run)")
    cl.add_argument("--lat", action="store_true", help="latency (ping-pong, like "
                    "ib_write_lat) instead of bandwidth; one-way = half the round trip")
    cl.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    for name, text in (("raw-sink", "count raw MRC frames arriving (the ceiling, receive "
                        "side; needs CAP_NET_RAW, run in the host)"),
                       ("raw-send", "send raw MRC frames as fast as possible over every "
                        "path (the ceiling, send side)")):
        rp = sub.add_parser(name, help=text)
        rp.add_argument("--fabric", help="fabric description file (ports and paths)")
        rp.add_argument("--host", help="this host's name in the fabric")
        rp.add_argument("--ifname", action="append", default=[],
                        help="a port to use (repeat; without --fabric)")
        rp.add_argument("--json", action="store_true", help="one JSON line")
        if name == "raw-send":
            rp.add_argument("peer", nargs="?", help="destination host (with --fabric)")
            rp.add_argument("--dst-mac", help="next hop MAC (without --fabric)")
            rp.add_argument("--src-ip", help="source address (without --fabric)")
            rp.add_argument("--dst-ip", help="destination address (without --fabric)")
            rp.add_argument("-s", "--size", type=int, default=8192, help="payload bytes")
            rp.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args(argv)
    if args.mode in ("raw-sink", "raw-send"):
        return _raw_main(args)
    try:
        with Context(args.socket) as ctx:
            if args.mode == "server":
                bad = run_server(ctx, args.size, args.service, args.verify, args.timeout,
                                 lambda line: print(line, flush=True))
                if args.verify:
                    print("verify: ok" if not bad else f"verify: {bad} size(s) differ")
                return 1 if bad else 0
            sizes = ALL_SIZES if args.all else [args.size]
            if args.lat:
                rows = run_latency(ctx, args.peer, sizes, args.iters, args.service,
                                   args.timeout, args.cc)
                if args.json:
                    for row in rows:
                        print(json.dumps(asdict(row)))
                else:
                    print("\n".join(_lat_table(rows)))
                return 0
            results = run_client(ctx, args.peer, sizes, args.iters, args.tx_depth,
                                 args.service, args.timeout, args.cc, args.tcp,
                                 args.warmup)
            if args.json:
                for r in results:
                    print(json.dumps(asdict(r)))
            else:
                print("\n".join(_table(results)))
            return 1 if any(r.errors for r in results) else 0
    except (ApiError, TimeoutError) as e:
        print(f"mrc-perf: {e}", file=sys.stderr)
        return 1


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


def _raw_main(args: argparse.Namespace) -> int:
    from mrcnet.daemon.paths import FabricPaths
    from mrcnet.fabric.describe import load

    try:
        ports, local = _raw_ports(args)
    except MrcError as e:
        print(f"mrc-perf: {e}", file=sys.stderr)
        return 1
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
        print(json.dumps({"frames": r.frames, "bytes": r.nbytes, "seconds": r.seconds,
                          "kpps": r.kpps, "gbps": r.gbps, "trimmed": r.trimmed}))
    else:
        trims = f" ({r.trimmed} trimmed by switches)" if r.trimmed else ""
        print(f"raw {what}: {r.frames} frames{trims} in {r.seconds:.2f} s: "
              f"{r.kpps:.1f} kframes/s, {r.gbps:.3f} Gb/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
