"""Failure injection on the bare network: what each failure does to frames, and when."""

from __future__ import annotations

import pytest
from simtraffic import Blaster, Sink

from mrcnet.sim.engine import Simulator
from mrcnet.sim.errors import SpecError
from mrcnet.sim.failures import parse_failure, schedule_failure
from mrcnet.sim.topology import Fabric, parse_topology

SPEC = "leafspine:planes=1,spines=4,leaves=2,hosts=1,rate=10gbit,delay=1us"
GAP = 10e-6  # one frame every 10 us: far below line rate, no queueing


def _run(fails: list[str], *, count: int = 100, spines: tuple[int, ...] = (1,),
         reverse: bool = False, seed: int = 3) -> tuple[Fabric, Sink]:
    fab = Fabric(Simulator(seed=seed), parse_topology(SPEC))
    for f in fails:
        schedule_failure(fab, parse_failure(f))
    src, dst = (1, 0) if reverse else (0, 1)
    sink = Sink()
    fab.hosts[dst].attach(sink)
    fab.hosts[src].attach(Blaster(fab, src, dst, count, spines=spines, gap=GAP))
    fab.sim.run()
    return fab, sink


def _sent_at(sink: Sink) -> list[float]:
    """Send times of what arrived (PSN i was sent at i x GAP; one spine -> PSN 0 each)."""
    return [t for t, _, _ in sink.frames]


def test_link_down_for_a_while_loses_exactly_that_window() -> None:
    fab, sink = _run(["link:L0.0-S0.1@200us..400us:down"])
    arrivals = _sent_at(sink)
    # Frames arrive ~4.4 us after they are sent; those crossing the link while it is down
    # (sent from ~199 us to ~398 us) are lost, everything else arrives.
    assert not any(0.2e-3 < t < 0.4e-3 for t in arrivals)
    assert len(arrivals) == 100 - 20
    c = fab.links["L0.0-S0.1"].ab.counters
    assert c.drop_down == 20


def test_link_down_then_up_spec() -> None:
    _, sink = _run(["link:L0.0-S0.1@200us:down", "link:L0.0-S0.1@400us:up"])
    assert len(sink.frames) == 80


def test_other_spines_are_unaffected() -> None:
    _, sink = _run(["link:L0.0-S0.1@0:down"], spines=(0, 2, 3), count=30)
    assert len(sink.frames) == 30


def test_one_way_blackhole_keeps_the_other_direction() -> None:
    fab, sink = _run(["link:L0.0>S0.1@0:blackhole"], count=10)
    assert sink.frames == [] and fab.links["L0.0-S0.1"].ab.counters.drop_blackhole == 10
    # L0.0>S0.1 carries h0 -> h1; h1 -> h0 leaves L0.1 and comes down S0.1>L0.0.
    _, back = _run(["link:L0.0>S0.1@0:blackhole"], count=10, reverse=True)
    assert len(back.frames) == 10


def test_switch_blackhole_keeps_links_up_and_forwards_nothing() -> None:
    fab, sink = _run(["switch:S0.1@300us..600us:blackhole"])
    assert len(sink.frames) == 70
    assert fab.spines[0][1].counters.drop_blackhole == 30
    assert all(ln.ab.up and ln.ba.up for ln in fab.links.values())


def test_switch_down_takes_every_link_of_it_down() -> None:
    fab, sink = _run(["switch:S0.1@0:down"], count=5)
    assert sink.frames == []
    assert all(not ln.ab.up for name, ln in fab.links.items() if name.endswith("S0.1"))
    assert all(ln.ab.up for name, ln in fab.links.items() if not name.endswith("S0.1"))


def test_random_loss_rate_matches_the_spec() -> None:
    n = 4000
    fab, sink = _run(["loss:L0.0-S0.1=5%"], count=n)
    lost = fab.links["L0.0-S0.1"].ab.counters.drop_loss
    assert lost + len(sink.frames) == n
    sigma = (n * 0.05 * 0.95) ** 0.5
    assert abs(lost - n * 0.05) < 5 * sigma


def test_loss_star_hits_every_fabric_link_but_not_host_links() -> None:
    fab, _ = _run(["loss:*=100%"], count=3)
    assert fab.links["h0-L0.0"].ab.counters.drop_loss == 0
    assert fab.links["L0.0-S0.1"].ab.counters.drop_loss == 3
    assert fab.links["L0.0-S0.2"].ab.loss == 1.0


def test_flap_alternates_down_and_up_until_the_end() -> None:
    # 50 us down, 50 us up from 100 us to 500 us: four down windows of 5 frames each.
    fab, sink = _run(["link:L0.0-S0.1@100us..500us:flap=50us/50us"])
    assert len(sink.frames) == 100 - 20
    assert fab.links["L0.0-S0.1"].ab.up  # healed at the end


def test_loss_is_reproducible_with_the_seed() -> None:
    a = _run(["loss:L0.0-S0.1=20%"], count=200, seed=9)[1]
    b = _run(["loss:L0.0-S0.1=20%"], count=200, seed=9)[1]
    assert [t for t, _, _ in a.frames] == [t for t, _, _ in b.frames]


@pytest.mark.parametrize("bad", [
    "lnk:L0.0-S0.1@1ms:down",
    "link:L0.0-S0.1@1ms:explode",
    "link:L0.0>S0.1@1ms:down",
    "link:L0.0-S0.1@2ms..1ms:down",
    "link:L0.0-S0.1@1ms:flap=10us",
    "loss:L0.0-S0.1=150%",
    "loss:L0.0-S0.1",
    "link:L0.0@1ms:down",
    "switch:S0.1@1ms:flap=1us/1us",
    "link:L0.0-S0.1@soon:down",
])
def test_bad_failure_specs_say_what_is_wrong(bad: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_failure(bad)
    assert bad in str(e.value) or "time" in str(e.value) or "probability" in str(e.value)


@pytest.mark.parametrize("unknown", ["link:L0.0-S0.9@0:down", "switch:S7.0@0:blackhole",
                                     "link:h0-S0.1@0:down"])
def test_unknown_nodes_are_rejected_when_scheduled(unknown: str) -> None:
    fab = Fabric(Simulator(), parse_topology(SPEC))
    with pytest.raises(SpecError, match=r"no (link|switch)"):
        schedule_failure(fab, parse_failure(unknown))


def test_a_flap_shorter_than_the_wire_still_loses_the_frame_on_it() -> None:
    # 1 us of delay; the link drops for 100 ns while the first frame is on the wire.
    fab, sink = _run(["link:L0.0-S0.1@2.5us..2.6us:down"], count=2)
    assert len(sink.frames) == 1
    assert fab.links["L0.0-S0.1"].ab.counters.drop_down == 1


def test_carrier_changes_are_reported_once_each() -> None:
    fab = Fabric(Simulator(), parse_topology(SPEC))
    heard: list[tuple[float, bool]] = []
    fab.links["h0-L0.0"].on_carrier.append(lambda up: heard.append((fab.sim.now, up)))
    for f in ("link:h0-L0.0@1us..2us:down", "link:h0-L0.0@1.5us:down",
              "link:h0-L0.0@3us..4us:flap=0.25us/0.25us"):
        schedule_failure(fab, parse_failure(f))
    fab.sim.run()
    assert [up for _, up in heard] == [False, True, False, True, False, True]
    assert [t for t, _ in heard] == pytest.approx([1e-6, 2e-6, 3e-6, 3.25e-6, 3.5e-6, 3.75e-6])
