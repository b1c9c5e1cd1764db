"""A test run started with SIGINT ignored (in the background of a non-interactive shell:
``.ci/run &``, nohup) still gives what it starts a working Ctrl-C (tests/conftest.py).

Runs a real pytest process with SIGINT ignored over a one-test module that starts a
child and asks it whether SIGINT is ignored; without the session's conftest (the control)
the child inherits the ignored SIGINT.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

_MODULE = '''
import subprocess, sys

def test_child_can_be_interrupted():
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False", "the child inherited SIGINT ignored"
'''


def _run_ignoring_sigint(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_child.py").write_text(_MODULE)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra,
         "--rootdir", str(tmp_path), str(tmp_path / "test_child.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))


def test_a_run_started_with_sigint_ignored_restores_it(tmp_path: Path) -> None:
    shutil.copy(Path(__file__).parent / "conftest.py", tmp_path / "conftest.py")
    r = _run_ignoring_sigint(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_without_the_conftest_the_child_inherits_it(tmp_path: Path) -> None:
    """The control: the same run without the session's hooks fails its test."""
    r = _run_ignoring_sigint(tmp_path, "--noconftest")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the child inherited SIGINT ignored" in r.stdout
