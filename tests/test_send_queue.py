"""SendQueue (mrcd's data frames from the C frame builder straight to sendmmsg): each
port's socket receives exactly the frames RunPatcher.frames makes for it, in order,
through full sockets (the rest waits and goes later), a queue that overflows, drops, and
errors at the head of the queue."""

from __future__ import annotations

import errno
import random
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
from test_run_patcher import _EXT_TSETH, _paths

from mrcnet.io.batch import CBatchIO, SendQueue, send_queue
from mrcnet.native import HAVE_C
from mrcnet.wire.bth import F_TS
from mrcnet.wire.template import FRAME_ROOM, RunPatcher

pytestmark = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")

OP_MIDDLE = 0xC7


@contextmanager
def _ports(n: int, sndbuf: int | None = None
           ) -> Iterator[list[tuple[socket.socket, CBatchIO]]]:
    """``n`` datagram socket pairs: (the receiving end, a batch I/O on the sending end)."""
    with ExitStack() as stack:
        out = []
        for _ in range(n):
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            stack.enter_context(a)
            stack.enter_context(b)
            if sndbuf is not None:
                b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            a.setblocking(False)
            out.append((a, CBatchIO(b.fileno(), max_batch=8)))
        yield out


def _drain(a: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            got.append(a.recv(65536))
        except BlockingIOError:
            return got


def _runs(rng: random.Random, rp: RunPatcher, slots: list[int], nports: int,
          count: int) -> Iterator[tuple[list[int], tuple[object, ...]]]:
    """Random runs: (each frame's port, RunPatcher arguments)."""
    for _ in range(count):
        n = rng.randint(1, 30)
        seg = rng.choice([256, 1024, 4096])
        payload = rng.randbytes(seg * n)
        args = ([rng.choice(slots) for _ in range(n)],
                [rng.getrandbits(31) | 1 << 31 for _ in range(n)], [OP_MIDDLE] * n,
                [F_TS] * n, [_EXT_TSETH] * n, rng.randrange(1 << 24), rng.getrandbits(40),
                payload, seg, 0, 0, rng.getrandbits(16))
        yield [rng.randrange(nports) for _ in range(n)], args


@pytest.mark.parametrize("seed", range(4))
def test_queued_frames_are_the_run_frames_in_order(seed: int) -> None:
    rng = random.Random(seed)
    rp = RunPatcher()
    slots = [rp.add(t, spec) for t, spec in _paths()]
    want: list[list[bytes]] = [[], [], []]
    got: list[list[bytes]] = [[], [], []]
    q = SendQueue(3)
    with _ports(3) as ports:
        for k, (where, args) in enumerate(_runs(rng, rp, slots, 3, 40)):
            for p, f in zip(where, rp.frames(*args), strict=True):  # type: ignore[arg-type]
                want[p].append(bytes(f))
            rp.queue(q, where, *args)  # type: ignore[arg-type]
            assert q.waiting == sum(q.pending(p) for p in range(3))
            if k % 3 == 2:  # send some of the time: runs pile up in between
                for p, (a, io) in enumerate(ports):
                    n, calls, err = q.send(p, io)
                    assert err == 0 and q.pending(p) == 0 and calls == -(-n // 8)
                    got[p] += _drain(a)
        assert q.take_added() == sum(map(len, want)) and q.take_added() == 0
        for p, (a, io) in enumerate(ports):
            q.send(p, io)
            got[p] += _drain(a)
    assert got == want and q.waiting == 0 and not q._keep


def test_full_socket_keeps_the_rest_then_sends_it() -> None:
    rng = random.Random(9)
    rp = RunPatcher()
    slots = [rp.add(t, spec) for t, spec in _paths()]
    q = SendQueue(1)
    want: list[bytes] = []
    with _ports(1, sndbuf=4096) as [(a, io)]:
        for where, args in _runs(rng, rp, slots, 1, 6):
            want += [bytes(f) for f in rp.frames(*args)]  # type: ignore[arg-type]
            rp.queue(q, where, *args)  # type: ignore[arg-type]
        got: list[bytes] = []
        rounds = 0
        while q.pending(0):
            _n, _calls, err = q.send(0, io)
            assert err in (0, errno.EAGAIN)
            assert err or not q.pending(0)
            got += _drain(a)
            rounds += 1
        assert rounds > 1  # the socket was full at least once
    assert got == want and q.waiting == 0


def test_overflow_drop_and_an_error_at_the_head() -> None:
    rng = random.Random(3)
    rp = RunPatcher()
    slots = [rp.add(t, spec) for t, spec in _paths()]
    q = SendQueue(2, cap=10)
    where, args = next(_runs(random.Random(5), rp, slots, 1, 1))
    n = len(where)
    frames = [bytes(f) for f in rp.frames(*args)]  # type: ignore[arg-type]
    rp.queue(q, [0] * n, *args)  # type: ignore[arg-type]
    rp.queue(q, [0] * n, *args)  # type: ignore[arg-type]
    assert q.pending(0) == min(10, 2 * n) and q.overflow == 2 * n - q.pending(0)
    assert q.drop(0, 3) == 3 and q.pending(0) == min(10, 2 * n) - 3
    rp.queue(q, [7] * n, *args)  # no such port: nothing queued
    assert q.pending(1) == 0 and q.overflow == 3 * n - min(10, 2 * n)
    with _ports(1) as [(a, io)]:
        a.close()  # the peer is gone: the frame at the head fails and stays
        sent, _calls, err = q.send(0, io)
        assert sent == 0 and err in (errno.ECONNREFUSED, errno.EPIPE, errno.ENOTCONN)
        assert q.pending(0) == min(10, 2 * n) - 3
    assert q.drop(0, 1000) == min(10, 2 * n) - 3 and q.waiting == 0 and not q._keep
    assert rng and frames


def test_send_queue_is_c_only() -> None:
    assert isinstance(send_queue(2), SendQueue)


@pytest.mark.parametrize("seed", range(6))
def test_gathered_frames_are_the_run_frames(seed: int) -> None:
    """``mrc_patch_run_gather`` + ``mrc_sendq_add_gather`` (mrcd's fused runs: payloads
    sent from where they lie, only headers and ICRCs written): each socket receives the
    very frames ``RunPatcher.frames`` makes, whole. A payload is left in place exactly
    when it is MRC_GATHER_MIN bytes or more of an even length (segments odd, small or
    large, and odd-length last payloads)."""
    from mrcnet.native import C, ffi

    rng = random.Random(seed)
    rp = RunPatcher()
    slots = [rp.add(t, spec) for t, spec in _paths()]
    q = SendQueue(2)
    want: list[list[bytes]] = [[], []]
    got: list[list[bytes]] = [[], []]
    gathered = whole = 0
    with _ports(2) as ports:
        for _ in range(12):
            n = rng.randint(1, 24)
            seg = rng.choice([256, 1023, C.MRC_GATHER_MIN, 4096, 8192])
            payload = rng.randbytes(seg * (n - 1) + rng.randint(1, seg))
            where = [rng.randrange(2) for _ in range(n)]
            args = ([rng.choice(slots) for _ in range(n)],
                    [rng.getrandbits(31) | 1 << 31 for _ in range(n)], [OP_MIDDLE] * n,
                    [F_TS] * n, [_EXT_TSETH] * n, rng.randrange(1 << 24),
                    rng.getrandbits(40))
            for p, f in zip(where, rp.frames(*args, payload, seg, 0, 0, 7), strict=True):
                want[p].append(bytes(f))
            cap = n * FRAME_ROOM + len(payload)
            buf, lens, plens = (ffi.new("uint8_t[]", cap), ffi.new("uint32_t[]", n),
                                ffi.new("uint32_t[]", n))
            src = ffi.from_buffer(payload)
            assert C.mrc_patch_run_gather(buf, cap, n, rp.paths, *args, src, len(payload),
                                          seg, 0, 0, 7, lens, plens)
            for i in range(n):
                plen = min(seg, len(payload) - i * seg)
                left = plen >= C.MRC_GATHER_MIN and not plen & 1
                assert plens[i] == (plen if left else 0)
                gathered += left
                whole += not left
            k = C.mrc_sendq_add_gather(q.queues, 2, buf, lens, plens, src, seg, where, n)
            assert k == n
            q.queued(buf, n, k, src)  # (as mrcd's fused run: the buffer and the payload kept)
            for p, (a, io) in enumerate(ports):
                q.send(p, io)
                got[p] += _drain(a)
    assert got == want and gathered > 20 and whole > 20
    assert q.waiting == 0 and not q._keep
