"""SendQueue.add_behind (an answer's ACK queued behind its data, the engine's
``_send_out``): each frame in one C call by scalars (``mrc_sendq_add_one``: no length and
port lists made and converted per frame), and the same queues, frames, counts and
overflow as one ``add_run`` per frame, whatever the frames are (bytes or read-only
views), a port out of range or a full queue."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mrcnet.io import batch
from mrcnet.io.batch import SendQueue
from mrcnet.native import HAVE_C, C, ffi

pytestmark = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")


def _queued(q: SendQueue, nports: int) -> list[list[bytes]]:
    """The frames waiting on each port, oldest first (read where they lie: an iovec is
    its base and its length, two words; cffi knows the struct only as opaque)."""
    out = []
    for i in range(nports):
        sq = q.queues[i]
        frames = []
        for j in range(sq.head, sq.n):
            iov = [ffi.cast("uintptr_t *", sq.iov + C.MRC_SENDQ_IOV * j + v)
                   for v in range(sq.niov[j])]
            frames.append(b"".join(bytes(ffi.buffer(ffi.cast("uint8_t *", w[0]), w[1]))
                                   for w in iov))
        out.append(frames)
    return out


def _frames(rng: random.Random, nports: int) -> list[tuple[int, Any]]:
    """One to four small frames, bytes or views, now and then for a port out of range."""
    out: list[tuple[int, Any]] = []
    for _ in range(rng.randint(1, 4)):
        frame: Any = rng.randbytes(rng.randint(1, 120))
        if rng.random() < 0.3:
            frame = memoryview(frame)[rng.randint(0, min(8, len(frame) - 1)):].toreadonly()
        port = rng.randrange(nports) if rng.random() < 0.9 else nports + rng.randrange(3)
        out.append((port, frame))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_same_queues_as_add_run_per_frame(seed: int) -> None:
    rng = random.Random(seed)
    nports = 3
    ref, new = SendQueue(nports, cap=6), SendQueue(nports, cap=6)
    for step in range(200):
        frames = _frames(rng, nports) if step % 17 else []
        busy = ref.busy()
        for port, frame in frames:
            ref.add_run(ffi.from_buffer(frame), [len(frame)], [port])
        assert new.add_behind(frames) == busy
        assert _queued(new, nports) == _queued(ref, nports)
        assert (new.waiting, new.added, new.overflow) == \
            (ref.waiting, ref.added, ref.overflow)
        assert len(new._keep) == len(ref._keep)  # (a buffer kept per frame queued)
        if rng.random() < 0.4:  # (a port's queue drains, as a send would)
            p = rng.randrange(nports)
            k = rng.randint(0, 6)
            assert new.drop(p, k) == ref.drop(p, k)
    assert ref.overflow > 5 and ref.added > 100  # (queues filled, ports out of range)
    assert _queued(new, nports) == _queued(ref, nports)
    for q in (ref, new):
        for i in range(nports):
            q.drop(i, q.pending(i))
        assert q.waiting == 0 and not q._keep  # (the buffers let go with the frames)


def test_one_scalar_c_call_per_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two frames: the busy ports once, then one ``mrc_sendq_add_one`` per frame, with no
    list among any call's arguments."""
    calls: list[tuple[str, tuple[Any, ...]]] = []
    lib = batch.C

    class Counting:
        def __getattr__(self, name: str) -> Any:
            fn = getattr(lib, name)

            def counted(*args: Any) -> Any:
                calls.append((name, args))
                return fn(*args)

            return counted

    q = SendQueue(2, cap=4)
    monkeypatch.setattr(batch, "C", Counting())
    assert q.add_behind([(1, b"ack-one"), (0, memoryview(b"ack-two"))]) == 0
    assert [name for name, _ in calls] == \
        ["mrc_sendq_busy", "mrc_sendq_add_one", "mrc_sendq_add_one"]
    assert not any(isinstance(a, list) for _, args in calls for a in args)
    assert _queued(q, 2) == [[b"ack-two"], [b"ack-one"]]
