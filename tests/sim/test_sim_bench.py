"""tools/bench_sim.py keeps working (a tiny run; the real one takes about a minute)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "tools" / "bench_sim.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_sim", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_json_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load()
    rc = bench.main(["--topology", "leafspine:planes=2,spines=2,leaves=5,hosts=2",
                     "--size", "128k", "--raw-frames", "20", "--incast", "--json", "--quiet"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["transport"] for r in out["transports"]] == ["mrc", "ecmp"]
    assert [r["transport"] for r in out["incast"]] == ["mrc trim", "mrc drop-tail"]
    for r in out["transports"] + out["incast"]:
        assert r["completed"] == r["flows"] and r["qp_errors"] == 0
        assert r["p100_fct_over_ideal"] >= r["p50_fct_over_ideal"] >= 1.0
        assert r["events_per_second"] > 0
    assert out["network_only"]["frame_hops"] == 10 * 20 * 4  # hosts x frames x hops


def test_bench_rejects_a_bad_topology(capsys: pytest.CaptureFixture[str]) -> None:
    assert _load().main(["--topology", "torus:3", "--quiet"]) == 2
    assert "bench_sim: error:" in capsys.readouterr().err
