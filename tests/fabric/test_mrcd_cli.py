"""``mrc-fabric up --mrcd``: an mrcd on every host, a transfer through them, clean down.

The fabric is named ``mf<hex>`` and recorded in a state directory of this test only;
everything is removed in ``finally`` (the fabric by its record, mrcds by recorded PID).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrcnet.fabric.state import proc_start_time

BIN = os.path.dirname(sys.executable)
FABRIC = os.path.join(BIN, "mrc-fabric")
PERF = os.path.join(BIN, "mrc-perf")
SPEC = "leafspine:planes=2,spines=2,leaves=2,hosts=1,rate=500mbit,mtu=9000"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")


def _gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped yet (it runs no code, holds nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _kill_ours(pids: dict[str, int], starts: dict[str, int | None]) -> None:
    """SIGKILL what is left of the mrcds this test started (same PID and start time)."""
    for h, pid in pids.items():
        if not _gone(pid) and starts.get(h) is not None and proc_start_time(pid) == starts[h]:
            os.kill(pid, 9)


def test_up_with_mrcd_transfer_and_down(tmp_path: Path) -> None:
    env = {**os.environ, "MRC_FABRIC_STATE_DIR": str(tmp_path / "state")}
    name = "mf" + secrets.token_hex(3)

    def fabric(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([FABRIC, *args], env=env, capture_output=True, text=True,
                           timeout=120, check=False)
        if check:
            assert r.returncode == 0, r.stderr
        return r

    pids: dict[str, int] = {}
    starts: dict[str, int | None] = {}
    try:
        up = json.loads(fabric("up", SPEC, "--name", name, "--mrcd", "--json", "-q").stdout)
        pids = up["mrcd"]
        starts.update((h, proc_start_time(p)) for h, p in pids.items())
        assert sorted(pids) == ["h0", "h1"]
        st = json.loads(fabric("status", name, "--json").stdout)
        assert {h: (m["pid"], m["running"]) for h, m in st["mrcd"].items()} == {
            h: (pid, True) for h, pid in pids.items()}
        socks = {h: m["socket"] for h, m in st["mrcd"].items()}
        assert all(Path(s).is_socket() for s in socks.values())
        text = fabric("status", name).stdout
        assert all(f"{pid:>9}  running" in text for pid in pids.values()), text
        # A transfer through both mrcds, each tool inside its host (mrc-fabric exec).
        server = subprocess.Popen([FABRIC, "exec", name, "h1", "--", PERF, "--socket",
                                   socks["h1"], "--timeout", "60", "server", "--size",
                                   str(1 << 20), "--verify"], env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert server.stdout is not None
            assert "waiting on service" in server.stdout.readline()
            r = fabric("exec", name, "h0", "--", PERF, "--socket", socks["h0"], "--timeout",
                       "60", "client", "h1", "--size", str(1 << 20), "--iters", "16",
                       "--json")
            (row,) = [x for x in map(json.loads, r.stdout.splitlines())
                      if x.get("type") == "result"]
            assert row["errors"] == 0 and row["gbps"] > 0
            out, err = server.communicate(timeout=60)
            assert server.returncode == 0, err
            assert "verify: ok" in out
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        netns = st["nodes"]
        fabric("down", name)
        # No mrcd, no namespace, no socket, no state left.
        deadline = time.monotonic() + 10
        while not all(_gone(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(p) for p in pids.values())
        assert not [n["netns"] for n in netns if Path("/run/netns", n["netns"]).exists()]
        assert not any(Path(s).exists() for s in socks.values())
        assert not (tmp_path / "state" / name).exists()
    finally:
        if (tmp_path / "state" / name / "state.json").exists():
            fabric("down", name, check=False)
        _kill_ours(pids, starts)


def test_down_stops_an_mrcd_that_ignores_sigterm_and_status_shows_it_gone(
        tmp_path: Path) -> None:
    """A stopped (SIGSTOP) mrcd cannot act on SIGTERM: down sends SIGKILL after its
    timeout; an mrcd that died shows as GONE in status."""
    env = {**os.environ, "MRC_FABRIC_STATE_DIR": str(tmp_path / "state")}
    name = "mf" + secrets.token_hex(3)

    def fabric(*args: str) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([FABRIC, *args], env=env, capture_output=True, text=True,
                           timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        return r

    pids: dict[str, int] = {}
    starts: dict[str, int | None] = {}
    try:
        pids = json.loads(fabric("up", SPEC, "--name", name, "--mrcd", "--json",
                                 "-q").stdout)["mrcd"]
        starts.update((h, proc_start_time(p)) for h, p in pids.items())
        os.kill(pids["h1"], 9)
        deadline = time.monotonic() + 10
        while not _gone(pids["h1"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        st = json.loads(fabric("status", name, "--json").stdout)
        assert st["mrcd"]["h1"]["running"] is False and st["mrcd"]["h0"]["running"] is True
        assert "GONE" in fabric("status", name).stdout
        os.kill(pids["h0"], 19)  # SIGSTOP: SIGTERM stays pending
        t0 = time.monotonic()
        fabric("down", name)
        assert _gone(pids["h0"])
        assert time.monotonic() - t0 < 60
        assert not (tmp_path / "state" / name).exists()
    finally:
        if (tmp_path / "state" / name / "state.json").exists():
            subprocess.run([FABRIC, "down", name], env=env, capture_output=True, timeout=120,
                           check=False)
        _kill_ours(pids, starts)
