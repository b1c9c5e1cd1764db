"""Kernel data path: shaping at the link rate, trimming and ECN marking in tc BPF."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from mrcnet.constants import DSCP_CONTROL, DSCP_DATA, DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP, ECN
from mrcnet.fabric import plan, probe
from mrcnet.fabric.bpfmap import F_ECN, F_TRIM
from mrcnet.fabric.fabric import Fabric

from .conftest import fabric_name

pytestmark = pytest.mark.root

TRIM_SPEC = "leafspine:planes=1,spines=1,leaves=2,hosts=1,rate=20mbit,mtu=1500"
FRAME = 1500


@pytest.fixture(scope="module")
def slow_fabric(fabric_state_dir: object) -> Iterator[Fabric]:
    from .conftest import _module_fabric

    yield from _module_fabric(TRIM_SPEC, fabric_state_dir)  # type: ignore[arg-type]


def _collect(fab: Fabric, dst: str, plane: int, send: Callable[[], None],
             quiet_s: float = 0.3) -> list[bytes]:
    """Frames (>= 100 bytes, IPv6) arriving at dst's port while ``send`` runs."""
    d = fab.description
    h = d.host(dst)
    frames: list[bytes] = []
    with probe.packet_socket(h.netns, h.port(plane).ifname) as rx:
        rx.settimeout(quiet_s)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        send()
        try:
            while True:
                data, addr = rx.recvfrom(65535)
                if addr[2] != socket.PACKET_OUTGOING and len(data) >= 100 and \
                        data[12:14] == b"\x86\xdd" and data[20] in (41, 43):
                    frames.append(data)
        except TimeoutError:
            pass
    return frames


@pytest.mark.parametrize("srv6", ["usid", "srh"])
def test_congested_port_trims(slow_fabric: Fabric, srv6: str) -> None:
    """Also SRH frames: a usid fabric's End next-csid does classic End when the SRH asks."""
    fab = slow_fabric
    time.sleep(0.2)  # let the previous test's queue drain
    d = fab.description
    src, dst = d.hosts[0].name, d.hosts[-1].name
    leaf = d.planes[0].leaves[d.hosts[0].leaf_index].name
    trim_size = int(d.options["trim_size"])
    n = 150
    frame = probe.build_frame(d, src, dst, 0, 0, size=FRAME, srv6=srv6)
    before = fab.counters()
    got = _collect(fab, dst, 0, lambda: probe.send_frames(d, src, 0, [frame] * n))
    after = fab.counters()
    trims = after[f"{leaf}->S0.0"]["trims"] - before[f"{leaf}->S0.0"]["trims"]
    drops = after[f"{leaf}->S0.0"]["drops"] - before[f"{leaf}->S0.0"]["drops"]
    trimmed = [f for f in got if len(f) == trim_size]
    full = [f for f in got if len(f) == FRAME]
    assert trims >= n // 2, (trims, drops)
    assert len(trimmed) == trims  # every trimmed header made it (high priority band)
    assert len(full) + len(trimmed) + drops == n
    assert len(full) >= 5  # the queue held a few full frames before trimming started
    assert all(probe.parse_tclass(f)[0] == DSCP_TRIMMED for f in trimmed)
    assert all(probe.parse_tclass(f)[0] == DSCP_DATA for f in full)
    st = fab.status()
    [ln] = [x for x in st["links"] if x["name"] == f"{leaf}-S0.0"]
    assert ln["directions"][f"{leaf}->S0.0"]["trims"] >= trims
    # Trimmed headers overtake queued full frames (strict priority under the shaper):
    # the last frame to arrive is a full one, though trimmed ones were sent after it.
    assert len(got[-1]) == FRAME


def test_no_trim_when_not_congested(slow_fabric: Fabric) -> None:
    fab = slow_fabric
    d = fab.description
    src, dst = d.hosts[0].name, d.hosts[-1].name
    frame = probe.build_frame(d, src, dst, 0, 0, size=FRAME)
    before = fab.counters()
    # 40 frames of 1500 B at 2 ms intervals = 6 Mbit/s on a 20 Mbit/s link.
    got = _collect(fab, dst, 0, lambda: probe.send_frames(d, src, 0, [frame] * 40, pace_s=0.002))
    after = fab.counters()
    assert sum(a["trims"] - before[k]["trims"] for k, a in after.items()) == 0
    assert sum(a["ce"] - before[k]["ce"] for k, a in after.items()) == 0
    assert len([f for f in got if len(f) == FRAME]) == 40


def test_ecn_marks_before_trimming(slow_fabric: Fabric) -> None:
    fab = slow_fabric
    d = fab.description
    src, dst = d.hosts[0].name, d.hosts[-1].name
    leaf = d.planes[0].leaves[d.hosts[0].leaf_index].name
    # ECN threshold 3 x MTU, trim threshold 8 x MTU: a burst of 7 frames gets CE on the
    # tail and no trims.
    frame = probe.build_frame(d, src, dst, 0, 0, size=FRAME, ecn=ECN.ECT0)
    before = fab.counters()
    got = _collect(fab, dst, 0, lambda: probe.send_frames(d, src, 0, [frame] * 7))
    after = fab.counters()
    ce = after[f"{leaf}->S0.0"]["ce"] - before[f"{leaf}->S0.0"]["ce"]
    marked = [f for f in got if probe.parse_tclass(f)[1] == ECN.CE]
    assert len(got) == 7
    assert ce >= 1 and len(marked) == ce
    assert after[f"{leaf}->S0.0"]["trims"] == before[f"{leaf}->S0.0"]["trims"]
    # ECN is off on the last hop (leaf -> host) by default, on elsewhere.
    dst_leaf = d.planes[0].leaves[d.hosts[-1].leaf_index].name
    assert not fab.maps(dst_leaf, dst).read_config().flags & F_ECN
    cfg = fab.maps(leaf, "s0").read_config()
    assert cfg.flags & F_ECN and cfg.flags & F_TRIM


@pytest.fixture
def rate_fabric(make_fabric: Callable[..., Fabric]) -> Fabric:
    # Trimming off so that the shaper alone decides what the link carries.
    return make_fabric(
        "leafspine:planes=1,spines=1,leaves=1,hosts=2,rate=50mbit,mtu=1500,trim=off,ecn=off,"
        "drop=off", name=fabric_name()
    )


def test_shaped_link_carries_its_rate(rate_fabric: Fabric) -> None:
    fab = rate_fabric
    d = fab.description
    rate = d.links[0].rate_bps
    frame = probe.build_frame(d, "h0", "h1", 0, 0, size=FRAME)
    stop = threading.Event()

    def blast() -> None:
        h = d.host("h0")
        with probe.packet_socket(h.netns, h.port(0).ifname) as s:
            while not stop.is_set():
                for _ in range(64):
                    try:
                        s.send(frame)
                    except OSError:
                        time.sleep(0.001)
                # Offer about 4x the link rate, not more: the box has 2 shared cores.
                time.sleep(64 * FRAME * 8 / (4 * rate))

    t = threading.Thread(target=blast)
    t.start()
    try:
        time.sleep(0.5)  # let the queue fill
        b0 = fab.counters()["S0.0->L0.0"]["bytes"]
        t0 = time.monotonic()
        time.sleep(1.5)
        b1 = fab.counters()["S0.0->L0.0"]["bytes"]
        t1 = time.monotonic()
    finally:
        stop.set()
        t.join()
    carried = (b1 - b0) * 8 / (t1 - t0)
    assert 0.6 * rate <= carried <= 1.2 * rate, f"carried {carried / 1e6:.1f} Mbit/s"


@pytest.mark.parametrize("ecn_last_hop", [False, True])
def test_last_hop_trims_and_ecn_option(
    make_fabric: Callable[..., Fabric], ecn_last_hop: bool
) -> None:
    """Incast at the receiver's port: trims on the leaf -> host link, marked
    TRIMMED_LASTHOP there (the switch knows its host-facing ports); CE only if enabled."""
    fab = make_fabric(
        "leafspine:planes=1,spines=1,leaves=1,hosts=2,rate=20mbit,mtu=1500,"
        f"ecn_last_hop={str(ecn_last_hop).lower()}"
    )
    d = fab.description
    # Same leaf, direct path [leaf, dst host]: the first congested port is the last hop.
    frame = probe.build_frame(d, "h0", "h1", 0, None, size=FRAME, ecn=ECN.ECT0)
    before = fab.counters()
    got = _collect(fab, "h1", 0, lambda: probe.send_frames(d, "h0", 0, [frame] * 60))
    after = fab.counters()
    last = after["L0.0->h1"]
    trims = last["trims"] - before["L0.0->h1"]["trims"]
    ce = last["ce"] - before["L0.0->h1"]["ce"]
    assert trims >= 20
    assert len([f for f in got if probe.parse_tclass(f)[0] == DSCP_TRIMMED_LASTHOP]) == trims
    if ecn_last_hop:
        assert ce >= 1
    else:
        assert ce == 0
        assert not any(probe.parse_tclass(f)[1] == ECN.CE for f in got)


def test_control_dscp_overtakes_queued_data(slow_fabric: Fabric) -> None:
    """SACK/NACK-like frames (DSCP_CONTROL) go in the strict-priority band, like trims."""
    fab = slow_fabric
    d = fab.description
    src, dst = d.hosts[0].name, d.hosts[-1].name
    time.sleep(0.2)
    data = probe.build_frame(d, src, dst, 0, 0, size=FRAME)
    ctl = probe.build_frame(d, src, dst, 0, 0, size=200, dscp=DSCP_CONTROL)
    got = _collect(fab, dst, 0, lambda: probe.send_frames(d, src, 0, [data] * 6 + [ctl]))
    sizes = [len(f) for f in got]
    assert sorted(sizes) == sorted([FRAME] * 6 + [200])
    # Sent last, it arrives before some of the data queued behind the shaper.
    assert sizes.index(200) < 6, sizes


def test_spec_options_for_the_real_queue() -> None:
    """vq_drain, txqueuelen and burst parse, default and validate (docs/FABRIC.md)."""
    from mrcnet.fabric.errors import SpecError
    from mrcnet.fabric.spec import DEFAULT_VQ_DRAIN, allocate, parse_spec

    base = "leafspine:planes=1,spines=1,leaves=2,hosts=1,rate=20mbit,mtu=1500"
    d = allocate(parse_spec(base), "hcx", 1)
    assert d.options["vq_drain"] == DEFAULT_VQ_DRAIN
    assert plan.txqueuelen(d) is None  # the kernel's (docs/FABRIC.md: why)
    t = parse_spec(base + ",vq_drain=85%,txqueuelen=24,burst=4pkt")
    assert (t.vq_drain, t.txqueuelen, t.burst) == (0.85, 24, 4 * 1500)
    assert parse_spec(base + ",vq_drain=1").vq_drain_frac == 1.0
    for bad in ("vq_drain=0", "vq_drain=120%", "txqueuelen=1", "burst=100"):
        with pytest.raises(SpecError):
            parse_spec(f"{base},{bad}")


def test_virtual_queue_drains_at_vq_drain(make_fabric: Callable[..., Fabric]) -> None:
    """The program drains its virtual queue at vq_drain x the link rate (docs/FABRIC.md,
    "Real and virtual queues"), on every switch port."""
    fab = make_fabric("leafspine:planes=1,spines=1,leaves=2,hosts=1,rate=20mbit,mtu=1500,"
                      "vq_drain=85%")
    d = fab.description
    leaf = d.planes[0].leaves[0]
    assert fab.maps(leaf.name, "s0").read_config().rate_Bps == int(20e6 * 0.85) // 8
    assert fab.maps(leaf.name, "h0").read_config().rate_Bps == int(20e6 * 0.85) // 8


def test_txqueuelen_bounds_the_real_queue(make_fabric: Callable[..., Fabric]) -> None:
    """With trimming and BPF drops off only the qdisc bounds the queue: a burst of 200
    frames into a shaped port leaves about txqueuelen of them queued, the rest dropped
    (with the kernel's 1000 it queued all 200). Set before pfifo_fast is made, which
    sizes its bands from it; host ports keep the kernel's."""
    fab = make_fabric("leafspine:planes=1,spines=1,leaves=1,hosts=2,rate=20mbit,mtu=1500,"
                      "trim=off,ecn=off,drop=off,txqueuelen=16", name=fabric_name())
    d = fab.description
    qlen = plan.txqueuelen(d)
    assert qlen == 16
    for ns, dev, want in ((d.planes[0].leaves[0].netns, "h1", qlen),
                          (d.hosts[0].netns, "p0", 1000)):  # hosts are not shaped
        out = subprocess.run(["ip", "-n", ns, "-j", "link", "show", "dev", dev],
                             capture_output=True, text=True, check=True).stdout
        assert json.loads(out)[0]["txqlen"] == want
    frame = probe.build_frame(d, "h0", "h1", 0, None, size=FRAME)
    got = _collect(fab, "h1", 0, lambda: probe.send_frames(d, "h0", 0, [frame] * 200),
                   quiet_s=0.5)
    full = len([f for f in got if len(f) == FRAME])
    # qlen queued, plus what the shaper sent while the burst was being written (the
    # sender is a Python loop: a few ms, ~2 frames per ms at 20 Mbit/s)
    assert qlen <= full <= qlen + 40, (full, qlen)


def test_shaper_charges_trimmed_frames_their_trimmed_length(slow_fabric: Fabric) -> None:
    """The root qdisc has a size table (stab), so it charges a frame the length it has
    after the egress program: without it the kernel's length of the untrimmed frame
    (taken before the tc egress hook) stays, and every trimmed header costs the shaper
    a full frame of link time (docs/FABRIC.md, "Real and virtual queues")."""
    fab = slow_fabric
    d = fab.description
    time.sleep(0.2)
    src, dst = d.hosts[0].name, d.hosts[-1].name
    leaf = d.planes[0].leaves[d.hosts[0].leaf_index]

    def tbf_bytes() -> int:
        out = subprocess.run(["tc", "-n", leaf.netns, "-s", "-j", "qdisc", "show", "dev", "s0"],
                             capture_output=True, text=True, check=True).stdout
        [root] = [q for q in json.loads(out) if q.get("root")]
        return int(root["bytes"])

    frame = probe.build_frame(d, src, dst, 0, 0, size=FRAME)
    b0, q0 = fab.counters()[f"{leaf.name}->S0.0"], tbf_bytes()
    _collect(fab, dst, 0, lambda: probe.send_frames(d, src, 0, [frame] * 100))
    b1, q1 = fab.counters()[f"{leaf.name}->S0.0"], tbf_bytes()
    assert b1["trims"] - b0["trims"] >= 50
    # what the program handed over (after trimming) is what the shaper charged
    assert q1 - q0 == b1["bytes"] - b0["bytes"], (q1 - q0, b1["bytes"] - b0["bytes"])
