"""Fixtures for tests/daemon: root check and per-test namespaces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mdnsutil import (
    Mrcd,
    MrcdPair,
    NsRegistry,
    VethPair,
    make_veth_pair,
    start_mrcd,
    write_config,
)


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
    cfg_a, cfg_b = str(tmp_path / "ha.toml"), str(tmp_path / "hb.toml")
    sock_a, sock_b = str(tmp_path / "ha.sock"), str(tmp_path / "hb.sock")
    write_config(cfg_a, "ha", veth.if_a, veth.ip_a, sock_a, {"hb": veth.ip_b})
    write_config(cfg_b, "hb", veth.if_b, veth.ip_b, sock_b, {"ha": veth.ip_a})
    started: list[Mrcd] = []
    try:
        started.append(start_mrcd("ha", veth.ns_a, cfg_a, sock_a, str(tmp_path)))
        started.append(start_mrcd("hb", veth.ns_b, cfg_b, sock_b, str(tmp_path)))
        yield MrcdPair(veth, started[0], started[1])
    finally:
        for m in started:
            m.stop()
