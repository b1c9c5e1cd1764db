"""Fixtures for tests/daemon: root check and per-test namespaces."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from mdnsutil import NsRegistry, VethPair, make_veth_pair

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, raw sockets)")


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
