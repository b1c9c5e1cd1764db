"""The collectives' algorithms, layouts and reports, run for real over kernel TCP on
loopback (one thread per rank): every result checked, a wrong byte caught, a silent
peer stopped by the step deadline."""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

import numpy as np
import pytest

from mrcnet.coll.algorithms import layout, prepare, run_iteration, verify
from mrcnet.coll.errors import CollError, PeerFailed, StepTimeout, VerifyFailed
from mrcnet.coll.failures import parse_fabric_failure
from mrcnet.coll.options import CollOptions, sweep
from mrcnet.coll.patterns import allreduce_input
from mrcnet.coll.rank import buffer_sizes, run_rank
from mrcnet.coll.report import percentile, row_from_ranks, stall_note
from mrcnet.coll.transport_tcp import TcpTransport


def _ranks(world: int, opts: CollOptions, body: Any = None,
           step_timeout: float = 10.0) -> tuple[dict[int, list[dict[str, Any]]],
                                                dict[int, BaseException]]:
    """Run ``world`` ranks over loopback TCP in threads; their records and errors."""
    port = 20000 + secrets.randbelow(12000)  # below the ephemeral ports (32768-)
    names = [f"r{i}" for i in range(world)]
    data, inbox = buffer_sizes(opts, world)
    out: dict[int, list[dict[str, Any]]] = {r: [] for r in range(world)}
    errs: dict[int, BaseException] = {}

    def one(r: int) -> None:
        try:
            t = TcpTransport(r, names, ["::1"] * world, data, inbox, token=7, port=port,
                             step_timeout=step_timeout, connect_timeout=20)
            try:
                (body or run_rank)(t, opts, out[r].append)
            finally:
                t.close()
        except BaseException as e:  # handed to the test
            errs[r] = e

    threads = [threading.Thread(target=one, args=(r,)) for r in range(world)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    return out, errs


@pytest.mark.parametrize("op", ["allreduce", "allgather", "alltoall"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_collective_verified_over_loopback(op: str, world: int) -> None:
    # 4100 and 12 KiB + 4: chunks of unequal length (the remainder lands in the last
    # ones); 1.5 MiB: chunks cut in several pipelined slices.
    opts = CollOptions(op, (4100, 12292, 3 << 19), iters=3, warmup=1, fail=())
    out, errs = _ranks(world, opts)
    assert not errs, errs
    for r in range(world):
        sizes = [x for x in out[r] if x["type"] == "size"]
        assert [x["size"] for x in sizes] == [4100, 12292, 3 << 19]
        assert all(x["verified"] is True and len(x["steps"]) == 3 for x in sizes)


def test_allreduce_result_is_the_exact_sum() -> None:
    """The data buffer after an all-reduce holds the element-wise sum of the inputs."""
    opts = CollOptions("allreduce", (4096,), iters=1, warmup=0, fail=())
    seen: dict[int, Any] = {}

    def body(t: Any, o: CollOptions, emit: Any) -> None:
        lay = layout(o.op, o.sizes[0], t.world)
        prepare(t, lay, 0)
        run_iteration(t, lay, 0)
        seen[t.rank] = np.frombuffer(t.data, dtype=np.float32, count=1024).copy()
        t.wait_sent()

    _, errs = _ranks(3, opts, body)
    assert not errs, errs
    want = sum(allreduce_input(r, 0, 1024).astype(np.float64) for r in range(3))
    for r in range(3):
        assert np.array_equal(seen[r], want.astype(np.float32))


def test_a_wrong_byte_fails_the_check() -> None:
    opts = CollOptions("alltoall", (4096,), iters=1, warmup=0, fail=())
    caught: dict[int, BaseException] = {}

    def body(t: Any, o: CollOptions, emit: Any) -> None:
        lay = layout(o.op, o.sizes[0], t.world)
        prepare(t, lay, 0)
        run_iteration(t, lay, 0)
        if t.rank == 1:
            at = lay.slot_at(0, 0) + 17  # one byte of the block from rank 0
            t.inbox[at] = (t.inbox[at] + 1) % 256
        try:
            verify(t, lay, 0)
        except VerifyFailed as e:
            caught[t.rank] = e

    _, errs = _ranks(3, opts, body)
    assert not errs, errs
    assert list(caught) == [1]
    assert "index 17" in str(caught[1]) and "from rank 0" in str(caught[1])


def test_a_silent_peer_hits_the_step_deadline() -> None:
    """Rank 1 connects and then sends nothing: rank 0 stops with StepTimeout after
    about the deadline, not never."""
    opts = CollOptions("allreduce", (4096,), iters=1, warmup=0, fail=())
    release = threading.Event()
    took: dict[str, float] = {}

    def body(t: Any, o: CollOptions, emit: Any) -> None:
        if t.rank == 1:
            release.wait(10)
            return
        t0 = time.monotonic()
        try:
            run_rank(t, o, emit)
        finally:
            took["s"] = time.monotonic() - t0
            release.set()

    _, errs = _ranks(2, opts, body, step_timeout=1.0)
    assert isinstance(errs.get(0), StepTimeout), errs
    assert "no progress for 1 s" in str(errs[0])
    assert 0.9 < took["s"] < 5


def test_an_aborting_rank_stops_its_peers() -> None:
    opts = CollOptions("allreduce", (4096,), iters=50, warmup=0, fail=())

    def body(t: Any, o: CollOptions, emit: Any) -> None:
        if t.rank == 2:
            t.abort("test")
            return
        run_rank(t, o, emit)

    _, errs = _ranks(4, opts, body, step_timeout=30)
    assert set(errs) == {0, 1, 3}
    assert all(isinstance(e, PeerFailed) for e in errs.values()), errs
    assert any("rank 2 (r2) aborted" in str(e) for e in errs.values())


def test_layout_errors_and_sweep() -> None:
    with pytest.raises(CollError, match="multiple of 4"):
        layout("allreduce", 1001, 4)
    with pytest.raises(CollError, match="unknown collective"):
        layout("broadcast", 4096, 4)
    with pytest.raises(CollError, match="at least 2 ranks"):
        layout("alltoall", 4096, 1)
    lay = layout("allreduce", 4 * 10, 4)
    assert lay.bounds == (0, 8, 20, 28, 40) and lay.slot == 12
    assert sweep(1 << 20, 64 << 20, 2)[-1] == 64 << 20 and len(sweep(1 << 20, 64 << 20, 2)) == 7
    with pytest.raises(CollError):
        sweep(8, 4, 2)


def test_report_rows() -> None:
    per_rank = {0: [[10.0, 1.0], [11.0, 1.0], [12.0, 1.0]],
                1: [[10.1, 1.1], [11.1, 4.0], [12.1, 0.9]]}
    row = row_from_ranks("allreduce", 1 << 20, per_rank, True)
    assert row.steps_s == [1.1, 4.0, 1.0]
    assert row.worst_rank == [1, 1, 0] and row.worst == 1
    assert row.p100_s == 4.0 and row.p50_s == 1.1
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 2 * 1 / 2)
    assert row.algbw_gbps == pytest.approx((1 << 20) * 8 / (6.1 / 3) / 1e9)
    note = stall_note(row)
    assert note is not None and "step 1 took 4.000 s" in note
    assert percentile([3, 1, 2], 50) == 2


def test_failure_specs() -> None:
    f = parse_fabric_failure("port:h0.1@2s..4s:down")
    assert (f.kind, f.target, f.start, f.end) == ("port", "h0.1", 2.0, 4.0)
    g = parse_fabric_failure("link:L0.0-S0.1@1s..9s:flap=2s/2s")
    assert (g.action, g.flap_down, g.end) == ("flap", 2.0, 9.0)
    with pytest.raises(CollError, match="bad failure"):
        parse_fabric_failure("link:L0.0-S0.1@1s:explode")
