"""mrc-fabric's user path: exec's environment, privileges, confirmations, the status table,
``down --all`` confirmation, capture.

One small fabric with an mrcd on every host is built by the CLI for the module, in a
state directory of this module only, named ``fbt<hex>`` and removed at the end by its
record (mrcds by recorded PID). Commands run without privileges use ``setpriv`` to drop
every capability (root without capabilities) or to become nobody.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mrcnet.fabric.fabric import down

from .conftest import fabric_name

pytestmark = pytest.mark.root

CLI = [sys.executable, "-m", "mrcnet.fabric.cli"]
SPEC = "leafspine:planes=2,spines=1,leaves=1,hosts=2,rate=200mbit,mtu=9000"
NO_CAPS = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
          "--"]


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")


def run_cli(*args: str, state: Path, prefix: list[str] | None = None, stdin: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MRC_FABRIC_STATE_DIR": str(state)}
    return subprocess.run([*(prefix or []), *CLI, *args], env=env, capture_output=True,
                          text=True, timeout=timeout, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(name, state dir) of a fabric built by ``mrc-fabric up --mrcd``."""
    _needs_root()
    state = tmp_path_factory.mktemp("ux-state")
    state.chmod(0o755)
    name = fabric_name()
    old = os.environ.get("MRC_FABRIC_STATE_DIR")
    os.environ["MRC_FABRIC_STATE_DIR"] = str(state)
    try:
        r = run_cli("up", SPEC, "--name", name, "--mrcd", "-q", state=state)
        assert r.returncode == 0, r.stderr
        yield name, state
    finally:
        if (state / name / "state.json").exists():
            r = run_cli("down", name, "--force", state=state)
            if (state / name / "state.json").exists():
                down(name, force=True)
        if old is None:
            os.environ.pop("MRC_FABRIC_STATE_DIR", None)
        else:
            os.environ["MRC_FABRIC_STATE_DIR"] = old


# --- 2. exec's environment ----------------------------------------------------------------
def test_exec_sets_mrcd_socket_host_and_hostname(lab: tuple[str, Path]) -> None:
    name, state = lab
    r = run_cli("exec", name, "h1", "--", "sh", "-c", "hostname; env", state=state)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"{name}-h1"
    env = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    assert env["MRCD_SOCKET"] == str(state / name / "mrcd" / "h1.sock")
    assert Path(env["MRCD_SOCKET"]).is_socket()
    assert env["MRC_HOST"] == "h1" and env["MRC_FABRIC"] == name and env["MRC_NODE"] == "h1"
    # A switch: its own hostname, no host and no mrcd.
    r = run_cli("exec", name, "p1l0", "--", "sh", "-c", "hostname; env", state=state)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"{name}-p1l0"
    assert "MRC_NODE=L1.0" in r.stdout and "MRC_HOST=" not in r.stdout
    assert "MRCD_SOCKET=" not in r.stdout or "MRCD_SOCKET" in os.environ
    # The machine's own hostname is untouched.
    assert subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip() != (
        f"{name}-h1")
