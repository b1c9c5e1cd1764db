"""tools/bench_wire.py stays runnable: a tiny run, its JSON and its table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench_wire.py"


def run(*args: str) -> str:
    r = subprocess.run([sys.executable, str(BENCH), "--duration", "0.01", "--rounds", "1",
                        "--sizes", "64,1001", *args], capture_output=True, text=True,
                       timeout=120, check=True)
    return r.stdout


def test_bench_json_has_every_op_impl_and_ratio() -> None:
    out = json.loads(run("--json"))
    ops = {(r["op"], r["impl"], r["payload"]) for r in out["results"]}
    assert ("build", "py-ref", 64) in ops and ("parse", "py-ref", 1001) in ops
    if out["env"]["have_c"]:
        assert ("build", "c-template", 1001) in ops and ("parse", "c-checksum", 64) in ops
        assert any(r["impl"] == "c-template" and r["vs"] == "py-ref" for r in out["ratios"])
    assert all(r["frames_per_s"] > 0 for r in out["results"])


def test_bench_table() -> None:
    out = run()
    assert "frames/s" in out and "(base)" in out
