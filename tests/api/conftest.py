"""Fixtures for tests/api (the socket-like API): namespaces, mrcds, a small fabric.

Everything here is created and removed by these fixtures only: namespaces are named
``sa`` + a random suffix, mrcds are stopped by the PID this process started, the fabric
is named ``sa`` + random hex and taken down by its own API. Nothing is killed or deleted
by pattern. The namespace and mrcd helpers are tests/daemon's (:mod:`mdnsutil`).
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# pytest puts tests/daemon on sys.path only when it collects that folder; this suite
# needs its helpers also when it runs alone. Appended: nothing here shadows a module.
sys.path.append(str(Path(__file__).resolve().parent.parent / "daemon"))

from mdnsutil import (
    Mrcd,
    MrcdPair,
    NsRegistry,
    make_veth_pair,
    mrcd_pair_on,
    ns_prefix,
    start_mrcd,
)

#: How long an mrcd of these tests may take to get ready.
MRCD_READY_TIMEOUT = 20.0


@pytest.fixture
def mrcd_pair(tmp_path: Path) -> Iterator[MrcdPair]:
    """Two mrcds on two namespaces (``sa<hex>a``, ``sa<hex>b``) and one veth."""
    if os.geteuid() != 0:
        pytest.skip("needs root (netns, raw sockets)")
    nss = NsRegistry(prefix=ns_prefix("sa"))
    try:
        veth = make_veth_pair(nss)
        with mrcd_pair_on(veth, tmp_path, log_level="info",
                          timeout=MRCD_READY_TIMEOUT) as pair:
            yield pair
    finally:
        nss.cleanup()


@dataclass
class FabricPair:
    """Two mrcds on hosts of a real mrc-fabric (2 planes x 2 spines)."""

    a: Mrcd
    b: Mrcd
    fabric: object


@pytest.fixture
def fabric_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FabricPair]:
    """A fabric ``sa<hex>`` (leafspine planes=2,spines=2,leaves=2,hosts=1) with mrcd on
    its first two hosts (every port from the fabric description)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (netns, raw sockets)")
    from mrcnet.fabric.fabric import Fabric

    # The fabric records (and `down` removes) exactly what it makes.
    monkeypatch.setenv("MRC_FABRIC_STATE_DIR", str(tmp_path / "fabrics"))
    started: list[Mrcd] = []
    with Fabric.up("leafspine:planes=2,spines=2,leaves=2,hosts=1,mtu=9000",
                   name=ns_prefix("sa") + secrets.token_hex(2)) as fab:
        try:
            for h in fab.description.hosts[:2]:
                sock = f"{tmp_path}/{h.name}.sock"
                cfg = tmp_path / f"{h.name}.toml"
                cfg.write_text(f'host = "{h.name}"\nsocket = "{sock}"\n'
                               f'fabric = "{fab.description_path}"\n')
                started.append(start_mrcd(h.name, fab.netns(h.name), str(cfg), sock,
                                          str(tmp_path), MRCD_READY_TIMEOUT))
            yield FabricPair(started[0], started[1], fab)
        finally:
            for m in started:
                m.stop()
