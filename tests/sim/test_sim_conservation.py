"""Property: the network never creates or loses a frame silently.

Every frame a host hands to its NIC is either delivered (whole or trimmed) or counted
in exactly one drop counter, whatever the topology, load and failures.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from simtraffic import Blaster, Sink

from mrcnet.sim.engine import Simulator
from mrcnet.sim.failures import parse_failure, schedule_failure
from mrcnet.sim.topology import Fabric, parse_topology

_PORT_DROPS = ("drop_queue", "drop_down", "drop_blackhole", "drop_loss")
_SWITCH_DROPS = ("drop_no_route", "drop_hop_limit", "drop_bad_sid", "drop_blackhole")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[str, list[str], list[tuple[int, int, int, int]], int]:
    planes = draw(st.integers(1, 2))
    spines = draw(st.integers(1, 3))
    leaves = draw(st.integers(2, 3))
    hosts = draw(st.integers(1, 2))
    trim = draw(st.booleans())
    srv6 = draw(st.sampled_from(["usid", "srh"]))
    spec = (f"leafspine:planes={planes},spines={spines},leaves={leaves},hosts={hosts},"
            f"rate=10gbit,queue={draw(st.integers(2, 6))}pkt,mtu=4500,"
            f"trim={'on' if trim else 'off'},srv6={srv6}")
    n = leaves * hosts
    flows = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1),
                                    st.integers(0, spines - 1), st.integers(1, 40)),
                          min_size=1, max_size=5))
    flows = [f for f in flows if f[0] != f[1]] or [(0, n - 1, 0, 10)]
    links = [f"L{p}.{i}-S{p}.{s}" for p in range(planes) for i in range(leaves)
             for s in range(spines)]
    fails = []
    for _ in range(draw(st.integers(0, 3))):
        link = draw(st.sampled_from(links))
        a, b = link.split("-")
        t0 = draw(st.integers(0, 40))
        kind = draw(st.sampled_from(["down", "blackhole", "oneway", "loss", "flap", "switch"]))
        when = f"@{t0}us..{t0 + draw(st.integers(1, 40))}us"
        fails.append({
            "down": f"link:{link}{when}:down",
            "blackhole": f"link:{link}{when}:blackhole",
            "oneway": f"link:{a}>{b}{when}:blackhole",
            "loss": f"loss:{link}{when}=30%",
            "flap": f"link:{link}{when}:flap=3us/2us",
            "switch": f"switch:{b}{when}:blackhole",
        }[kind])
    return spec, fails, flows, draw(st.integers(0, 2**16))


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_every_frame_is_delivered_or_counted(
        sc: tuple[str, list[str], list[tuple[int, int, int, int]], int]) -> None:
    spec, fails, flows, seed = sc
    fab = Fabric(Simulator(seed=seed), parse_topology(spec))
    for f in fails:
        schedule_failure(fab, parse_failure(f))
    sinks = [Sink() for _ in fab.hosts]
    senders: dict[int, list[Blaster]] = {}
    for src, dst, spine, count in flows:
        senders.setdefault(src, []).append(Blaster(fab, src, dst, count, payload_len=2000,
                                                   spines=(spine,), gap=1e-6))

    class Multi:
        """A host that sends several blasts and sinks whatever arrives."""

        def __init__(self, host: int) -> None:
            self.blasts = senders.get(host, [])
            self.sink = sinks[host]

        def receive(self, frame: bytearray, port: int, now: float) -> None:
            self.sink.receive(frame, port, now)

        def frames_to_send(self, now: float) -> list[tuple[int, bytes]]:
            return [x for b in self.blasts for x in b.frames_to_send(now)]

        def next_timer(self) -> float | None:
            ts = [t for b in self.blasts if (t := b.next_timer()) is not None]
            return min(ts) if ts else None

        def handle_timer(self, now: float) -> None:
            """Sending happens in frames_to_send."""

    for h in range(len(fab.hosts)):
        fab.hosts[h].attach(Multi(h))
    fab.sim.run()
    sent = sum(count for _, _, _, count in flows)
    delivered = sum(len(s.frames) for s in sinks)
    dropped = sum(getattr(p.counters, k) for p in fab.egress_ports() for k in _PORT_DROPS)
    dropped += sum(getattr(sw.counters, k) for sw in fab.switches() for k in _SWITCH_DROPS)
    assert sent == delivered + dropped
    # Nothing is left anywhere: every queue drained.
    assert all(p.queued_bytes == 0 for p in fab.egress_ports())
