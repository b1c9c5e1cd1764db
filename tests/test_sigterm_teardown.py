"""A test run ended by SIGTERM still runs its fixtures' teardown (tests/conftest.py).

Runs a real pytest process over a one-test module whose fixture makes a real network
namespace, terminates it while the test runs, and checks the namespace is gone.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.root

_MODULE = '''
import subprocess, time
from pathlib import Path
import pytest

@pytest.fixture
def netns():
    subprocess.run(["ip", "netns", "add", "{name}"], check=True)
    yield
    subprocess.run(["ip", "netns", "del", "{name}"], check=True)

def test_waits(netns):
    Path("{ready}").touch()
    time.sleep(60)
'''


def _netns_exists(name: str) -> bool:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return any(line.split()[0] == name for line in out.stdout.splitlines() if line.strip())


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")
def test_sigterm_runs_fixture_teardown(tmp_path: Path) -> None:
    name = "sgt" + secrets.token_hex(3)
    ready = tmp_path / "ready"
    shutil.copy(Path(__file__).parent / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_victim.py").write_text(_MODULE.format(name=name, ready=ready))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_victim.py")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the victim test never started"
            time.sleep(0.05)
        assert _netns_exists(name)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if _netns_exists(name):     # the test failed; still leave the machine clean
            subprocess.run(["ip", "netns", "del", name], check=False)
            pytest.fail(f"namespace {name} survived the SIGTERM")
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "terminated by signal" in out
