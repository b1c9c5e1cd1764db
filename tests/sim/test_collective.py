"""mrc-sim collective: the collective plans' dependencies and real simulated runs
(the protocol core unchanged): every timed step measured, busbw never above what the
hosts' links can carry, a failure survived by spray, and the command line."""

from __future__ import annotations

import json

import pytest

from mrcnet.coll.options import CollOptions
from mrcnet.sim.cli import main as sim_main
from mrcnet.sim.collective import CollectiveRun, default_topology, plan, run_collective
from mrcnet.sim.errors import SimError, SpecError
from mrcnet.sim.topology import parse_topology

SMALL = "leafspine:planes=2,spines=2,leaves=2,hosts=2"


def test_ring_plan_dependencies() -> None:
    ws = plan("allreduce", 4096, 4)
    assert len(ws) == 2 * 3 * 4  # 2(n-1) writes per rank
    assert all(w.dst == (w.src + 1) % 4 and w.size == 1024 for w in ws)
    assert [w.deps for w in ws[:4]] == [0, 0, 0, 0]  # the first step waits for nothing
    assert all(w.deps == 1 for w in ws[4:])
    # Rank 1's second write waits for rank 0's first (rank 1 must have received it).
    assert ws[4 + 1] is ws[ws[0].then[0]]
    a2a = plan("alltoall", 4096, 4)
    assert len(a2a) == 12 and all(not w.deps for w in a2a)


@pytest.mark.parametrize("op", ["allreduce", "allgather", "alltoall"])
def test_collective_steps_measured(op: str) -> None:
    run = CollectiveRun(parse_topology(SMALL), op, 256 << 10, iters=3, warmup=1)
    run.run()
    assert run.error is None
    assert len(run.steps) == 3 and all(s > 0 for s in run.steps)
    row = run.row()
    spec = parse_topology(SMALL)
    # Physics: busbw can never beat the hosts' bandwidth (the nccl-tests definition is
    # built so that busbw = link rate for a perfect algorithm).
    assert 0 < row.busbw_gbps * 1e9 <= spec.host_bandwidth_bps
    # Each step names its slowest rank (the receiver of its last write), as mrc-coll does.
    assert all(0 <= w < run.world for w in row.worst_rank)
    assert row.worst == row.worst_rank[row.steps_s.index(row.p100_s)]
    # The steps follow one another: each starts when the one before ended.
    for i in range(1, 3):
        assert run.step_start[i] == pytest.approx(run.step_start[i - 1] + run.steps[i - 1])


class _Timed(CollectiveRun):
    """Records when each ring write of the timed steps was posted."""

    def __init__(self, *a: object, **kw: object) -> None:
        self.posted: dict[tuple[int, int], float] = {}
        super().__init__(*a, **kw)  # type: ignore[arg-type]

    def _post(self, i: int) -> None:
        self.posted[(self.iteration, i)] = self.sim.now
        super()._post(i)


def _ring_hops(signal: str) -> tuple[list[float], float]:
    """Each timed ring write's wait for the one it depends on (its post time minus that
    one's), and the step time."""
    run = _Timed(parse_topology(SMALL), "allreduce", 256 << 10, iters=1, warmup=1,
                 signal=signal)
    run.run()
    assert run.error is None and len(run.steps) == 1
    n = run.world
    # Write (s, r) is writes[s*n + r]; for r >= 1 it waits for (s-1, r-1), n + 1 before.
    return [run.posted[(1, i)] - run.posted[(1, i - n - 1)]
            for i in range(n + 1, len(run.writes)) if i % n], run.steps[0]


def test_ring_goes_on_when_the_data_arrives() -> None:
    """mrc-coll sends a ring's next chunk when the previous one is in (its immediate
    received), not when the sender hears of it: that is a SACK later, four links back
    through a spine (and a SACK the receiver may hold up to ``ack_delay``)."""
    arrival, step_a = _ring_hops("arrival")
    completion, step_c = _ring_hops("completion")
    back = 4 * parse_topology(SMALL).delay  # the SACK's way back, propagation alone
    assert len(arrival) == len(completion) > 0
    assert all(a + back <= c for a, c in zip(arrival, completion, strict=True))
    assert step_a < step_c


def test_critical_chain_adds_up_to_the_ring() -> None:
    """The traced chain of a ring step: one write per ring step (2(n-1) of them), each
    posted when the one before it arrived, so their hops add up to the time from the
    step's start to its last arrival (the step then waits for the last SACKs)."""
    run = CollectiveRun(parse_topology(SMALL), "allreduce", 256 << 10, iters=2, warmup=1,
                        trace=True)
    run.run()
    assert run.traces is not None and len(run.traces) == 2
    for k in range(2):
        chain = run.critical_chain(k)
        assert [c[0] for c in chain] == list(range(2 * (run.world - 1)))
        assert all(c[2] == (c[1] + 1) % run.world and c[3] > 0 for c in chain)
        assert all(c[4] > 0 for c in chain)  # the sender's window at the post
        last = max(t[1] for t in run.traces[k].values())
        assert sum(c[3] for c in chain) == pytest.approx(last - run.step_start[k])
        assert sum(c[3] for c in chain) <= run.steps[k]
    with pytest.raises(SpecError, match="trace=True"):
        CollectiveRun(parse_topology(SMALL), "allreduce", 4096, iters=1).critical_chain(0)


def test_unknown_signal_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="unknown signal"):
        CollectiveRun(parse_topology(SMALL), "allreduce", 4096, iters=1, signal="sent")


def test_spray_rides_out_a_spine_link_down() -> None:
    opts = CollOptions("allreduce", (256 << 10,), iters=6, warmup=1,
                       fail=("link:L0.0-S0.1@30us:down",))
    res = run_collective(SMALL, opts, "mrc")
    assert res["completed"] and res["error"] is None
    assert res["failures"] == ["link L0.0-S0.1 down at 30.000us"]
    assert len(res["steps_s"]) == 6


@pytest.mark.parametrize(("tuning", "overrides", "resends"), [
    ("collective", None, True),
    ("default", None, False),
    ("collective", {"verdict_inflight": False}, False),  # a --set on top of the tuning
])
def test_collective_tuning_reaches_the_hosts(tuning: str, overrides: dict[str, object] | None,
                                             resends: bool) -> None:
    # The all-to-all's QPs share the dead link's routes: with the collective tuning one
    # QP's verdict resends the others' packets in flight there at once (verdict_inflight)
    opts = CollOptions("alltoall", (256 << 10,), iters=6, warmup=1,
                       fail=("link:L0.0-S0.1@30us:down",))
    res = run_collective(SMALL, opts, "mrc", tuning=tuning, host_config=overrides)
    assert res["completed"] and res["tuning"] == tuning
    assert (res["rows"][-1]["counters"].get("verdict_inflight", 0) > 0) is resends
    assert res["host_config"].get("rack_prompt", False) is (tuning == "collective")


def test_unknown_tuning_is_a_sim_error() -> None:
    with pytest.raises(SimError, match="tuning 'fast' unknown: use one of default, collective"):
        run_collective(SMALL, CollOptions("allreduce", (4096,), 1, 0, ()), tuning="fast")


def test_default_topology_is_eight_planes() -> None:
    spec = parse_topology(default_topology(64))
    assert (spec.planes, spec.n_hosts) == (8, 64)
    assert parse_topology(default_topology(4)).n_hosts == 4


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc = sim_main(["collective", "--hosts", "4", "--op", "alltoall", "--size", "64k",
                   "--iters", "2", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ranks"] == 4 and out["completed"] is True
    assert len(out["steps_s"]) == 2 and out["p100_s"] >= out["p50_s"] > 0
    assert "busbw_gbps" in out and "algbw_gbps" in out
    assert out["tuning"] == "collective" and out["host_config"]["verdict_inflight"] is True


def test_cli_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(["collective", "--op", "allreduce"]) == 2
    assert "give --hosts N" in capsys.readouterr().err
    assert sim_main(["collective", "--hosts", "4", "--transport", "rdma"]) == 2
