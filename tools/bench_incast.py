#!/usr/bin/env python3
"""3 -> 1 incast through the socket API on a shaped mrc-fabric, trimming on vs off.

    .venv/bin/python tools/bench_incast.py [--mib 8] [--modes on,off]
        [--core KEY=VALUE ...] [--spec KEY=VALUE,...] [--prefix hc] [--json]

Fabric (one per mode, named ``<prefix><hex>`` in a private state directory; prefix
``$MRC_E2E_PREFIX`` or ``ic``)::

    leafspine:planes=2,spines=2,leaves=2,hosts=3,rate=200mbit,host_rate=100mbit,
              mtu=9000,queue=8pkt[,trim=off]

Hosts h0 h1 h2 hang off leaf 0 of both planes, h3 h4 h5 off leaf 1. mrcd runs on every
host. The incast: h1, h3, h4 each ``sendall`` ``--mib`` MiB of random bytes to one
listener on h0 (``mrcnet.api.socket``), all released at once; the receiver's leaf -> h0
ports (2 x 100 Mbit/s) are the bottleneck. The victim: h5 -> h2, a continuous stream for
the whole run; it crosses the same leaf 1 -> spine and spine -> leaf 0 links as h3 and h4
but not the incast port. Its goodput is measured alone first (baseline), then during
the incast.

Reported per mode: incast completion time over ideal (bytes / bottleneck rate), the
fabric's trims and drops on the incast port (BPF counters of ``L<n>.0->h0``), the
senders' mrcd counters (``lost_trim``: trimmed packets NACKed and queued for resend,
``lost_loss``: SACK/RACK-detected losses, ``lost_timeout``: packets resent because their
retransmission timer fired, ``rto_rounds``, ``tx_retransmit``), the receiver's
``tx_nack``, and the victim's goodput during the incast over its baseline and over its
link capacity, and the mrcds' CPU, the kernel's drops at each mrcd's packet sockets,
and the incast ports' real (qdisc) and virtual (BPF) backlog, sampled every 5 ms. Every
byte is checked (sha256 per connection). mrcd runs with its own defaults (timeout floor
20 ms) unless ``--core`` says otherwise (``--core timeout_floor=0.5`` is what the test
needed before the fabric's queues were fixed, docs/INCAST.md); a mode ``on:defaults``
uses mrcd's defaults even then.

Importable: :func:`run_incast` and :func:`fabric_mrcds` are used by tests/e2e.
Everything started is stopped by PID; the fabric is removed even on error.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import secrets
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BIN = os.path.dirname(sys.executable)
MRCD = os.path.join(BIN, "mrcd")
MIB = 1 << 20

RECEIVER, SENDERS = "h0", ("h1", "h3", "h4")
VICTIM_SRC, VICTIM_DST = "h5", "h2"
INCAST_SERVICE, VICTIM_SERVICE = 10, 11
#: mrcd host counters reported for the senders (summed over the three).
SENDER_COUNTERS = ("tx_data", "tx_retransmit", "lost_trim", "lost_loss", "lost_timeout",
                   "rto_rounds", "loss_spurious", "rx_nack_stale", "rx_nack_lasthop",
                   "ev_skip_trim")
RECEIVER_COUNTERS = ("rx_data", "rx_trimmed", "tx_nack", "tx_nack_lasthop", "rx_duplicate")


def spec_for(trim: bool, rate: str = "200mbit", host_rate: str = "100mbit",
             queue: str = "8pkt", extra: str = "") -> str:
    """The fabric spec of one mode (the same but for ``trim``); ``extra``: more
    ``key=value`` items (e.g. ``vq_drain=0.85,txqueuelen=40``)."""
    s = (f"leafspine:planes=2,spines=2,leaves=2,hosts=3,rate={rate},host_rate={host_rate},"
         f"mtu=9000,queue={queue}")
    if extra:
        s += "," + extra.strip(",")
    return s if trim else s + ",trim=off"


def default_prefix() -> str:
    """Fabric name prefix: ``$MRC_E2E_PREFIX`` (so that engineers sharing a machine keep
    their fabrics apart), else ``ic``."""
    return os.environ.get("MRC_E2E_PREFIX") or "ic"


# --- fabric + mrcds ----------------------------------------------------------------------

@dataclass
class MrcdProc:
    """An mrcd this process started (stopped by its PID only)."""

    host: str
    socket: str
    proc: subprocess.Popen[bytes]
    log: str

    def logs(self) -> str:
        return Path(self.log).read_text(errors="replace")

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)


def start_mrcd(netns: str, host: str, fabric_path: str, workdir: Path,
               core: dict[str, float | bool] | None = None, timeout: float = 30.0,
               profile: Path | None = None, top: str = "") -> MrcdProc:
    """mrcd for ``host`` inside ``netns`` (``ip netns exec`` execs it: the PID is mrcd's);
    ``core``: ``[core]`` overrides of its configuration; ``profile``: a directory for its
    cProfile statistics (``HOST.prof``, written when it stops); ``top``: top-level TOML
    lines of its configuration (``key = value``, one per line)."""
    sock = str(workdir / f"{host}.sock")
    cfg = workdir / f"{host}.toml"
    text = (f'host = "{host}"\nsocket = "{sock}"\nfabric = "{fabric_path}"\n'
            f'log_level = "info"\n{top}')
    if core:
        # (TOML spells booleans in lower case: ack_lone = false)
        text += "[core]\n" + "".join(
            f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v)}\n"
            for k, v in core.items())
    cfg.write_text(text)
    log = str(workdir / f"{host}.log")
    with open(log, "wb") as lf:
        extra = ["--profile", str(profile / f"{host}.prof")] if profile else []
        proc = subprocess.Popen(["ip", "netns", "exec", netns, MRCD, "--config", str(cfg),
                                 *extra], stdout=lf, stderr=subprocess.STDOUT)
    m = MrcdProc(host, sock, proc, log)
    deadline = time.monotonic() + timeout
    while not os.path.exists(sock) or "mrcd ready" not in m.logs():
        if proc.poll() is not None:
            raise RuntimeError(f"mrcd {host} exited {proc.returncode}: {m.logs()}")
        if time.monotonic() > deadline:
            m.stop()
            raise RuntimeError(f"mrcd {host} not ready in {timeout} s: {m.logs()}")
        time.sleep(0.05)
    return m


@dataclass
class Lab:
    """A fabric with an mrcd on some of its hosts."""

    fab: Any  # mrcnet.fabric.fabric.Fabric
    mrcds: dict[str, MrcdProc]
    workdir: Path

    def sock(self, host: str) -> str:
        return self.mrcds[host].socket


@contextlib.contextmanager
def fabric_mrcds(spec: str, workdir: Path, hosts: tuple[str, ...] | None = None,
                 prefix: str | None = None, core: dict[str, float | bool] | None = None,
                 profile: Path | None = None, top: str = "") -> Iterator[Lab]:
    """Fabric ``<prefix><hex>`` (default :func:`default_prefix`) recorded under
    ``workdir/fabrics`` with an mrcd on ``hosts`` (default all); the mrcds are stopped
    by PID and the fabric (exactly its recorded namespaces) removed on the way out.
    ``profile``: a directory where each mrcd writes its cProfile statistics; ``top``:
    top-level lines of every mrcd's configuration (:func:`start_mrcd`)."""
    from mrcnet.fabric.fabric import Fabric

    old = os.environ.get("MRC_FABRIC_STATE_DIR")
    os.environ["MRC_FABRIC_STATE_DIR"] = str(workdir / "fabrics")
    try:
        fab = Fabric.up(spec, name=(prefix or default_prefix()) + secrets.token_hex(3))
        started: dict[str, MrcdProc] = {}
        try:
            names = hosts or tuple(h.name for h in fab.description.hosts)
            for h in names:
                started[h] = start_mrcd(fab.netns(h), h, str(fab.description_path), workdir,
                                        core, profile=profile, top=top)
            yield Lab(fab, started, workdir)
        finally:
            for m in started.values():
                m.stop()
            fab.down()
    finally:
        if old is None:
            os.environ.pop("MRC_FABRIC_STATE_DIR", None)
        else:
            os.environ["MRC_FABRIC_STATE_DIR"] = old


def host_counters(sock: str) -> dict[str, int]:
    """mrcd's host counters (every QP's counters summed by the core)."""
    from mrcnet.api import Context

    ctx = Context(sock)
    try:
        c: dict[str, int] = dict(ctx.stats()["host"])
        return c
    finally:
        ctx.close()


TICK = os.sysconf("SC_CLK_TCK")


def packet_socket_drops(lab: Lab, host: str) -> int:
    """Frames the kernel dropped because the host mrcd's packet sockets were full
    (``ss -0 -m``: ``skmem`` ``d``, summed over the sockets of that mrcd's PID)."""
    pid = lab.mrcds[host].proc.pid
    r = lab.fab.exec(host, ["ss", "-0", "-a", "-m", "-n", "-p"], capture_output=True,
                     text=True, timeout=10)
    total = 0
    for line in r.stdout.splitlines():
        if f"pid={pid}," in line and (m := re.search(r"[(,]d(\d+)\)", line)):
            total += int(m.group(1))
    return total


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a process (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


RTM_GETQDISC, TCA_KIND, TCA_STATS, NLMSG_DONE = 38, 1, 3, 3
TC_H_ROOT = 0xFFFFFFFF


class QdiscBacklog:
    """Backlog (bytes, frames) of one port's root qdisc, read over rtnetlink from a
    socket opened inside the switch's netns: cheap enough to sample every few ms, where
    ``tc -s qdisc`` would fork a process per sample on a 2-CPU machine."""

    def __init__(self, netns: str, ifname: str) -> None:
        from mrcnet.fabric.nsutil import in_netns

        with in_netns(netns):
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
            self.ifindex = socket.if_nametoindex(ifname)
        self.seq = 0

    def read(self) -> tuple[int, int, int]:
        """(backlog bytes, frames, drops so far) of the root qdisc (tbf: everything
        queued behind it, and what its child dropped)."""
        self.seq += 1
        tcm = struct.pack("<BBHiIII", 0, 0, 0, self.ifindex, 0, 0, 0)
        # NLM_F_REQUEST | NLM_F_DUMP: a dump of every qdisc of the netns (few)
        self.sock.send(struct.pack("<IHHII", 16 + len(tcm), RTM_GETQDISC, 0x301, self.seq, 0)
                       + tcm)
        found = (0, 0, 0)
        while True:
            data = self.sock.recv(65536)
            off = 0
            while off + 16 <= len(data):
                ln, typ = struct.unpack_from("<IH", data, off)
                if typ == NLMSG_DONE:
                    return found
                _, _, _, idx, _, parent, _ = struct.unpack_from("<BBHiIII", data, off + 16)
                if idx == self.ifindex and parent == TC_H_ROOT:
                    a = off + 36
                    while a + 4 <= off + ln:
                        alen, atyp = struct.unpack_from("<HH", data, a)
                        if atyp == TCA_STATS and alen >= 4 + 36:
                            # struct tc_stats: u64 bytes, u32 packets, drops,
                            # overlimits, bps, pps, qlen, backlog
                            drops = struct.unpack_from("<I", data, a + 4 + 12)[0]
                            qlen, backlog = struct.unpack_from("<II", data, a + 4 + 28)
                            found = (backlog, qlen, drops)
                        a += (alen + 3) & ~3
                off += (ln + 3) & ~3

    def close(self) -> None:
        self.sock.close()


@dataclass
class QueueSampler:
    """Samples the real (qdisc) and virtual (BPF) backlog of the incast ports every
    ``interval`` s while running: the two queues docs/INCAST.md compares."""

    lab: Lab
    interval: float = 0.005
    real_max: dict[str, int] = field(default_factory=dict)
    virtual_max: dict[str, int] = field(default_factory=dict)
    real_sum: dict[str, int] = field(default_factory=dict)
    drops: dict[str, int] = field(default_factory=dict)  #: qdisc drops while running
    samples: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._ports: dict[str, tuple[QdiscBacklog, Any]] = {}
        for ln in self.lab.fab.description.links:
            if ln.b.ifname == RECEIVER:  # the leaf end of a leaf -> h0 link
                key = f"{ln.b.node}->{RECEIVER}"
                self._ports[key] = (QdiscBacklog(ln.b.netns, ln.b.ifname),
                                    self.lab.fab.maps(ln.b.node, ln.b.ifname))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._drops0: dict[str, int] = {}

    def start(self) -> None:
        self._drops0 = {k: q.read()[2] for k, (q, _) in self._ports.items()}
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples += 1
            for key, (q, maps) in self._ports.items():
                real = q.read()[0]
                virt = maps.read_backlog()
                self.real_max[key] = max(self.real_max.get(key, 0), real)
                self.virtual_max[key] = max(self.virtual_max.get(key, 0), virt)
                self.real_sum[key] = self.real_sum.get(key, 0) + real

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for key, (q, _) in self._ports.items():
            self.drops[key] = q.read()[2] - self._drops0.get(key, 0)
            q.close()


def diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}


# --- the experiment ------------------------------------------------------------------------

@dataclass
class Reader:
    """Reads one connection to its end: bytes, sha256, (time, total) samples."""

    sock: Any
    peer: str = ""
    total: int = 0
    first: float = 0.0
    last: float = 0.0
    digest: str = ""
    error: str | None = None
    samples: list[tuple[float, int]] = field(default_factory=list)
    keep_samples: bool = False

    def run(self) -> None:
        h = hashlib.sha256()
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        try:
            while True:
                n = self.sock.recv_into(buf)
                if n == 0:
                    break
                now = time.monotonic()
                if not self.total:
                    self.first = now
                self.last = now
                self.total += n
                h.update(view[:n])
                if self.keep_samples:
                    self.samples.append((now, self.total))
            self.digest = h.hexdigest()
        except Exception as e:  # reported, and the test fails on it
            self.error = f"{type(e).__name__}: {e}"
        finally:
            with contextlib.suppress(Exception):
                self.sock.close()

    def bytes_between(self, t0: float, t1: float) -> int:
        """Bytes received between ``t0`` and ``t1`` (from the samples)."""
        at0 = at1 = 0
        for t, tot in self.samples:
            if t <= t0:
                at0 = tot
            if t <= t1:
                at1 = tot
        return at1 - at0


@dataclass
class IncastResult:
    mode: str
    spec: str
    bytes_per_sender: int
    bottleneck_bps: int
    ideal_s: float
    completion_s: float
    over_ideal: float
    per_sender_s: dict[str, float]
    byte_exact: bool
    errors: list[str]
    fabric_incast_port: dict[str, int]
    fabric_elsewhere: dict[str, int]
    senders: dict[str, int]
    senders_all: dict[str, int]
    links: dict[str, dict[str, int]]
    receiver: dict[str, int]
    victim: dict[str, int]
    victim_baseline_bps: float
    victim_during_bps: float
    victim_capacity_bps: int
    victim_share_of_baseline: float
    victim_share_of_capacity: float
    victim_byte_exact: bool
    mrcd_cpu_share: dict[str, float]  #: CPU seconds per second of the incast, per host
    socket_drops: dict[str, int]  #: frames dropped by the kernel at mrcd's full sockets
    #: incast ports ("L0.0->h0"): largest real (qdisc) and virtual (BPF) backlog sampled,
    #: and the mean real backlog, in bytes
    queue_real_max: dict[str, int] = field(default_factory=dict)
    queue_virtual_max: dict[str, int] = field(default_factory=dict)
    queue_real_mean: dict[str, float] = field(default_factory=dict)
    drop_thresh: int = 0  #: the switches' virtual-queue drop threshold, bytes
    trim_thresh: int = 0  #: the switches' virtual-queue trim threshold, bytes
    #: frames the incast ports' qdiscs dropped (the real queue full: txqueuelen)
    queue_drops: dict[str, int] = field(default_factory=dict)


def _sender(lab: Lab, host: str, data: bytes, start: threading.Event,
            done: threading.Event, out: dict[str, Any]) -> None:
    from mrcnet.api.socket import create_connection

    try:
        s = create_connection((RECEIVER, INCAST_SERVICE), timeout=120.0,
                              mrcd=lab.sock(host), connect_timeout=20.0)
        with s:
            out["connected"] = time.monotonic()
            start.wait()
            t0 = time.monotonic()
            s.sendall(data)
            s.flush(120.0)
            out["sent_s"] = time.monotonic() - t0
            # keep the QP (and its per-QP counters in mrcd's totals) until measured
            done.wait(60)
    except Exception as e:
        out["error"] = f"{host}: {type(e).__name__}: {e}"


def _victim_sender(lab: Lab, stop: threading.Event, out: dict[str, Any]) -> None:
    from mrcnet.api.socket import create_connection

    block = os.urandom(256 * 1024)
    h = hashlib.sha256()
    sent = 0
    try:
        s = create_connection((VICTIM_DST, VICTIM_SERVICE), timeout=60.0,
                              mrcd=lab.sock(VICTIM_SRC), connect_timeout=20.0)
        with s:
            i = 0
            while not stop.is_set():
                # vary the bytes so a misplaced block would show in the digest
                chunk = i.to_bytes(8, "little") + block[8:]
                s.sendall(chunk)
                h.update(chunk)
                sent += len(chunk)
                i += 1
        out["digest"] = h.hexdigest()
        out["sent"] = sent
    except Exception as e:
        out["error"] = f"victim: {type(e).__name__}: {e}"


def run_incast(trim: bool, workdir: Path, *, mib: int = 8, rate: str = "200mbit",
               host_rate: str = "100mbit", queue: str = "8pkt",
               baseline_s: float = 1.5, core: dict[str, float] | None = None,
               extra: str = "", prefix: str | None = None) -> IncastResult:
    """One mode: fabric, mrcds, victim alone, then the incast beside it."""
    from mrcnet.api.socket import create_server
    from mrcnet.fabric.spec import parse_spec

    spec = spec_for(trim, rate, host_rate, queue, extra)
    topo = parse_spec(spec)
    planes = topo.planes
    bottleneck = planes * topo.host_link_rate
    nbytes = mib * MIB
    hosts = (RECEIVER, *SENDERS, VICTIM_SRC, VICTIM_DST)
    workdir.mkdir(parents=True, exist_ok=True)
    with fabric_mrcds(spec, workdir, tuple(sorted(hosts)), prefix, core=core) as lab:
        errors: list[str] = []
        threads: list[threading.Thread] = []
        # victim: listener on h2, stream from h5
        vsrv = create_server(VICTIM_SERVICE, mrcd=lab.sock(VICTIM_DST), timeout=30.0)
        isrv = create_server(INCAST_SERVICE, mrcd=lab.sock(RECEIVER), timeout=30.0)
        stop_victim = threading.Event()
        vout: dict[str, Any] = {}
        vt = threading.Thread(target=_victim_sender, args=(lab, stop_victim, vout),
                              daemon=True)
        vt.start()
        vconn, _ = vsrv.accept()
        vreader = Reader(vconn, VICTIM_SRC, keep_samples=True)
        vrt = threading.Thread(target=vreader.run, daemon=True)
        vrt.start()
        # incast senders connect now (not timed) and wait for the start
        start, done = threading.Event(), threading.Event()
        datas = {h: os.urandom(nbytes) for h in SENDERS}
        outs: dict[str, dict[str, Any]] = {h: {} for h in SENDERS}
        for h in SENDERS:
            t = threading.Thread(target=_sender, args=(lab, h, datas[h], start, done, outs[h]),
                                 daemon=True)
            t.start()
            threads.append(t)
        readers: list[Reader] = []
        for _ in SENDERS:
            conn, (peer, _qpn) = isrv.accept()
            r = Reader(conn, peer)
            readers.append(r)
            rt = threading.Thread(target=r.run, daemon=True)
            rt.start()
            threads.append(rt)
        deadline = time.monotonic() + 20
        while any("connected" not in o and "error" not in o for o in outs.values()):
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        # victim alone: warm up, then the baseline
        time.sleep(1.0)
        b0 = time.monotonic()
        time.sleep(baseline_s)
        b1 = time.monotonic()
        before = {h: host_counters(lab.sock(h)) for h in hosts}
        fab_before = lab.fab.counters()
        cpu0 = {h: cpu_seconds(m.proc.pid) for h, m in lab.mrcds.items()}
        sdrop0 = {h: packet_socket_drops(lab, h) for h in hosts}
        sampler = QueueSampler(lab)
        sampler.start()
        t0 = time.monotonic()
        start.set()
        limit = time.monotonic() + 180
        while (any("sent_s" not in o and "error" not in o for o in outs.values())
               and time.monotonic() < limit):
            time.sleep(0.01)
        sampler.stop()
        t_end = max((r.last for r in readers), default=time.monotonic())
        cpu1 = {h: cpu_seconds(m.proc.pid) for h, m in lab.mrcds.items()}
        t_cpu = time.monotonic()
        after = {h: host_counters(lab.sock(h)) for h in hosts}
        fab_after = lab.fab.counters()
        sdrop1 = {h: packet_socket_drops(lab, h) for h in hosts}
        done.set()
        for t in threads:
            t.join(60)
        stop_victim.set()
        vt.join(60)
        vrt.join(60)
        isrv.close()
        vsrv.close()

        for h, o in outs.items():
            if "error" in o:
                errors.append(str(o["error"]))
            elif "sent_s" not in o:
                errors.append(f"{h}: did not finish")
        for r in readers:
            if r.error:
                errors.append(f"reader of {r.peer}: {r.error}")
        if "error" in vout:
            errors.append(str(vout["error"]))
        if vreader.error:
            errors.append(f"victim reader: {vreader.error}")
        expect = {h: hashlib.sha256(d).hexdigest() for h, d in datas.items()}
        got = {r.peer: r.digest for r in readers}
        exact = got == expect and all(r.total == nbytes for r in readers)
        victim_exact = (vout.get("digest") == vreader.digest
                        and vout.get("sent") == vreader.total)

        port: dict[str, int] = {}
        elsewhere: dict[str, int] = {}
        links: dict[str, dict[str, int]] = {}
        for key, a in fab_after.items():
            d = diff(a, fab_before.get(key, {}))
            if d.get("trims") or d.get("drops"):
                links[key] = {k: d.get(k, 0) for k in ("pkts", "trims", "drops", "ce")}
            tgt = port if key.endswith(f"->{RECEIVER}") else elsewhere
            for k in ("pkts", "trims", "drops", "ce"):
                tgt[k] = tgt.get(k, 0) + d.get(k, 0)
        snd: dict[str, int] = {}
        snd_all: dict[str, int] = {}
        for h in SENDERS:
            d = diff(after[h], before[h])
            for k in SENDER_COUNTERS:
                snd[k] = snd.get(k, 0) + d.get(k, 0)
            for k, v in d.items():
                if v:
                    snd_all[k] = snd_all.get(k, 0) + v
        drx = diff(after[RECEIVER], before[RECEIVER])
        dv = diff(after[VICTIM_SRC], before[VICTIM_SRC])
        dur = t_end - t0
        ideal = 3 * nbytes * 8 / bottleneck
        base_bps = vreader.bytes_between(b0, b1) * 8 / (b1 - b0)
        during_bps = vreader.bytes_between(t0, t_end) * 8 / dur if dur > 0 else 0.0
        vcap = planes * topo.host_link_rate
        return IncastResult(
            mode="trim on" if trim else "trim off",
            spec=spec,
            bytes_per_sender=nbytes,
            bottleneck_bps=bottleneck,
            ideal_s=ideal,
            completion_s=dur,
            over_ideal=dur / ideal,
            per_sender_s={h: float(o.get("sent_s", -1.0)) for h, o in outs.items()},
            byte_exact=exact,
            errors=errors,
            fabric_incast_port=port,
            fabric_elsewhere=elsewhere,
            senders=snd,
            senders_all=snd_all,
            links=links,
            receiver={k: drx.get(k, 0) for k in RECEIVER_COUNTERS},
            victim={k: dv.get(k, 0) for k in SENDER_COUNTERS},
            victim_baseline_bps=base_bps,
            victim_during_bps=during_bps,
            victim_capacity_bps=vcap,
            victim_share_of_baseline=during_bps / base_bps if base_bps else 0.0,
            victim_share_of_capacity=during_bps / vcap,
            victim_byte_exact=victim_exact,
            mrcd_cpu_share={h: (cpu1[h] - cpu0[h]) / (t_cpu - t0) for h in cpu0},
            socket_drops={h: sdrop1[h] - sdrop0[h] for h in hosts},
            queue_real_max=sampler.real_max,
            queue_virtual_max=sampler.virtual_max,
            queue_real_mean={k: v / max(sampler.samples, 1)
                             for k, v in sampler.real_sum.items()},
            drop_thresh=int(lab.fab.description.options.get("drop_thresh", 0)),
            trim_thresh=int(lab.fab.description.options.get("trim_thresh", 0)),
            queue_drops=sampler.drops,
        )


# --- output ---------------------------------------------------------------------------------

ROWS: list[tuple[str, Any]] = [
    ("completion (s)", lambda r: f"{r.completion_s:.2f}"),
    ("ideal (s)", lambda r: f"{r.ideal_s:.2f}"),
    ("completion / ideal", lambda r: f"{r.over_ideal:.2f}"),
    ("byte-exact", lambda r: "yes" if r.byte_exact and not r.errors else "NO"),
    ("incast port: trims", lambda r: r.fabric_incast_port.get("trims", 0)),
    ("incast port: drops", lambda r: r.fabric_incast_port.get("drops", 0)),
    ("elsewhere: trims / drops", lambda r: f"{r.fabric_elsewhere.get('trims', 0)} / "
                                           f"{r.fabric_elsewhere.get('drops', 0)}"),
    ("senders: data packets", lambda r: r.senders["tx_data"]),
    ("senders: retransmissions", lambda r: r.senders["tx_retransmit"]),
    ("  NACKed trims (lost_trim)", lambda r: r.senders["lost_trim"]),
    ("  SACK/RACK losses (lost_loss)", lambda r: r.senders["lost_loss"]),
    ("  timeouts (lost_timeout)", lambda r: r.senders["lost_timeout"]),
    ("  RTO rounds", lambda r: r.senders["rto_rounds"]),
    ("receiver: NACKs sent", lambda r: r.receiver["tx_nack"]),
    ("victim alone (Mbit/s)", lambda r: f"{r.victim_baseline_bps / 1e6:.0f}"),
    ("victim during (Mbit/s)", lambda r: f"{r.victim_during_bps / 1e6:.0f}"),
    ("victim share of alone", lambda r: f"{r.victim_share_of_baseline:.2f}"),
    ("victim share of its link", lambda r: f"{r.victim_share_of_capacity:.2f}"),
    ("victim retransmissions", lambda r: r.victim["tx_retransmit"]),
    ("incast port real queue max (KB)",
     lambda r: "/".join(f"{v / 1000:.0f}" for v in r.queue_real_max.values())),
    ("  virtual queue max (KB)",
     lambda r: "/".join(f"{v / 1000:.0f}" for v in r.queue_virtual_max.values())),
    ("  qdisc drops (real queue full)",
     lambda r: "/".join(str(v) for v in r.queue_drops.values())),
    ("  real queue mean (KB)",
     lambda r: "/".join(f"{v / 1000:.0f}" for v in r.queue_real_mean.values())),
    ("receiver socket drops", lambda r: r.socket_drops[RECEIVER]),
    ("other hosts' socket drops",
     lambda r: sum(v for h, v in r.socket_drops.items() if h != RECEIVER)),
    ("receiver mrcd CPU (s/s)", lambda r: f"{r.mrcd_cpu_share[RECEIVER]:.2f}"),
    ("sender mrcds CPU (s/s, sum)",
     lambda r: f"{sum(r.mrcd_cpu_share[h] for h in SENDERS):.2f}"),
]


def table(results: list[IncastResult]) -> str:
    lines = [f"{'':32}" + "".join(f"{r.mode:>12}" for r in results)]
    for name, fn in ROWS:
        lines.append(f"{name:32}" + "".join(f"{fn(r)!s:>12}" for r in results))
    for r in results:
        for e in r.errors:
            lines.append(f"{r.mode}: error: {e}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--mib", type=int, default=8, help="MiB per incast sender (8)")
    ap.add_argument("--modes", default="on,off",
                    help="runs in order: on|off[:defaults] (trimming; ':defaults' = mrcd's "
                    "own [core] defaults instead of --core); default on,off")
    ap.add_argument("--rate", default="200mbit", help="leaf-spine link rate")
    ap.add_argument("--host-rate", default="100mbit", help="host-leaf link rate")
    ap.add_argument("--queue", default="8pkt", help="trim threshold / drop-tail queue")
    ap.add_argument("--core", action="append", default=None, metavar="KEY=VALUE",
                    help="mrcd [core] override (repeatable; default: none, mrcd's own "
                    "defaults)")
    ap.add_argument("--spec", default="", metavar="KEY=VALUE,...",
                    help="more fabric spec items, e.g. vq_drain=1,txqueuelen=1000 "
                    "(docs/FABRIC.md)")
    ap.add_argument("--prefix", default=None,
                    help="fabric name prefix (default $MRC_E2E_PREFIX or ic)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args(argv)
    pairs = a.core or []
    core = {k: float(v) for k, _, v in (c.partition("=") for c in pairs)} or None
    if os.geteuid() != 0:
        print("bench_incast: needs root (network namespaces, raw sockets)", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_incast.") as tmp:
        for i, mode in enumerate(a.modes.split(",")):
            trim, _, defaults = mode.strip().partition(":")
            r = run_incast(trim == "on", Path(tmp) / f"run{i}", mib=a.mib, rate=a.rate,
                           host_rate=a.host_rate, queue=a.queue,
                           core=None if defaults else core, extra=a.spec,
                           prefix=a.prefix)
            if defaults:
                r.mode += "*"
            results.append(r)
    if a.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(f"3 -> 1 incast, {a.mib} MiB per sender, {results[0].spec}")
        print(f"mrcd [core]: {core or 'defaults'}; * = mrcd defaults (timeout_floor 20 ms)")
        print(table(results))
    return 0 if all(r.byte_exact and not r.errors for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
