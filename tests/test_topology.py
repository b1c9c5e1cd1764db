"""mrc-fabric and mrc-sim read a spec line the same way: same shape, same names, same plan.

No root needed: the fabric side is the layout mrc-fabric would build (its description),
the simulator side a built simulated fabric.
"""

from __future__ import annotations

import ipaddress

import pytest

from mrcnet.fabric.errors import SpecError as FabricSpecError
from mrcnet.fabric.spec import allocate
from mrcnet.fabric.spec import parse_spec as fabric_spec
from mrcnet.sim.engine import Simulator
from mrcnet.sim.errors import SpecError as SimSpecError
from mrcnet.sim.topology import Fabric, parse_topology
from mrcnet.topology import FABRIC, SIM, SpecError, parse_spec
from mrcnet.topology.addressing import SIM_FABRIC_ID
from mrcnet.topology.description import FabricDescription
from mrcnet.topology.naming import canonical, compact
from mrcnet.wire.dscp import DscpClasses

SPECS = [
    "leafspine:",
    "leafspine:planes=1",
    "leafspine:planes=2,spines=4,leaves=2,hosts=2",
    "leafspine:planes=3,spines=1,leaves=3,hosts=2,srv6=srh",
    "leafspine:planes=2,spines=8,leaves=4,hosts=2,rate=100gbit,delay=1us,queue=16pkt",
    "leafspine:spines=3,hosts=3,rate=500mbit,mtu=1500,trim=off,ecn=off,vq_drain=0.9",
]


def _both(line: str) -> tuple[FabricDescription, Fabric]:
    desc = allocate(fabric_spec(line), "t", SIM_FABRIC_ID)
    return desc, Fabric(Simulator(seed=1), parse_topology(line))


@pytest.mark.parametrize("line", SPECS)
def test_same_shape_and_names(line: str) -> None:
    desc, sim = _both(line)
    spec = parse_spec(line)
    assert len(desc.planes) == sim.spec.planes == spec.planes
    assert [h.name for h in desc.hosts] == [h.name for h in sim.hosts]
    assert [h.leaf_index for h in desc.hosts] == [h.leaf_index for h in sim.hosts]
    for p, plane in enumerate(desc.planes):
        assert [s.name for s in plane.leaves] == [s.name for s in sim.leaves[p]]
        assert [s.name for s in plane.spines] == [s.name for s in sim.spines[p]]
        assert len(plane.spines) == spec.spines and len(plane.leaves) == spec.leaves
    assert sorted(ln.name for ln in desc.links) == sorted(sim.links)
    assert len(desc.hosts) == spec.n_hosts == spec.leaves * spec.hosts


@pytest.mark.parametrize("line", SPECS)
def test_same_addressing_plan_and_routes(line: str) -> None:
    """Same uSIDs, locators, port addresses and MACs; mrcd's routes are the simulator's."""
    from mrcnet.daemon.paths import FabricPaths, LocalPort

    desc, sim = _both(line)
    for sw_d, sw_s in zip(desc.switches(), sim.switches(), strict=True):
        assert (sw_d.name, sw_d.usid) == (sw_s.name, sw_s.usid)
        net = ipaddress.IPv6Network(sw_d.locator)
        assert net.network_address.packed[:6] == sw_s.locator
    for h_d, h_s in zip(desc.hosts, sim.hosts, strict=True):
        assert h_d.usid == h_s.usid
        assert [ipaddress.IPv6Address(p.address).packed for p in h_d.ports] == h_s.addresses
        assert [bytes.fromhex(p.mac.replace(":", "")) for p in h_d.ports] == h_s.macs
    src, dst = desc.hosts[0], desc.hosts[-1]
    ports = [LocalPort(i, p.plane, p.ifname, bytes.fromhex(p.mac.replace(":", "")),
                       ipaddress.IPv6Address(p.address).packed)
             for i, p in enumerate(src.ports)]
    paths = FabricPaths(desc, src.name, ports)
    for plane in range(len(desc.planes)):
        assert list(paths.routes(dst.name, plane)) == sim.routes(0, len(sim.hosts) - 1, plane)


def test_shape_defaults_are_shared() -> None:
    spec = parse_spec("leafspine:")
    fab, sim = fabric_spec("leafspine:"), parse_topology("leafspine:")
    shape = (spec.planes, spec.spines, spec.leaves, spec.hosts, spec.mtu, spec.srv6)
    assert (fab.planes, fab.spines, fab.leaves, fab.hosts, fab.mtu, fab.srv6) == shape
    assert (sim.planes, sim.spines, sim.leaves, sim.hosts, sim.mtu, sim.srv6) == shape


def test_keys_a_tool_cannot_emulate_are_recorded() -> None:
    line = "leafspine:rate=100gbit,delay=1us,skew=2us,vq_drain=0.9,host_drop=off"
    spec = parse_spec(line)
    assert spec.not_emulated(FABRIC) == ["delay=1.000us", "skew=2.000us"]
    assert spec.not_emulated(SIM) == ["host_drop=off", "vq_drain=0.9"]
    notes = fabric_spec(line).notes()
    assert any(n.startswith("delay=1.000us: recorded, not emulated") for n in notes)
    assert any(n.startswith("rate=100gbit: recorded, not emulated faithfully") for n in notes)
    assert parse_topology(line).notes() == [
        "host_drop=off: recorded, not emulated", "vq_drain=0.9: recorded, not emulated"]
    assert fabric_spec(line).delay_s == pytest.approx(1e-6)
    assert parse_topology(line).delay == pytest.approx(1e-6)


def test_dscp_classes_from_the_spec() -> None:
    """One spelling for both tools; the fabric writes the classes in its description."""
    line = "leafspine:planes=2,dscp=trimmed:10/control:48"
    spec = parse_spec(line)
    want = DscpClasses(trimmed=10, control=48)
    assert spec.get("dscp") == want
    assert "dscp=trimmed:10/control:48" in spec.to_line()
    assert parse_spec(spec.to_line()) == spec
    fab = fabric_spec(line)
    assert fab.dscp == want and "dscp=trimmed:10/control:48" in fab.effective()
    assert allocate(fab, "dq1", 1).options["dscp"] == want.to_dict()
    assert allocate(fabric_spec("leafspine:planes=2"), "dq2", 2).options["dscp"] == \
        DscpClasses().to_dict()
    assert parse_topology(line).dscp == want
    for bad, why in (("x:1", "unknown DSCP class"), ("trimmed:64", "0..63"),
                     ("trimmed", "expected CLASS:N"), ("trimmed:ten", "integer"),
                     ("trimmed:46", "distinct")):
        with pytest.raises(SpecError, match=why):
            parse_spec(f"leafspine:dscp={bad}")


def test_one_spec_error() -> None:
    assert FabricSpecError is SimSpecError is SpecError
    for bad in ("leafspine:planes=0", "leafspine:colour=red", "leafspine:rate=fast"):
        with pytest.raises(SpecError):
            fabric_spec(bad)
        with pytest.raises(SpecError):
            parse_topology(bad)


def test_names_typed_either_way() -> None:
    assert canonical("p0l1") == "L0.1" and canonical("p1s3") == "S1.3"
    assert canonical("L0.1") == "L0.1" and canonical("h3") == "h3"
    assert compact("S1.3") == "p1s3" and compact("h3") == "h3"
    desc, sim = _both("leafspine:planes=2,spines=2,leaves=2,hosts=1")
    assert desc.link("p0l0", "p0s1").name == sim.link("p0l0", "p0s1").name == "L0.0-S0.1"
    assert desc.switch("p1s0").name == sim.switch("p1s0").name == "S1.0"
    assert desc.node_netns("S1.0") == "t-p1s0"
