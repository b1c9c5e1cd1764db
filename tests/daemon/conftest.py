"""Fixtures for tests/daemon: root check and per-test namespaces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mdnsutil import MrcdPair, NsRegistry, VethPair, make_veth_pair, mrcd_pair_on


@pytest.fixture
def nsreg() -> Iterator[NsRegistry]:
    reg = NsRegistry()
    try:
        yield reg
    finally:
        reg.cleanup()


@pytest.fixture
def veth(nsreg: NsRegistry) -> VethPair:
    return make_veth_pair(nsreg)


@pytest.fixture
def mrcd_pair(veth: VethPair, tmp_path: Path) -> Iterator[MrcdPair]:
    """mrcd "ha" in namespace a and "hb" in namespace b, directly cabled peers."""
    with mrcd_pair_on(veth, tmp_path) as pair:
        yield pair
