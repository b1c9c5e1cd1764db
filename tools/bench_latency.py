#!/usr/bin/env python3
"""Small-message round trips between two fabric hosts: mrcd vs kernel UDP, same run.

    .venv/bin/python tools/bench_latency.py [--sizes 8,64,512,4096] [--iters 500] [--json]

Like ib_write_lat, but side by side with the kernel: one fabric (named
``<--prefix><hex>``, default ``ic``, in a private state directory; default
``leafspine:planes=2,spines=2,leaves=2,hosts=1,rate=200mbit,mtu=9000``), h0 and h1 on
different leaves, mrcd on both. Per size, in this order, each measured by a client
process inside h0 against an echo process inside h1:

- **mrc**: ``mrcnet.api.socket``: ``send_message`` + ``recv_message`` of the same bytes
  echoed by a ``create_server`` process on h1 (RDMA WRITE-with-immediate each way,
  through both mrcds, sprayed over the planes and spines);
- **mrc-verbs**: the verbs API directly: a write-with-immediate into the peer's region,
  answered by one back (like ``mrc-perf --lat``; no socket-layer copy or credits). Both
  sides post their writes unsignalled (QPs made with ``sq_sig_all=False``, every
  ``SIGNAL_EVERY``-th write signalled), as ib_write_lat does: each learns of the other's
  write by its receive, and neither it nor its mrcd wakes for its own write's
  completion; ``--signal-all``: every write signalled (the way before session 14);
- **udp**: a kernel UDP datagram to an echo socket on h1's plane-0 address (plain IPv6
  through the same fabric, spine 0), ``recvfrom`` of the answer.

Every echoed payload is checked. Round-trip P50 / P99 / max in microseconds after
``--warmup`` untimed round trips, and the ratios mrc / udp.

Then a message-rate table (like ``ib_write_bw -s 64``), same fabric, same run:

- **mrc**: 64-byte RDMA WRITEs through both mrcds, ``mrc-perf client h1 --rate
  --no-verify`` (a window of 128), per second acknowledged;
- **udp**: a kernel UDP blaster, ``sendmmsg`` of 64 datagrams of 64 bytes per call from
  h0 to a receiver on h1's plane-0 address, per second received.

The rate table also gives the CPU (user + system) per message of each mrcd
(/proc/PID/stat) and of the sending mrc-perf (its own figure) in the mrc run, and each
mrcd's loop passes, doorbells and frames sent and read per message. Runs in about 20-40 s.
Everything started is stopped by PID; the fabric is removed even on error.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_incast import Lab, default_prefix, fabric_mrcds, host_counters

SPEC = "leafspine:planes=2,spines=2,leaves=2,hosts=1,rate=200mbit,mtu=9000"
SERVICE, VERBS_SERVICE, UDP_PORT = 21, 22, 47999
END_WR = 0xE0D  # wr_id of the verbs client's last write
METHODS = ("mrc", "mrc-verbs", "udp")
SELF = os.path.abspath(__file__)
#: Set (by --place / --pin) to the placement in the environment of the processes this
#: bench starts in the hosts.
PIN_ENV = "BENCH_LATENCY_PIN"
PLACES = ("none", "host", "split")
#: Set (by --profile) likewise: the clients and echoes of the verbs and the socket API
#: write their cProfile there too.
PROFILE_ENV = "BENCH_LATENCY_PROFILE"
#: Set (by --signal-all) likewise: the verbs client and echo signal every write.
SIGNAL_ALL_ENV = "BENCH_LATENCY_SIGNAL_ALL"
#: The verbs round trips' unsignalled writes: every SIGNAL_EVERY-th is signalled (a run
#: of unsignalled writes must stay shorter than the send queue, as on a verbs QP).
SIGNAL_EVERY = 64
PERF = os.path.join(os.path.dirname(sys.executable), "mrc-perf")
#: The message-rate table: bytes per message, datagrams per sendmmsg call, seconds.
RATE_SIZE, RATE_BATCH, RATE_SECONDS, RATE_PORT, RATE_SERVICE = 64, 64, 2.0, 47998, 23
RATE_WARMUP = 2000  # mrc-perf's untimed writes first


# --- the processes inside the hosts (run as `bench_latency.py _role ...`) -------------------

def _pattern(size: int, i: int) -> bytes:
    return bytes((i + k * 7) & 0xFF for k in range(size))


def _udp_echo(port: int) -> None:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.bind(("::", port))
    print("ready", flush=True)
    while True:
        data, addr = s.recvfrom(65536)
        if data == b"quit":
            return
        s.sendto(data, addr)


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(_IoVec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("hdr", _MsgHdr), ("len", ctypes.c_uint)]


def _udp_blast(target: str, seconds: float) -> None:
    """Send 64-byte datagrams to ``target`` for ``seconds``, RATE_BATCH per sendmmsg
    (libc's, through ctypes: Python has no sendmmsg); prints how many were sent."""
    libc = ctypes.CDLL(None, use_errno=True)
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    s.connect((target, RATE_PORT))
    payload = ctypes.create_string_buffer(bytes(RATE_SIZE))
    iov = _IoVec(ctypes.cast(payload, ctypes.c_void_p), RATE_SIZE)
    msgs = (_MMsgHdr * RATE_BATCH)()
    for m in msgs:
        m.hdr.iov = ctypes.pointer(iov)
        m.hdr.iovlen = 1
    sent, fd = 0, s.fileno()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        n = libc.sendmmsg(fd, msgs, RATE_BATCH, 0)
        if n > 0:
            sent += n
    time.sleep(0.2)
    s.send(b"quit")
    print(json.dumps({"sent": sent}), flush=True)


def _udp_count(port: int) -> None:
    """Count datagrams until ``quit``; prints the count and the first and last arrival."""
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(("::", port))
    print("ready", flush=True)
    buf = bytearray(2048)
    n, first, last = 0, 0.0, 0.0
    while True:
        k = s.recv_into(buf)
        if buf[:k] == b"quit":
            break
        last = time.monotonic()
        if not n:
            first = last
        n += 1
    print(json.dumps({"received": n, "first": first, "last": last}), flush=True)


def _mrc_echo(mrcd: str, service: int) -> None:
    from mrcnet.api.socket import EndOfStream, create_server

    with create_server(service, mrcd=mrcd) as srv:
        print("ready", flush=True)
        conn, _ = srv.accept(60)
        with conn:
            while True:
                try:
                    m = conn.recv_message()
                except EndOfStream:
                    return
                conn.send_message(m)


def _verbs_echo(mrcd: str, service: int, biggest: int) -> None:
    from mrcnet.api import Context

    with Context(mrcd) as ctx:
        mr = ctx.alloc_mr(biggest)
        cq = ctx.create_cq()
        qp = ctx.create_qp(cq, sq_sig_all=bool(os.environ.get(SIGNAL_ALL_ENV)))
        ctx.listen(service, qp, expose=[mr])
        for i in range(16):
            qp.post_recv(wr_id=i)
        print("ready", flush=True)
        peer = qp.accept(timeout=60)
        while True:
            for w in cq.wait(timeout=30):
                if w.opcode != "RECV_RDMA_WITH_IMM":
                    continue
                if w.imm == 0:
                    return
                n = w.byte_len
                # the pong: the same bytes back into the client's region (unsignalled:
                # the next ping says it arrived); the receive again behind it (one
                # doorbell: mrcd takes both in one pass)
                qp.post_write(mr, 0, n, peer.regions[0], imm=n,
                              signaled=qp.unsignaled_run >= SIGNAL_EVERY - 1)
                qp.post_recv(wr_id=w.wr_id)


def _client(method: str, target: str, sizes: list[int], iters: int, warmup: int,
            mrcd: str | None) -> None:
    out: dict[str, Any] = {}
    if method == "udp":
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.settimeout(5)
        s.connect((target, UDP_PORT))

        def rt(data: bytes) -> bytes:
            s.send(data)
            return s.recv(65536)

        def done() -> None:
            s.send(b"quit")
    elif method == "mrc":
        from mrcnet.api.socket import create_connection

        host, svc = target.split(":")
        conn = create_connection((host, int(svc)), timeout=10, mrcd=mrcd)

        def rt(data: bytes) -> bytes:
            conn.send_message(data)
            return conn.recv_message()

        def done() -> None:
            conn.close()
    else:
        from mrcnet.api import Context

        host, svc = target.split(":")
        ctx = Context(mrcd)
        biggest = max(sizes)
        ping = ctx.alloc_mr(biggest)  # source of the pings
        pong = ctx.alloc_mr(biggest)  # exposed: the echo writes the pongs here
        cq = ctx.create_cq()
        qp = ctx.create_qp(cq, sq_sig_all=bool(os.environ.get(SIGNAL_ALL_ENV)))
        peer = qp.connect(host, int(svc), expose=[pong])
        for i in range(16):
            qp.post_recv(wr_id=i)
        used: list[int] = []  # receives the pongs consumed: posted again after a ping

        def rt(data: bytes) -> bytes:
            nonlocal used
            n = len(data)
            ping.buf[:n] = data
            # (unsignalled: the pong's receive says it arrived)
            qp.post_write(ping, 0, n, peer.regions[0], imm=n,
                          signaled=qp.unsignaled_run >= SIGNAL_EVERY - 1)
            # Behind the ping (like mrc-perf --lat): mrcd takes both in one pass.
            for wr_id in used:
                qp.post_recv(wr_id=wr_id)
            while True:
                got = [w for w in cq.wait(timeout=5) if w.opcode == "RECV_RDMA_WITH_IMM"]
                if got:
                    used = [w.wr_id for w in got]
                    return bytes(pong.buf[:n])

        def done() -> None:
            # Closed before mrcd sent it, the last write would be flushed, not sent (and
            # the echo wait for it): wait for its own completion, not just any.
            qp.post_write(ping, 0, 0, peer.regions[0], imm=0, wr_id=END_WR, signaled=True)
            end = time.monotonic() + 5
            with contextlib.suppress(Exception):
                while time.monotonic() < end and not any(
                        w.wr_id == END_WR for w in cq.wait(timeout=1)):
                    pass
            ctx.close()

    bad = 0
    for size in sizes:
        samples = []
        for i in range(warmup + iters):
            data = _pattern(size, i)
            t0 = time.perf_counter()
            back = rt(data)
            dt = time.perf_counter() - t0
            bad += back != data
            if i >= warmup:
                samples.append(dt * 1e6)
        out[str(size)] = samples
    done()
    print(json.dumps({"samples": out, "bad": bad}), flush=True)


# --- the bench ------------------------------------------------------------------------------

@dataclass
class Row:
    method: str
    size: int
    iters: int
    p50_us: float
    p99_us: float
    max_us: float
    mismatches: int


def _pct(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(len(ys) * q))]


@contextlib.contextmanager
def _server(lab: Lab, host: str, args: list[str]) -> Iterator[subprocess.Popen[str]]:
    """An echo process inside ``host``, ready when it printed ``ready``; stopped by PID."""
    p: subprocess.Popen[str] = lab.fab.popen(host, [sys.executable, SELF, *args],
                                              stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        if "ready" not in line:
            raise RuntimeError(f"echo server {args[0]} on {host} did not start: {line!r}")
        yield p
        p.wait(20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def _run_client(lab: Lab, args: list[str], timeout: float) -> dict[str, Any]:
    r = lab.fab.exec("h0", [sys.executable, SELF, "_client", *args], capture_output=True,
                     text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"client {args[0]} failed: {r.stderr.strip()[-2000:]}")
    res: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return res


def _loop_passes(sock: str) -> dict[str, int]:
    """An mrcd's loop passes so far, by what woke them, the doorbells it rang to its
    clients and read from them and its CPU time in us (``stats``)."""
    from mrcnet.api import Context

    with Context(sock) as ctx:
        st = ctx.stats()
        cpu = st["cpu_s"]
        return {**st["loop_passes"], "doorbells": int(st["doorbells"]),
                "doorbells_in": int(st.get("doorbells_in", 0)),
                "cpu_us": round((cpu["user"] + cpu["system"]) * 1e6),
                "sys_us": round(cpu["system"] * 1e6)}


def _counts(sock: str) -> dict[str, int]:
    """An mrcd's loop passes and doorbells (:func:`_loop_passes`) and the frames it
    sent and read so far."""
    host = host_counters(sock)
    return {**_loop_passes(sock), "tx_frames": host.get("tx_frames", 0),
            "rx_frames": host.get("rx_frames", 0)}


@dataclass
class Rate:
    method: str
    size: int
    msgs_per_s: float
    messages: int
    #: CPU (user, system) per message of each mrcd during the run, and of the sending
    #: mrc-perf (``client``: user + system as user, without its start-up), microseconds
    #: (mrc only)
    cpu_us: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: Per message, of each mrcd in the run (mrc only): its loop passes by what woke
    #: them and the doorbells it rang (``loop_passes``), the frames it sent and read
    #: (``tx_frames``, ``rx_frames``: data one way, SACKs the other)
    per_msg: dict[str, dict[str, float]] = field(default_factory=dict)


def _cpu(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _rates(lab: Lab, h1_addr: str, seconds: float) -> list[Rate]:
    """The message-rate table's two rows (see the module)."""
    count = int(max(2000.0, 20000 * seconds))
    server = lab.fab.popen("h1", [PERF, "--socket", lab.sock("h1"), "--service",
                                  str(RATE_SERVICE), "--timeout", "60", "server", "--size",
                                  "64K", "--no-verify"],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "waiting on service ..."
        pids = {h: m.proc.pid for h, m in lab.mrcds.items()}
        counts0 = {h: _counts(lab.sock(h)) for h in pids}
        before = {h: _cpu(pid) for h, pid in pids.items()}
        r = lab.fab.exec("h0", [PERF, "--socket", lab.sock("h0"), "--service",
                                str(RATE_SERVICE), "--timeout", "60", "client", "h1",
                                "--rate", "--no-verify", "-n", str(count), "-w", str(RATE_WARMUP),
                                "--json"],
                         capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"mrc-perf --rate failed: {r.stderr.strip()[-2000:]}")
        after = {h: _cpu(pid) for h, pid in pids.items()}
        counts1 = {h: _counts(lab.sock(h)) for h in pids}
        (row,) = [x for x in map(json.loads, r.stdout.splitlines())
                  if x.get("type") == "result"]
        server.wait(30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
    # (the CPU deltas also hold the connection's set-up: a few ms against seconds)
    cpu = {h: ((after[h][0] - before[h][0]) * 1e6 / row["iters"],
               (after[h][1] - before[h][1]) * 1e6 / row["iters"]) for h in pids}
    # mrc-perf's own CPU from its warm-up on (user and system together: its start-up,
    # ~0.4 s of imports, would count ~10 us per message in a 2 s run)
    cpu["client"] = (row.get("cpu_s", 0.0) * 1e6 / (row["iters"] + RATE_WARMUP), 0.0)
    # (the counts, like the CPU, from before the warm-up: per message of the whole run)
    msgs = row["iters"] + RATE_WARMUP
    per_msg = {h: {k: round((v - counts0[h].get(k, 0)) / msgs, 4)
                   for k, v in counts1[h].items() if k not in ("cpu_us", "sys_us")}
               for h in pids}
    rows = [Rate("mrc", RATE_SIZE, row["mpps"] * 1e6, row["iters"], cpu, per_msg)]
    with _server(lab, "h1", ["_udp_count", str(RATE_PORT)]) as sink:
        blast = lab.fab.exec("h0", [sys.executable, SELF, "_udp_blast", h1_addr,
                                    str(seconds)], capture_output=True, text=True,
                             timeout=60 + seconds)
        if blast.returncode != 0:
            raise RuntimeError(f"UDP blaster failed: {blast.stderr.strip()[-2000:]}")
        assert sink.stdout is not None
        got = json.loads(sink.stdout.readline())
    span = max(got["last"] - got["first"], 1e-6)
    rows.append(Rate("udp", RATE_SIZE, got["received"] / span, got["received"]))
    return rows


def run_latency(workdir: Path, sizes: list[int], iters: int, warmup: int,
                spec: str = SPEC, core: dict[str, float | bool] | None = None,
                rates: list[Rate] | None = None,
                rate_seconds: float = RATE_SECONDS,
                passes: dict[str, dict[str, float]] | None = None,
                profile: Path | None = None, prefix: str | None = None,
                sched_batch: bool = False, top: str = "") -> list[Row]:
    """Every method and size on one fabric; rows in METHODS order. ``core``: mrcd
    ``[core]`` overrides. ``rates``: filled with the message-rate table (same fabric,
    after the round trips). ``passes``: filled with each mrcd's loop passes per verbs
    round trip, by what woke them (its ``loop_passes`` stats; h0 is the pinging side).
    ``profile``: a directory where each mrcd writes its cProfile statistics; ``prefix``:
    the fabric's name prefix (default ``$MRC_E2E_PREFIX`` or ``ic``); ``sched_batch``:
    both mrcds under SCHED_BATCH (set from here, whatever their configuration says: so
    that trees without mrcd's ``sched_batch`` compare the same way); ``top``: top-level
    TOML lines of both mrcds' configuration (``--mrcd``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    common = [",".join(map(str, sizes)), str(iters), str(warmup)]
    with fabric_mrcds(spec, workdir, ("h0", "h1"), prefix=prefix, core=core,
                      profile=profile, top=top) as lab:
        place = os.environ.get(PIN_ENV)
        if place:  # --place: each host's mrcd on its application's CPU, or both on 0
            for cpu, h in enumerate(("h0", "h1")):
                os.sched_setaffinity(lab.mrcds[h].proc.pid, {0 if place == "split" else cpu})
        if sched_batch:
            for m in lab.mrcds.values():
                os.sched_setscheduler(m.proc.pid, os.SCHED_BATCH, os.sched_param(0))
        h1_addr = str(lab.fab.description.host("h1").port(0).address)
        timeout = 30 + (iters + warmup) * len(sizes) * 0.05
        results: dict[str, dict[str, Any]] = {}
        with _server(lab, "h1", ["_mrc_echo", lab.sock("h1"), str(SERVICE)]):
            results["mrc"] = _run_client(
                lab, ["mrc", f"h1:{SERVICE}", *common, lab.sock("h0")], timeout)
        with _server(lab, "h1", ["_verbs_echo", lab.sock("h1"), str(VERBS_SERVICE),
                                 str(max(sizes))]):
            before = {h: _loop_passes(lab.sock(h)) for h in ("h0", "h1")}
            results["mrc-verbs"] = _run_client(
                lab, ["verbs", f"h1:{VERBS_SERVICE}", *common, lab.sock("h0")], timeout)
            if passes is not None:
                trips = (iters + warmup) * len(sizes)
                for h, b in before.items():
                    after = _loop_passes(lab.sock(h))
                    passes[h] = {k: round((v - b.get(k, 0)) / trips, 2)
                                 for k, v in after.items()}
        with _server(lab, "h1", ["_udp_echo", str(UDP_PORT)]):
            results["udp"] = _run_client(lab, ["udp", h1_addr, *common, "-"], timeout)
        if rates is not None:
            rates += _rates(lab, h1_addr, rate_seconds)
    for method in METHODS:
        res = results[method]
        for size in sizes:
            xs = res["samples"][str(size)]
            rows.append(Row(method, size, len(xs), _pct(xs, 0.5), _pct(xs, 0.99), max(xs),
                            int(res["bad"])))
    return rows


def table(rows: list[Row]) -> str:
    by = {(r.method, r.size): r for r in rows}
    sizes = sorted({r.size for r in rows})
    lines = [f"{'bytes':>6} {'method':>10} {'P50 us':>9} {'P99 us':>9} {'max us':>9}"
             f" {'P50/udp':>8} {'P99/udp':>8}"]
    for size in sizes:
        udp = by[("udp", size)]
        for m in METHODS:
            r = by[(m, size)]
            lines.append(f"{size:>6} {m:>10} {r.p50_us:>9.0f} {r.p99_us:>9.0f} "
                         f"{r.max_us:>9.0f} {r.p50_us / udp.p50_us:>8.1f} "
                         f"{r.p99_us / udp.p99_us:>8.1f}")
    bad = sum(r.mismatches for r in rows if r.size == sizes[0])
    lines.append(f"echo mismatches: {bad}")
    return "\n".join(lines)


def rate_table(rates: list[Rate]) -> str:
    by = {r.method: r for r in rates}
    udp = by.get("udp")
    lines = [f"{'bytes':>6} {'method':>10} {'msgs/s':>12} {'messages':>10} {'/udp':>6}"
             "  CPU us per message (user+sys)"]
    for r in rates:
        ratio = f"{r.msgs_per_s / udp.msgs_per_s:>6.2f}" if udp and udp.msgs_per_s else "-"
        cpu = ", ".join(f"{h} {u + s_:.1f}" + ("" if h == "client" else f" ({u:.1f}+{s_:.1f})")
                        for h, (u, s_) in r.cpu_us.items())
        lines.append(f"{r.size:>6} {r.method:>10} {r.msgs_per_s:>12,.0f} {r.messages:>10} "
                     f"{ratio}  {cpu}")
    for r in rates:
        for h, counts in r.per_msg.items():
            lines.append(f"  mrcd {h} per message: " + ", ".join(
                f"{k} {v:.3f}" for k, v in counts.items()))
    return "\n".join(lines)


def _knob(text: str) -> float | bool:
    """A ``--core`` value: true/false (mrcd's boolean knobs, e.g. ack_lone) or a number."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    return float(text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0].startswith("_"):
        role, rest = argv[0], argv[1:]
        place = os.environ.get(PIN_ENV)
        if place and role in ("_client", "_udp_echo", "_mrc_echo", "_verbs_echo"):
            # --place host: the round trips' pinging side on CPU 0, the echo on CPU 1;
            # split: both on CPU 1 (the mrcds have CPU 0)
            os.sched_setaffinity(0, {0 if role == "_client" and place == "host" else 1})
        if role == "_udp_echo":
            _udp_echo(int(rest[0]))
        elif role == "_udp_blast":
            _udp_blast(rest[0], float(rest[1]))
        elif role == "_udp_count":
            _udp_count(int(rest[0]))
        prof_dir = os.environ.get(PROFILE_ENV)
        prof = None
        if prof_dir and (role in ("_verbs_echo", "_mrc_echo")
                         or (role == "_client" and rest[0] in ("verbs", "mrc"))):
            import cProfile  # (the round trip's application side, both hosts)
            prof = cProfile.Profile(time.thread_time)
            prof.enable()
        if role == "_mrc_echo":
            _mrc_echo(rest[0], int(rest[1]))
        elif role == "_verbs_echo":
            _verbs_echo(rest[0], int(rest[1]), int(rest[2]))
        elif role == "_client":
            method, target, sizes, iters, warmup, mrcd = rest
            _client(method, target, [int(x) for x in sizes.split(",")], int(iters),
                    int(warmup), None if mrcd == "-" else mrcd)
        if prof is not None and prof_dir:
            prof.disable()
            # (app_client.prof: the verbs client's; app_client_mrc.prof: the socket API's)
            name = role + ("_mrc" if role == "_client" and rest[0] == "mrc" else "")
            prof.dump_stats(os.path.join(prof_dir, f"app{name}.prof"))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--sizes", default="8,64,512,4096")
    ap.add_argument("--iters", type=int, default=500, help="timed round trips per size")
    ap.add_argument("--warmup", type=int, default=50, help="untimed round trips per size")
    ap.add_argument("--spec", default=SPEC)
    ap.add_argument("--core", action="append", default=[], metavar="KEY=VALUE",
                    help="mrcd [core] override (repeatable), e.g. ack_delay=0.0001")
    ap.add_argument("--rate-seconds", type=float, default=RATE_SECONDS,
                    help="seconds of the UDP blaster (mrc: about 20,000 writes a second)")
    ap.add_argument("--no-rate", action="store_true", help="round trips only")
    ap.add_argument("--mrcd", action="append", default=[], metavar="KEY=VALUE",
                    help="a top-level mrcd setting (TOML value) for both hosts, e.g. "
                         "--mrcd answer_poll_us=0")
    ap.add_argument("--profile", metavar="DIR", type=Path,
                    help="each mrcd writes cProfile statistics to DIR/HOST.prof, the verbs "
                    "client and echo to DIR/app_client.prof and app_verbs_echo.prof, the "
                    "socket API's to app_client_mrc.prof and app_mrc_echo.prof (read them "
                    "with python -m pstats)")
    ap.add_argument("--place", choices=PLACES, default="none",
                    help="where the round trips run: the scheduler's choice (none); "
                    "each host's mrcd and application on a CPU of its own (host: h0 on "
                    "0, h1 on 1, as ib_write_lat is run under taskset; the UDP rows "
                    "likewise); both mrcds on CPU 0 and the applications, the UDP ends "
                    "included, on CPU 1 (split: mrcd on a core of its own). The message "
                    "rate pins only the mrcds")
    ap.add_argument("--pin", action="store_true", help="--place host")
    ap.add_argument("--signal-all", action="store_true",
                    help="the verbs round trips with every write signalled (each side "
                    "then wakes for its own write's completion too: the way before "
                    "selective signalling)")
    ap.add_argument("--sched-batch", action="store_true",
                    help="both mrcds under SCHED_BATCH (mrcd's sched_batch, set from here "
                    "so that any tree runs the same way)")
    ap.add_argument("--prefix", default=default_prefix(),
                    help="fabric name prefix, a few letters (default $MRC_E2E_PREFIX or ic)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if not (a.prefix.isalnum() and a.prefix.islower() and len(a.prefix) <= 4):
        ap.error("--prefix takes 1-4 lower-case letters or digits (the name adds 6 hex)")
    place = "host" if a.pin else a.place
    if place != "none":
        os.environ[PIN_ENV] = place  # (inherited by every process started in the hosts)
    if a.signal_all:
        os.environ[SIGNAL_ALL_ENV] = "1"  # (likewise)
    try:
        core = {k: _knob(v) for k, v in (kv.split("=", 1) for kv in a.core)}
    except ValueError:
        ap.error("--core takes KEY=NUMBER or KEY=true/false")
    if any("=" not in kv for kv in a.mrcd):
        ap.error("--mrcd takes KEY=VALUE (a TOML value, e.g. answer_poll_us=0)")
    if os.geteuid() != 0:
        print("bench_latency: needs root (network namespaces, raw sockets)", file=sys.stderr)
        return 2
    size_list = [int(x) for x in a.sizes.split(",")]
    if a.profile:
        a.profile.mkdir(parents=True, exist_ok=True)
        os.environ[PROFILE_ENV] = str(a.profile.resolve())  # (inherited, as --place's)
    with tempfile.TemporaryDirectory(prefix="bench_latency.") as tmp:
        t0 = time.monotonic()
        rates: list[Rate] | None = None if a.no_rate else []
        passes: dict[str, dict[str, float]] = {}
        rows = run_latency(Path(tmp), size_list, a.iters, a.warmup, a.spec, core or None,
                           rates, a.rate_seconds, passes,
                           a.profile.resolve() if a.profile else None, a.prefix,
                           a.sched_batch, "".join(f"{kv}\n" for kv in a.mrcd))
        took = time.monotonic() - t0
    if a.json:
        print(json.dumps({"spec": a.spec, "place": place, "seconds": took,
                          "rows": [asdict(r) for r in rows],
                          "rates": [asdict(r) for r in rates or []],
                          "passes_per_verbs_round_trip": passes}, indent=2))
    else:
        print(f"round trips h0 <-> h1, {a.iters} per size, {a.spec}, place {place} "
              f"({took:.1f} s)")
        print(table(rows))
        for h, p in passes.items():
            print(f"mrcd {h} loop passes per verbs round trip: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in p.items()))
        if rates:
            print(f"\nmessage rate, {RATE_SIZE}-byte messages h0 -> h1")
            print(rate_table(rates))
    return 0 if not any(r.mismatches for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
