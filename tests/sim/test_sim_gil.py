"""The C network's loop keeps the GIL across the module's C calls while it runs
(simnet.h ``simnet_keep_gil``: no release and retake per call), and gives the count
back when it returns, by an error too: outside a run every call lets go of it as cffi
does (mrcd's calls)."""

from __future__ import annotations

import pytest

from mrcnet.native import HAVE_C, C
from mrcnet.sim.matrix import permutation
from mrcnet.sim.runner import SimRun
from mrcnet.sim.topology import parse_topology

pytestmark = pytest.mark.skipif(not HAVE_C, reason="the C network is not built")


def _run() -> SimRun:
    spec = parse_topology("leafspine:planes=2,spines=2,leaves=2,hosts=2")
    run = SimRun(spec, permutation(4, 64 << 10, seed=1), seed=1)
    assert type(run.sim).__name__ == "NativeSimulator"
    return run


def test_a_run_keeps_the_gil_and_gives_the_count_back() -> None:
    assert C.simnet_keep_gil(0) == 0
    run, seen = _run(), []
    run.sim.at(1e-6, lambda _: seen.append(C.simnet_keep_gil(0)))
    res = run.run()
    assert res.summary()["completed"] == 4
    assert seen == [1] and C.simnet_keep_gil(0) == 0


def test_an_error_in_the_run_gives_the_count_back() -> None:
    run = _run()

    def fail(_: object) -> None:
        raise RuntimeError("a callback's bug")

    run.sim.at(1e-6, fail)
    with pytest.raises(RuntimeError, match="callback"):
        run.sim.run()
    assert C.simnet_keep_gil(0) == 0
