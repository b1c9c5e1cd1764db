"""The simulated network on its own: forwarding, timing, queues, trimming, ECN.

Traffic comes from the test-only blaster (real frames from mrcnet.wire builders); the
sink parses every frame strictly, so a switch that corrupted a byte fails the test.
"""

from __future__ import annotations

import pytest
from simtraffic import Blaster, Sink, data_frame

from mrcnet.constants import DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP, ECN
from mrcnet.native import HAVE_C
from mrcnet.sim.engine import Simulator
from mrcnet.sim.net import EgressPort, frame_dscp, frame_ecn
from mrcnet.sim.simnet import NativeSimulator
from mrcnet.sim.topology import USID_BLOCK, Fabric, parse_topology
from mrcnet.wire import Route, usid_container

_NATIVE = [False]


@pytest.fixture(autouse=True, params=[
    "python", pytest.param("c", marks=pytest.mark.skipif(not HAVE_C, reason="no C module"))])
def network(request: pytest.FixtureRequest) -> None:
    """Every fabric test runs on both networks: the Python one and its C twin."""
    _NATIVE[0] = request.param == "c"


def fabric(spec: str = "leafspine:planes=2,spines=4,leaves=2,hosts=2") -> Fabric:
    sim = NativeSimulator(seed=7) if _NATIVE[0] else Simulator(seed=7)
    return Fabric(sim, parse_topology(spec))


def test_usid_frame_follows_its_spine_and_arrives_fully_shifted() -> None:
    fab = fabric()
    sink = Sink()
    fab.hosts[3].attach(sink)
    fab.hosts[0].attach(Blaster(fab, 0, 3, 5, plane=1, spines=(2,)))
    fab.sim.run()
    assert len(sink.frames) == 5
    for _, port, f in sink.frames:  # parse_frame verified checksum and ICRC
        assert port == 1
        assert f.outer.dst == usid_container(USID_BLOCK, [fab.hosts[3].usid])
        assert f.outer.hop_limit == 64 - 3  # leaf, spine, leaf
        assert f.eth.dst == fab.hosts[3].macs[1]
        assert f.inner is not None and f.inner.dst == fab.hosts[3].addresses[1]
    used = {p.name for p in fab.egress_ports() if p.counters.tx_frames}
    assert used == {"h0>L1.0", "L1.0>S1.2", "S1.2>L1.1", "L1.1>h3"}


def test_srh_mode_steps_segments_left_to_zero() -> None:
    fab = fabric("leafspine:planes=1,spines=2,leaves=2,hosts=1,srv6=srh")
    sink = Sink()
    fab.hosts[1].attach(sink)
    fab.hosts[0].attach(Blaster(fab, 0, 1, 3, spines=(1,)))
    fab.sim.run()
    assert len(sink.frames) == 3
    for _, _, f in sink.frames:
        assert f.srh is not None and f.srh.segments_left == 0
        assert f.outer.dst == f.srh.final_segment == usid_container(USID_BLOCK, [fab.hosts[1].usid])
    assert fab.links["L0.0-S0.1"].ab.counters.tx_frames == 3
    assert fab.links["L0.0-S0.0"].ab.counters.tx_frames == 0


def test_same_leaf_peers_hairpin_through_the_spine() -> None:
    fab = fabric()
    sink = Sink()
    fab.hosts[1].attach(sink)
    fab.hosts[0].attach(Blaster(fab, 0, 1, 2, spines=(3,)))
    fab.sim.run()
    assert len(sink.frames) == 2
    assert fab.links["L0.0-S0.3"].ba.counters.tx_frames == 2


def test_one_frame_latency_is_four_serialisations_plus_four_delays() -> None:
    fab = fabric("leafspine:planes=1,spines=2,leaves=2,hosts=1,rate=10gbit,delay=2us")
    sink = Sink()
    fab.hosts[1].attach(sink)
    blaster = Blaster(fab, 0, 1, 1, payload_len=4000)
    fab.hosts[0].attach(blaster)
    fab.sim.run()
    size = len(sink.raw[0])
    assert sink.frames[0][0] == pytest.approx(4 * (size * 8 / 10e9 + 2e-6), rel=1e-12)


def test_back_to_back_frames_pipeline_at_line_rate() -> None:
    fab = fabric("leafspine:planes=1,spines=2,leaves=2,hosts=1,rate=10gbit,delay=1us")
    sink = Sink()
    fab.hosts[1].attach(sink)
    fab.hosts[0].attach(Blaster(fab, 0, 1, 100, payload_len=8000))
    fab.sim.run()
    size = len(sink.raw[0])
    ser = size * 8 / 10e9
    times = [t for t, _, _ in sink.frames]
    assert times[0] == pytest.approx(4 * (ser + 1e-6))
    assert times[-1] == pytest.approx(times[0] + 99 * ser)
    # Store-and-forward of an uncongested pipeline never builds a real queue.
    assert all(p.counters.max_queue_bytes <= size for p in fab.egress_ports()
               if not p.name.startswith("h"))


def _incast(spec: str, senders: int = 3, count: int = 60) -> tuple[Fabric, Sink]:
    fab = fabric(spec)
    sink = Sink()
    dst = senders
    fab.hosts[dst].attach(sink)
    for s in range(senders):
        # Each sender on its own leaf and spine: only the last hop is shared.
        fab.hosts[s].attach(Blaster(fab, s, dst, count, payload_len=4000, spines=(s,)))
    fab.sim.run()
    return fab, sink


def test_incast_overflow_is_trimmed_not_dropped() -> None:
    fab, sink = _incast("leafspine:planes=1,spines=4,leaves=4,hosts=1,queue=20k,trim_size=200")
    last_hop = fab.links["h3-L0.3"].ba
    c = last_hop.counters
    assert c.trimmed > 0 and c.drop_queue == 0
    assert sink.full + sink.trimmed == 3 * 60
    assert sink.trimmed == c.trimmed
    assert c.max_queue_bytes <= 20 * 1024
    for raw, (_, _, f) in zip(sink.raw, sink.frames, strict=True):
        if f.trimmed:
            assert len(raw) == 200
            # trimmed at the leaf's port to the receiver: the last hop
            assert frame_dscp(raw) == DSCP_TRIMMED_LASTHOP and f.trim_lasthop
            assert f.reth is not None and f.reth.length == 4000  # headers intact


def test_drop_tail_when_trimming_is_off() -> None:
    fab, sink = _incast("leafspine:planes=1,spines=4,leaves=4,hosts=1,queue=20k,trim=off")
    c = fab.links["h3-L0.3"].ba.counters
    assert c.trimmed == 0 and sink.trimmed == 0
    assert c.drop_queue > 0
    assert sink.full + c.drop_queue == 3 * 60


class _Recorder:
    name = "rec"

    def __init__(self) -> None:
        self.got: list[bytes] = []

    def receive(self, frame: bytearray, port: int) -> None:
        self.got.append(bytes(frame))


def test_trimmed_header_jumps_the_data_queue() -> None:
    sim = Simulator()
    port = EgressPort(sim, "x", rate_bps=1e9, delay=0.0, queue_bytes=3000,
                      prio_queue_bytes=10_000, trim=True, trim_size=200, ecn_bytes=0,
                      mac_rewrite=None)
    rec = _Recorder()
    port.connect(rec, 0)
    fab = fabric("leafspine:planes=1,spines=1,leaves=2,hosts=1")
    route = fab.route(0, 1, 0, 0)
    frames = [data_frame(route, psn=i, payload_len=1200) for i in range(4)]
    for f in frames:  # first goes on the wire, next two queue (2 x 1334 <= 3000), last trims
        port.send(bytearray(f))
    sim.run()
    psns = [int.from_bytes(g[54 + 40 + 8 + 9 : 54 + 40 + 8 + 12], "big") for g in rec.got]
    assert psns == [0, 3, 1, 2]
    assert len(rec.got[1]) == 200 and frame_dscp(rec.got[1]) == DSCP_TRIMMED
    assert port.counters.trimmed == 1


def _ecn_run(spec: str, *, via_same_spine: bool, ecn: int = ECN.ECT0) -> tuple[Fabric, Sink]:
    fab = fabric(spec)
    sink = Sink()
    fab.hosts[2].attach(sink)
    for s in (0, 1):
        spine = 0 if via_same_spine else s
        fab.hosts[s].attach(Blaster(fab, s, 2, 40, payload_len=4000, spines=(spine,), ecn=ecn))
    fab.sim.run()
    return fab, sink


_ECN_SPEC = "leafspine:planes=1,spines=2,leaves=3,hosts=1,queue=1m,ecn=10k"


def test_ecn_marks_a_congested_spine_downlink() -> None:
    fab, sink = _ecn_run(_ECN_SPEC, via_same_spine=True)
    marked = fab.links["L0.2-S0.0"].ba.counters.ecn_marked
    assert marked > 0 and sink.ce == marked
    assert fab.links["h2-L0.2"].ba.counters.ecn_marked == 0
    assert all(frame_ecn(r) in (ECN.ECT0, ECN.CE) for r in sink.raw)


def test_ecn_is_off_on_the_last_hop_by_default() -> None:
    fab, sink = _ecn_run(_ECN_SPEC, via_same_spine=False)
    last = fab.links["h2-L0.2"].ba.counters
    assert last.max_queue_bytes > 10 * 1024  # the queue did pass the threshold
    assert last.ecn_marked == 0 and sink.ce == 0
    fab, sink = _ecn_run(_ECN_SPEC + ",ecn_last_hop=on", via_same_spine=False)
    assert fab.links["h2-L0.2"].ba.counters.ecn_marked == sink.ce > 0


def test_not_ect_frames_are_never_marked() -> None:
    fab, sink = _ecn_run(_ECN_SPEC, via_same_spine=True, ecn=ECN.NOT_ECT)
    assert sink.ce == 0 and fab.links["L0.2-S0.0"].ba.counters.ecn_marked == 0


def test_hop_limit_and_missing_route_are_counted_drops() -> None:
    fab = fabric("leafspine:planes=1,spines=2,leaves=2,hosts=1")
    sink = Sink()
    fab.hosts[1].attach(sink)
    good = fab.route(0, 1, 0, 0)
    short = Route(good.src_mac, good.dst_mac, good.src_ip, good.dst_ip, usid=good.usid,
                  hop_limit=2)
    nowhere = good.with_usid(usid_container(USID_BLOCK, [fab.leaves[0][0].usid, 0x10FF]))

    class Two(Blaster):
        def __post_init__(self) -> None:
            self._frames = [data_frame(short, psn=0, payload_len=10),
                            data_frame(nowhere, psn=1, payload_len=10)]

    fab.hosts[0].attach(Two(fab, 0, 1, 2))
    fab.sim.run()
    assert sink.frames == []
    assert fab.spines[0][0].counters.drop_hop_limit == 1
    assert fab.leaves[0][0].counters.drop_no_route == 1


def test_path_provider_gives_one_route_per_spine_per_plane() -> None:
    fab = fabric("leafspine:planes=2,spines=8,leaves=4,hosts=2")
    paths = fab.paths_for(0)
    assert list(paths.planes("h5")) == [0, 1]
    routes = paths.routes("h5", 1)
    assert len(routes) == 8
    assert len({r.usid for r in routes}) == 8
    assert routes == list(paths.routes(5, 1)) == list(paths.routes(fab.hosts[5].addresses[0], 1))
    assert all(r.src_ip == fab.hosts[0].addresses[1] for r in routes)


@pytest.mark.parametrize(("srv6", "size"), [("usid", 144), ("srh", 216)])
def test_smallest_trim_keeps_every_header_parseable(srv6: str, size: int) -> None:
    _, sink = _incast(f"leafspine:planes=1,spines=4,leaves=4,hosts=1,queue=20k,"
                      f"trim_size={size},srv6={srv6}")
    assert sink.trimmed > 0
    for raw, (_, _, f) in zip(sink.raw, sink.frames, strict=True):
        if f.trimmed:
            assert len(raw) == size and f.reth is not None and f.reth.length == 4000


def test_plain_ipv6_goes_through_spine_zero() -> None:
    fab = fabric()
    sink = Sink()
    fab.hosts[3].attach(sink)
    r = fab.route(0, 3, 1, 2)
    plain = Route(r.src_mac, r.dst_mac, r.src_ip, r.dst_ip, encap=False)

    class Plain(Blaster):
        def __post_init__(self) -> None:
            self._frames = [data_frame(plain, psn=i, payload_len=100) for i in range(3)]

    fab.hosts[0].attach(Plain(fab, 0, 3, 3, plane=1))
    fab.sim.run()
    assert len(sink.frames) == 3
    assert all(f.outer.dst == fab.hosts[3].addresses[1] for _, _, f in sink.frames)
    assert fab.links["L1.0-S1.0"].ab.counters.tx_frames == 3


@pytest.mark.parametrize("srv6", ["usid", "srh"])
def test_a_pairs_routes_are_the_ones_built_spine_by_spine(srv6: str) -> None:
    fab = fabric(f"leafspine:planes=2,spines=4,leaves=3,hosts=2,srv6={srv6}")
    for a in range(6):
        for b in range(6):
            for p in range(2):
                assert fab.routes(a, b, p) == [fab.route(a, b, p, s) for s in range(4)]
