"""Up/down hygiene: cycles, killed builders, name clashes, errors, coexistence, CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mrcnet.fabric.errors import FabricError
from mrcnet.fabric.fabric import Fabric, down, list_fabrics
from mrcnet.fabric.nsutil import netns_exists
from mrcnet.fabric.state import StateRecord, proc_start_time

from .conftest import SMALL, fabric_name

pytestmark = pytest.mark.root

CLI = [sys.executable, "-m", "mrcnet.fabric.cli"]


def _root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def _netns_with(prefix: str) -> list[str]:
    return sorted(p.name for p in Path("/run/netns").glob(prefix + "*"))


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    if not os.access(os.path.realpath(sys.executable), os.X_OK):
        # e.g. a non-root run with an interpreter that lives under /root
        pytest.skip("this user cannot run the interpreter in a subprocess")
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=env or dict(os.environ), timeout=120
    )


@pytest.fixture
def private_state_dir(
    fabric_state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A state dir of this test alone: list / down --all see only its fabrics."""
    d = tmp_path / "state"
    monkeypatch.setenv("MRC_FABRIC_STATE_DIR", str(d))
    return d


def test_twenty_cycles_leave_nothing(private_state_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    fabric_state_dir = private_state_dir
    links_before = _root_links()
    names = []
    pids = []
    for i in range(20):
        name = fabric_name()
        names.append(name)
        fab = Fabric.up("leafspine:planes=2,spines=2,leaves=2,hosts=1", name=name)
        try:
            assert all(netns_exists(ns) for ns in fab.record.netns)
            if i % 5 == 0:  # a background flapper must die with the fabric too
                pids.append((fab.link("p0l0", "p0s0").flap(50), fab.name))
        finally:
            fab.down()
        assert not (fabric_state_dir / name).exists()
    time.sleep(0.2)
    for name in names:
        assert _netns_with(name) == []
    for pid, _ in pids:
        assert proc_start_time(pid) is None or _is_zombie(pid)
    assert _root_links() <= links_before, "a link leaked into the root namespace"
    assert list_fabrics() == []


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_killed_builder_is_removed_by_down(fabric_state_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    name = fabric_name()
    env = dict(os.environ, MRC_FABRIC_STEP_DELAY="0.7")
    p = subprocess.Popen([*CLI, "up", SMALL, "--name", name], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not netns_exists(f"{name}-p1s1") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert netns_exists(f"{name}-h0")
        p.send_signal(signal.SIGKILL)
        p.wait()
        rec = StateRecord.load(name)
        assert rec.status == "building" and not rec.builder_alive()
        [row] = [r for r in list_fabrics() if r["name"] == name]
        assert row["status"].startswith("broken")
        with pytest.raises(FabricError, match="building"):
            Fabric.load(name)
        r = _cli("down", name)
        assert r.returncode == 0, r.stderr
        assert _netns_with(name) == []
        assert not (fabric_state_dir / name).exists()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if (fabric_state_dir / name / "state.json").exists():
            down(name, force=True)


def test_sigterm_during_build_cleans_up(fabric_state_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    name = fabric_name()
    env = dict(os.environ, MRC_FABRIC_STEP_DELAY="0.7")
    p = subprocess.Popen([*CLI, "up", SMALL, "--name", name], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not netns_exists(f"{name}-h0") and time.monotonic() < deadline:
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        assert p.returncode != 0
        assert "interrupted" in err and "Traceback" not in err
        assert _netns_with(name) == []
        assert not (fabric_state_dir / name).exists()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if (fabric_state_dir / name / "state.json").exists():
            down(name, force=True)


def test_name_in_use_and_coexistence(make_fabric: Callable[..., Fabric]) -> None:
    a = make_fabric("leafspine:planes=1,spines=1,leaves=2,hosts=1")
    b = make_fabric("leafspine:planes=1,spines=1,leaves=2,hosts=1")
    assert a.description.fabric_id != b.description.fabric_id
    assert a.description.usid_block != b.description.usid_block
    r = _cli("up", "leafspine:planes=1", "--name", a.name)
    assert r.returncode == 1
    assert "already in use" in r.stderr and "Traceback" not in r.stderr
    # the failed attempt did not touch the existing fabric
    assert all(netns_exists(ns) for ns in a.record.netns)
    assert Fabric.load(a.name).status()["status"] == "up"
    names = {row["name"] for row in json.loads(_cli("list", "--json").stdout)}
    assert {a.name, b.name} <= names


@pytest.mark.parametrize(
    "args, message",
    [
        (["up", "leafspine:planes=zero", "--name", "fbtbad"], "bad value"),
        (["up", "leafspine:planes=1", "--name", "FB-bad"], "bad fabric name"),
        (["up", "/nonexistent/x.toml", "--name", "fbtbad"], "cannot read"),
        (["status", "fbtnothere"], "no fabric named"),
        (["down", "fbtnothere"], "no fabric named"),
        (["link", "fbtnothere", "a", "b", "down"], "no fabric named"),
    ],
)
def test_cli_errors_are_one_line(fabric_state_dir: Path, args: list[str], message: str) -> None:
    r = _cli(*args)
    assert r.returncode != 0
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert not (fabric_state_dir / "fbtbad").exists()


@pytest.mark.parametrize(
    "drop",
    [
        ["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"],  # not root
        ["--bounding-set=-net_admin", "--inh-caps=-net_admin"],  # root without the cap
    ],
    ids=["not-root", "no-cap-net-admin"],
)
def test_not_root_is_refused(fabric_state_dir: Path, drop: list[str]) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop privileges")
    r = subprocess.run(
        ["setpriv", *drop, *CLI, "up", "leafspine:planes=1", "--name", "fbtnoroot"],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 2
    assert "run as root" in r.stderr and "CAP_NET_ADMIN" in r.stderr
    assert "Traceback" not in r.stderr
    assert not netns_exists("fbtnoroot-h0")


def test_clang_missing_is_refused(fabric_state_dir: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("ip", "tc"):
        src = shutil.which(tool)
        assert src
        (bindir / tool).symlink_to(src)
    env = dict(os.environ, PATH=str(bindir), MRC_FABRIC_BPF_CACHE=str(tmp_path / "cache"))
    name = fabric_name()
    r = _cli("up", "leafspine:planes=1", "--name", name, env=env)
    assert r.returncode == 1
    assert "clang" in r.stderr and "Traceback" not in r.stderr
    assert _netns_with(name) == [] and not (fabric_state_dir / name).exists()


def test_cli_up_status_exec_down(private_state_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    fabric_state_dir = private_state_dir
    name = fabric_name()
    try:
        toml = private_state_dir.parent / "lab.toml"
        toml.write_text("[fabric]\nplanes = 2\nspines = 1\nleaves = 1\nhosts = 2\n")
        r = _cli("up", str(toml), "--name", name)
        assert r.returncode == 0, r.stderr
        desc_path = Path(r.stdout.strip())
        assert desc_path.is_file()
        assert "up in" in r.stderr  # progress lines go to stderr
        st = json.loads(_cli("status", name, "--json").stdout)
        assert {n["netns"] for n in st["nodes"]} == set(StateRecord.load(name).netns)
        assert all(
            {"pkts", "bytes", "drops", "trims", "ce"} <= set(d)
            for ln in st["links"] for d in ln["directions"].values()
        )
        text = _cli("status", name).stdout
        assert "LINK DIRECTION" in text and f"{name}-h1" in text
        out = _cli("exec", name, "h1", "--", "ip", "-6", "addr", "show", "dev", "p1")
        assert out.returncode == 0 and "fd00:" in out.stdout
        assert _cli("describe", name, "--path").stdout.strip() == str(desc_path)
        from mrcnet.fabric.describe import default_path

        assert default_path(name) == desc_path
        bad = _cli("exec", name, "h9", "--", "true")
        assert bad.returncode == 1 and "no node 'h9'" in bad.stderr
        r = _cli("down", "--all", "--yes")
        assert r.returncode == 0, r.stderr
        assert _netns_with(name) == [] and not (fabric_state_dir / name).exists()
    finally:
        if (fabric_state_dir / name / "state.json").exists():
            down(name, force=True)
