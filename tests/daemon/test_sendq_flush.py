"""SendQueue.flush (mrcd's pass sends every port's queue in one C call) against the
per-port sends it replaces: the same frames on each socket in the same order, the ports
asked for first sent first, the same counts, a full socket's rest left queued, an
unbound (closed) port skipped; and ``mark`` / ``grown`` (where a run went, for an
answer's acknowledgement) against each queue's ``pending``."""

from __future__ import annotations

import contextlib
import os
import random
import socket
from contextlib import ExitStack

import pytest

from mrcnet.io.batch import CBatchIO, SendQueue
from mrcnet.native import HAVE_C, ffi

pytestmark = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")


def _drain(a: socket.socket) -> list[bytes]:
    """Every datagram ``a`` holds now."""
    got: list[bytes] = []
    with contextlib.suppress(BlockingIOError):
        while True:
            got.append(a.recv(65536))
    return got


def _fill(rng: random.Random, q: SendQueue, nports: int, keep: list[bytes]) -> None:
    """A few random runs of frames on random ports (the same for both queues: ``rng``)."""
    for _ in range(rng.randint(0, 4)):
        n = rng.randint(1, 12)
        lens = [rng.randint(20, 400) for _ in range(n)]
        data = rng.randbytes(sum(lens))
        keep.append(data)  # (the queue points into it)
        q.add_run(ffi.from_buffer(data), lens, [rng.randrange(nports) for _ in range(n)])


def _per_port(q: SendQueue, ios: list[CBatchIO | None], first: int) -> dict[int, tuple]:
    """The engine's former loop: the ports in ``first`` in order, then the others."""
    nports = len(ios)
    order = [i for i in range(nports) if first >> i & 1]
    order += [i for i in range(nports) if i not in order]
    done = {}
    for i in order:
        io = ios[i]
        if q.pending(i) and io is not None:
            done[i] = q.send(i, io)
    return done


@pytest.mark.parametrize("seed", range(6))
def test_flush_sends_as_the_per_port_loop(seed: int) -> None:
    rng = random.Random(seed)
    nports = 3
    with ExitStack() as stack:
        # One receiving socket per tree, every port's sending fd a dup of one socket:
        # the frames arrive in the order the ports were sent, whichever port
        rx, ios_of = [], []
        for _ in range(2):
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            stack.enter_context(a)
            stack.enter_context(b)
            a.setblocking(False)
            b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096 + 2048 * seed)
            fds = [os.dup(b.fileno()) for _ in range(nports)]
            for fd in fds:
                stack.callback(os.close, fd)
            rx.append(a)
            ios_of.append([CBatchIO(fd, max_batch=4) for fd in fds])
        ref, new = SendQueue(nports), SendQueue(nports)
        closed = rng.randrange(nports) if seed % 2 else -1
        ios_ref: list[CBatchIO | None] = list(ios_of[0])
        for i, io in enumerate(ios_of[1]):
            new.bind(i, None if i == closed else io)
        if closed >= 0:
            ios_ref[closed] = None
        keep: list[bytes] = []
        seen = 0
        for step in range(60):
            state = rng.getstate()
            _fill(rng, ref, nports, keep)
            rng.setstate(state)
            had = [new.pending(i) for i in range(nports)]
            new.mark()
            _fill(rng, new, nports, keep)
            assert new.grown() == sum(1 << i for i in range(nports)
                                      if new.pending(i) > had[i])
            assert new.busy() == sum(1 << i for i in range(nports) if new.pending(i))
            first = rng.randrange(1 << nports)
            want = _per_port(ref, ios_ref, first)
            done = new.flush(first)
            assert done == sum(1 << i for i in want)
            for i, (n, calls, err) in want.items():
                assert (new.flushed_frames[i], new.flushed_calls[i],
                        new.flushed_errs[i]) == (n, calls, err)
            assert new.waiting == ref.waiting
            assert [new.pending(i) for i in range(nports)] == \
                [ref.pending(i) for i in range(nports)]
            if step % 3 == 0:  # (sometimes the receivers read, making room)
                got_ref, got_new = _drain(rx[0]), _drain(rx[1])
                assert got_new == got_ref
                seen += len(got_ref)
        assert seen > 0
        for q in (ref, new):  # (what is left: dropped, then nothing waits)
            for i in range(nports):
                q.drop(i, q.pending(i))
            assert q.waiting == 0 and q.busy() == 0


def test_add_behind_queues_as_add_run_per_frame() -> None:
    """An answer's few frames queued behind the data (the engine's ``_send_out``):
    the same queues, counts and overflow as one ``add_run`` each, and the ports that
    had frames before."""
    rng = random.Random(7)
    nports = 3
    ref, new = SendQueue(nports, cap=8), SendQueue(nports, cap=8)
    keep: list[bytes] = []
    for _ in range(40):
        state = rng.getstate()
        _fill(rng, ref, nports, keep)
        rng.setstate(state)
        _fill(rng, new, nports, keep)
        frames = [(rng.randrange(nports), rng.randbytes(rng.randint(20, 90)))
                  for _ in range(rng.randint(1, 4))]
        busy = sum(1 << i for i in range(nports) if ref.pending(i))
        for port, frame in frames:
            ref.add_run(ffi.from_buffer(frame), [len(frame)], [port])
        assert new.add_behind(frames) == busy
        assert [new.pending(i) for i in range(nports)] == \
            [ref.pending(i) for i in range(nports)]
        assert (new.waiting, new.added, new.overflow) == (ref.waiting, ref.added, ref.overflow)
        p = rng.randrange(nports)  # (a port's queue empties, as a send would)
        for q in (ref, new):
            q.drop(p, q.pending(p))
    assert ref.overflow > 0  # (the small queues filled up at times)
