#!/usr/bin/env python3
"""Goodput side by side on one unshaped fabric: mrcd/mrc-perf vs kernel TCP vs raw packets.

    .venv/bin/python tools/bench_goodput.py [--runs 3] [--mib 256] [--json] [--profile DIR]

One fabric (default ``planes=2,spines=2,leaves=2,hosts=1,rate=none,mtu=9000``, named
``mf<hex>`` in a private state directory), h0 -> h1, in this order per run:

1. **raw**: ``mrc-perf raw-sink`` in h1, ``raw-send`` in h0 (batched C sendmmsg/recvmmsg on
   the packet sockets, MRC-shaped 8 KiB-payload frames round robin over every (plane,
   spine) path, no protocol, no mrcd). Goodput = payload of the frames that arrived
   untrimmed / the sink's time from first to last frame.
2. **tcp**: one kernel TCP stream of the same volume as the MRC run, h0 -> h1 on the
   plane-0 addresses (python sendall of 1 MiB blocks / recv_into).
3. **mrc**: mrcd on h0 and h1, ``mrc-perf server`` in h1, ``mrc-perf client h1`` in h0
   (1 MiB writes, ``--tx-depth 16``): goodput as mrc-perf reports it.

CPU: user+system seconds of the processes of each measurement (mrcds from
/proc/<pid>/stat, the tools from their rusage) per GB moved, and the whole machine's busy
CPU seconds per GB (/proc/stat: includes the kernel forwarding in the switch namespaces,
and other users of this shared machine). Prints min / median / max over ``--runs`` and the
ratios mrc/raw and mrc/tcp (of the medians), then the path's CPU per GB process by
process, MRC against raw side by side: each mrcd's user and system time, mrc-perf's
client and server (the transfer: start-up excluded, as for raw-send and raw-sink), the
tools' start-up, the machine's softirq time and the rest of the machine (other users of
this shared machine included). ``--profile DIR`` runs the mrcds under cProfile (``mrcd
--profile``) in the last run and prints their top functions; ``--sched-batch`` and
``--mrcd KEY=VALUE`` set mrcd settings.

``--steady SECONDS`` also measures each sending process (raw-send, mrcd h0) in the
middle of its transfer: once h0's ports send steadily, its user+system CPU over that
many seconds per GB its ports sent meanwhile. Both senders are CPU-bound here (each
takes a whole vCPU, the fabric's forwarding running inline in its ``sendmmsg``), so the
ratio raw / mrc of these figures is what bounds mrc / raw goodput, without the ramps,
the start-up and the 10 ms steps of whole-run CPU accounting; it needs transfers
longer than the window (e.g. ``--mib 4096 --raw-seconds 6 --steady 2``).
Everything started is stopped by PID; the fabric is removed even on error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pstats
import re
import resource
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BIN = os.path.dirname(sys.executable)
MRCD = os.path.join(BIN, "mrcd")
PERF = os.path.join(BIN, "mrc-perf")
CTL = os.path.join(BIN, "mrcctl")
#: Host counters of each mrcd reported after an MRC run (SACK rate, losses, resends).
COUNTERS = ("rx_frames", "tx_frames", "tx_retransmit", "lost_loss", "loss_rack_tie", "lost_trim",
            "lost_timeout", "loss_spurious", "rx_duplicate", "rx_sack_stale")
#: Port counters summed over each mrcd's ports after an MRC run (frames per syscall).
PORT_COUNTERS = ("rx_frames", "rx_batches", "tx_frames", "tx_batches")
DEFAULT_SPEC = "leafspine:planes=2,spines=2,leaves=2,hosts=1,rate=none,mtu=9000"
RAW_PAYLOAD = 8192
TICK = os.sysconf("SC_CLK_TCK")

TCP_SINK = """
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
buf = bytearray(1 << 20)
while c.recv_into(buf):
    pass
c.close()
"""
TCP_SEND = """
import socket, sys, time
n = int(sys.argv[3]); block = bytes(1 << 20)
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
t0 = time.perf_counter()
while n > 0:
    k = min(n, len(block)); s.sendall(block[:k]); n -= k
s.shutdown(socket.SHUT_WR); s.recv(1)
print(time.perf_counter() - t0)
"""


def _proc_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a running process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a running process."""
    return sum(_proc_times(pid))


#: /proc/stat's first line, the fields kept (guest time is inside user already)
STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def _machine_stat() -> dict[str, float]:
    """The whole machine's CPU seconds so far (all CPUs) by /proc/stat's kind."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return {k: n / TICK for k, n in zip(STAT_FIELDS, v, strict=False)}


def _machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (all CPUs)."""
    st = _machine_stat()
    return sum(st.values()) - st["idle"] - st["iowait"]


def _reap(p: subprocess.Popen[str], timeout: float) -> resource.struct_rusage:
    """Wait for ``p`` (by its PID, as Popen.wait would) and return its own rusage."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return ru
        if time.monotonic() > deadline:
            p.kill()
            timeout = 5.0
            deadline = time.monotonic() + timeout
        time.sleep(0.01)


def _run_rusage(cmd: list[str], timeout: float
                ) -> tuple[subprocess.CompletedProcess[str], resource.struct_rusage]:
    """subprocess.run(cmd, capture_output=True, text=True) that also gives the process's
    own rusage (output through files: nothing to drain while it runs)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        ru = _reap(p, timeout)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, p.returncode, out.read(), err.read()), ru


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@dataclass
class Meter:
    """CPU seconds used by our reaped children, given live PIDs, and the machine."""

    pids: list[int] = field(default_factory=list)
    t0: float = 0.0
    c0: float = 0.0
    m0: float = 0.0
    p0: dict[int, tuple[float, float]] = field(default_factory=dict)

    def __enter__(self) -> Meter:
        self.t0, self.c0, self.m0 = time.perf_counter(), _children_cpu(), _machine_busy()
        self.s0 = _machine_stat()
        self.p0 = {p: _proc_times(p) for p in self.pids}
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        #: per given PID: (user, system) CPU seconds used meanwhile
        self.per_pid = {p: tuple(b - a for a, b in zip(t0, _proc_times(p), strict=True))
                        for p, t0 in self.p0.items()}
        self.live = sum(u + s for u, s in self.per_pid.values())  # the given PIDs
        self.children = _children_cpu() - self.c0  # tools started and reaped meanwhile
        self.proc = self.children + self.live
        self.machine = _machine_busy() - self.m0
        #: the machine's CPU seconds meanwhile by kind (/proc/stat: user, system, softirq..)
        self.stat = {k: v - self.s0[k] for k, v in _machine_stat().items()}


#: --steady: a sender counts as steady once h0's ports send this many bytes a second
STEADY_RATE = 200e6


def h0_sent(fab: Any) -> int:
    """Bytes h0's ports have sent (their interfaces' tx_bytes, summed)."""
    r = subprocess.run([*_ns(fab, "h0"), "sh", "-c", "cat /sys/class/net/*/statistics/tx_bytes"],
                       capture_output=True, text=True, timeout=10, check=False)
    return sum(int(x) for x in r.stdout.split())


def h0_steady(fab: Any, pause: Callable[[float], object] = time.sleep) -> bool:
    """Did h0's ports send at :data:`STEADY_RATE` or more over the next 0.3 s
    (``pause``: how to wait them)?"""
    b0 = h0_sent(fab)
    pause(0.3)
    return (h0_sent(fab) - b0) / 0.3 >= STEADY_RATE


class SteadySender(threading.Thread):
    """``--steady``: the CPU per GB of h0's sending process (``pid()``: None until it
    runs) over ``seconds`` in the middle of its transfer, per byte h0's ports sent
    meanwhile; :attr:`s_per_gb` stays None if the transfer never held that long."""

    def __init__(self, fab: Any, pid: Callable[[], int | None], seconds: float) -> None:
        super().__init__(daemon=True)
        self.fab, self.pid, self.seconds = fab, pid, seconds
        self.s_per_gb: float | None = None
        self.done = threading.Event()

    def run(self) -> None:
        with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
            while not self.done.is_set():
                pid = self.pid()
                # (a wait ended by done leaves the loop at its test)
                if not h0_steady(self.fab, self.done.wait) or pid is None \
                        or self.done.is_set():
                    continue
                c0, b0 = sum(_proc_times(pid)), h0_sent(self.fab)
                if self.done.wait(self.seconds):
                    return  # (it ended inside the window: no figure)
                c1, b1 = sum(_proc_times(pid)), h0_sent(self.fab)
                if b1 > b0:
                    self.s_per_gb = (c1 - c0) / ((b1 - b0) / 1e9)
                return

    def result(self) -> float | None:
        """Stop watching; the figure, or None."""
        self.done.set()
        self.join(timeout=30)
        return self.s_per_gb


@contextlib.contextmanager
def _steady(fab: Any, pid: Callable[[], int | None], seconds: float
            ) -> Iterator[dict[str, float | None]]:
    """A SteadySender for the block (none when ``seconds`` is 0); the figure lands in
    the yielded dict's ``sender_steady_s_per_gb``."""
    out: dict[str, float | None] = {"sender_steady_s_per_gb": None}
    t = SteadySender(fab, pid, seconds) if seconds > 0 else None
    if t is not None:
        t.start()
    try:
        yield out
    finally:
        if t is not None:
            out["sender_steady_s_per_gb"] = t.result()


#: --pin: host -> CPU for every process the bench starts in that host (taskset)
PIN: dict[str, int] = {}
#: --sched-batch: the hosts whose mrcd runs under SCHED_BATCH (mrcd's ``sched_batch``)
SCHED_BATCH: set[str] = set()
#: --mrcd: top-level mrcd settings (TOML lines) for both hosts
MRCD_SETTINGS: list[str] = []


def _ns(fab: Any, host: str) -> list[str]:
    pin = ["taskset", "-c", str(PIN[host])] if host in PIN else []
    return [*pin, "ip", "netns", "exec", fab.netns(host)]


@contextlib.contextmanager
def _mrcds(fab: Any, tmp: Path, profile: Path | None,
           core: list[str]) -> Iterator[dict[str, tuple[int, str]]]:
    """mrcd on h0 and h1 (``SCHED_BATCH`` where --sched-batch set it), stopped by PID on
    the way out; yields each host's (PID, socket path)."""
    started: dict[str, subprocess.Popen[bytes]] = {}
    socks: dict[str, tuple[int, str]] = {}
    try:
        for h in ("h0", "h1"):
            sock = str(tmp / f"{h}.sock")
            cfg = tmp / f"{h}.toml"
            cfg.write_text(f'host = "{h}"\nsocket = "{sock}"\n'
                           f'fabric = "{fab.description_path}"\nlog_level = "warning"\n'
                           + ("sched_batch = true\n" if h in SCHED_BATCH else "")
                           + "".join(f"{line}\n" for line in MRCD_SETTINGS)
                           + ("[core]\n" + "\n".join(core) + "\n" if core else ""))
            log = open(tmp / f"{h}.log", "wb")  # noqa: SIM115 (closed with the process)
            args = [MRCD, "--config", str(cfg)]
            if profile is not None:
                args += ["--profile", str(profile / f"mrcd-{h}.prof")]
            p = subprocess.Popen([*_ns(fab, h), *args], stdout=log, stderr=subprocess.STDOUT)
            log.close()
            started[h] = p
            deadline = time.monotonic() + 20
            while not os.path.exists(sock):
                if p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"mrcd {h} did not start: "
                                       f"{(tmp / f'{h}.log').read_text()}")
                time.sleep(0.05)
            socks[h] = (p.pid, sock)
        time.sleep(0.3)
        yield socks
    finally:
        for p in started.values():  # by PID: SIGTERM, then SIGKILL
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)


def run_raw(fab: Any, seconds: float, steady: float = 0.0) -> dict[str, Any]:
    desc = str(fab.description_path)
    sender: list[int] = []
    with Meter() as m, _steady(fab, lambda: sender[0] if sender else None, steady) as st:
        sink = subprocess.Popen([*_ns(fab, "h1"), PERF, "raw-sink", "--fabric", desc,
                                                  "--host", "h1", "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert sink.stderr is not None
        sink.stderr.readline()  # "listening on ..."
        send = subprocess.Popen([*_ns(fab, "h0"), PERF, "raw-send", "--fabric", desc,
                                 "--host", "h0", "h1", "--seconds", str(seconds), "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sender.append(send.pid)  # (ip netns exec execs the tool: the same PID)
        send_out, send_err = send.communicate(timeout=seconds + 60)
        if send.returncode:
            raise RuntimeError(f"mrc-perf raw-send failed: {send_err}")
        out, _ = sink.communicate(timeout=60)
    r = json.loads(out)
    s = json.loads(send_out)
    nbytes = (r["frames"] - r["trimmed"]) * RAW_PAYLOAD
    return {"gbps": nbytes * 8 / r["seconds"] / 1e9, "bytes": nbytes,
            "sent_frames": s["frames"], "recv_frames": r["frames"], "trimmed": r["trimmed"],
            "proc_cpu": m.proc, "machine_cpu": m.machine,
            # the sending process alone (its frames: some did not fit the socket and
            # were dropped, offered load being the point; per byte that arrived)
            "send_user": s["cpu_user"], "send_sys": s["cpu_system"],
            **st,
            # the transfer alone (start-up excluded, as mrc-perf's rows are)
            **{f"{who}_{k}": d.get(f"transfer_cpu_{kind}", d[f"cpu_{kind}"])
               for who, d in (("sendx", s), ("sink", r))
               for k, kind in (("user", "user"), ("sys", "system"))},
            **{f"m_{k}": v for k, v in m.stat.items()}}


def run_tcp(fab: Any, nbytes: int) -> dict[str, float]:
    addr = fab.description.host("h1").port(0).address
    py = sys.executable
    with Meter() as m:
        sink = subprocess.Popen([*_ns(fab, "h1"), py, "-c", TCP_SINK, addr, "5201"],
                                stdout=subprocess.PIPE, text=True)
        assert sink.stdout is not None
        sink.stdout.readline()
        r = subprocess.run([*_ns(fab, "h0"), py, "-c", TCP_SEND, addr, "5201", str(nbytes)],
                           capture_output=True, text=True, timeout=300, check=True)
        sink.wait(60)
    dt = float(r.stdout)
    return {"gbps": nbytes * 8 / dt / 1e9, "bytes": nbytes, "proc_cpu": m.proc,
            "machine_cpu": m.machine}


def run_mrc(fab: Any, tmp: Path, nbytes: int, profile: Path | None, core: list[str],
            cc: str | None, size: int = 1 << 20, depth: int = 16,
            steady: float = 0.0) -> dict[str, Any]:
    iters = max(1, nbytes // size)
    with _mrcds(fab, tmp, profile, core) as socks:
        pids = {h: pid for h, (pid, _) in socks.items()}
        with Meter(list(pids.values())) as m, _steady(fab, lambda: pids["h0"], steady) as st:
            server = subprocess.Popen([*_ns(fab, "h1"), PERF, "--socket", socks["h1"][1],
                                                        "--timeout", "60", "server",
                                                        "--size", str(size)],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True)
            assert server.stdout is not None
            server.stdout.readline()  # waiting on service ...
            r, cru = _run_rusage([*_ns(fab, "h0"), PERF, "--socket", socks["h0"][1],
                                  "--timeout", "60", "client", "h1", "--size", str(size),
                                  "--iters", str(iters), "--tx-depth", str(depth), "--json",
                                  *(["--cc", cc] if cc else [])], 600)
            sout = server.stdout.read()
            sru = _reap(server, 60)
        if r.returncode != 0:
            raise RuntimeError(f"mrc-perf client failed: {r.stderr}")
        counters = {}
        for h, (_, sock) in socks.items():
            c = subprocess.run([*_ns(fab, h), CTL, "ports", "--socket", sock, "--json"],
                               capture_output=True, text=True, timeout=30, check=False)
            doc = json.loads(c.stdout) if c.returncode == 0 else {}
            host = doc.get("host", {})
            counters.update({f"{h}_{k}": host.get(k, 0) for k in COUNTERS})
            # the loop's passes by what woke them (and sched_batch = "bulk"'s changes)
            with contextlib.suppress(Exception):  # (an mrcd without the stats request)
                from mrcnet.api import Context

                with Context(sock) as ctx:
                    passes = ctx.stats().get("loop_passes", {})
                counters.update({f"{h}_passes_{k}": v for k, v in passes.items()})
            # the ports' syscalls: frames per recvmmsg and per sendmmsg
            for k in PORT_COUNTERS:
                counters[f"{h}_port_{k}"] = sum(p.get(k, 0) for p in doc.get("ports", []))
            # Frames the kernel dropped at the packet sockets (receive buffer full):
            # sk_drops, the d<N> of ss's socket memory line.
            ss = subprocess.run([*_ns(fab, h), "ss", "-0", "-m", "-n"], capture_output=True,
                                text=True, timeout=30, check=False).stdout
            counters[f"{h}_sk_drops"] = sum(int(x) for x in re.findall(r"\bd(\d+)\)", ss))
    (row,) = [x for x in map(json.loads, r.stdout.splitlines()) if x.get("type") == "result"]
    # mrc-perf's own CPU for the transfer (both sides report it; start-up excluded: a
    # Python process's imports are most of what its PID used for 256 MiB).
    m_cpu = re.search(r"server CPU ([0-9.]+) s", sout or "")
    client_cpu = float(row.get("cpu_s", 0.0))
    server_cpu = float(m_cpu.group(1)) if m_cpu else 0.0
    # The warm-up writes (iters // 2) moved data too: count them in the CPU per GB.
    nbytes = size * (iters + iters // 2)
    return {"gbps": row["gbps"], "bytes": nbytes, "errors": row["errors"],
            "proc_cpu": m.proc, "machine_cpu": m.machine, "mrcd_cpu": m.live,
            "tools_cpu": m.children, "perf_cpu": client_cpu + server_cpu,
            "client_cpu": client_cpu, "server_cpu": server_cpu,
            "client_pid_user": cru.ru_utime, "client_pid_sys": cru.ru_stime,
            "server_pid_user": sru.ru_utime, "server_pid_sys": sru.ru_stime,
            **{f"m_{k}": v for k, v in m.stat.items()}, **counters, **st,
            **{f"{h}_{kind}": m.per_pid[pid][i] for h, pid in pids.items()
               for i, kind in enumerate(("user", "sys"))}}


def _profile_top(path: Path, n: int = 15) -> list[str]:
    st = pstats.Stats(str(path))
    total = st.total_tt  # type: ignore[attr-defined]
    rows = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    out = [f"{path.name}: {total:.2f} s profiled (tottime = own time, cumtime = with callees)"]
    for (fname, line, func), (_cc, nc, tt, ct, _callers) in rows[:n]:
        where = f"{os.path.basename(fname)}:{line}({func})"
        out.append(f"  {tt / total * 100:5.1f}%  tottime {tt:6.2f}  cumtime {ct:6.2f}  "
                   f"calls {nc:>8}  {where}")
    return out


#: The per-process table's rows: (label, the MRC run's CPU seconds, the raw run's), each
#: from a run's result dict (None: no such process in that run).
_Row = tuple[str, Any, Any]
PROCESS_ROWS: tuple[_Row, ...] = (
    ("sender user (mrcd h0 / raw-send)", lambda r: r["h0_user"], lambda r: r["sendx_user"]),
    ("sender system", lambda r: r["h0_sys"], lambda r: r["sendx_sys"]),
    ("receiver user (mrcd h1 / raw-sink)", lambda r: r["h1_user"], lambda r: r["sink_user"]),
    ("receiver system", lambda r: r["h1_sys"], lambda r: r["sink_sys"]),
    ("mrc-perf client (transfer)", lambda r: r["client_cpu"], None),
    ("mrc-perf server (transfer)", lambda r: r["server_cpu"], None),
    ("the path's processes (the rows above)",
     lambda r: r["h0_user"] + r["h0_sys"] + r["h1_user"] + r["h1_sys"] + r["client_cpu"]
     + r["server_cpu"],
     lambda r: r["sendx_user"] + r["sendx_sys"] + r["sink_user"] + r["sink_sys"]),
    ("tools' start-up (PIDs - transfer)",
     lambda r: r["tools_cpu"] - r["client_cpu"] - r["server_cpu"],
     lambda r: r["proc_cpu"] - r["sendx_user"] - r["sendx_sys"] - r["sink_user"]
     - r["sink_sys"]),
    # (a softirq that ran in a process's context, as the fabric's forwarding inside a
    # sendmmsg does, is in that process's system time too: this row overlaps those)
    ("machine softirq (/proc/stat)", lambda r: r["m_softirq"], lambda r: r["m_softirq"]),
    ("machine busy - the processes above",
     lambda r: r["machine_cpu"] - r["proc_cpu"], lambda r: r["machine_cpu"] - r["proc_cpu"]),
    ("machine busy (all of it)", lambda r: r["machine_cpu"], lambda r: r["machine_cpu"]),
)


def process_table(results: dict[str, list[dict[str, float]]]) -> list[dict[str, Any]]:
    """CPU seconds per GB, process by process, MRC against raw: per row the per-run
    values of each (what each run moved: MRC bytes written, raw bytes that arrived)."""
    out = []
    for label, fm, fr in PROCESS_ROWS:
        row: dict[str, Any] = {"row": label}
        for k, f in (("mrc", fm), ("raw", fr)):
            if f is not None and results.get(k):
                row[k] = [f(r) / (r["bytes"] / 1e9) for r in results[k]]
        out.append(row)
    return out


def _stats(xs: list[float]) -> str:
    return f"{min(xs):7.3f} {statistics.median(xs):7.3f} {max(xs):7.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=DEFAULT_SPEC)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mib", type=int, default=256, help="MiB per MRC and TCP run")
    ap.add_argument("--raw-seconds", type=float, default=3.0)
    ap.add_argument("--write-size", type=int, default=1 << 20, help="bytes per RDMA WRITE")
    ap.add_argument("--tx-depth", type=int, default=16, help="writes outstanding")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cc", help="congestion control of the MRC QP (default: mrcd's)")
    ap.add_argument("--core", action="append", default=[], metavar="KEY=VALUE",
                    help="an mrcd [core] setting (TOML value), e.g. --core ack_every=8")
    ap.add_argument("--mrcd", action="append", default=[], metavar="KEY=VALUE",
                    help='a top-level mrcd setting (TOML value) for both hosts, e.g. '
                         '--mrcd sched_batch=\'"bulk"\'')
    ap.add_argument("--skip", action="append", default=[], choices=["raw", "tcp"],
                    help="leave out a baseline (e.g. to try mrcd settings quickly)")
    ap.add_argument("--profile", metavar="DIR", help="cProfile the mrcds of the last run")
    ap.add_argument("--pin", action="store_true",
                    help="pin each host's processes to a CPU of its own (h0: CPU 0, h1: "
                         "CPU 1): mrcd and the sending tool, mrcd and the receiving tool")
    ap.add_argument("--sched-batch", nargs="?", const="h0,h1", default="", metavar="HOSTS",
                    help="mrcd under SCHED_BATCH (mrcd's sched_batch) on these hosts "
                         "(default both: h0,h1): woken by a frame, an mrcd does not "
                         "preempt the sender mid-batch")
    ap.add_argument("--steady", type=float, default=0.0, metavar="SECONDS",
                    help="also each sender's CPU per GB over this many seconds in the "
                         "middle of its transfer (raw-send, mrcd h0): what bounds the "
                         "goodput ratio, measured without ramps or start-up; needs "
                         "transfers longer than that (e.g. --mib 4096 --raw-seconds 6)")
    ap.add_argument("--prefix", default="mf",
                    help="fabric name prefix (its netns are PREFIX<hex>-<node>; fabric "
                         "names are lowercase a-z0-9, at most 10 characters in all)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_goodput: needs root (network namespaces, packet sockets)",
              file=sys.stderr)
        return 1
    from mrcnet.fabric.fabric import Fabric

    results: dict[str, list[dict[str, float]]] = {"raw": [], "tcp": [], "mrc": []}
    SCHED_BATCH.update(h for h in args.sched_batch.split(",") if h)
    MRCD_SETTINGS.extend(args.mrcd)
    if SCHED_BATCH - {"h0", "h1"}:
        ap.error(f"--sched-batch: hosts are h0 and h1, not {args.sched_batch!r}")
    if args.pin:
        PIN.update({"h0": 0, "h1": 1 % (os.cpu_count() or 1)})
    prof_dir = Path(args.profile) if args.profile else None
    if prof_dir:
        prof_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mfbench") as td:
        tmp = Path(td)
        os.environ["MRC_FABRIC_STATE_DIR"] = str(tmp / "fabrics")
        with Fabric.up(args.spec, name=args.prefix + secrets.token_hex(3)) as fab:
            for i in range(args.runs):
                last = i == args.runs - 1
                if "raw" not in args.skip:
                    results["raw"].append(run_raw(fab, args.raw_seconds, args.steady))
                if "tcp" not in args.skip:
                    results["tcp"].append(run_tcp(fab, args.mib << 20))
                results["mrc"].append(run_mrc(fab, tmp, args.mib << 20,
                                              prof_dir if last else None, args.core,
                                              args.cc, args.write_size, args.tx_depth,
                                              args.steady))
                print(f"run {i + 1}: " + ", ".join(f"{k} {v[-1]['gbps']:.2f} Gb/s"
                                                   for k, v in results.items() if v),
                      file=sys.stderr, flush=True)
    results = {k: v for k, v in results.items() if v}
    med = {k: statistics.median(r["gbps"] for r in v) for k, v in results.items()}
    summary: dict[str, Any] = {"spec": args.spec, "runs": args.runs, "mib": args.mib,
                               "cc": args.cc, "core": args.core,
                               "sched_batch": args.sched_batch, "mrcd": args.mrcd}
    for k, v in results.items():
        summary[k] = {
            "gbps": [r["gbps"] for r in v],
            "proc_cpu_s_per_gb": [r["proc_cpu"] / (r["bytes"] / 1e9) for r in v],
            "machine_cpu_s_per_gb": [r["machine_cpu"] / (r["bytes"] / 1e9) for r in v],
            "sender_steady_s_per_gb": [r.get("sender_steady_s_per_gb") for r in v],
            "detail": v,
        }
    summary["processes"] = process_table(results)
    summary["ratio_mrc_raw"] = med["mrc"] / med["raw"] if med.get("raw") else 0.0
    summary["ratio_mrc_tcp"] = med["mrc"] / med["tcp"] if med.get("tcp") else 0.0
    if prof_dir:
        summary["profile"] = [line for h in ("h0", "h1")
                              if (prof_dir / f"mrcd-{h}.prof").exists()
                              for line in _profile_top(prof_dir / f"mrcd-{h}.prof")]
    steady = {k: [x for x in summary[k]["sender_steady_s_per_gb"] if x is not None]
              for k in ("raw", "mrc") if k in summary}
    if steady.get("raw") and steady.get("mrc"):
        summary["ratio_steady_raw_mrc"] = (statistics.median(steady["raw"])
                                           / statistics.median(steady["mrc"]))
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{args.spec}, h0 -> h1, {args.runs} runs (min median max)")
    print(f"{'':6} {'goodput Gb/s':>23}   {'process CPU s/GB':>23}   {'machine CPU s/GB':>23}")
    for k in results:
        s = summary[k]
        print(f"{k:6} {_stats(s['gbps'])}   {_stats(s['proc_cpu_s_per_gb'])}   "
              f"{_stats(s['machine_cpu_s_per_gb'])}")
    mrc = results["mrc"]
    gb = [r["bytes"] / 1e9 for r in mrc]
    split = [(r["mrcd_cpu"] / g, r["tools_cpu"] / g) for r, g in zip(mrc, gb, strict=True)]
    print(f"mrc process CPU split: both mrcds {_stats([a for a, _ in split])}"
          f" s/GB, mrc-perf client + server "
          f"{_stats([b for _, b in split])} s/GB")
    print(f"mrc-perf's own CPU for the transfer (client + server, start-up excluded): "
          f"{_stats([r['perf_cpu'] / g for r, g in zip(mrc, gb, strict=True)])} s/GB")
    last = mrc[-1]
    print("last MRC run, host counters: " + ", ".join(
        f"{h}.{k} {last.get(f'{h}_{k}', 0):.0f}" for h in ("h0", "h1") for k in COUNTERS
        if last.get(f"{h}_{k}")) + "".join(
        f", {h}.sk_drops {last.get(f'{h}_sk_drops', 0)}" for h in ("h0", "h1")))
    per_call = [(r["h1_port_rx_frames"] / max(1, r["h1_port_rx_batches"]),
                  r["h1_port_tx_frames"] / max(1, r["h1_port_rx_frames"]),
                  r["h1_port_tx_frames"] / max(1, r["h1_port_tx_batches"]),
                  r["h0_port_tx_frames"] / max(1, r["h0_port_tx_batches"]),
                  r["h0_port_rx_frames"] / max(1, r["h0_port_rx_batches"])) for r in mrc]
    print(f"receiving mrcd: frames per recvmmsg {_stats([x[0] for x in per_call])}, SACKs "
          f"per data frame {_stats([x[1] for x in per_call])}, per sendmmsg "
          f"{_stats([x[2] for x in per_call])}")
    print(f"sending mrcd: frames per sendmmsg {_stats([x[3] for x in per_call])}, SACKs per "
          f"recvmmsg {_stats([x[4] for x in per_call])}")
    for h in ("h0", "h1"):
        port = [r.get(f"{h}_passes_port", 0) / g for r, g in zip(mrc, gb, strict=True)]
        client = [r.get(f"{h}_passes_client", 0) / g for r, g in zip(mrc, gb, strict=True)]
        changes = [r.get(f"{h}_passes_sched_batch_changes") for r in mrc]
        print(f"mrcd {h} loop passes per GB: port {_stats(port)}, client {_stats(client)}"
              + (f"; SCHED_BATCH changes {_stats([float(c or 0) for c in changes])}"
                 if any(c is not None for c in changes) else ""))
    for h in ("h0", "h1"):
        role = "sender" if h == "h0" else "receiver"
        print(f"mrcd {h} ({role}) s/GB: user "
              f"{_stats([r[h + '_user'] / g for r, g in zip(mrc, gb, strict=True)])}"
              f", system {_stats([r[h + '_sys'] / g for r, g in zip(mrc, gb, strict=True)])}")
    if "raw" in results:
        raw = [(r, r["bytes"] / 1e9) for r in results["raw"]]
        print("raw sender s/GB (its PID, start-up included): user "
              f"{_stats([r['send_user'] / g for r, g in raw])}"
              f", system {_stats([r['send_sys'] / g for r, g in raw])}")
    print(f"CPU s/GB by process, median (min-max) of the runs; {'mrc':>16} {'raw':>16}"
          f" {'mrc - raw':>9}")
    for row in summary["processes"]:
        cells = [f"{statistics.median(row[k]):5.3f} ({min(row[k]):.2f}-{max(row[k]):.2f})"
                 if k in row else "-" for k in ("mrc", "raw")]
        diff = (f"{statistics.median(row['mrc']) - statistics.median(row['raw']):+9.3f}"
                if "mrc" in row and "raw" in row else "")
        print(f"  {row['row']:<42} {cells[0]:>16} {cells[1]:>16} {diff}")
    if args.steady:
        print(f"the sender's CPU s/GB in the steady state ({args.steady:g} s windows): "
              + ", ".join(f"{'raw-send' if k == 'raw' else 'mrcd h0'} {_stats(v)}"
                          if v else f"{k}: none (a transfer shorter than the window)"
                          for k, v in steady.items()))
        if "ratio_steady_raw_mrc" in summary:
            print(f"  raw / mrc of those (medians) = {summary['ratio_steady_raw_mrc']:.3f}: "
                  "the goodput ratio's bound while both senders are CPU-bound")
    print(f"mrc / raw = {summary['ratio_mrc_raw']:.2f}   mrc / tcp = "
          f"{summary['ratio_mrc_tcp']:.2f}   (issue 15 asked mrc >= 0.8 x raw, median of --runs 5)")
    for line in summary.get("profile", []):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
