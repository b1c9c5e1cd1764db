"""mrc-coll on a real fabric (4 hosts, mrcd on each): all-reduce and all-to-all verified,
a spine link down mid-run and still verified (and undone after), and a rank killed
mid-run: every other rank exits with a clear error well inside the step deadline, and
nothing this test started is left running."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mrcnet.fabric.fabric import Fabric
from mrcnet.fabric.mrcd import exec_env

pytestmark = [pytest.mark.root, pytest.mark.slow]

BIN = Path(sys.executable).parent


def _coll(fab: Fabric, *args: str, timeout: float = 240) -> tuple[int, dict[str, Any], str]:
    r = subprocess.run([str(BIN / "mrc-coll"), "--fabric", fab.name, "--json", *args],
                       capture_output=True, text=True, timeout=timeout)
    out = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
    return r.returncode, out, r.stderr


@pytest.mark.parametrize("op", ["allreduce", "alltoall"])
def test_verified_on_four_hosts(coll_fabric: Fabric, op: str) -> None:
    rc, out, err = _coll(coll_fabric, "--op", op, "-b", "64k", "-e", "1M", "-f", "4",
                         "--iters", "5", "--warmup", "1")
    assert rc == 0, err
    assert out["verified"] is True and out["ranks"] == 4
    assert [r["size"] for r in out["rows"]] == [64 << 10, 256 << 10, 1 << 20]
    assert all(r["verified"] and len(r["steps_s"]) == 5 for r in out["rows"])
    assert out["p100_s"] >= out["p99_s"] >= out["p50_s"] > 0
    assert out["busbw_gbps"] > 0


def test_link_down_mid_run_still_verified(coll_fabric: Fabric) -> None:
    rc, out, err = _coll(coll_fabric, "--op", "allreduce", "--size", "2M", "--iters", "30",
                         "--fail", "link:L0.0-S0.1@0.3s:down")
    assert rc == 0, err
    assert out["verified"] is True
    assert [e["what"] for e in out["failure_events"]] == ["link L0.0-S0.1 down at 300.000ms"]
    # The run outlived the failure: some steps started after the link went down.
    down_at = out["failure_events"][0]["clock"]
    assert max(out["rows"][0]["step_clock"]) > down_at
    # ... and the failure is undone: no failure left recorded on the fabric.
    assert not any(Fabric.load(coll_fabric.name).status().get("failures", {}).values())


def test_killed_rank_stops_every_other_rank(coll_fabric: Fabric) -> None:
    """Ranks started by hand (as on real hosts); rank 2 is killed after its timed steps
    began: the others exit with status 3 and a clear reason, long before the 60 s step
    deadline (mrcd's retry budget declares a dead peer in about 2.6 s)."""
    hosts = [h.name for h in coll_fabric.description.hosts]
    procs = []
    for r, h in enumerate(hosts):
        argv = [sys.executable, "-m", "mrcnet.coll.cli", "rank", "--rank", str(r),
                "--peers", ",".join(hosts), "--token", "4242", "--service", "31000",
                "--op", "allreduce", "--size", "1M", "--iters", "100000", "--warmup", "0",
                "--step-timeout", "60"]
        procs.append(coll_fabric.popen(h, argv, env=exec_env(coll_fabric, h),
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True))
    try:
        victim = procs[2]
        assert victim.stdout is not None
        for line in victim.stdout:
            if json.loads(line).get("type") == "start":
                break
        time.sleep(0.5)  # in the middle of the timed steps
        victim.kill()
        t_kill = time.monotonic()
        ends: dict[int, float] = {}
        outs: dict[int, tuple[str, str]] = {}
        for r, p in enumerate(procs):
            if r == 2:
                continue
            o, e = p.communicate(timeout=60)
            ends[r] = time.monotonic() - t_kill
            outs[r] = (o, e)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    for r, (o, e) in outs.items():
        assert procs[r].returncode == 3, (r, e)
        errors = [json.loads(x) for x in o.splitlines() if '"error"' in x]
        assert errors and errors[-1]["type"] == "error"
        why = errors[-1]["error"]
        assert "aborted" in why or "failed" in why or "closed" in why, why
    # Every other rank stopped well inside the step deadline: the failure was noticed
    # (retry budget) and passed on (abort), not waited out.
    print("seconds from the kill to each rank's exit:", ends, outs)
    assert max(ends.values()) < 20, ends
    assert all(p.poll() is not None for p in procs)


def test_failures_are_undone(coll_fabric: Fabric) -> None:
    """Every kind of failure applied on the fabric, then cleared by undo()."""
    from mrcnet.coll.failures import FailureRunner

    specs = ["link:L0.0-S0.1@0s:down", "link:L1.0>S1.0@0s:blackhole",
             "loss:L0.1-S0.0@0s=5%", "switch:S1.1@0s:blackhole", "port:h0.1@0s:down"]
    runner = FailureRunner(Fabric.load(coll_fabric.name), specs)
    runner.start(time.monotonic())
    deadline = time.monotonic() + 30
    while len(runner.events) < len(specs) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not runner.errors
    assert len(runner.events) == len(specs)
    status = Fabric.load(coll_fabric.name).status()
    assert sum(1 for v in status["failures"].values() if v) == len(specs)
    assert runner.undo() == []
    status = Fabric.load(coll_fabric.name).status()
    assert not any(status["failures"].values()), status["failures"]


def test_sigint_stops_every_rank(coll_fabric: Fabric, tmp_path: Path) -> None:
    """Ctrl-C on mrc-coll: exit 130, every rank it started gone, the plot option
    checked before the run."""
    p = subprocess.Popen([str(BIN / "mrc-coll"), "--fabric", coll_fabric.name, "--size",
                          "1M", "--iters", "100000", "--fail", "link:L0.0-S0.1@0.2s:down"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        children: list[int] = []
        deadline = time.monotonic() + 30
        while len(children) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
            raw = Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
            children = [int(x) for x in raw]
        assert len(children) == 4
        time.sleep(3)  # the ranks are in their timed steps, the link is down
        p.send_signal(2)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    assert "interrupted" in err
    assert not [c for c in children if Path(f"/proc/{c}").exists()]
    assert not any(Fabric.load(coll_fabric.name).status()["failures"].values())
