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
import json
import random
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from mrcnet.api import (
    ApiError,
    CompletionQueue,
    Context,
    MemoryRegion,
    QueuePair,
    WorkCompletion,
    messages,
)
from mrcnet.core.events import Event, PathStateChanged
from mrcnet.perf_pattern import (
    PATTERN_BLOCK,
    fill_pattern,
    pattern_matches,
    prefix_imm,
    prefix_of,
)
from mrcnet.perf_raw import raw_main

__all__ = ["Latency", "Result", "main", "run_client", "run_latency", "run_server"]

DEFAULT_SERVICE = 18515  # perftest's port, as a service number
DEFAULT_SIZE = 65536
ALL_SIZES = [1 << k for k in range(6, 21, 2)]  # 64 B .. 1 MiB, x4 steps
END_IMM = 0xFFFFFFFF  # the last write: done
END_TCP_IMM = 0xFFFFFFFE  # the last write: done, a TCP baseline stream follows
PING_FLAG = 0x80000000  # latency mode: imm = PING_FLAG | size, the server writes it back
RECV_DEPTH = 64
VERDICT_FLAG = 0x40000000  # the server's answer to a size's last write: flag | verdict
VERDICT_BAD = 1  # ... the bytes differ from the client's pattern
VERDICT_UNCHECKED = 2  # ... the server runs with --no-verify
DEFAULT_ITERS = 200
DEFAULT_REGION = 16 << 20  # bytes the server exposes per QP (writes cycle over them)
#: The largest single write (its size travels in a 32-bit immediate in --lat; the
#: region the server exposes may be any size).
MAX_WRITE = 1 << 30


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
    """One row of the client's table: one message size (or, ``size == -1``, the kernel
    TCP baseline). ``verified``: the server found every byte it checked equal to the
    client's pattern (None: not checked); ``retransmissions``, ``trims`` (trimmed
    packets NACKed to the sender) and ``ev_changes`` (EV state changes) are summed over
    the run's QPs for this size."""

    size: int
    iters: int
    seconds: float
    gbps: float
    mpps: float
    errors: int
    bytes: int = 0
    qps: int = 1
    verified: bool | None = None
    retransmissions: int = 0
    trims: int = 0
    ev_changes: int = 0
    packets: int = 0  #: data packets sent, retransmissions included


#: How late completion moderation may make a bandwidth run's completions (us).
MODERATION_PERIOD_US = 1000


def _wait(cq: CompletionQueue, timeout: float) -> list[WorkCompletion]:
    wcs = cq.wait(timeout=timeout, max_entries=256)
    if not wcs:
        raise TimeoutError(f"no completion in {timeout} s (is the peer alive?)")
    return wcs


def run_server(ctx: Context, size: int, service: int, verify: bool, timeout: float,
               say: Callable[[str], None] = print, qps: int = 1) -> int:
    """Serve one client run with ``qps`` QPs (QP i listens on ``service + i``, ``size``
    bytes exposed to each); returns the number of checks whose bytes did not verify."""
    cq = ctx.create_cq()
    mrs = [ctx.alloc_mr(size) for _ in range(qps)]
    qplist = [ctx.create_qp(cq) for _ in range(qps)]
    # A kernel TCP sink on this host's plain address, for the client's side-by-side
    # baseline (--tcp); its address travels in the connection's private data.
    tcp = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    tcp.bind(("::", 0))
    tcp.listen(1)
    private: dict[str, Any] = {"qps": qps, "verify": verify}
    if ctx.addresses:
        private["tcp"] = [ctx.addresses[0], tcp.getsockname()[1]]
    for i, (qp, mr) in enumerate(zip(qplist, mrs, strict=True)):
        ctx.listen(service + i, qp, expose=[mr], private=private)
    try:
        return _serve(ctx, qplist, cq, mrs, service, verify, timeout, say, tcp)
    finally:
        tcp.close()


def _serve(ctx: Context, qplist: list[QueuePair], cq: CompletionQueue,
           mrs: list[MemoryRegion], service: int, verify: bool, timeout: float,
           say: Callable[[str], None], tcp: socket.socket) -> int:
    for qp in qplist:
        for i in range(RECV_DEPTH):
            qp.post_recv(wr_id=i)
    services = (f"service {service}" if len(qplist) == 1
                else f"services {service}..{service + len(qplist) - 1}")
    say(f"mrc-perf server on {ctx.host}: waiting on {services} "
        f"({mrs[0].length} bytes exposed per QP)")
    peers = [qp.accept(timeout=None) for qp in qplist]
    say(f"connected: {peers[0].host} QP {', '.join(str(p.qpn) for p in peers)}")
    seed = peers[0].private.get("seed") if isinstance(peers[0].private, dict) else None
    check = verify and isinstance(seed, int)
    seed_n = seed if isinstance(seed, int) else 0
    index = {qp.qpn: i for i, qp in enumerate(qplist)}
    bad = 0
    while True:
        for wc in _wait(cq, timeout):
            if not wc.ok:
                say(f"error completion: {wc.status}")
                return bad + 1
            if wc.opcode != "RECV_RDMA_WITH_IMM" or wc.imm is None:
                continue  # our own writes (pongs, verdicts) completing
            i = index.get(wc.qpn, 0)
            qp, mr, peer = qplist[i], mrs[i], peers[i]
            qp.post_recv(wr_id=wc.wr_id)
            if wc.imm in (END_IMM, END_TCP_IMM):
                if wc.imm == END_TCP_IMM:
                    _tcp_sink(tcp, timeout)
                return bad
            if wc.imm & PING_FLAG and peer.regions:
                n = wc.imm & ~PING_FLAG  # ping: write the same size back, same immediate
                qp.post_write(mr, 0, n, peer.regions[0], imm=wc.imm)
                continue
            # The last write of a size: the client has written [0, imm) of this QP's
            # region with its pattern. Check it and answer with the verdict.
            n = min(prefix_of(wc.imm), mr.length)
            ok = not check or pattern_matches(mr.buf, seed_n, n)
            if not ok:
                bad += 1
                say(f"QP {qp.qpn}: the first {n} bytes differ from the client's pattern")
            if peer.regions:
                verdict = VERDICT_UNCHECKED if not check else 0 if ok else VERDICT_BAD
                qp.post_write(mr, 0, 0, peer.regions[0], imm=VERDICT_FLAG | verdict)


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


@dataclass
class Amount:
    """How much to send per size: ``iters`` writes, ``nbytes`` bytes or ``seconds``."""

    iters: int | None = None
    nbytes: int | None = None
    seconds: float | None = None

    def writes(self, size: int) -> int | None:
        """Writes for ``size`` (None: until ``seconds`` have passed)."""
        if self.nbytes is not None:
            return max(1, -(-self.nbytes // size))
        if self.seconds is not None:
            return None
        return self.iters if self.iters is not None else DEFAULT_ITERS


#: What the progress callback gets, about once per interval: seconds since the size
#: started (``t``) and ``clock`` (time.monotonic(), to line up with other processes),
#: bytes completed, the interval's Gb/s, counters so far; with ``paths`` also "paths":
#: {"p0s1": {"sent": n, "states": {"GOOD": n, ...}}} (sent: cumulative).
Progress = Callable[[dict[str, Any]], None]


class _Run:
    """The client side of one run: QPs, regions, counters and path events."""

    def __init__(self, ctx: Context, peer: str, service: int, qps: int, timeout: float,
                 cc_profile: str | None, biggest: int) -> None:
        self.ctx = ctx
        self.timeout = timeout
        self.cq = ctx.create_cq(depth=4096)
        self.qps = [ctx.create_qp(self.cq, cc_profile=cc_profile) for _ in range(qps)]
        self.seed = random.getrandbits(63)
        self.back = ctx.alloc_mr(64)  # where the server writes its verdicts
        infos = []
        for i, qp in enumerate(self.qps):
            try:
                infos.append(qp.connect(peer, service + i, expose=[self.back],
                                        private={"seed": self.seed, "qps": qps}))
            except ApiError as e:
                hint = f" (is the server running with --qps {qps}?)" if i else ""
                raise type(e)(f"{e}{hint}") from None
        self.remotes = [info.regions[0] for info in infos if info.regions]
        if len(self.remotes) < qps or min(r.length for r in self.remotes) < biggest:
            have = min((r.length for r in self.remotes), default=0)
            raise ApiError(f"the server exposes {have} bytes per QP; run it with "
                           f"--size {biggest} or more")
        private = infos[0].private
        self.private: dict[str, Any] = private if isinstance(private, dict) else {}
        # The client's region is as long as the server's: the pattern is the same bytes
        # on both sides, and each write lands at the offset it was read from.
        self.region = min(r.length for r in self.remotes)
        self.mr = ctx.alloc_mr(self.region)
        self.filled = 0  # the pattern is in [0, filled) of the region (see fill)
        for qp in self.qps:
            for i in range(RECV_DEPTH):
                qp.post_recv(wr_id=i)
        self.by_qpn = {qp.qpn: qp for qp in self.qps}
        self.verdicts: list[int] = []
        self.events: list[dict[str, Any]] = []
        self.other_events: list[Event] = []
        self.on_event: Callable[[dict[str, Any]], None] | None = None

    def fill(self, upto: int) -> None:
        """Put the pattern in the region up to ``upto`` bytes: only what writes will
        read is touched (a large region stays sparse)."""
        upto = min(upto, self.region)
        if upto > self.filled:
            fill_pattern(self.mr.buf, self.seed, self.filled, upto)
            self.filled = -(-upto // PATTERN_BLOCK) * PATTERN_BLOCK

    def counters(self) -> tuple[int, int, int]:
        """(retransmissions, trims NACKed, data packets sent) summed over the QPs."""
        rtx = trims = packets = 0
        for qp in self.qps:
            c = self.ctx.stats(qp)["qp"].get("counters", {})
            rtx += int(c.get("tx_retransmit", 0))
            trims += int(c.get("lost_trim", 0))
            packets += int(c.get("tx_data", 0))
        return rtx, trims, packets

    def paths(self) -> dict[str, dict[str, Any]]:
        """Per (plane, path): packets sent (cumulative) and EV states, over the QPs."""
        out: dict[str, dict[str, Any]] = {}
        for qp in self.qps:
            for e in self.ctx.stats(qp, evs=True).get("evs", []):
                p = out.setdefault(f"p{e['plane']}s{e['path']}", {"sent": 0, "states": {}})
                p["sent"] += int(e["sent"])
                p["states"][e["state"]] = p["states"].get(e["state"], 0) + 1
        return out

    def drain_events(self) -> None:
        """Move mrcd's asynchronous events into ``events`` (EV state changes as JSON
        records, with mrcd's time.monotonic() stamp as ``clock``) and ``other_events``."""
        while (got := self.ctx.get_stamped_event(timeout=0)) is not None:
            if isinstance(got.event, PathStateChanged):
                # A record for JSON lines: the event's fields and mrcd's stamp.
                rec = {"clock": got.clock, **messages.encode(got.event)}
                self.events.append(rec)
                if self.on_event is not None:
                    self.on_event(rec)
            else:
                self.other_events.append(got.event)

    def take(self, wcs: list[WorkCompletion]) -> tuple[int, int]:
        """Sort completions: (writes done, errors); verdicts are kept, receives reposted."""
        done = errors = 0
        for wc in wcs:
            if wc.opcode == "RECV_RDMA_WITH_IMM":
                if wc.ok and wc.imm is not None and wc.imm & VERDICT_FLAG:
                    self.verdicts.append(wc.imm & ~VERDICT_FLAG)
                qp = self.by_qpn.get(wc.qpn)
                if qp is not None and wc.ok:
                    qp.post_recv(wr_id=wc.wr_id)
                errors += not wc.ok
                continue
            done += 1
            errors += not wc.ok
        return done, errors


def run_client(ctx: Context, peer: str, sizes: Sequence[int], iters: int | None = None,
               tx_depth: int = 16, service: int = DEFAULT_SERVICE, timeout: float = 30.0,
               cc_profile: str | None = None, tcp: bool = False,
               warmup: int | None = None, *, qps: int = 1, nbytes: int | None = None,
               seconds: float | None = None, progress: Progress | None = None,
               interval: float = 1.0, paths: bool = False,
               events: Callable[[dict[str, Any]], None] | None = None) -> list[Result]:
    """Run every size against ``peer``'s server; one :class:`Result` per size.

    Per size: ``iters`` writes, or ``nbytes`` bytes, or writes for ``seconds``, spread
    round robin over ``qps`` QPs with at most ``tx_depth`` outstanding on each. After
    the size, one more write per QP carries an immediate: the server checks that QP's
    region against the pattern and answers with a verdict (``Result.verified``). With
    ``tcp``, a last row (``size`` = -1) is a kernel TCP stream of as many bytes as the
    largest size moved, to the server's host, in the same run. ``progress`` is called
    about every ``interval`` seconds (see :data:`Progress`); ``events`` with every EV
    state change of the run's QPs (mrcd's PathStateChanged, plus ``clock``)."""
    run = _Run(ctx, peer, service, qps, timeout, cc_profile, max(sizes))
    run.on_event = events
    # Completions in batches of a quarter of the window (the rest stays in flight): a
    # push, a wake-up of this process and a round of posts per batch, not per write.
    run.cq.moderate(max(1, tx_depth * qps // 4), MODERATION_PERIOD_US)
    amount = Amount(iters, nbytes, seconds)
    results = []
    for size in sizes:
        n = amount.writes(size)
        warm = (n // 2 if n is not None else 2 * tx_depth * qps) if warmup is None else warmup
        results.append(_one_size(run, size, amount, warm, tx_depth,
                                 _Ticker(run, progress, interval, paths)))
    sink = run.private.get("tcp")
    tcp = tcp and bool(sink)
    run.qps[0].post_write(run.mr, 0, 0, run.remotes[0], imm=END_TCP_IMM if tcp else END_IMM,
                          wr_id=1 << 40)
    while not run.take(_wait(run.cq, timeout))[0]:
        pass
    if tcp and sink:
        moved = max(r.bytes for r in results)
        gbps = tcp_baseline(sink[0], int(sink[1]), moved, timeout)
        results.append(Result(-1, 1, moved * 8 / gbps / 1e9, gbps, 0.0, 0, moved))
    return results


class _Ticker:
    """Calls the progress callback about once per interval with the run's figures."""

    def __init__(self, run: _Run, progress: Progress | None, interval: float,
                 paths: bool) -> None:
        self.run, self.progress, self.interval, self.paths = run, progress, interval, paths

    def start(self, size: int) -> None:
        self.size = size
        self.rtx0, self.trims0, self.packets0 = self.run.counters()
        self.run.drain_events()
        self.ev0 = len(self.run.events)
        self.t0 = self.last = time.perf_counter()
        self.last_done = 0

    def tick(self, done: int, force: bool = False) -> None:
        now = time.perf_counter()
        if self.progress is None or (now - self.last < self.interval and not force):
            return
        run = self.run
        run.drain_events()
        rtx, trims, _ = run.counters()
        dt = max(now - self.last, 1e-9)
        rec: dict[str, Any] = {
            "t": round(now - self.t0, 3), "clock": time.monotonic(), "size": self.size,
            "bytes": done * self.size,
            "gbps": round((done - self.last_done) * self.size * 8 / dt / 1e9, 4),
            "retransmissions": rtx - self.rtx0, "trims": trims - self.trims0,
            "ev_changes": len(run.events) - self.ev0}
        if self.paths:
            rec["paths"] = run.paths()
        self.progress(rec)
        self.last, self.last_done = now, done


def _one_size(run: _Run, size: int, amount: Amount, warmup: int, tx_depth: int,
              ticker: _Ticker) -> Result:
    nq = len(run.qps)
    slots = run.region // size  # offsets a write may land at
    written = [0] * nq  # writes posted per QP, warm-up included: the next offset
    outstanding = [0] * nq

    def post(q: int, imm: int | None = None) -> None:
        off = (written[q] % slots) * size
        run.qps[q].post_write(run.mr, off, size, run.remotes[q], off, imm=imm, wr_id=q)
        written[q] += 1
        outstanding[q] += 1

    def reap() -> tuple[int, int]:
        wcs = _wait(run.cq, run.timeout)
        for wc in wcs:
            if wc.opcode != "RECV_RDMA_WITH_IMM":
                outstanding[wc.wr_id] -= 1
        return run.take(wcs)

    # The writes read [0, slots used) of the region: the pattern must be there.
    want = amount.writes(size)
    run.fill(run.region if want is None else (warmup + want + 1) * size)
    # Warm-up writes first (untimed), so the window has opened when the clock starts.
    done = posted = 0
    while done < warmup:
        while posted < warmup and outstanding[posted % nq] < tx_depth:
            post(posted % nq)
            posted += 1
        done += reap()[0]
    ticker.start(size)
    deadline = ticker.t0 + (amount.seconds or 0.0)
    posted = done = errors = 0

    def more() -> bool:
        return posted < want if want is not None else time.perf_counter() < deadline

    while True:
        going = more()  # once per round: a round that found it true posts at least once
        if not going and done >= posted:
            break
        while going and outstanding[posted % nq] < tx_depth:
            post(posted % nq)
            posted += 1
            going = more()
        d, e = reap()
        done += d
        errors += e
        ticker.tick(done)
    dt = time.perf_counter() - ticker.t0
    ticker.tick(done, force=True)
    # The check: one more write per QP carrying how far this QP's pattern now reaches
    # ([0, n) of its region); the server compares and answers with a verdict.
    verdicts0 = len(run.verdicts)
    for q in range(nq):
        post(q, imm=prefix_imm(min(written[q] + 1, slots) * size))
    got = 0
    while got < nq or len(run.verdicts) - verdicts0 < nq:
        d, e = reap()
        got += d
        errors += e
    answers = run.verdicts[verdicts0:]
    verified = (None if VERDICT_UNCHECKED in answers
                else all(a == 0 for a in answers))
    rtx, trims, packets = run.counters()
    run.drain_events()
    moved = done * size
    return Result(size, done, dt, moved * 8 / dt / 1e9, done / dt / 1e6, errors, moved,
                  nq, verified, rtx - ticker.rtx0, trims - ticker.trims0,
                  len(run.events) - ticker.ev0, packets - ticker.packets0)


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
             f"{'MsgRate[Mpps]':>14} {'errors':>7} {'verified':>9} {'rtx':>7} "
             f"{'trims':>7} {'EV chg':>7}"]
    best = max((r.gbps for r in results if r.size > 0), default=0.0)
    for r in results:
        if r.size < 0:
            lines.append(f"kernel TCP, same hosts, same run: {r.gbps:.3f} Gb/s; best MRC "
                         f"size / TCP = {best / r.gbps:.2f}")
            continue
        verified = {True: "yes", False: "NO", None: "-"}[r.verified]
        lines.append(f"{r.size:>10} {r.iters:>12} {r.gbps:>17.3f} {r.mpps:>14.6f} "
                     f"{r.errors:>7} {verified:>9} {r.retransmissions:>7} {r.trims:>7} "
                     f"{r.ev_changes:>7}")
    return lines


def _size(text: str) -> int:
    """``65536``, ``64K``, ``1M``, ``1G`` (binary multiples) as bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 65536, 64K, 1M, "
                                         "2G)") from None


def _positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
        return v
    return parse


def _progress_printer(stream: TextIO | None, json_lines: bool) -> Progress:
    """Progress records: a human line on ``stream`` (overwritten in place on a
    terminal; None: no line), and with ``json_lines`` also the record as a JSON line on
    stdout."""
    tty = stream is not None and stream.isatty()

    def show(rec: dict[str, Any]) -> None:
        if stream is not None:
            line = (f"[{rec['t']:6.1f} s] size {rec['size']}: "
                    f"{rec['bytes'] / (1 << 20):,.0f} MiB, {rec['gbps']:.3f} Gb/s, rtx "
                    f"{rec['retransmissions']}, trims {rec['trims']}, EV changes "
                    f"{rec['ev_changes']}")
            print(("\r" + line + "\x1b[K") if tty else line, end="" if tty else "\n",
                  file=stream, flush=True)
        if json_lines:
            print(json.dumps({"type": "interval", **rec}), flush=True)
    return show


def build_parser() -> argparse.ArgumentParser:
    """The ``mrc-perf`` command line."""
    ap = argparse.ArgumentParser(
        prog="mrc-perf", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="RDMA WRITE bandwidth and latency over MRC between two mrcd hosts "
        "(like perftest's ib_write_bw / ib_write_lat), and the raw-socket ceiling.",
        epilog="examples:\n"
        "  mrc-perf server                          # on h1 (its mrcd: $MRCD_SOCKET)\n"
        "  mrc-perf client h1                       # 200 writes of 64 KiB, verified\n"
        "  mrc-perf client h1 -s 1M --seconds 10 --qps 4\n"
        "  mrc-perf client h1 --bytes 1G --tcp      # and kernel TCP beside it\n"
        "  mrc-perf client h1 --lat -s 64           # round trips\n"
        "  mrc-perf client h1 -a --json             # every size, JSON lines\n"
        "The server must run with the same --qps as the client.")
    ap.add_argument("--socket", help="mrcd's socket (default $MRCD_SOCKET or "
                    "/run/mrcd/<hostname>.sock)")
    ap.add_argument("--service", type=int, default=DEFAULT_SERVICE,
                    help="service number the server listens on (QP i: service + i)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds without progress "
                    "before giving up")
    sub = ap.add_subparsers(dest="mode", required=True, metavar="MODE")
    sv = sub.add_parser("server", help="wait for one client run and check its bytes")
    sv.add_argument("-s", "--size", type=_size, default=DEFAULT_REGION,
                    help="bytes of memory to expose per QP: at least the client's "
                    "largest size; writes cycle over it (default 16M)")
    sv.add_argument("-q", "--qps", type=_positive(int), default=1,
                    help="QPs to accept (the client's --qps)")
    sv.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                    help="check every size's bytes against the client's pattern and "
                    "answer with the verdict (default: on)")
    cl = sub.add_parser("client", help="measure against PEER's server")
    cl.add_argument("peer", help="the server's host: a name from mrcd's fabric "
                    "description or configuration, or one of its IPv6 addresses")
    cl.add_argument("-s", "--size", type=_size, default=DEFAULT_SIZE,
                    help="bytes per RDMA WRITE (default 64K)")
    cl.add_argument("-a", "--all", action="store_true",
                    help=f"sizes {ALL_SIZES[0]} .. {ALL_SIZES[-1]}, x4 steps")
    much = cl.add_mutually_exclusive_group()
    much.add_argument("-n", "--iters", type=_positive(int),
                      help=f"writes per size (default {DEFAULT_ITERS})")
    much.add_argument("--bytes", type=_size, dest="nbytes", help="bytes per size "
                      "(e.g. 1G)")
    much.add_argument("-D", "--seconds", type=_positive(float),
                      help="seconds per size (like ib_write_bw -D)")
    cl.add_argument("-q", "--qps", type=_positive(int), default=1,
                    help="QPs, writes spread round robin (default 1)")
    cl.add_argument("-t", "--tx-depth", type=_positive(int), default=16,
                    help="outstanding writes per QP (default 16)")
    cl.add_argument("-w", "--warmup", type=int, help="untimed writes before each size "
                    "(default: half of --iters, or 2 x tx-depth x QPs)")
    cl.add_argument("--cc", help="congestion control profile of the QP (default: mrcd's)")
    cl.add_argument("--tcp", action="store_true", help="also measure one kernel TCP stream "
                    "to the server's host (side by side, same run)")
    cl.add_argument("--lat", action="store_true", help="latency (ping-pong, like "
                    "ib_write_lat) instead of bandwidth; one-way = half the round trip")
    cl.add_argument("-i", "--interval", type=_positive(float), default=1.0,
                    help="seconds between progress lines (default 1)")
    cl.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    cl.add_argument("--paths", action="store_true", help="with --json: per-path packets "
                    "and EV states in every interval record")
    cl.add_argument("--events", action="store_true", help="with --json: one JSON line "
                    "per EV state change (type path_event, clock = time.monotonic())")
    cl.add_argument("--json", action="store_true", help="JSON lines instead of a table: "
                    "one per size (with 'verified'); with --paths/--events also interval "
                    "and path_event records (field 'type')")
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
    return ap


def _client(ctx: Context, args: argparse.Namespace) -> int:
    sizes = ALL_SIZES if args.all else [args.size]
    if args.lat:
        rows = run_latency(ctx, args.peer, sizes, args.iters or 1000, args.service,
                           args.timeout, args.cc)
        if args.json:
            for row in rows:
                print(json.dumps(asdict(row)))
        else:
            print("\n".join(_lat_table(rows)))
        return 0
    json_intervals = args.json and (args.paths or args.events)
    progress = (None if args.quiet and not json_intervals else
                _progress_printer(None if args.quiet else sys.stderr, json_intervals))
    results = run_client(ctx, args.peer, sizes, args.iters, args.tx_depth, args.service,
                         args.timeout, args.cc, args.tcp, args.warmup, qps=args.qps,
                         nbytes=args.nbytes, seconds=args.seconds, progress=progress,
                         interval=args.interval, paths=args.paths, events=(
                             (lambda e: print(json.dumps({**e, "type": "path_event"}),
                                              flush=True)) if args.json and args.events
                             else None))
    if progress is not None and not args.quiet and sys.stderr.isatty():
        print(file=sys.stderr)
    if args.json:
        for r in results:
            print(json.dumps(asdict(r)))
    else:
        print("\n".join(_table(results)))
    failed = any(r.errors or r.verified is False for r in results)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mrc-perf`` command."""
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.mode in ("raw-sink", "raw-send"):
        return raw_main(args)
    if args.size <= 0:
        ap.error(f"--size {args.size}: give a positive number of bytes")
    if args.mode == "client" and args.size > MAX_WRITE:
        ap.error(f"--size {args.size}: one write is at most {MAX_WRITE} bytes (1G); the "
                 "server's region (its --size) may be larger")
    try:
        with Context(args.socket, path_events=args.mode == "client") as ctx:
            if args.mode == "server":
                bad = run_server(ctx, args.size, args.service, args.verify, args.timeout,
                                 lambda line: print(line, flush=True), qps=args.qps)
                if args.verify:
                    print("verify: ok" if not bad else f"verify: {bad} check(s) differ")
                return 1 if bad else 0
            return _client(ctx, args)
    except (ApiError, OSError, MemoryError) as e:  # (TimeoutError is an OSError)
        why = ("out of memory (a smaller --size?)" if isinstance(e, MemoryError)
               else e.strerror if isinstance(e, OSError) and e.strerror else str(e))
        print(f"mrc-perf: {why}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mrc-perf: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
