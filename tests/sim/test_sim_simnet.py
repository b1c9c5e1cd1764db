"""The network in C (mrcnet/sim/simnet.py, mrcnet/_csrc/simnet.c) against its Python twin.

Whole runs with the real protocol core, once on each network from the same seed: every
flow's finish time, every port's and switch's counters, every host's core counters and
the number of events must be the same (the C network runs the same events in the same
order). The network tests (test_sim_network.py) run on both networks too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from mrcnet.native import HAVE_C
from mrcnet.sim.cli import parse_host_jitter
from mrcnet.sim.errors import SimError, SpecError
from mrcnet.sim.failures import parse_failure
from mrcnet.sim.matrix import incast, permutation
from mrcnet.sim.net import HostJitter
from mrcnet.sim.runner import SimRun
from mrcnet.sim.topology import parse_topology

pytestmark = pytest.mark.skipif(not HAVE_C, reason="the C network needs the C module")

_WALL = ("wall_seconds", "cpu_seconds", "events_per_second")

# (name, topology, flows, failures, options)
_SCENARIOS: list[tuple[str, str, Any, list[str], dict[str, Any]]] = [
    ("incast-trim", "leafspine:planes=2,spines=4,leaves=2,hosts=4",
     incast(range(1, 8), 0, 1 << 20), [], {}),
    ("incast-droptail", "leafspine:planes=2,spines=4,leaves=2,hosts=4,trim=off",
     incast(range(1, 8), 0, 1 << 20), [], {}),
    ("ecn-everywhere", "leafspine:planes=1,spines=2,leaves=2,hosts=4,ecn=20k,ecn_last_hop=on",
     incast(range(1, 8), 0, 512 << 10), [], {}),
    ("link-down-and-flap", "leafspine:planes=2,spines=4,leaves=4,hosts=2",
     permutation(8, 2 << 20, seed=3),
     ["link:L0.1-S0.2@50us:down", "link:L0.0-S0.1@20us..400us:flap=50us/100us"], {}),
    ("blackholes", "leafspine:planes=2,spines=4,leaves=2,hosts=2",
     permutation(4, 2 << 20, seed=1),
     ["switch:S1.2@40us:blackhole", "link:L0.0>S0.3@10us..300us:blackhole"], {}),
    ("srh", "leafspine:planes=2,spines=4,leaves=2,hosts=2,srv6=srh",
     permutation(4, 1 << 20, seed=2), [], {}),
    ("jitter", "leafspine:planes=2,spines=4,leaves=2,hosts=2",
     incast(range(1, 4), 0, 512 << 10), [], {"host_jitter": parse_host_jitter("mrcd")}),
    ("ecmp", "leafspine:planes=2,spines=4,leaves=2,hosts=4",
     permutation(8, 1 << 20, seed=4), [], {"transport": "ecmp"}),
]


def _run(topo: str, flows: Any, fails: list[str], opts: dict[str, Any],
         native: bool) -> tuple[dict[str, Any], int]:
    run = SimRun(parse_topology(topo), flows, failures=[parse_failure(f) for f in fails],
                 seed=5, native=native, **opts)
    assert run.native is native
    res = run.run(until=0.2)
    d = res.as_dict()
    for k in _WALL:
        d["summary"].pop(k)
    return d, res.events


@pytest.mark.parametrize(("name", "topo", "flows", "fails", "opts"), _SCENARIOS,
                         ids=[s[0] for s in _SCENARIOS])
def test_the_c_network_decides_a_run_exactly_as_the_python_one(
        name: str, topo: str, flows: Any, fails: list[str], opts: dict[str, Any]) -> None:
    py, py_events = _run(topo, flows, fails, opts, native=False)
    c, c_events = _run(topo, flows, fails, opts, native=True)
    assert py["summary"]["completed"] > 0
    assert c_events == py_events
    assert c["ports"] == py["ports"]
    assert c["switches"] == py["switches"]
    assert c["hosts"] == py["hosts"]
    assert c["flows"] == py["flows"]
    assert c == py


def test_each_scenario_exercises_what_it_is_named_for() -> None:
    """The comparison above is only as good as what the runs do: trims, drops, marks,
    failures must actually happen in them."""
    by = {s[0]: s for s in _SCENARIOS}

    def ports(name: str) -> dict[str, dict[str, int]]:
        _, topo, flows, fails, opts = by[name]
        return _run(topo, flows, fails, opts, native=True)[0]["ports"]

    def total(name: str, key: str) -> int:
        return sum(p[key] for p in ports(name).values())

    assert total("incast-trim", "trimmed") > 0
    assert total("incast-droptail", "drop_queue") > 0
    assert total("ecn-everywhere", "ecn_marked") > 0
    assert total("link-down-and-flap", "drop_down") > 0
    assert total("blackholes", "drop_blackhole") > 0


def test_random_loss_stays_with_the_python_network() -> None:
    spec = parse_topology("leafspine:planes=1,spines=2,leaves=2,hosts=1")
    flows = permutation(2, 64 << 10, seed=1)
    assert not SimRun(spec, flows, failures=[parse_failure("loss:*=1%")]).native
    assert SimRun(spec, flows).native
    with pytest.raises(SpecError, match="random loss"):
        SimRun(spec, flows, failures=[parse_failure("loss:*=1%")], native=True)
    run = SimRun(spec, flows, native=True)
    port = run.fabric.links["L0.0-S0.1"].ab
    with pytest.raises(SimError, match="random loss"):
        port.loss = 0.01
    port.loss = 0.0  # (no loss is fine)


def test_a_c_run_ends_with_its_queues_empty_and_its_counters_read_back() -> None:
    spec = parse_topology("leafspine:planes=2,spines=4,leaves=2,hosts=4")
    run = SimRun(spec, incast(range(1, 8), 0, 1 << 20), native=True,
                 host_jitter=HostJitter(wake_min=1e-6, wake_max=1e-6))
    res = run.run()
    assert res.summary()["completed"] == 7
    fab = run.fabric
    assert all(p.queued_bytes == 0 for p in fab.egress_ports())
    sent = sum(p.counters.tx_frames for p in fab.egress_ports())
    assert sent == sum(p["tx_frames"] for p in res.ports.values()) > 0
    assert sum(sw.counters.rx_frames for sw in fab.switches()) > 0


@pytest.mark.parametrize("step", ["events", "time"])
def test_a_run_in_pieces_stops_where_the_python_one_does(step: str) -> None:
    """Runs cut by an event budget (progress lines) or a horizon (--until, samples) stop
    at the same event, clock and queue length on both networks."""
    spec = parse_topology("leafspine:planes=2,spines=4,leaves=2,hosts=4")
    flows = incast(range(1, 8), 0, 256 << 10)
    runs = [SimRun(spec, flows, seed=3, native=n) for n in (False, True)]
    trace: list[list[tuple[float, int, int]]] = [[], []]
    for i, run in enumerate(runs):
        sim = run.sim
        for k in range(1, 400):
            if step == "events":
                sim.run(max_events=97)
            else:
                sim.run(until=k * 2e-6)
            trace[i].append((sim.now, sim.events, sim.pending))
            if all(r.finish is not None for r in run.results.values()):
                break
    assert trace[0] == trace[1]
    assert len(trace[0]) > 20
    assert all(r.finish is not None for r in runs[1].results.values())


class _RxTap:
    """A host's stack behind a tap that counts the frames handed to its ``receive``."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.received = inner, 0

    def receive(self, frame: bytearray, port: int, now: float) -> None:
        self.received += 1
        self.inner.receive(frame, port, now)

    def frames_to_send(self, now: float) -> list[tuple[int, bytes]]:
        return self.inner.frames_to_send(now)  # type: ignore[no-any-return]

    def next_timer(self) -> float | None:
        return self.inner.next_timer()  # type: ignore[no-any-return]

    def handle_timer(self, now: float) -> None:
        self.inner.handle_timer(now)


def test_a_stack_put_in_place_of_the_attached_one_gets_every_frame() -> None:
    """The C network hands a host's frames to the attached stack's batch entry
    (HostNode.arrive); an endpoint put in its place afterwards (a tap) gets them through
    its own ``receive``, every one."""
    run = SimRun(parse_topology("leafspine:planes=2,spines=2,leaves=2,hosts=2"),
                 permutation(4, 256 << 10, seed=2), native=True)
    node = run.fabric.hosts[1]
    tap = _RxTap(node.endpoint)
    node.endpoint = tap
    res = run.run(until=0.1)
    assert all(r.finish is not None for r in res.flows)
    assert tap.received == node.counters.rx_frames > 0


class _FrameLog(_RxTap):
    """A tap that keeps every frame its host got, with the time and port."""

    def __init__(self, inner: Any, log: list[tuple[float, int, bytes]]) -> None:
        super().__init__(inner)
        self.log = log

    def receive(self, frame: bytearray, port: int, now: float) -> None:
        self.log.append((now, port, bytes(frame)))
        super().receive(frame, port, now)


def test_every_frame_reaches_its_host_byte_for_byte_as_on_the_python_network() -> None:
    """The C network leaves a host's frame in its buffer, which it keeps zero but for
    the last frame's bytes (an elided frame's 8 KiB of zeros not written again): every
    frame every host gets, data frames of several lengths among SACKs, NACKs and trimmed
    headers, is the Python network's, byte for byte, in the same order."""
    logs: dict[bool, list[list[tuple[float, int, bytes]]]] = {}
    for native in (True, False):
        flows = [*incast(range(1, 6), 0, (256 << 10) + 1000),
                 *permutation(8, (128 << 10) + 3000, seed=2)]
        flows = [dataclasses.replace(f, id=i) for i, f in enumerate(flows)]
        run = SimRun(parse_topology("leafspine:planes=2,spines=4,leaves=2,hosts=4"),
                     flows, seed=5, native=native)
        logs[native] = [[] for _ in run.fabric.hosts]
        for node, log in zip(run.fabric.hosts, logs[native], strict=True):
            node.endpoint = _FrameLog(node.endpoint, log)
        res = run.run(until=0.2)
        assert all(r.finish is not None for r in res.flows)
    c, py = logs[True], logs[False]
    assert c == py
    sizes = {len(f) for log in c for _, _, f in log}
    assert len(sizes) > 4 and max(sizes) > 8000 and min(sizes) < 200
