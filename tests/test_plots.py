"""--plot: mrc-sim's goodput-over-time and FCT CDF, the demo's failure picture; a clear
message without matplotlib."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mrcnet.sim.cli import main as sim_main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_MAGIC


def test_sim_plot_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    m = tmp_path / "m.cm"
    m.write_text("0->1 start 0 size 2m\n2->3 start 0 size 1m\n1->0 start 10us size 1m\n")
    png = tmp_path / "plots" / "sim.png"
    rc = sim_main(["run", "-t", "leafspine:planes=2,spines=2,leaves=2,hosts=2", "-m", str(m),
                   "--sample", "20us", "--fail", "link:L0.0-S0.1@30us:down",
                   "--plot", str(png)])
    assert rc == 0
    assert _is_png(png)
    assert f"plot written to {png}" in capsys.readouterr().err


def test_sim_plot_without_samples_still_draws_the_cdf(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    m = tmp_path / "m.cm"
    m.write_text("0->1 start 0 size 256k\n")
    png = tmp_path / "sim.png"
    assert sim_main(["run", "-t", "leafspine:planes=1,spines=1,leaves=1,hosts=2", "-m", str(m),
                     "--plot", str(png)]) == 0
    assert _is_png(png)


def test_demo_plot_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from mrcnet.plots import demo_plot

    series, sent, done = [], dict.fromkeys(("p0s0", "p0s1", "p1s0", "p1s1"), 0), 0
    for i in range(1, 41):
        t = 0.25 * i
        down = 10 <= i < 24
        for k in sent:
            sent[k] += 0 if (down and k == "p0s1") else 1000
        done += (50 if down else 60) << 20
        series.append({"t": t, "bytes": done, "sent": dict(sent)})
    png = demo_plot(series, tmp_path / "out" / "demo.png", down_at=2.5, up_at=6.0,
                    failed="p0s1", link="p0l0-p0s1")
    assert png == tmp_path / "out" / "demo.png" and _is_png(png)


def test_missing_matplotlib_is_one_clear_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from mrcnet.plots import PlotUnavailable, require_matplotlib

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if missing
    with pytest.raises(PlotUnavailable, match=r"mrcnet\[plot\]"):
        require_matplotlib()
    m = tmp_path / "m.cm"
    m.write_text("0->1 start 0 size 64k\n")
    rc = sim_main(["run", "-t", "leafspine:planes=1,spines=1,leaves=1,hosts=2", "-m", str(m),
                   "--plot", str(tmp_path / "x.png")])
    err = capsys.readouterr().err
    assert rc == 2 and "matplotlib" in err and "Traceback" not in err
    assert not (tmp_path / "x.png").exists()
