"""mrc-sim sweep: every cell of a grid a separate seeded run, the same results on a local
process pool and on a two-worker Dask cluster, re-runnable cell by cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mrcnet.sim.cli import main
from mrcnet.sim.sweep import RESULT_COLUMNS, cells, load_grid, sweep

_GRID = """
[base]
topology = "leafspine:planes=2,spines=4,leaves=4,hosts=2"
size = "128k"
until = "20ms"

[grid]
seed = [1, 2, 3]
transport = ["mrc", "ecmp"]
fail = ["", "random:links=10%@5us"]
"""


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    p = tmp_path / "grid.toml"
    p.write_text(_GRID)
    return p


def _same(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """What must not depend on where a cell ran (timings do)."""
    return [{k: v for k, v in r.items() if k in RESULT_COLUMNS or k in ("cell", "seed",
             "transport", "fail")} for r in rows]


def test_grid_cells_are_the_product_in_order(grid: Path) -> None:
    c = cells(*load_grid(grid))
    assert len(c) == 12
    assert [(x["seed"], x["transport"], x["fail"]) for x in c[:3]] == [
        (1, "mrc", ""), (1, "mrc", "random:links=10%@5us"), (1, "ecmp", "")]
    assert all(x["topology"].startswith("leafspine:") and x["size"] == "128k" for x in c)


def test_a_sweep_on_the_pool_matches_one_on_a_two_worker_dask_cluster(grid: Path) -> None:
    distributed = pytest.importorskip(
        "distributed", reason="Dask distributed is not installed (pip install 'mrcnet[cluster]')")
    local = sweep(grid, workers=2)
    assert len(local) == 12 and [r["cell"] for r in local] == list(range(12))
    # the cells differ: seeds move the permutation, a failure and the transport the times
    assert len({r["p100_slowdown"] for r in local}) > 6
    assert any(r["completed"] == r["flows"] for r in local)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        assert len(cluster.workers) == 2
        remote = sweep(grid, scheduler=cluster.scheduler_address)
    assert _same(remote) == _same(local)


def test_one_cell_reruns_into_the_results_the_others_kept(grid: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    out = tmp_path / "res"
    assert main(["sweep", str(grid), "-o", str(out), "-j", "2", "-q"]) in (0, 1)
    first = json.loads((out / "results.json").read_text())["rows"]
    assert "p100" in capsys.readouterr().out  # the table
    doc = json.loads((out / "results.json").read_text())
    doc["rows"][5]["p100_slowdown"] = -1.0  # so the re-run is seen to replace it
    (out / "results.json").write_text(json.dumps(doc))
    main(["sweep", str(grid), "-o", str(out), "--cell", "5", "-q", "--json"])
    again = json.loads((out / "results.json").read_text())["rows"]
    assert _same(again) == _same(first)
    csv_lines = (out / "results.csv").read_text().splitlines()
    assert len(csv_lines) == 13 and csv_lines[0].startswith("cell,topology,")
    printed = json.loads(capsys.readouterr().out)
    assert len(printed["rows"]) == 12


@pytest.mark.parametrize("text, message", [
    ("[grid]\nseed = [1]\n", "no topology"),
    ('[base]\ntopology = "leafspine:planes=2"\ncolour = "red"\n', "unknown key 'colour'"),
    ('[base]\ntopology = "leafspine:planes=2"\n[grid]\nseed = 3\n', "non-empty list"),
    ('[base]\ntopology = "leafspine:planes=2"\n[grid]\nfail = ["link:nowhere"]\n', "cell 0"),
    ('[base\n', "grid"),
])
def test_a_bad_grid_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     text: str, message: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    assert main(["sweep", str(p), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
