"""mrcd's port read straight into the receive lane (mrcnet/io/batch.py ``lane_reader``,
rxread.c ``mrc_rx_recv``): the same frames, placements, counters and frames to send as
the read and the lane's load done apart (``recv_slots`` then ``receive_batch`` loading
the slots), on a real socket."""

from __future__ import annotations

import errno
import os
import socket
from typing import Any

import pytest

from mrcnet.buffers import SlotFrames
from mrcnet.core.rxlane import CRxLane
from mrcnet.io.batch import CBatchIO, lane_reader, recv_slots
from mrcnet.native import HAVE_C

from .test_rxlane import _generate, _setup

pytestmark = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")


def _run(frames: list[tuple[int, bytes]], use_reader: bool, max_batch: int
         ) -> tuple[Any, ...]:
    """Every frame through a datagram socket in batches of ``max_batch`` into a fresh
    receiver; what it ends with."""
    _net, (_qa, _qb, _ms, md, _src), hb = _setup("c", 0, {}, 600_000)
    lane = hb.rx_lane
    assert isinstance(lane, CRxLane)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    reads = []
    with a, b, CBatchIO(b.fileno(), max_batch=max_batch, bufsize=9216) as io:
        read = lane_reader(io, lane)
        t = 1.0
        for i in range(0, len(frames), 11):  # (more queued than a batch, at times)
            for _, f in frames[i : i + 11]:
                a.send(f)
            while True:
                k = read() if use_reader else recv_slots(io)
                if not k:
                    break
                reads.append(k)
                hb.receive_batch(SlotFrames(io, k), 0, t, io, lane if use_reader else None)
                t += 0.0001
        assert (read() if use_reader else recv_slots(io)) == 0
    return reads, hb.counters(), bytes(md.view), hb.frames_to_send(t)


@pytest.mark.parametrize("max_batch", [4, 8, 64])
def test_reader_is_recv_slots_then_load(max_batch: int,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    loads = []
    real = CRxLane.load_slots
    monkeypatch.setattr(CRxLane, "load_slots",
                        lambda self, io, k: (loads.append(k), real(self, io, k))[1])
    frames = _generate(0, {})
    got = _run(frames, True, max_batch)
    assert not loads  # the reader's read is the lane's load
    assert got == _run(frames, False, max_batch)
    assert sum(loads) == len(frames)
    reads, counters = got[0], got[1]
    assert sum(reads) == len(frames) and max(reads) <= max_batch
    assert counters["rx_data"] == len(frames)


def test_reader_grows_the_lane_to_its_batch() -> None:
    """A batch larger than the lane's arrays: the lane is grown first, every frame of a
    full read is one the lane points at."""
    _net, _q, hb = _setup("c", 0, {}, 600_000)
    lane = hb.rx_lane
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b, CBatchIO(b.fileno(), max_batch=200, bufsize=256) as io:
        read = lane_reader(io, lane)
        assert lane._cap >= 200
        for i in range(200):
            a.send(bytes([i]) * 20)
        assert read() == 200
        assert [bytes(v) for v in SlotFrames(io, 200)] == [bytes([i]) * 20 for i in range(200)]
        hb.receive_batch(SlotFrames(io, 200), 0, 1.0, io, lane)
        c = hb.counters()  # garbage: each one counted as malformed and dropped
        assert c["rx_frames"] == 200
        assert sum(v for k, v in c.items() if k.startswith("rx_malformed_")) == 200
        assert hb.frames_to_send(1.1) == []


def test_reader_reports_errno() -> None:
    """A read that fails gives -errno (the caller decides), not an exception."""
    _net, _q, hb = _setup("c", 0, {}, 600_000)
    r, w = os.pipe()
    os.close(w)
    os.close(r)  # a closed fd: EBADF
    io = CBatchIO(r, max_batch=8)
    assert lane_reader(io, hb.rx_lane)() == -errno.EBADF


def test_replaced_lane_loads_the_frames_itself() -> None:
    """Frames read into a lane the receiver no longer uses (tests plant another): the
    receiver loads them into its own, and decides as without the reader."""
    frames = _generate(0, {})[:20]
    results = []
    for use_reader in (True, False):
        _net, (_qa, _qb, _ms, md, _src), hb = _setup("c", 0, {}, 600_000)
        old = hb.rx_lane
        hb._rx.set_lane(CRxLane())
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        with a, b, CBatchIO(b.fileno(), max_batch=64, bufsize=9216) as io:
            for _, f in frames:
                a.send(f)
            k = lane_reader(io, old)() if use_reader else recv_slots(io)
            assert k == 20
            hb.receive_batch(SlotFrames(io, k), 0, 1.0, io, old if use_reader else None)
        results.append((hb.counters(), bytes(md.view), hb.frames_to_send(1.1)))
    assert results[0] == results[1]
    assert results[0][0]["rx_data"] == 20
