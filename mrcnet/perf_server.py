"""``mrc-perf server`` (:mod:`mrcnet.perf`): serve one client run, check its bytes, and
judge the run by what mrcd knows.

Plain RDMA WRITEs complete nothing at the responder, so a long run may give the server
no completion for minutes. The server waits on its CQ a little at a time and, when
nothing comes, asks mrcd about its QPs: a QP in ERROR (or a QPError event) ends the run
as failed, with mrcd's reason; receive counters that move are the client's progress.
Only when they have not moved for ``timeout`` seconds does the server give up on a
client that went silent. It ends when the client says the run is over (its last write)
and then says which of these it was.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mrcnet.api import ApiError, CompletionQueue, Context, MemoryRegion, QueuePair
from mrcnet.api.client import PeerInfo, WorkCompletion
from mrcnet.core.events import QPError
from mrcnet.perf_pattern import pattern_matches, prefix_of
from mrcnet.perf_proto import (
    BACK_REGION,
    END_IMM,
    END_TCP_IMM,
    PING_FLAG,
    RECV_DEPTH,
    REPORT,
    REPORT_AT,
    SIGNAL_EVERY,
    VERDICT_BAD,
    VERDICT_FLAG,
    VERDICT_UNCHECKED,
    RunFailed,
)

__all__ = ["QpsMismatch", "run_server"]

#: How long one wait on the CQ lasts before the server looks at its QPs.
LOOK_EVERY = 0.5
#: wr_id of the server's -b writes (low bits: the QP index).
BACK_WR = 1 << 32


class QpsMismatch(RunFailed):
    """The client runs with another ``--qps`` than the server."""


class _Watch:
    """Waits for completions and, between them, judges the run by mrcd's view of the
    QPs: their state and the client's progress (receive counters)."""

    def __init__(self, ctx: Context, qps: list[QueuePair], timeout: float) -> None:
        self.ctx, self.qps, self.timeout = ctx, qps, timeout
        self.rx = -1
        self.quiet_since = time.monotonic()

    def wait(self, cq: CompletionQueue) -> list[WorkCompletion]:
        while True:
            wcs = cq.wait(timeout=LOOK_EVERY, max_entries=256)
            if wcs:
                self.quiet_since = time.monotonic()
                return wcs
            self.look()

    def look(self) -> None:
        """Raise :class:`RunFailed` for a QP in ERROR or a client silent too long."""
        while (ev := self.ctx.get_async_event(timeout=0)) is not None:
            if isinstance(ev, QPError):
                raise RunFailed(f"QP {ev.qpn} failed: {ev.reason}")
        rx = 0
        for qp in self.qps:
            info = self.ctx.stats(qp)["qp"]
            if info.get("state") == "ERROR":
                raise RunFailed(f"QP {qp.qpn} is in ERROR: {info.get('error') or '?'}")
            rx += int(info.get("counters", {}).get("rx_data", 0))
        now = time.monotonic()
        if rx != self.rx:
            self.rx, self.quiet_since = rx, now
        elif now - self.quiet_since > self.timeout:
            raise RunFailed(f"the client sent nothing for {self.timeout:.0f} s while the "
                            "QPs stayed up (client gone or stalled?)")


@dataclass
class _Back:
    """With -b: the server's own writes to the client on one QP, a size at a time."""

    sizes: list[int]
    depth: int
    cycle: bool = False  #: the client runs its sizes again and again
    index: int = 0
    active: bool = True
    outstanding: int = 0
    nbytes: int = 0
    t0: float = field(default_factory=time.perf_counter)
    t1: float = 0.0
    verdict: int | None = None  #: to send once the writes in flight completed


def run_server(ctx: Context, size: int, service: int, verify: bool, timeout: float,
               say: Callable[[str], None] = print, qps: int = 1) -> int:
    """Serve one client run with ``qps`` QPs (QP i listens on ``service + i``, ``size``
    bytes exposed to each); returns the number of checks whose bytes did not verify.
    Raises :class:`RunFailed` when the run does not end with the client's last write
    (a QP failed, the client went silent, or it runs with another ``--qps``)."""
    cq = ctx.create_cq(depth=4096)
    mrs = [ctx.alloc_mr(size) for _ in range(qps)]
    # (sq_sig_all=False: the latency mode's pongs go unsignalled; every other write of
    # the server is posted signalled)
    qplist = [ctx.create_qp(cq, sq_sig_all=False) for _ in range(qps)]
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


def _accept(qplist: list[QueuePair], service: int, say: Callable[[str], None]
            ) -> list[PeerInfo]:
    """Accept the client's QPs, first checking that it runs as many as this server."""
    first = qplist[0].accept(timeout=None)
    theirs = first.private.get("qps", 1) if isinstance(first.private, dict) else 1
    if theirs != len(qplist):
        raise QpsMismatch(f"the client on {first.host} runs with --qps {theirs}, this "
                          f"server with --qps {len(qplist)}: start both with the same --qps")
    peers = [first] + [qp.accept(timeout=None) for qp in qplist[1:]]
    say(f"connected: {first.host} QP {', '.join(str(p.qpn) for p in peers)}")
    return peers


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
    peers = _accept(qplist, service, say)
    private = peers[0].private if isinstance(peers[0].private, dict) else {}
    seed = private.get("seed")
    check = verify and isinstance(seed, int)
    seed_n = seed if isinstance(seed, int) else 0
    index = {qp.qpn: i for i, qp in enumerate(qplist)}
    bidir = private.get("bidir")
    back: list[_Back] = []
    report = ctx.alloc_mr(BACK_REGION)
    if isinstance(bidir, list) and bidir and all(len(p.regions) > 1 for p in peers):
        depth = int(private.get("tx_depth", 16))
        cycle = bool(private.get("cycle"))
        back = [_Back([int(s) for s in bidir], depth, cycle) for _ in qplist]
        # What this side writes: its own region (the client's pattern lands in mrs).
        source = ctx.alloc_mr(max(b for b in back[0].sizes))
        say(f"bidirectional: writing back to {peers[0].host} as well")
    watch = _Watch(ctx, qplist, timeout)
    bad = 0
    cpu0 = time.process_time()  # this server's own cost, without its start-up

    def answer(i: int, verdict: int) -> None:
        qp, peer = qplist[i], peers[i]
        if not peer.regions:
            return
        if not back:
            qp.post_write(mrs[i], 0, 0, peer.regions[0], imm=VERDICT_FLAG | verdict,
                          signaled=True)
            return
        b = back[i]
        b.t1 = time.perf_counter()
        at = REPORT_AT + REPORT.size * i
        REPORT.pack_into(report.buf, at, b.nbytes, int((b.t1 - b.t0) * 1e9))
        qp.post_write(report, at, REPORT.size, peer.regions[0], at,
                      imm=VERDICT_FLAG | verdict, signaled=True)
        b.index, b.nbytes, b.verdict = b.index + 1, 0, None
        if b.cycle:
            b.index %= len(b.sizes)
        b.active, b.t0 = b.index < len(b.sizes), time.perf_counter()

    def fill(i: int) -> None:
        """-b: keep ``depth`` of this side's writes of the current size in flight."""
        b = back[i]
        n = b.sizes[b.index]
        while b.outstanding < b.depth:
            qplist[i].post_write(source, 0, n, peers[i].regions[1], wr_id=BACK_WR | i,
                                 signaled=True)
            b.outstanding += 1

    while True:
        for i, b in enumerate(back):  # -b: keep this side's writes going
            if b.active:
                fill(i)
            elif b.verdict is not None and b.outstanding == 0:
                answer(i, b.verdict)
        for wc in watch.wait(cq):
            if not wc.ok:
                raise RunFailed(f"error completion on QP {wc.qpn}: {wc.status}")
            if wc.wr_id & BACK_WR and wc.opcode != "RECV_RDMA_WITH_IMM":
                b = back[wc.wr_id & 0xFFFF]
                b.outstanding -= 1
                if b.index < len(b.sizes):
                    b.nbytes += b.sizes[b.index]
                continue
            if wc.opcode != "RECV_RDMA_WITH_IMM" or wc.imm is None:
                continue  # our own writes (pongs, verdicts) completing
            i = index.get(wc.qpn, 0)
            qp, mr, peer = qplist[i], mrs[i], peers[i]
            if wc.imm & PING_FLAG and peer.regions and wc.imm not in (END_IMM, END_TCP_IMM):
                n = wc.imm & ~PING_FLAG  # ping: write the same size back, same immediate
                # (unsignalled: the next ping says it arrived; see SIGNAL_EVERY)
                qp.post_write(mr, 0, n, peer.regions[0], imm=wc.imm,
                              signaled=qp.unsignaled_run >= SIGNAL_EVERY - 1)
                # (the receive behind the pong: one doorbell, one mrcd pass for both)
                qp.post_recv(wr_id=wc.wr_id)
                continue
            qp.post_recv(wr_id=wc.wr_id)
            if wc.imm in (END_IMM, END_TCP_IMM):
                if wc.imm == END_TCP_IMM:
                    _tcp_sink(tcp, timeout)
                say(f"run over: {peer.host} ended it (server CPU "
                    f"{time.process_time() - cpu0:.3f} s since the connection)")
                return bad
            # The last write of a size: the client has written [0, imm) of this QP's
            # region with its pattern. Check it and answer with the verdict.
            n = min(prefix_of(wc.imm), mr.length)
            ok = not check or pattern_matches(mr.buf, seed_n, n)
            if not ok:
                bad += 1
                say(f"QP {qp.qpn}: the first {n} bytes differ from the client's pattern")
            verdict = VERDICT_UNCHECKED if not check else 0 if ok else VERDICT_BAD
            if back:  # answer once this side's writes for the size are done
                b = back[i]
                if b.active and not b.outstanding and not b.nbytes:
                    fill(i)  # the client was quicker: the size still gets its writes back
                b.active, b.verdict = False, verdict
            else:
                answer(i, verdict)


def _tcp_sink(tcp: socket.socket, timeout: float) -> None:
    """Take one TCP stream (the client's baseline), until EOF."""
    tcp.settimeout(timeout)
    conn, _ = tcp.accept()
    with conn:
        conn.settimeout(timeout)
        while conn.recv(1 << 20):
            pass


def serve_main(ctx: Context, size: int, service: int, verify: bool, timeout: float,
               qps: int) -> int:
    """``mrc-perf server``: lines on stdout, the verdict, the end; exit status."""
    try:
        bad = run_server(ctx, size, service, verify, timeout,
                         lambda line: print(line, flush=True), qps=qps)
    except RunFailed as e:
        print(f"run failed: {e.reason}", flush=True)
        raise
    except ApiError as e:
        print(f"run failed: {e}", flush=True)
        raise
    if verify:
        print("verify: ok" if not bad else f"verify: {bad} check(s) differ")
    return 1 if bad else 0
