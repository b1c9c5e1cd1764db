"""New packets going to mrcd's send queues are recorded in the C table, built and queued
in one C call (``mrc_send_run`` / ``mrc_send_msgs``, mrcnet/_csrc/sender.c): the very
same frames at the same moments, and the same completions and landed bytes, as the three
calls it replaces (``Sender.fused`` off), through losses, duplicates, trims, jitter,
immediates, two remote regions and big writes among small ones; and the same frames as
the list the core hands a caller without send queues (the simulator's, the reference).

The queues are real: each port's frames leave through ``sendmmsg`` on a datagram
socket pair and are read back from its other end."""

from __future__ import annotations

import random
import socket
from typing import Any

import pytest

from mrcnet.core import HostConfig, sender
from mrcnet.io.batch import SENDQ_CAP, CBatchIO, SendQueue
from mrcnet.native import HAVE_C

from .harness import Impairments, Net, connect, write_regions

pytestmark = pytest.mark.skipif(not HAVE_C, reason="the send queues are C")


class QueuedNet(Net):
    """A :class:`Net` whose hosts hand their data frames to send queues, as mrcd's
    engine does (the list's frames first, then each port's queue)."""

    def __init__(self, cap: int = SENDQ_CAP, **kw: Any) -> None:
        super().__init__(**kw)
        self.queues = {name: SendQueue(2, cap) for name in self.hosts}
        self.pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)]
        for a, b in self.pairs:
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            b.setblocking(False)
        self.ios = [CBatchIO(a.fileno(), 64, 16) for a, _ in self.pairs]

    def flush(self) -> None:
        for name, host in self.hosts.items():
            sq = self.queues[name]
            for port, frame in host.frames_to_send(self.now, sendq=sq):
                self._send(name, port, frame)
            for port in range(2):
                while sq.pending(port):
                    _, _, err = sq.send(port, self.ios[port])
                    assert err in (0, 11), err  # (EAGAIN: read what went, send again)
                    self._drain(name, port)
                self._drain(name, port)

    def _drain(self, name: str, port: int) -> None:
        b = self.pairs[port][1]
        while True:
            try:
                frame = b.recv(1 << 16)
            except BlockingIOError:
                return
            self._send(name, port, frame)

    def close(self) -> None:
        for a, b in self.pairs:
            a.close()
            b.close()


def _run(queued: bool, fused: bool, seed: int, loss: float, jitter: float = 20e-6,
         gather: bool = True) -> tuple[Any, Any, bytes, int]:
    """A burst of posts on h0 -> h1; returns what h0 sent (time, port, frame), its
    completions, what landed on h1 and how many runs the fused call took (``gather``:
    the fused runs' payloads sent from the region, ``Sender.gather``)."""
    kw: Any = {"seed": seed, "config": HostConfig(mtu_payload=1024),
               "imp": Impairments(loss=loss, dup=loss / 2, trim=loss, jitter=jitter)}
    net = QueuedNet(**kw) if queued else Net(**kw)
    net.log_tx = True
    qa, _ = connect(net, 0, 1, recvs=400, attrs={"max_imm_outstanding": 3})
    net.h(0).qp(qa).snd.fused = fused
    net.h(0).qp(qa).snd.gather = gather
    calls = 0
    lib = sender.C

    class Counting:
        """The C module, counting the fused calls."""

        def __getattr__(self, name: str) -> Any:
            fn = getattr(lib, name)
            if name not in ("mrc_send_run", "mrc_send_msgs"):
                return fn

            def counted(*args: Any) -> Any:
                nonlocal calls
                calls += 1
                return fn(*args)

            return counted

    sender.C = Counting()
    try:
        frames, got, landed = _burst(net, seed, qa)
    finally:
        sender.C = lib
    return frames, got, landed, calls


def _burst(net: Net, seed: int, qa: int) -> tuple[Any, Any, bytes]:
    """The posts of :func:`_run`, run to their completions."""
    ha = net.h(0)
    rng = random.Random(seed)
    dst1, dst2, ms, m1, m2 = write_regions(net, rng)
    wr = 0
    for _round in range(6):
        for _ in range(rng.randint(20, 120)):
            big = rng.random() < 0.1
            length = rng.randint(1025, 9000) if big else rng.choice([0, 1, 64, 1024])
            off = rng.randrange(0, (1 << 16) - length)
            md = m1 if rng.random() < 0.7 else m2
            imm = rng.randint(0, 1 << 31) if rng.random() < 0.1 else None
            ha.post_write(qa, wr, ms, off, length, md.addr + off, md.rkey, imm=imm)
            wr += 1
        net.run(until=lambda: False, max_time=net.now + rng.choice([0.0, 0.0005, 0.01]))
    cq = ha.qp(qa).cq
    got: list[Any] = []
    net.run(until=lambda: len(got) + len(cq) >= wr, max_time=net.now + 10.0)
    got += ha.poll_cq(cq, 10_000)
    assert net.internal_errors() == 0
    if isinstance(net, QueuedNet):
        net.close()
    frames = [(t, p, bytes(f)) for t, s, p, f in net.tx_log if s == "h0"]
    return frames, got, bytes(dst1) + bytes(dst2)


@pytest.mark.parametrize(("seed", "loss"), [(1, 0.0), (2, 0.0), (3, 0.02), (4, 0.05)])
def test_fused_send_sends_what_three_calls_send(seed: int, loss: float) -> None:
    frames, wcs, landed, calls = _run(True, True, seed, loss)
    frames0, wcs0, landed0, calls0 = _run(True, False, seed, loss)
    assert calls > 50 and calls0 == 0  # (the fused calls did happen, and only there)
    assert len(frames) == len(frames0)
    assert frames == frames0
    assert wcs == wcs0
    assert landed == landed0
    assert len(wcs) > 300


@pytest.mark.parametrize(("seed", "loss"), [(7, 0.0), (8, 0.03)])
def test_gathered_payloads_send_the_copied_frames(seed: int, loss: float) -> None:
    """The fused runs' payloads sent from the work requests' region (three iovecs a
    frame: mrc_patch_run_gather, mrc_sendq_add_gather) put the same frames on the wire,
    at the same moments, as payloads copied into the frames."""
    frames, wcs, landed, calls = _run(True, True, seed, loss)
    frames0, wcs0, landed0, calls0 = _run(True, True, seed, loss, gather=False)
    assert calls > 50 and calls == calls0
    assert frames == frames0 and wcs == wcs0 and landed == landed0


@pytest.mark.parametrize("seed", [5, 6])
def test_queued_frames_are_the_listed_frames(seed: int) -> None:
    """Without impairments (no jitter either: its draws follow the order frames leave
    in) the frames through the queues (fused) are, moment by moment, the frames the core
    lists when it has no queues."""
    frames, wcs, landed, calls = _run(True, True, seed, 0.0, 0.0)
    frames0, wcs0, landed0, _ = _run(False, True, seed, 0.0, 0.0)
    assert calls > 50
    assert sorted(frames) == sorted(frames0)
    assert [w.wr_id for w in wcs] == [w.wr_id for w in wcs0]
    assert landed == landed0


@pytest.mark.parametrize(("fused", "cap"), [(True, SENDQ_CAP), (True, 3), (False, 3)])
def test_sender_notes_the_queues_that_grew(fused: bool, cap: int) -> None:
    """``Sender.grew``, which the answer's acknowledgement reads for the port its data
    took (mrcnet/core/answer.py), is the ports whose queue grew in the emit (what
    ``SendQueue.mark`` before it and ``grown`` after it gave): fused or not, and with
    queues so short that runs overflow them (frames left out)."""
    net = QueuedNet(cap=cap, seed=7, config=HostConfig(mtu_payload=1024),
                    imp=Impairments(loss=0.02))
    qa, _ = connect(net, 0, 1, recvs=400, attrs={"max_imm_outstanding": 3})
    qp = net.h(0).qp(qa)
    qp.snd.fused = fused
    emit, seen = qp.emit, []

    def checked(now: float, out: list[tuple[int, bytes]], sendq: Any = None) -> None:
        if sendq is None:
            emit(now, out, sendq)
            return
        before = [sendq.pending(p) for p in range(2)]
        qp.snd.grew[0] = 0
        emit(now, out, sendq)
        seen.append(qp.snd.grew[0])
        assert seen[-1] == sum(1 << p for p in range(2) if sendq.pending(p) > before[p])

    qp.emit = checked
    _burst(net, 7, qa)
    assert {1, 2, 3} <= set(seen)  # (each port alone, and both)
    assert (net.h(0).counters().get("tx_sendq_full", 0) > 0) == (cap < SENDQ_CAP)
