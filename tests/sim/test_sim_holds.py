"""The responder's holds (``ack_delay``, ``reorder_floor``) follow the simulated fabric.

A quarter of the longest unloaded RTT (RFC 8985's reordering window) or the paths'
one-way spread (skew plus one full queue at the slowest link: the most a loaded hop
delays), whichever is more, at most the core's 20 us defaults; a value the user sets
wins (docs/SIM.md, docs/DECISIONS.md).
"""

from __future__ import annotations

import pytest

from mrcnet.core import HostConfig
from mrcnet.sim.collective import default_topology
from mrcnet.sim.matrix import Flow
from mrcnet.sim.runner import SimRun, base_rtt, longest_rtt, path_spread, payload_for_mtu
from mrcnet.sim.topology import LeafSpineSpec, parse_topology

#: issue 16's simulator shape: 64 hosts x 8 planes at 100 Gbit/s (base RTT ~10.8 us)
DEPLOYED = default_topology(64)
#: the 1 %-lossy link's fabric of tests/sim/test_sim_detection.py (10 Gbit/s, 20 us skew)
SLOW_SKEWED = "leafspine:planes=2,spines=8,leaves=2,hosts=1,rate=10gbit,delay=5us,skew=20us"


def _holds(run: SimRun) -> list[tuple[float, float]]:
    return [(h.config.ack_delay, h.config.reorder_floor) for h in run.hosts]


def _spread(spec: LeafSpineSpec) -> float:
    return path_spread(spec, payload_for_mtu(spec.mtu))


def test_the_deployed_shape_holds_one_loaded_hop() -> None:
    spec = parse_topology(DEPLOYED)
    rtt = base_rtt(spec, payload_for_mtu(spec.mtu))
    assert 10e-6 < rtt < 11e-6
    # a loaded 100 Gbit/s hop (63.6 kB ahead of a frame) delays more than a quarter RTT
    assert _spread(spec) == pytest.approx(5.09e-6, rel=1e-3)
    assert rtt / 4 < _spread(spec)
    run = SimRun(spec, [Flow(0, 0, 63, 0.0, 4096)])
    # every host's core, responder and RACK alike, gets it
    assert set(_holds(run)) == {(_spread(spec), _spread(spec))}
    assert run.run().flows[0].fct is not None


def test_a_loaded_slower_spine_layer_holds_its_queue() -> None:
    # 40 Gbit/s spines under 100 Gbit/s NICs: a full spine queue is 12.7 us
    spec = parse_topology("leafspine:planes=2,spines=4,leaves=2,hosts=2,rate=40gbit,"
                          "host_rate=100gbit")
    assert _spread(spec) == pytest.approx(12.7e-6, rel=1e-2)
    run = SimRun(spec, [Flow(0, 0, 2, 0.0, 4096)])
    assert set(_holds(run)) == {(_spread(spec), _spread(spec))}


def test_a_longer_propagation_holds_a_quarter_rtt() -> None:
    spec = parse_topology("leafspine:planes=2,spines=4,leaves=2,hosts=2,delay=3us")
    rtt = longest_rtt(spec, payload_for_mtu(spec.mtu))
    assert _spread(spec) < rtt / 4 < 20e-6
    run = SimRun(spec, [Flow(0, 0, 2, 0.0, 4096)])
    assert set(_holds(run)) == {(rtt / 4, rtt / 4)}


@pytest.mark.parametrize("topo", [
    SLOW_SKEWED,
    # test_sim_core.py's spine bottleneck: a full 12.5 Gbit/s queue is 46 us
    "leafspine:planes=2,spines=8,leaves=2,hosts=1,rate=12.5gbit,host_rate=100gbit",
])
def test_a_slow_or_skewed_fabric_keeps_the_core_defaults(topo: str) -> None:
    spec = parse_topology(topo)
    run = SimRun(spec, [Flow(0, 0, 1, 0.0, 4096)])
    core = HostConfig()
    assert _spread(spec) > 20e-6
    assert set(_holds(run)) == {(core.ack_delay, core.reorder_floor)} == {(20e-6, 20e-6)}


@pytest.mark.parametrize("topo", [DEPLOYED, SLOW_SKEWED])
def test_a_value_the_user_sets_wins(topo: str) -> None:
    spec = parse_topology(topo)
    run = SimRun(spec, [Flow(0, 0, 1, 0.0, 4096)],
                 host_config={"ack_delay": 7e-6, "reorder_floor": 30e-6})
    assert set(_holds(run)) == {(7e-6, 30e-6)}
    # one set, the other still derived
    run = SimRun(spec, [Flow(0, 0, 1, 0.0, 4096)], host_config={"reorder_floor": 3e-6})
    derived = min(20e-6, max(longest_rtt(spec, payload_for_mtu(spec.mtu)) / 4,
                             _spread(spec)))
    assert set(_holds(run)) == {(derived, 3e-6)}
