"""Fixtures for tests/coll: a small fabric with mrcd on every host, run-owned.

The fabric is named ``$MRC_E2E_PREFIX`` (default ``co``) + random hex, recorded in a
state directory of this test session only, and removed by its own record at the end
(mrcds stopped by their recorded PIDs). Tests needing it skip without root.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from mrcnet.fabric.fabric import Fabric, down

#: 4 hosts, 2 planes, 2 leaves, 2 spines per plane.
SPEC = "leafspine:planes=2,spines=2,leaves=2,hosts=2"


@pytest.fixture(scope="module")
def coll_fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    """A 4-host fabric with mrcd on every host (module-wide)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, raw sockets)")
    from mrcnet.fabric.mrcd import start_mrcds

    state: Path = tmp_path_factory.mktemp("coll-state")
    old = os.environ.get("MRC_FABRIC_STATE_DIR")
    os.environ["MRC_FABRIC_STATE_DIR"] = str(state)
    name = os.environ.get("MRC_E2E_PREFIX", "co") + secrets.token_hex(3)
    try:
        fab = Fabric.up(SPEC, name=name)
        try:
            start_mrcds(fab)
            yield fab
        finally:
            down(name, force=True)
    finally:
        if old is None:
            os.environ.pop("MRC_FABRIC_STATE_DIR", None)
        else:
            os.environ["MRC_FABRIC_STATE_DIR"] = old
