"""Spec parsing, the addressing plan and the description file (no root needed)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from mrcnet.fabric import plan
from mrcnet.fabric.describe import FabricDescription, load, save, usid_address
from mrcnet.fabric.errors import FabricError, SpecError
from mrcnet.fabric.spec import allocate, parse_rate, parse_spec, validate_name


def test_one_line_spec() -> None:
    s = parse_spec("leafspine:planes=2,spines=4,leaves=2,hosts=2,rate=1gbit,mtu=9000")
    assert (s.planes, s.spines, s.leaves, s.hosts) == (2, 4, 2, 2)
    assert s.rate_bps == 1_000_000_000 and s.mtu == 9000 and s.srv6 == "usid"
    assert s.trim_bytes == 8 * 9000 and s.ecn_bytes < s.trim_bytes


def test_toml_spec(tmp_path: Path) -> None:
    f = tmp_path / "lab.toml"
    f.write_text('[fabric]\nplanes = 3\nspines = 2\nrate = "100mbit"\nsrv6 = "srh"\n')
    s = parse_spec(str(f))
    assert (s.planes, s.spines, s.rate_bps, s.srv6) == (3, 2, 100_000_000, "srh")


@pytest.mark.parametrize(
    "bad",
    [
        "mesh:planes=2",
        "leafspine:planes=0",
        "leafspine:planes=x",
        "leafspine:spines",
        "leafspine:colour=red",
        "leafspine:srv6=mpls",
        "leafspine:rate=fast",
        "leafspine:mtu=100",
        "leafspine:trim_size=100",
        "leafspine:srv6=srh,trim_size=200",
    ],
)
def test_bad_specs(bad: str) -> None:
    with pytest.raises(SpecError):
        parse_spec(bad)


def test_rates() -> None:
    assert parse_rate("1.5gbit") == 1_500_000_000
    assert parse_rate("100kbit") == 100_000
    assert parse_rate("none") == 0


@pytest.mark.parametrize("bad", ["", "Lab", "1lab", "a" * 11, "lab-1", "lab_1"])
def test_bad_names(bad: str) -> None:
    with pytest.raises(SpecError):
        validate_name(bad)


def _desc(spec: str = "leafspine:planes=2,spines=4,leaves=2,hosts=2") -> FabricDescription:
    return allocate(parse_spec(spec), "lab", 0x1A2B)


def test_allocation_unique() -> None:
    d = _desc()
    usids = [h.usid for h in d.hosts] + [s.usid for s in d.switches()]
    assert len(usids) == len(set(usids)) and all(0 < u < 0x10000 for u in usids)
    macs = [e.mac for ln in d.links for e in (ln.a, ln.b)]
    assert len(macs) == len(set(macs))
    addrs = [p.address for h in d.hosts for p in h.ports]
    assert len(addrs) == len(set(addrs))
    assert len(d.hosts) == 4 and all(len(h.ports) == 2 for h in d.hosts)
    # every leaf connects to every spine of its plane, every host to one leaf per plane
    assert len(d.links) == 2 * (2 * 4) + 4 * 2
    for ln in d.links:
        for e in (ln.a, ln.b):
            assert len(e.ifname) <= 15
    # a switch's locator is block:usid::/48
    sw = d.switch("p1s3")
    assert sw.locator == f"fc00:1a2b:{sw.usid:x}::/48"


def test_path_container_and_segments() -> None:
    d = _desc()
    h0, h3 = d.host("h0"), d.host("h3")
    c = d.path_container("h0", "h3", 1, 2)
    src_leaf = d.planes[1].leaves[h0.leaf_index]
    dst_leaf = d.planes[1].leaves[h3.leaf_index]
    spine = d.planes[1].spines[2]
    assert c == ipaddress.IPv6Address(
        f"fc00:1a2b:{src_leaf.usid:x}:{spine.usid:x}:{dst_leaf.usid:x}:{h3.usid:x}::"
    )
    segs = d.path_segments("h0", "h3", 1, 2)
    assert segs == [
        usid_address(d.block, [u]) for u in (src_leaf.usid, spine.usid, dst_leaf.usid, h3.usid)
    ]
    assert d.path_container("h0", "h1", 0, None) == usid_address(
        d.block, [d.planes[0].leaves[0].usid, d.host("h1").usid]
    )
    with pytest.raises(FabricError):
        d.path_container("h0", "h3", 0, None)


def test_round_trip(tmp_path: Path) -> None:
    d = _desc()
    save(d, tmp_path / "d.json")
    back = load(tmp_path / "d.json")
    assert back == d
    assert back.path_container("h1", "h2", 0, 1) == d.path_container("h1", "h2", 0, 1)


def test_version_checked(tmp_path: Path) -> None:
    d = _desc().to_dict()
    d["version"] = 99
    p = tmp_path / "d.json"
    import json

    p.write_text(json.dumps(d))
    with pytest.raises(FabricError, match="version"):
        load(p)


def test_plan_routes_are_static_and_single_path() -> None:
    d = _desc()
    for sw in d.switches():
        lines = plan.node_lines(d, sw.name)
        seg6 = [ln for ln in lines if "seg6local" in ln]
        assert seg6 == [plan.seg6local_line(d, sw.usid)]
        assert "flavors next-csid lblen 32 nflen 16" in seg6[0]
        assert f"dev {plan.SID_DEV}" in seg6[0]
        prefixes = [ln.split()[2] for ln in lines if ln.startswith("route replace")]
        assert len(prefixes) == len(set(prefixes)), "one route per prefix: no ECMP"
    srh = _desc("leafspine:srv6=srh")
    assert "flavors" not in plan.seg6local_line(srh, srh.switches()[0].usid)


def test_seg6local_readback_must_show_flavors() -> None:
    """The route read back from the kernel is checked: a missing flavors clause fails."""
    from mrcnet.fabric.fabric import Fabric
    from mrcnet.fabric.state import StateRecord

    d = _desc()
    fab = Fabric(d, StateRecord(name="lab", fabric_id=d.fabric_id))
    sw = d.switches()[0]
    prefix = sw.locator
    good = f"{prefix}  encap seg6local action End flavors next-csid lblen 32 nflen 16 dev sid0"
    fab._verify_seg6local(sw.name, good + "\n")
    # what a pyroute2 0.9.7 install leaves: the flavors attribute silently dropped
    with pytest.raises(FabricError, match="next-csid"):
        fab._verify_seg6local(sw.name, f"{prefix}  encap seg6local action End dev sid0\n")
    with pytest.raises(FabricError):
        fab._verify_seg6local(sw.name, "")


def test_seg6nl_flavors_round_trip() -> None:
    """Our rtnetlink encoding of SEG6_LOCAL_FLAVORS decodes back to the same route."""
    from mrcnet.fabric import seg6nl

    net = ipaddress.IPv6Network("fc00:1a2b:1001::/48")
    body = seg6nl.encode_end_route(net, oif=7, next_csid=True, lblen=32, nflen=16)
    r = seg6nl.decode_route(body)
    assert r == seg6nl.Seg6LocalRoute(net, 7, seg6nl.SEG6_LOCAL_ACTION_END, True, 32, 16)
    plain = seg6nl.decode_route(seg6nl.encode_end_route(net, 7, False, 32, 16))
    assert plain is not None and not plain.next_csid and plain.lblen == 0


def test_mrc_sim_spec_keys_are_accepted() -> None:
    """One spec drives mrc-sim and mrc-fabric: the sim's keys map onto the switch model."""
    s = parse_spec(
        "leafspine:planes=2,spines=4,leaves=2,hosts=2,rate=100gbit,host_rate=50gbit,"
        "delay=1us,mtu=9000,queue=8pkt,hdr_queue=64k,trim=on,trim_size=256,ecn=3pkt,"
        "ecn_last_hop=off,srv6=usid"
    )
    assert s.trim_bytes == 8 * 9000 and s.ecn_bytes == 3 * 9000
    assert s.drop_bytes == 8 * 9000 + 64 * 1024
    assert s.host_link_rate == 50_000_000_000 and s.rate_bps == 100_000_000_000
    assert s.delay_s == pytest.approx(1e-6)
    d = allocate(s, "lab", 7)
    assert {ln.rate_bps for ln in d.links if ln.kind == "host-leaf"} == {50_000_000_000}
    assert {ln.rate_bps for ln in d.links if ln.kind == "leaf-spine"} == {100_000_000_000}
    off = parse_spec("leafspine:mtu=1500,queue=8pkt,trim=off,ecn=off")
    assert (off.trim_bytes, off.drop_bytes, off.ecn_bytes) == (0, 8 * 1500, 0)
    assert parse_spec("leafspine:trim=64k,ecn=20000").trim_bytes == 65536
    assert parse_spec("leafspine:trim=64k,ecn=20000").ecn_bytes == 20000
