"""The shared-memory ring on its own (both ends in this process, over one memfd mapping
each, as a client and mrcd map it): wrap-around, a full ring, the doorbell handshakes,
and indices a hostile peer could write."""

from __future__ import annotations

import mmap
import os
import random
import struct
import time

import pytest

from mrcnet.api import shmring
from mrcnet.api.protocol import map_region
from mrcnet.api.shmqueues import queue_bytes, sealed_memfd
from mrcnet.api.shmring import OFF_HEAD, OFF_TAIL, Ring, RingCorrupt

SLOT = 16


def _pair(nslots: int) -> tuple[Ring, Ring, mmap.mmap, mmap.mmap]:
    """A producer and a consumer over two mappings of one sealed memfd."""
    size = queue_bytes(nslots, SLOT)
    fd = sealed_memfd("test-ring", size)
    try:
        a, b = map_region(fd, size, "producer"), map_region(fd, size, "consumer")
    finally:
        os.close(fd)
    return Ring(a, 0, nslots, SLOT, "producer"), Ring(b, 0, nslots, SLOT, "consumer"), a, b


def _push(p: Ring, mm: mmap.mmap, values: list[int]) -> None:
    for i, v in enumerate(values):
        struct.pack_into("<Q", mm, p.offset_of(p.tail + i), v)
    p.publish(len(values))


def _pop(c: Ring, mm: mmap.mmap) -> list[int]:
    n = c.ready()
    out = [struct.unpack_from("<Q", mm, c.offset_of(c.head + i))[0] for i in range(n)]
    c.release(n)
    return out


def test_wrap_around_keeps_order_and_loses_nothing() -> None:
    p, c, pm, cm = _pair(16)
    rng = random.Random(5)
    sent: list[int] = []
    got: list[int] = []
    nxt = 0
    while nxt < 5000:  # ~300 times round the ring, in uneven bites
        k = min(rng.randint(1, 16), p.room())
        batch = list(range(nxt, nxt + k))
        _push(p, pm, batch)
        sent += batch
        nxt += k
        if rng.random() < 0.6:
            got += _pop(c, cm)
    got += _pop(c, cm)
    assert got == sent
    assert p.tail == c.head == nxt >= 5000


def test_many_slots_at_once_across_the_wrap() -> None:
    """Ring.write of many slots by the producer and Ring.read by the consumer: the same
    values as slot by slot, in order, whichever way the batches straddle the ring's end
    (and they agree with slot-by-slot access on the other side)."""
    p, c, pm, cm = _pair(16)
    rng = random.Random(7)
    nxt = 0
    for _ in range(400):
        k = rng.randint(0, p.room())
        values = list(range(nxt, nxt + k))
        if rng.random() < 0.5:
            p.write(p.tail, b"".join(struct.pack("<Q8x", v) for v in values))
            p.publish(k)
        else:
            _push(p, pm, values)
        nxt += k
        n = c.ready()
        if rng.random() < 0.5:
            data = c.read(c.head, n)
            assert len(data) == n * SLOT
            got = [v for (v,) in struct.iter_unpack("<Q8x", data)]
            c.release(n)
        else:
            got = _pop(c, cm)
        assert got == list(range(nxt - n, nxt))
    assert p.tail == c.head == nxt


def test_full_ring_has_no_room_until_the_consumer_takes() -> None:
    p, c, pm, cm = _pair(16)
    _push(p, pm, list(range(16)))
    assert p.room() == 0
    assert not p.block()  # nothing taken: the producer must wait
    assert _pop(c, cm)[:3] == [0, 1, 2]
    assert p.room() == 16


@pytest.mark.skipif(not shmring.PRECISE, reason="needs the C fence")
def test_doorbell_handshakes() -> None:
    p, c, pm, cm = _pair(16)
    _push(p, pm, [1])  # the consumer does not sleep: no doorbell
    assert _pop(c, cm) == [1]
    assert not c.sleep()  # nothing published meanwhile: it may sleep
    struct.pack_into("<Q", pm, p.offset_of(p.tail), 2)
    assert p.publish(1)  # asleep: ring it, once
    struct.pack_into("<Q", pm, p.offset_of(p.tail), 3)
    assert not p.publish(1)
    assert c.sleep()  # published before it slept: do not sleep
    assert _pop(c, cm) == [2, 3]
    # A producer that waits for room is rung when the consumer takes.
    _push(p, pm, list(range(16)))
    assert not p.block()
    n = c.ready()
    assert c.release(n)


@pytest.mark.parametrize("field,value", [(OFF_TAIL, 17), (OFF_TAIL, 2**64 - 1),
                                         (OFF_HEAD, 5)])
def test_hostile_indices_are_refused(field: int, value: int) -> None:
    """A tail beyond the ring, a tail behind the head, a head ahead of the tail: each is
    RingCorrupt on the side that reads it, never a wrong slot."""
    p, c, pm, _cm = _pair(16)
    struct.pack_into("<Q", pm, field, value)
    with pytest.raises(RingCorrupt):
        if field == OFF_TAIL:
            c.ready()
        else:
            p.room()


def test_a_ring_must_fit_and_be_a_power_of_two() -> None:
    _p, _c, pm, _cm = _pair(16)
    with pytest.raises(ValueError):
        Ring(pm, 0, 12, SLOT, "consumer")
    with pytest.raises(ValueError):
        Ring(pm, 0, 1024, SLOT, "consumer")


def _produce(fd: int, nslots: int, count: int) -> None:
    """In a child process: push 0..count-1 through the ring; exits 0 when done, 1 on any
    error, 2 after 60 s."""
    code = 1
    try:
        size = queue_bytes(nslots, SLOT)
        mm = map_region(fd, size, "producer")
        p = Ring(mm, 0, nslots, SLOT, "producer")
        i, end = 0, time.monotonic() + 60
        while i < count and time.monotonic() < end:
            if p.room():
                struct.pack_into("<Q", mm, p.offset_of(p.tail), i)
                p.publish(1)
                i += 1
        code = 0 if i == count else 2
    finally:
        os._exit(code)


@pytest.mark.skipif(not shmring.PRECISE, reason="the rings need the C module's indices")
def test_indices_written_by_another_process_are_never_torn() -> None:
    """A producer process and this consumer hammer a 16-slot ring: every value arrives
    once, in order, and no index is ever read half written (through Python's struct,
    2 in 2 million reads of an index another process wrote were torn, and a torn tail
    looks like a corrupt ring: that is why the queues need the C module)."""
    nslots, count = 16, 20_000
    size = queue_bytes(nslots, SLOT)
    fd = sealed_memfd("test-ring", size)
    try:
        mm = map_region(fd, size, "consumer")
        pid = os.fork()
        if pid == 0:
            _produce(fd, nslots, count)
        try:
            c = Ring(mm, 0, nslots, SLOT, "consumer")
            want, end = 0, time.monotonic() + 60
            while want < count and time.monotonic() < end:
                n = c.ready()
                for k in range(n):
                    assert struct.unpack_from("<Q", mm, c.offset_of(c.head + k))[0] == want
                    want += 1
                c.release(n)
            assert want == count
        finally:
            _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(fd)


@pytest.mark.skipif(not shmring.PRECISE, reason="needs the C module")
@pytest.mark.parametrize("once", [True, False])
def test_put_in_one_c_call_is_its_python_twin(once: bool) -> None:
    """Ring.put through mrc_shmring_put and through the Python twin (a detached
    producer: room, write, publish in Python), fed the same puts across the wrap, into
    a full ring and to a sleeping consumer: the same counts, doorbells and bytes."""
    rings = []
    for _ in range(2):
        p, c, pm, cm = _pair(16)
        p.once = once
        rings.append((p, c, pm, cm))
    rings[1][0].detach()  # the twin
    rng = random.Random(15)
    nxt = 0
    for step in range(600):
        k = rng.randint(0, 20)  # up to more than the ring holds
        data = b"".join(struct.pack("<Q", nxt + i) + bytes([step % 251]) * (SLOT - 8)
                        for i in range(k))
        nxt += k
        sleeps = rng.random() < 0.3
        got = []
        for p, c, _pm, _cm in rings:
            if sleeps:
                c.sleep()
            got.append(p.put(data))
            assert p.tail == p.load(OFF_TAIL)
        assert got[0] == got[1], step
        assert got[0][0] == min(k, got[0][0]) and (got[0][0] == k or rings[0][0].room() == 0)
        assert rings[0][2][:] == rings[1][2][:], step  # every byte of both rings
        if rng.random() < 0.5:
            assert _pop(rings[0][1], rings[0][3]) == _pop(rings[1][1], rings[1][3])
    for p, _, pm, _ in rings:  # a head the client broke: refused by both
        struct.pack_into("Q", pm, p.base + OFF_HEAD, p.tail + 1)
        with pytest.raises(RingCorrupt):
            p.put(bytes(SLOT))


@pytest.mark.skipif(not shmring.PRECISE, reason="needs the C module")
def test_take_in_one_c_call_is_its_python_twin() -> None:
    """Ring.take through mrc_shmring_take and through the Python twin (a detached
    consumer: ready, read, release in Python), across the wrap, in bites smaller and
    larger than what waits, with a producer that waits for room: the same slots,
    doorbells and bytes."""
    rings = [_pair(16) for _ in range(2)]
    rings[1][1].detach()  # the twin
    rng = random.Random(16)
    nxt = taken_upto = 0
    for step in range(600):
        k = rng.randint(0, 16)
        data = b"".join(struct.pack("<Q", nxt + i) + bytes([step % 251]) * (SLOT - 8)
                        for i in range(k))
        blocks = rng.random() < 0.3
        most = rng.randint(1, 20)
        got = []
        for p, c, _pm, _cm in rings:
            n, _ = p.put(data)
            if blocks:
                p.block()
            got.append((n, c.take(most)))
        assert got[0] == got[1], step
        nxt += got[0][0]
        taken = got[0][1][0]
        assert len(taken) <= SLOT * most
        values = [struct.unpack_from("<Q", taken, i)[0] for i in range(0, len(taken), SLOT)]
        assert values == list(range(taken_upto, taken_upto + len(values)))  # in order
        taken_upto += len(values)
        assert rings[0][2][:] == rings[1][2][:], step  # every byte of both rings
    for p, c, pm, _ in rings:  # a tail the producer broke: refused by both
        struct.pack_into("Q", pm, p.base + OFF_TAIL, c.head + 17)
        with pytest.raises(RingCorrupt):
            c.take(4)
