"""mrcd on a real mrc-fabric: 2 planes x 2 spines, uSID paths, trimming switches."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from mdnsutil import Mrcd, needs_root, ns_prefix, start_mrcd

from mrcnet.api import Context
from mrcnet.fabric.fabric import Fabric

MIB = 1 << 20


@pytest.fixture
def fabric(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fabric]:
    # The fabric records (and `down` removes) exactly what it makes; its namespaces are
    # named "<fabric name>-<node>", so "md<random>-h0" etc.
    monkeypatch.setenv("MRC_FABRIC_STATE_DIR", str(tmp_path / "fabrics"))
    with Fabric.up("leafspine:planes=2,spines=2,leaves=2,hosts=1,mtu=9000",
                   name=ns_prefix("md") + secrets.token_hex(2)) as fab:
        yield fab


def _config(tmp: Path, host: str, fabric_path: str, ports: list[tuple[str, int]]) -> str:
    lines = [f'host = "{host}"', f'socket = "{tmp}/{host}.sock"',
             f'fabric = "{fabric_path}"']
    for ifname, plane in ports:  # none: every port the description gives the host
        lines += ["[[port]]", f'ifname = "{ifname}"', f"plane = {plane}"]
    path = tmp / f"{host}.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@needs_root
def test_write_sprays_over_both_planes(fabric: Fabric, tmp_path: Path) -> None:
    fab = fabric
    desc = fab.description
    started: list[Mrcd] = []
    try:
        for i, h in enumerate(desc.hosts[:2]):
            # h0 names its ports; h1 takes them from the fabric description.
            ports = [(p.ifname, p.plane) for p in h.ports] if i == 0 else []
            cfg = _config(tmp_path, h.name, str(fab.description_path), ports)
            started.append(start_mrcd(h.name, fab.netns(h.name), cfg,
                                      f"{tmp_path}/{h.name}.sock", str(tmp_path)))
        a, b = started
        with Context(b.socket) as cb, Context(a.socket) as ca:
            mr_b = cb.alloc_mr(MIB)
            cq_b = cb.create_cq()
            qp_b = cb.create_qp(cq_b)
            cb.listen(1, qp_b, expose=[mr_b])
            qp_b.post_recv(wr_id=1)
            mr_a = ca.alloc_mr(MIB)
            data = os.urandom(MIB)
            mr_a.buf[:] = data
            qp_a = ca.create_qp(ca.create_cq())
            peer = qp_a.connect(b.name, 1)
            qp_a.post_write(mr_a, 0, MIB, peer.regions[0], imm=5, wr_id=9)
            assert [w.status for w in qp_a.cq.wait(timeout=30)] == ["SUCCESS"]
            assert [(w.imm, w.byte_len) for w in cq_b.wait(timeout=10)] == [(5, MIB)]
            assert bytes(mr_b.buf) == data
            ports = ca.stats()["ports"]
            # Both planes carried data (every port sent a share of the 128 packets).
            assert all(p["tx_frames"] > 20 for p in ports.values()), ports
    finally:
        for m in started:
            assert m.stop() == 0, m.logs()
