"""``mrc-perf client`` (:mod:`mrcnet.perf`): bandwidth and latency runs against a server.

A run that fails part way (a QP error, no completion for ``timeout`` seconds) raises
:class:`~mrcnet.perf_proto.RunFailed` carrying every row measured, the last one partial
with mrcd's reason, so the tool can still print them.
"""

from __future__ import annotations

import math
import random
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

from mrcnet.api import ApiError, CompletionQueue, Context, WorkCompletion, messages
from mrcnet.api.errors import ConnectError
from mrcnet.core.events import Event, PathStateChanged, QPError
from mrcnet.perf_pattern import PATTERN_BLOCK, fill_pattern, prefix_imm
from mrcnet.perf_proto import (
    BACK_REGION,
    END_IMM,
    END_TCP_IMM,
    MAX_QPS,
    PING_FLAG,
    RECV_DEPTH,
    REPORT,
    REPORT_AT,
    SIGNAL_EVERY,
    VERDICT_FLAG,
    VERDICT_UNCHECKED,
    Amount,
    Latency,
    Progress,
    Result,
    RunFailed,
)

__all__ = ["latency_row", "run_client", "run_latency", "tcp_baseline"]

#: How late completion moderation may make a bandwidth run's completions (us).
MODERATION_PERIOD_US = 1000
#: wr_id of the run's last write (END).
END_WR = 1 << 40


def _wait(cq: CompletionQueue, timeout: float) -> list[WorkCompletion]:
    wcs = cq.wait(timeout=timeout, max_entries=256)
    if not wcs:
        raise TimeoutError(f"no completion in {timeout} s (is the peer alive?)")
    return wcs


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


#: Seconds the first connect retries while nothing listens on the service yet: a server
#: started in the background just before the client (as in the README's tour) is given
#: the moment it needs to listen.
REFUSED_WAIT = 10.0


def _connect(qp: Any, peer: str, service: int, expose: list[Any], private: Any,
             refused_wait: float) -> Any:
    """``qp.connect``, retried every 0.1 s for ``refused_wait`` s while the peer says no
    QP listens on the service (any other error at once)."""
    end = time.monotonic() + refused_wait
    while True:
        try:
            return qp.connect(peer, service, expose=expose, private=private)
        except ConnectError as e:
            if "no QP listens" not in str(e) or time.monotonic() >= end:
                raise
            time.sleep(0.1)


class _Run:
    """The client side of one run: QPs, regions, counters and path events."""

    def __init__(self, ctx: Context, peer: str, service: int, qps: int, timeout: float,
                 cc_profile: str | None, biggest: int, bidir: list[int] | None = None,
                 tx_depth: int = 16, cycle: bool = False, verify: bool = True) -> None:
        if qps > MAX_QPS:
            raise ApiError(f"--qps {qps}: at most {MAX_QPS}")
        self.ctx = ctx
        self.timeout = timeout
        self.cq = ctx.create_cq(depth=4096)
        self.qps = [ctx.create_qp(self.cq, cc_profile=cc_profile) for _ in range(qps)]
        self.seed = random.getrandbits(63)
        self.back = ctx.alloc_mr(BACK_REGION)  # the server's verdicts (and -b reports)
        expose = [self.back]
        # Without a seed the server checks nothing (its verdict: unchecked).
        private: dict[str, Any] = {"seed": self.seed, "qps": qps} if verify else {"qps": qps}
        self.verify = verify
        if bidir:  # -b: where the server writes its own direction
            expose.append(ctx.alloc_mr(max(bidir)))
            private.update(bidir=list(bidir), tx_depth=tx_depth, cycle=cycle)
        self.bidir = bool(bidir)
        infos = []
        for i, qp in enumerate(self.qps):
            try:
                infos.append(_connect(qp, peer, service + i, expose, private,
                                      REFUSED_WAIT if i == 0 else 0.0))
            except ApiError as e:
                hint = f" (is the server running with --qps {qps}?)" if i else ""
                raise type(e)(f"{e}{hint}") from None
            theirs = infos[0].private.get("qps") if isinstance(infos[0].private, dict) else 1
            if i == 0 and theirs not in (None, qps):
                raise ApiError(f"the server runs with --qps {theirs}, this client with "
                               f"--qps {qps}: start both with the same --qps")
        self.remotes = [info.regions[0] for info in infos if info.regions]
        if len(self.remotes) < qps or min(r.length for r in self.remotes) < biggest:
            have = min((r.length for r in self.remotes), default=0)
            raise ApiError(f"the server exposes {have} bytes per QP; run it with "
                           f"--size {biggest} or more")
        got = infos[0].private
        self.private: dict[str, Any] = got if isinstance(got, dict) else {}
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
        # Whole blocks: a later, larger size starts where this fill ended (filling only
        # [filled, upto) and counting the block as filled left the next size's bytes
        # past ``upto`` unwritten, so -a failed its checks from the second size on).
        end = min(-(-upto // PATTERN_BLOCK) * PATTERN_BLOCK, self.region)
        if end > self.filled and self.verify:
            fill_pattern(self.mr.buf, self.seed, self.filled, end)
            self.filled = end

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

    def reason(self, err: BaseException) -> str:
        """Why the run stopped: mrcd's reason for a failed QP when it gave one (an
        event, else the QP's state), else the error itself."""
        try:
            self.drain_events()
            for ev in self.other_events:
                if isinstance(ev, QPError):
                    return f"QP {ev.qpn} failed: {ev.reason}"
            for qp in self.qps:
                info = self.ctx.stats(qp)["qp"]
                if info.get("state") == "ERROR":
                    return f"QP {qp.qpn} is in ERROR: {info.get('error') or '?'}"
        except (ApiError, OSError):
            pass
        return (err.strerror if isinstance(err, OSError) and err.strerror else str(err))

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

    def back_report(self) -> tuple[int, float]:
        """-b: what the server wrote back during the size, (bytes, seconds), read from
        the reports its verdicts carried (bytes summed, the longest time)."""
        nbytes, ns = 0, 0
        for q in range(len(self.qps)):
            b, t = REPORT.unpack_from(self.back.buf, REPORT_AT + REPORT.size * q)
            nbytes, ns = nbytes + b, max(ns, t)
        return nbytes, ns / 1e9


def run_client(ctx: Context, peer: str, sizes: Sequence[int], iters: int | None = None,
               tx_depth: int = 16, service: int = 18515, timeout: float = 30.0,
               cc_profile: str | None = None, tcp: bool = False,
               warmup: int | None = None, *, qps: int = 1, nbytes: int | None = None,
               seconds: float | None = None, progress: Progress | None = None,
               interval: float = 1.0, paths: bool = False,
               events: Callable[[dict[str, Any]], None] | None = None,
               bidir: bool = False, forever: bool = False,
               stop: Callable[[], bool] | None = None,
               on_result: Callable[[Result], None] | None = None,
               verify: bool = True) -> list[Result]:
    """Run every size against ``peer``'s server; one :class:`Result` per size.

    Per size: ``iters`` writes, or ``nbytes`` bytes, or writes for ``seconds``, spread
    round robin over ``qps`` QPs with at most ``tx_depth`` outstanding on each. After
    the size, one more write per QP carries an immediate: the server checks that QP's
    region against the pattern and answers with a verdict (``Result.verified``). With
    ``tcp``, a last row (``size`` = -1) is a kernel TCP stream of as many bytes as the
    largest size moved, to the server's host, in the same run. ``progress`` is called
    about every ``interval`` seconds (see :data:`Progress`); ``events`` with every EV
    state change of the run's QPs (mrcd's PathStateChanged, plus ``clock``). ``bidir``:
    the server writes to this host meanwhile (``Result.gbps_back``); ``forever``: the
    sizes again and again until ``stop()`` (checked between writes) says so;
    ``on_result`` gets each row as it is measured; ``verify=False``: the server checks
    nothing (``Result.verified`` None, perftest's behaviour). Raises :class:`RunFailed` (with the
    rows so far) when the run cannot finish."""
    stop = stop or (lambda: False)
    order = list(sizes)
    run = _Run(ctx, peer, service, qps, timeout, cc_profile, max(sizes),
               order if bidir else None, tx_depth, cycle=forever, verify=verify)
    run.on_event = events
    # Completions in batches of a quarter of the window (the rest stays in flight): a
    # push, a wake-up of this process and a round of posts per batch, not per write.
    run.cq.moderate(max(1, tx_depth * qps // 4), MODERATION_PERIOD_US)
    amount = Amount(iters, nbytes, seconds)
    results: list[Result] = []
    k = 0
    while not stop() and (forever or k < len(order)):
        size = order[k % len(order)]
        k += 1
        n = amount.writes(size)
        warm = (n // 2 if n is not None else 2 * tx_depth * qps) if warmup is None else warmup
        try:
            r = _one_size(run, size, amount, warm, tx_depth,
                          _Ticker(run, progress, interval, paths), stop)
        except RunFailed as e:
            raise RunFailed(e.reason, [*results, *e.results]) from None
        results.append(r)
        if on_result is not None:
            on_result(r)
    sink = run.private.get("tcp")
    tcp = tcp and bool(sink) and bool(results)
    try:
        run.qps[0].post_write(run.mr, 0, 0, run.remotes[0],
                              imm=END_TCP_IMM if tcp else END_IMM, wr_id=END_WR)
        while not any(w.wr_id == END_WR for w in _wait(run.cq, timeout)):
            pass
        if tcp and sink:
            moved = max(r.bytes for r in results)
            gbps = tcp_baseline(sink[0], int(sink[1]), moved, timeout)
            results.append(Result(-1, 1, moved * 8 / gbps / 1e9, gbps, 0.0, 0, moved))
    except (ApiError, OSError) as e:
        raise RunFailed(f"ending the run: {run.reason(e)}", results) from None
    return results


class _Ticker:
    """Calls the progress callback about once per interval with the run's figures, and
    keeps the best interval's rate (BW peak)."""

    def __init__(self, run: _Run, progress: Progress | None, interval: float,
                 paths: bool) -> None:
        self.run, self.progress, self.interval, self.paths = run, progress, interval, paths
        self.peak = 0.0

    def start(self, size: int) -> None:
        self.size = size
        self.rtx0, self.trims0, self.packets0 = self.run.counters()
        self.run.drain_events()
        self.ev0 = len(self.run.events)
        self.t0 = self.last = time.perf_counter()
        self.last_done = 0

    def tick(self, done: int, force: bool = False) -> None:
        now = time.perf_counter()
        if now - self.last < self.interval and not force:
            return
        dt = max(now - self.last, 1e-9)
        gbps = (done - self.last_done) * self.size * 8 / dt / 1e9
        if now - self.last >= self.interval / 2:  # a short last interval is no peak
            self.peak = max(self.peak, gbps)
        if self.progress is not None:
            run = self.run
            run.drain_events()
            rtx, trims, _ = run.counters()
            rec: dict[str, Any] = {
                "t": round(now - self.t0, 3), "clock": time.monotonic(), "size": self.size,
                "bytes": done * self.size, "gbps": round(gbps, 4),
                "retransmissions": rtx - self.rtx0, "trims": trims - self.trims0,
                "ev_changes": len(run.events) - self.ev0}
            if self.paths:
                rec["paths"] = run.paths()
            self.progress(rec)
        self.last, self.last_done = now, done


def _one_size(run: _Run, size: int, amount: Amount, warmup: int, tx_depth: int,
              ticker: _Ticker, stop: Callable[[], bool]) -> Result:
    nq = len(run.qps)
    slots = run.region // size  # offsets a write may land at
    written = [0] * nq  # writes posted per QP, warm-up included: the next offset
    outstanding = [0] * nq
    done = posted = errors = 0
    t_start: float | None = None
    cpu0 = time.process_time()

    def post(q: int, imm: int | None = None) -> None:
        off = (written[q] % slots) * size
        run.qps[q].post_write(run.mr, off, size, run.remotes[q], off, imm=imm, wr_id=q)
        written[q] += 1
        outstanding[q] += 1

    def reap() -> tuple[int, int]:
        wcs = _wait(run.cq, run.timeout)
        for wc in wcs:
            if wc.opcode != "RECV_RDMA_WITH_IMM" and wc.wr_id < nq:
                outstanding[wc.wr_id] -= 1
        return run.take(wcs)

    def result(dt: float, verified: bool | None, error: str | None = None) -> Result:
        dt = max(dt, 1e-9)
        rtx, trims, packets = (ticker.rtx0, ticker.trims0, ticker.packets0)
        try:
            rtx, trims, packets = run.counters()
            run.drain_events()
        except (ApiError, OSError):
            pass
        moved = done * size
        gbps = moved * 8 / dt / 1e9
        back = back_s = 0.0
        if run.bidir and error is None:
            nb, back_s = run.back_report()
            back = nb
        return Result(size, done, dt, gbps, done / dt / 1e6, errors, moved, nq, verified,
                      rtx - ticker.rtx0, trims - ticker.trims0,
                      len(run.events) - ticker.ev0, packets - ticker.packets0,
                      max(ticker.peak, gbps) if ticker.peak else gbps,
                      (back * 8 / back_s / 1e9 if back_s else 0.0) if run.bidir else None,
                      int(back), error, time.process_time() - cpu0)

    # The writes read [0, slots used) of the region: the pattern must be there.
    want = amount.writes(size)
    run.fill(run.region if want is None else (warmup + want + 1) * size)
    ticker.start(size)
    try:
        # Warm-up writes first (untimed), so the window has opened when the clock starts.
        while done < warmup:
            while posted < warmup and outstanding[posted % nq] < tx_depth:
                post(posted % nq)
                posted += 1
            done += reap()[0]
        ticker.start(size)
        t_start = ticker.t0
        deadline = ticker.t0 + (amount.seconds or 0.0)
        posted = done = errors = 0

        def more() -> bool:
            if stop():
                return False
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
        # The check: one more write per QP carrying how far this QP's pattern now
        # reaches ([0, n) of its region); the server compares and answers.
        verdicts0 = len(run.verdicts)
        for q in range(nq):
            post(q, imm=prefix_imm(min(written[q] + 1, slots) * size))
        got = 0
        while got < nq or len(run.verdicts) - verdicts0 < nq:
            d, e = reap()
            got += d
            errors += e
    except (ApiError, OSError) as e:
        dt = time.perf_counter() - (t_start if t_start is not None else ticker.t0)
        if t_start is None:
            done = 0
        why = run.reason(e)
        raise RunFailed(why, [result(dt, None, why)]) from None
    answers = run.verdicts[verdicts0:]
    verified = (None if VERDICT_UNCHECKED in answers
                else all(a == 0 for a in answers))
    return result(dt, verified)


def run_latency(ctx: Context, peer: str, sizes: Sequence[int], iters: int, service: int,
                timeout: float, cc_profile: str | None = None) -> list[Latency]:
    """Ping-pong writes-with-immediate (like ib_write_lat): one :class:`Latency` per size.
    The pings are posted unsignalled (but every :data:`SIGNAL_EVERY`-th): the pong's
    receive says the ping arrived, and the pinger does not wake for its own write."""
    biggest = max(sizes)
    mr = ctx.alloc_mr(biggest)
    cq = ctx.create_cq()
    qp = ctx.create_qp(cq, cc_profile=cc_profile, sq_sig_all=False)
    info = qp.connect(peer, service, expose=[mr])  # the server writes its pongs here
    theirs = info.private.get("qps") if isinstance(info.private, dict) else None
    if theirs not in (None, 1):
        raise ApiError(f"the server runs with --qps {theirs}; --lat uses one QP: start "
                       "the server with --qps 1")
    remote = info.regions[0]
    for i in range(RECV_DEPTH):
        qp.post_recv(wr_id=i)
    rows = []
    used: list[int] = []  # receives the pongs consumed, posted again after the next ping
    for size in sizes:
        samples = []
        for _ in range(iters):
            t0 = time.perf_counter()
            qp.post_write(mr, 0, size, remote, imm=PING_FLAG | size,
                          signaled=qp.unsignaled_run >= SIGNAL_EVERY - 1)
            # Behind the ping, not before it: mrcd takes both in the pass the ping's
            # doorbell wakes (posted first, the receive rang it once and the ping again).
            for wr_id in used:
                qp.post_recv(wr_id=wr_id)
            while True:
                pong = [w for w in _wait(cq, timeout) if w.opcode == "RECV_RDMA_WITH_IMM"]
                if pong:
                    break
            samples.append((time.perf_counter() - t0) / 2 * 1e6)
            used = [w.wr_id for w in pong]
        rows.append(latency_row(size, samples))
    for wr_id in used:
        qp.post_recv(wr_id=wr_id)
    qp.post_write(mr, 0, 0, remote, imm=END_IMM, wr_id=END_WR, signaled=True)
    while not any(w.wr_id == END_WR for w in _wait(cq, timeout)):
        pass
    return rows


def latency_row(size: int, samples: list[float]) -> Latency:
    """The latency table's row for one size's one-way samples (microseconds)."""
    s = sorted(samples)
    n = len(s)
    avg = sum(s) / n
    stdev = math.sqrt(sum((x - avg) ** 2 for x in s) / (n - 1)) if n > 1 else 0.0

    def pct(p: float) -> float:
        return s[min(n - 1, int(n * p))]
    return Latency(size, n, s[0], s[n // 2], avg, pct(0.99), s[-1], stdev, pct(0.999))

