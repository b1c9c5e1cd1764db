"""`make demo` end to end: ``python -m mrcnet.demo --json`` as a subprocess (root only).

Checks the summary (verified bytes, no application error, the failed link's EVs
ASSUMED_BAD during the failure, revived by probes and carrying its share after) and that
the demo left nothing behind: no netns of its fabric, none of its mrcds, no state
directory. This test only *reads* ``ip netns list`` and /proc; it never deletes or kills
anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the demo builds network namespaces: root"),
]

REPO = Path(__file__).resolve().parent.parent
TIMEOUT_S = 180


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_demo_runs_a_verified_transfer_through_a_link_failure_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    env = dict(os.environ, MRC_FABRIC_STATE_DIR=str(tmp_path / "fabrics"))
    run = subprocess.run(
        [sys.executable, "-m", "mrcnet.demo", "--json", "--seconds", "3", "4", "4",
         "--plot", str(tmp_path / "demo.png")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    s: dict[str, Any] = json.loads(run.stdout)
    name = s["fabric"]
    assert name.startswith("demo")
    r = s["result"]

    # Verified data, no error seen by the application.
    assert r["verified"] is True
    assert r["perf"]["verified"] is True and r["server_status"] == 0  # mrc-perf's check
    assert r["app_errors"] == 0
    assert r["bytes"] >= 64 * (1 << 20)
    assert "error" not in r
    # The PNG of the failure, where the demo said it wrote it.
    png = tmp_path / "demo.png"
    assert r["plot"] == str(png) and png.stat().st_size > 1000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot of the failure (goodput, per-path share): {png}" in run.stderr

    # The failed link's path: ASSUMED_BAD during, revived and carrying its share after.
    path = r["failure"]["path"]
    phases = {p["name"]: p for p in r["phases"]}
    assert phases["during"]["states"][path].get("ASSUMED_BAD", 0) > 0
    after = phases["after"]["sent"]
    assert after[path] >= 0.5 * sum(after.values()) / len(after)
    assert r["failed_path_good_after"] is True
    assert r["failure"]["first_assumed_bad_ms"] is not None
    assert r["failure"]["first_good_again_ms"] is not None
    # Traffic moved: the failed path carried far less than the others while down.
    during = phases["during"]["sent"]
    assert during[path] < 0.1 * max(v for k, v in during.items() if k != path)

    # Nothing left: netns, mrcds, state directory (checked, never deleted).
    assert s["leftovers"] == {"netns": [], "mrcd_pids": [], "perf_pids": [],
                              "state_dir": []}
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                           check=True).stdout.split()
    assert not [n for n in netns if n.startswith(name)]
    assert s["mrcd_pids"] and not [p for p in s["mrcd_pids"].values() if _running(p)]
    assert not (tmp_path / "fabrics" / name).exists()


def test_demo_sigterm_mid_transfer_still_removes_everything(tmp_path: Path) -> None:
    env = dict(os.environ, MRC_FABRIC_STATE_DIR=str(tmp_path / "fabrics"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mrcnet.demo", "--json", "--seconds", "20", "5", "5"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        for line in proc.stderr:  # progress lines go to stderr with --json
            seen.append(line)
            if line.startswith("== 3."):
                break
        assert seen and seen[-1].startswith("== 3."), "".join(seen)[-3000:]
        proc.send_signal(15)  # SIGTERM, to the demo we started (by its PID)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-3000:]
    s: dict[str, Any] = json.loads(out)
    assert s["result"]["error"] == "interrupted"
    assert s["leftovers"] == {"netns": [], "mrcd_pids": [], "perf_pids": [],
                              "state_dir": []}
    name = s["fabric"]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                           check=True).stdout.split()
    assert not [n for n in netns if n.startswith(name)]
    assert s["mrcd_pids"] and not [p for p in s["mrcd_pids"].values() if _running(p)]
    assert not (tmp_path / "fabrics" / name).exists()
