"""Each failure kind does what it says, shown by counters and reachability."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from mrcnet.fabric import probe
from mrcnet.fabric.errors import FabricError
from mrcnet.fabric.fabric import Fabric
from mrcnet.fabric.state import StateRecord

pytestmark = pytest.mark.root


@pytest.fixture
def fab(usid_fabric: Fabric) -> Iterator[Fabric]:
    """The shared fabric, with every failure undone after each test."""
    try:
        yield usid_fabric
    finally:
        d = usid_fabric.description
        for ln in d.links:
            usid_fabric.link(ln.a.node, ln.b.node).clear()
        for sw in d.switches():
            usid_fabric.node(sw.name).restore()
        for h in d.hosts:
            for p in h.ports:
                usid_fabric.port(h.name, p.plane).up()


def _deliver(fab: Fabric, plane: int, spine: int, reverse: bool = False, n: int = 20) -> int:
    d = fab.description
    src, dst = d.hosts[0].name, d.hosts[-1].name
    if reverse:
        src, dst = dst, src
    return probe.deliver(d, src, dst, plane, spine, count=n)


def _delta(fab: Fabric, before: dict[str, dict[str, int]], key: str, field: str) -> int:
    return fab.counters()[key][field] - before[key][field]


def _udp_ok(fab: Fabric, src: str, address: str) -> bool:
    """A UDP echo over plain IPv6 (kernel routing) between two hosts."""
    d = fab.description
    dst = next(h for h in d.hosts for p in h.ports if p.address == address)
    server = (
        "import socket; s=socket.socket(socket.AF_INET6, socket.SOCK_DGRAM);"
        "s.bind(('::', 7790)); s.settimeout(3); print('ready', flush=True);"
        "d,a=s.recvfrom(100); s.sendto(d,a)"
    )
    srv = fab.popen(dst.name, [sys.executable, "-c", server], stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"
        client = (
            "import socket; s=socket.socket(socket.AF_INET6, socket.SOCK_DGRAM);"
            f"s.settimeout(1); s.sendto(b'x', ('{address}', 7790));"
            "print(s.recvfrom(10)[0].decode())"
        )
        r = fab.exec(src, [sys.executable, "-c", client], capture_output=True, text=True,
                     timeout=10)
        return r.stdout.strip() == "x"
    finally:
        srv.kill()
        srv.wait()


def test_link_down_and_up(fab: Fabric) -> None:
    d = fab.description
    leaf = d.planes[0].leaves[d.hosts[0].leaf_index].name
    fab.link(leaf, "p0s0").down()
    st = fab.status()
    [ln] = [x for x in st["links"] if x["name"] == f"{leaf}-S0.0"]
    assert all(v["oper"] == "down" for v in ln["directions"].values())
    assert _deliver(fab, 0, 0) == 0
    assert _deliver(fab, 0, 1) == 20  # the other spine is untouched
    assert st["failures"][f"link:{leaf}-S0.0"] == {"down": True}
    fab.link(leaf, "p0s0").up()
    assert _deliver(fab, 0, 0) == 20  # routes and neighbours were re-installed
    assert _deliver(fab, 0, 0, reverse=True) == 20


def test_link_blackhole_is_one_way(fab: Fabric) -> None:
    d = fab.description
    leaf = d.planes[1].leaves[d.hosts[0].leaf_index].name
    before = fab.counters()
    fab.link(leaf, "p1s1").blackhole()
    assert _deliver(fab, 1, 1) == 0
    assert _delta(fab, before, f"{leaf}->S1.1", "drops") >= 20
    assert _deliver(fab, 1, 1, reverse=True) == 20  # p1s1 -> leaf still forwards
    st = fab.status()
    [ln] = [x for x in st["links"] if x["name"] == f"{leaf}-S1.1"]
    assert all(v["oper"] == "up" for v in ln["directions"].values())  # link stays up
    assert ln["directions"][f"{leaf}->S1.1"]["blackhole"] is True
    fab.link(leaf, "p1s1").clear()
    assert _deliver(fab, 1, 1) == 20


def test_link_loss(fab: Fabric) -> None:
    d = fab.description
    leaf = d.planes[0].leaves[d.hosts[0].leaf_index].name
    fab.link(leaf, "p0s1").loss(50)
    got = _deliver(fab, 0, 1, n=200)
    assert 40 <= got <= 160, got
    assert _deliver(fab, 0, 0, n=50) == 50
    fab.link(leaf, "p0s1").clear()
    assert _deliver(fab, 0, 1, n=50) == 50
    with pytest.raises(FabricError):
        fab.link(leaf, "p0s1").loss(150)


def test_node_blackhole(fab: Fabric) -> None:
    before = fab.counters()
    fab.node("p0s1").blackhole()
    assert _deliver(fab, 0, 1) == 0
    assert _deliver(fab, 0, 1, reverse=True) == 0
    assert _deliver(fab, 0, 0) == 20
    dst_leaf = fab.description.planes[0].leaves[fab.description.hosts[-1].leaf_index].name
    assert _delta(fab, before, f"S0.1->{dst_leaf}", "drops") >= 20
    st = fab.status()
    spine_links = [x for x in st["links"] if "S0.1" in x["name"]]
    assert all(v["oper"] == "up" for x in spine_links for v in x["directions"].values())
    assert next(n for n in st["nodes"] if n["name"] == "S0.1")["blackhole"] is True
    fab.node("p0s1").restore()
    assert _deliver(fab, 0, 1) == 20


def test_port_down_and_up(fab: Fabric) -> None:
    d = fab.description
    h0, h1 = d.hosts[0].name, d.hosts[-1].name
    fab.port(h1, 0).down()
    assert _deliver(fab, 0, 0) == 0
    assert _deliver(fab, 1, 0) == 20  # the other plane carries on
    assert not _udp_ok(fab, h0, d.host(h1).port(0).address)
    assert _udp_ok(fab, h0, d.host(h1).port(1).address)
    fab.port(h1, 0).up()
    assert _deliver(fab, 0, 0) == 20
    assert _udp_ok(fab, h0, d.host(h1).port(0).address)  # host routes came back


def test_flap_runs_in_background_and_clear_stops_it(fab: Fabric) -> None:
    d = fab.description
    leaf = d.planes[0].leaves[d.hosts[0].leaf_index].name
    ctl = fab.link(leaf, "p0s0")
    pid = ctl.flap(100)
    rec = StateRecord.load(fab.name)
    [proc] = [p for p in rec.processes if p.pid == pid]
    assert proc.alive()
    seen = set()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and len(seen) < 2:
        st = fab.status()
        [ln] = [x for x in st["links"] if x["name"] == f"{leaf}-S0.0"]
        seen.add(ln["directions"][f"{leaf}->S0.0"]["oper"])
        time.sleep(0.03)
    assert {"up", "down"} <= seen, seen
    ctl.clear()
    assert not proc.alive()
    assert StateRecord.load(fab.name).processes == []
    assert _deliver(fab, 0, 0) == 20


def test_failures_compose(fab: Fabric) -> None:
    """A node restore keeps a link blackhole; a link clear keeps a node blackhole."""
    d = fab.description
    leaf = d.planes[0].leaves[d.hosts[0].leaf_index].name
    fab.link("p0s0", leaf).blackhole()  # spine -> leaf only
    fab.node("p0s0").blackhole()
    fab.node("p0s0").restore()
    assert _deliver(fab, 0, 0) == 20  # h0 -> h1 does not use p0s0 -> leaf(h0)
    assert _deliver(fab, 0, 0, reverse=True) == 0  # h1 -> h0 does: still blackholed
    fab.node("p0s0").blackhole()
    fab.link("p0s0", leaf).clear()
    assert _deliver(fab, 0, 0) == 0  # the switch as a whole is still blackholed
    fab.node("p0s0").restore()
    assert _deliver(fab, 0, 0) == 20 and _deliver(fab, 0, 0, reverse=True) == 20
    fab.link(leaf, "p0s1").loss(100, both=True)
    fab.link(leaf, "p0s1").down()
    fab.link(leaf, "p0s1").up()  # up undoes down only: the loss stays
    assert _deliver(fab, 0, 1) == 0
    rec = StateRecord.load(fab.name).failures
    assert rec[f"link:{leaf}-S0.1"] == {"loss_pct": {f"{leaf}->S0.1": 100, f"S0.1->{leaf}": 100}}
