"""Fixtures for mrc-fabric tests: private state directory, run-owned fabric names.

Every fabric a test builds is named "fbt<6 hex>" (netns "fbt...-h0" etc.), recorded in a
state directory private to this test session, and removed in a ``finally`` by exactly
that record. Tests that need root skip cleanly without it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mrcnet.fabric.fabric import Fabric, down

IS_ROOT = os.geteuid() == 0


def fabric_name() -> str:
    """A unique, run-owned fabric name (prefix "fb" as agreed with the other teams)."""
    return "fbt" + secrets.token_hex(3)


@pytest.fixture(scope="session")
def fabric_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """MRC_FABRIC_STATE_DIR pointing at a directory of this session only."""
    d = tmp_path_factory.mktemp("fabric-state")
    old = os.environ.get("MRC_FABRIC_STATE_DIR")
    os.environ["MRC_FABRIC_STATE_DIR"] = str(d)
    try:
        yield d
    finally:
        # Belt and braces: anything a test left recorded in *our* directory goes.
        for rec in sorted(d.glob("*/state.json")):
            try:
                down(rec.parent.name, force=True)
            except Exception as e:  # pragma: no cover - reported, not hidden
                print(f"cleanup of {rec.parent.name} failed: {e}")
        if old is None:
            os.environ.pop("MRC_FABRIC_STATE_DIR", None)
        else:
            os.environ["MRC_FABRIC_STATE_DIR"] = old


def _require_root() -> None:
    if not IS_ROOT:
        pytest.skip("needs root (network namespaces)")


@pytest.fixture
def make_fabric(fabric_state_dir: Path) -> Iterator[Callable[..., Fabric]]:
    """Factory: ``make_fabric(spec)`` builds a fabric removed at the end of the test."""
    _require_root()
    made: list[str] = []

    def make(spec: str, name: str | None = None) -> Fabric:
        n = name or fabric_name()
        made.append(n)
        return Fabric.up(spec, name=n)

    try:
        yield make
    finally:
        for n in made:
            if (fabric_state_dir / n / "state.json").exists():
                down(n, force=True)


def _module_fabric(spec: str, fabric_state_dir: Path) -> Iterator[Fabric]:
    _require_root()
    name = fabric_name()
    try:
        fab = Fabric.up(spec, name=name)
        yield fab
    finally:
        if (fabric_state_dir / name / "state.json").exists():
            down(name, force=True)


SMALL = "leafspine:planes=2,spines=2,leaves=2,hosts=1,rate=1gbit,mtu=9000"


@pytest.fixture(scope="module")
def usid_fabric(fabric_state_dir: Path) -> Iterator[Fabric]:
    """A small uSID fabric shared by a module's tests (they must undo their failures)."""
    yield from _module_fabric(SMALL, fabric_state_dir)


@pytest.fixture(scope="module")
def srh_fabric(fabric_state_dir: Path) -> Iterator[Fabric]:
    """The same fabric in classic SRH mode."""
    yield from _module_fabric(SMALL + ",srv6=srh", fabric_state_dir)
