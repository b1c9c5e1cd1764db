"""The receive lane's SACKs and NACKs on paths the QP has no template for yet (a plane's
routes, rxlane.h ``struct mrc_rx_plane``, mrcnet/core/laneplane.py): every frame a run
sends is the one Python's ``Responder.send_sack`` / ``_nack`` would have built, byte for
byte, on uSID fabrics (where the lane takes them) and SRH ones (where it must not)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest

from mrcnet.core import responder as responder_mod
from mrcnet.core.ctrl import only_outer_dst_differs
from mrcnet.native import HAVE_C
from mrcnet.sim.engine import Simulator
from mrcnet.sim.matrix import incast, permutation
from mrcnet.sim.runner import SimRun
from mrcnet.sim.simnet import NativeSimulator
from mrcnet.sim.topology import Fabric, parse_topology

pytestmark = pytest.mark.skipif(not HAVE_C, reason="the receive lane is C")


def _sent(monkeypatch: pytest.MonkeyPatch, srv6: str = "usid", planes: bool = True,
          fast: bool = True) -> tuple[list[tuple[int, bytes]], Counter[str], object]:
    """Every frame the hosts hand the C network (NIC, bytes), in order, the SACKs and
    NACKs Python made, and the run's results, for a trimming run (a permutation and an
    incast); ``planes`` False: responders give the lane no plane routes; ``fast`` False:
    no lane at all (the pure-Python per-frame path)."""
    sent: list[tuple[int, bytes]] = []
    calls = Counter[str]()
    send = NativeSimulator.send_frames

    def record(self: NativeSimulator, nic_ids: list[int], out: Any, keep: int) -> None:
        sent.extend((nic_ids[p], bytes(f)) for p, f in out)
        send(self, nic_ids, out, keep)

    monkeypatch.setattr(NativeSimulator, "send_frames", record)
    for name in ("send_sack", "_nack"):
        orig = getattr(responder_mod.Responder, name)

        def counted(self: Any, *a: Any, _orig: Any = orig, _name: str = name,
                    **k: Any) -> None:
            calls[_name] += 1
            _orig(self, *a, **k)

        monkeypatch.setattr(responder_mod.Responder, name, counted)
    if not planes:
        monkeypatch.setattr(responder_mod.Responder, "lane_sack_setup",
                            _without_planes(responder_mod.Responder.lane_sack_setup))
    spec = parse_topology(
        f"leafspine:planes=2,spines=4,leaves=4,hosts=2,queue=4pkt,srv6={srv6}")
    flows = [*permutation(8, 256 << 10, seed=5), *incast(range(1, 8), 0, 128 << 10)]
    run = SimRun(spec, [dataclasses.replace(f, id=i) for i, f in enumerate(flows)], seed=5,
                 host_config={"fast_parse": fast}, native=True)
    res = run.run(until=0.05)
    monkeypatch.undo()
    return sent, calls, ([(r.flow.id, r.finish) for r in res.flows], res.ports, res.hosts,
                         res.events)


def _without_planes(setup: Any) -> Any:
    def lane_sack_setup(self: Any, lane: Any) -> None:
        self._planes = {}
        setup(self, lane)
    return lane_sack_setup


@pytest.mark.parametrize("srv6", ["usid", "srh"])
def test_the_lanes_sacks_along_a_planes_routes_are_the_ones_python_builds(
        monkeypatch: pytest.MonkeyPatch, srv6: str) -> None:
    with_planes, py_with, res_with = _sent(monkeypatch, srv6, True)
    without, py_without, res_without = _sent(monkeypatch, srv6, False)
    assert res_with == res_without
    assert len(with_planes) == len(without) > 300
    assert with_planes == without  # every frame, byte for byte, in the same order
    assert py_without["_nack"] > 50  # (trims: NACKs to build)
    if srv6 == "usid":  # the lane built SACKs and NACKs Python built without them
        assert py_with["send_sack"] < py_without["send_sack"]
        assert py_with["_nack"] < py_without["_nack"]  # (incast: the lane serves one QP)
    else:  # SRH routes are not the plane's template but for one address: Python's
        assert py_with == py_without


@pytest.mark.parametrize("srv6", ["usid", "srh"])
def test_routes_differ_only_in_the_outer_destination_within_a_plane_of_usid(
        srv6: str) -> None:
    fab = Fabric(Simulator(), parse_topology(
        f"leafspine:planes=2,spines=4,leaves=3,hosts=2,srv6={srv6}"))
    for p in range(2):
        first = fab.route(0, 5, p, 0)
        for sp in range(1, 4):
            r = fab.route(0, 5, p, sp)
            assert only_outer_dst_differs(first, r) == (srv6 == "usid")
            assert r != first  # (SRH: the segments differ, not the first one)
        other_plane = fab.route(0, 5, 1 - p, 0)
        assert not only_outer_dst_differs(first, other_plane)  # (its MACs, addresses)


def test_the_lanes_control_frames_are_the_per_frame_paths(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With the C receive lane (its SACKs and NACKs along the planes' routes, one frame
    per call) every frame the run sends is the one the pure-Python per-frame path
    sends, in the same order."""
    lane, lane_calls, lane_res = _sent(monkeypatch)
    ref, ref_calls, ref_res = _sent(monkeypatch, fast=False)
    assert len(lane) == len(ref) > 300
    assert lane == ref
    assert lane_res == ref_res
    assert ref_calls["_nack"] > 20  # (trims: NACKs, all built in Python there)
    assert lane_calls["_nack"] < ref_calls["_nack"]
