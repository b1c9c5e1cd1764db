"""What lets the simulator reach thousands of hosts: frames that travel without their
all-zero payload (byte-exact at the receiver, timed and trimmed by their wire length),
and per-QP state sized to the flow; each gives the same results as before."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from simtraffic import Blaster, Sink, data_frame

from mrcnet.constants import NackReason, Opcode
from mrcnet.core import PathStateChanged, WriteCompleted
from mrcnet.core.ctrl import NackTemplate, SackTemplate
from mrcnet.native import HAVE_C
from mrcnet.sim.cli import main
from mrcnet.sim.engine import Simulator
from mrcnet.sim.errors import SpecError
from mrcnet.sim.failures import expand_failure, parse_failure
from mrcnet.sim.matrix import format_matrix, incast, permutation
from mrcnet.sim.net import EgressPort, ElidedFrame, elide_frame, restore_frame, wire_len
from mrcnet.sim.runner import GC_MIDDLE_THRESHOLD, GC_YOUNG_THRESHOLD, SimRun
from mrcnet.sim.topology import Fabric, parse_topology
from mrcnet.wire import parse_frame
from mrcnet.wire.template import DataTemplate, make_template


def _frame(payload_len: int = 4000) -> bytes:
    fab = Fabric(Simulator(), parse_topology("leafspine:planes=1,spines=1,leaves=2,hosts=1"))
    return data_frame(fab.route(0, 1, 0, 0), psn=3, payload_len=payload_len)


def test_an_elided_frame_keeps_its_headers_and_comes_back_byte_for_byte() -> None:
    whole = _frame()
    e = elide_frame(whole, 256)
    assert isinstance(e, ElidedFrame) and len(e) == 260
    assert wire_len(e) == len(whole)
    assert bytes(e[:256]) == whole[:256] and bytes(e[-4:]) == whole[-4:]
    assert bytes(restore_frame(e)) == whole
    small = _frame(100)  # nothing worth leaving out: a plain copy
    assert type(elide_frame(small, 256)) is bytearray


class _Rec:
    name = "rec"

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.got: list[tuple[float, bytes]] = []

    def receive(self, frame: bytearray, port: int) -> None:
        self.got.append((self.sim.now, bytes(restore_frame(frame))))


def test_a_port_times_and_trims_an_elided_frame_as_the_whole_one() -> None:
    arrivals = []
    for elide in (False, True):
        sim = Simulator()
        port = EgressPort(sim, "x", rate_bps=1e9, delay=1e-6, queue_bytes=9000,
                          prio_queue_bytes=100_000, trim=True, trim_size=200, ecn_bytes=0,
                          mac_rewrite=None)
        rec = _Rec(sim)
        port.connect(rec, 0)
        for _ in range(4):  # one on the wire, two queued (2 x 4.1k <= 9000), one trimmed
            port.send(elide_frame(_frame(), 256) if elide else bytearray(_frame()))
        sim.run()
        arrivals.append((rec.got, port.counters.as_dict()))
    assert arrivals[0] == arrivals[1]
    assert arrivals[0][1]["trimmed"] == 1


def test_elided_frames_cross_the_fabric_and_parse_strictly() -> None:
    fab = Fabric(Simulator(seed=3), parse_topology("leafspine:planes=2,spines=2,leaves=2,hosts=1"))
    fab.hosts[0].elide = 256
    sink = Sink()
    fab.hosts[1].attach(sink)
    fab.hosts[0].attach(Blaster(fab, 0, 1, 6, payload_len=4000))
    fab.sim.run()
    assert len(sink.frames) == 6  # parsed with UDP checksum and ICRC verified
    assert fab.links["h0-L0.0"].ab.counters.tx_bytes == 6 * len(_frame())


def _result(elide: bool) -> tuple[object, ...]:
    spec = parse_topology("leafspine:planes=2,spines=4,leaves=4,hosts=2,queue=4pkt")
    flows = [*permutation(8, 256 << 10, seed=5), *incast(range(1, 8), 0, 128 << 10)]
    run = SimRun(spec, [dataclasses.replace(f, id=i) for i, f in enumerate(flows)], seed=5)
    if not elide:
        for node in run.fabric.hosts:
            node.elide = 0
    res = run.run(until=0.05)
    return ([(r.flow.id, r.finish, r.error) for r in res.flows], res.ports, res.hosts,
            res.events)


def test_a_run_with_elided_frames_decides_exactly_what_one_with_whole_frames_does() -> None:
    elided, whole = _result(True), _result(False)
    assert all(f[1] is not None for f in elided[0])  # type: ignore[attr-defined]
    assert sum(p["trimmed"] for p in elided[1].values()) > 0  # type: ignore[attr-defined]
    assert elided == whole


def test_qp_tables_are_sized_to_the_flow() -> None:
    spec = parse_topology("leafspine:planes=2,spines=2,leaves=2,hosts=1")
    flows = permutation(2, 1 << 20, seed=1)
    run = SimRun(spec, flows)
    f = run.flows[0]
    sq, rq = run.qps[f.id]
    req, resp = run.hosts[f.src].qp(sq), run.hosts[f.dst].qp(rq)
    assert req.tx_window == 128  # 1 MiB = 128 packets of 8 KiB
    assert resp.tx_window == 128 and resp.rx_window == 4096  # its receive window as it was
    assert resp.rx.ooo_cap == 128  # grows on demand


def test_random_link_failures_draw_a_fraction_of_the_spine_links_from_the_seed() -> None:
    spec = parse_topology("leafspine:planes=2,spines=8,leaves=8,hosts=1")
    f = parse_failure("random:links=10%@20us..40us")
    fab = Fabric(Simulator(), spec)
    a = expand_failure(fab, f, seed=1)
    assert len(a) == round(0.1 * 2 * 8 * 8)  # of the 128 leaf-spine links
    assert a == expand_failure(Fabric(Simulator(), spec), f, seed=1)  # same seed, same picks
    assert {g.target for g in a} != {g.target for g in expand_failure(fab, f, seed=2)}
    assert all(g.kind == "link" and g.action == "down" and (g.start, g.end) == (f.start, f.end)
               for g in a)
    # scheduled by the run: down between 20 and 40 us, up again after
    run = SimRun(spec, permutation(8, 64 << 10, seed=1, start=1e-3), failures=[f], seed=1)
    assert [g.target for g in run.failures] == [g.target for g in a]
    links = [run.fabric.link(*g.target.split("-")) for g in a]
    run.sim.run(until=30e-6)
    assert not any(ln.ab.up or ln.ba.up for ln in links)
    run.sim.run(until=50e-6)
    assert all(ln.ab.up and ln.ba.up for ln in links)


def test_random_switch_failures_and_bad_random_specs() -> None:
    fab = Fabric(Simulator(), parse_topology("leafspine:planes=2,spines=4,leaves=4,hosts=1"))
    got = expand_failure(fab, parse_failure("random:spines=3:blackhole"), seed=4)
    assert len(got) == 3 and all(g.kind == "switch" and g.target.startswith("S") for g in got)
    assert all(g.action == "blackhole" for g in got)
    for bad in ("random:hosts=2", "random:links=0", "random:links=1%:flap", "random:links"):
        with pytest.raises(SpecError):
            parse_failure(bad)
    with pytest.raises(SpecError, match="fabric has 8"):
        expand_failure(fab, parse_failure("random:spines=9"), seed=1)


@pytest.mark.parametrize("srv6", ["usid", "srh"])
def test_sack_and_nack_templates_for_another_route_are_built_from_scratch_ones(
        srv6: str) -> None:
    fab = Fabric(Simulator(), parse_topology(
        f"leafspine:planes=2,spines=4,leaves=3,hosts=2,srv6={srv6}"))
    routes = [fab.route(s, d, p, sp) for s, d in ((0, 5), (3, 2), (1, 0))
              for p in range(2) for sp in range(4)]
    first = SackTemplate(routes[0], dest_qp=0x12345, src_qp=0x789, mpr=32)
    assert first.matches(0x12345, 0x789, 32) and not first.matches(0x12345, 0x789, 1)
    for r in routes[1:]:
        derived = first.for_route(r)
        fresh = SackTemplate(r, dest_qp=0x12345, src_qp=0x789, mpr=32)
        assert derived.layout() == fresh.layout()
        args = (77, 5, 1000, 1003, 1001, True, -1, 0b1011, 0x1234, 3, 9, 123456)
        assert derived.build_fields(*args) == fresh.build_fields(*args)
        parse_frame(derived.build_fields(*args))  # checksum and ICRC verified
    nfirst = NackTemplate(routes[0], dest_qp=0x12345, src_qp=0x789)
    for r in routes[1:]:
        nargs = (0x80012345, 1000, NackReason.TRIMMED, 0x80054321, 1000, 0x1234)
        assert nfirst.for_route(r).build(*nargs) == NackTemplate(
            r, dest_qp=0x12345, src_qp=0x789).build(*nargs)
        parse_frame(nfirst.for_route(r).build(*nargs))


@pytest.mark.parametrize("srv6", ["usid", "srh"])
def test_a_data_template_along_another_route_makes_the_fresh_ones_frames(srv6: str) -> None:
    """A QP's data template for another plane (or spine) is its first one's headers
    patched (DataTemplate.along): every frame it makes is the one a template built from
    scratch for that route makes, in C and in Python; SRH routes are built."""
    fab = Fabric(Simulator(), parse_topology(
        f"leafspine:planes=2,spines=4,leaves=3,hosts=2,srv6={srv6}"))
    routes = [fab.route(s, d, p, sp) for s, d in ((0, 5), (3, 2), (1, 0))
              for p in range(2) for sp in range(4)]
    first = DataTemplate.for_route(routes[0], dest_qp=0x12345, rkey=0x777)
    payload = bytes(range(256)) * 3
    for r in routes[1:]:
        derived = first.along(r)
        fresh = DataTemplate.for_route(r, dest_qp=0x12345, rkey=0x777)
        if srv6 == "srh":
            assert derived is None
            continue
        assert derived is not None
        u = fresh.off_udp + 6  # (the UDP checksum: the headers' own is never sent)
        assert derived.hdr[:u] + derived.hdr[u + 2:] == fresh.hdr[:u] + fresh.hdr[u + 2:]
        assert {k: v for k, v in vars(derived).items() if k != "hdr"} == {
            k: v for k, v in vars(fresh).items() if k != "hdr"}
        path = fresh.path(usid=r.usid)
        for t_d, t_f in ((derived, fresh), (make_template(derived), make_template(fresh))):
            for args in ((Opcode.WRITE_FIRST, 5, 0x80012345, 0x1000, payload, path, 7, None,
                          0x1234, False, True),
                         (Opcode.WRITE_ONLY_IMM, 9, 0x80054321, 0x2000, payload[:100], None,
                          8, 0xABCD, None, True, False)):
                got = t_d.frame(*args)
                assert got == t_f.frame(*args)
                parse_frame(got)  # checksum and ICRC verified


def test_progress_lines_give_time_speed_flows_and_an_eta(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    m = tmp_path / "p.cm"
    m.write_text(format_matrix(permutation(16, 12 << 20, seed=2)))
    assert main(["run", "-t", "leafspine:planes=2,spines=4,leaves=4,hosts=4", "-m", str(m),
                 "--progress", "--json"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 2
    last = lines[-1]
    assert "flows done=16/16" in last and "data 100.0%" in last and "/CPU-s" in last
    assert all("ETA" in ln and "t=" in ln for ln in lines)


def test_the_c_fast_paths_and_pure_python_decide_the_same_run(tmp_path: Path) -> None:
    if not HAVE_C:
        pytest.skip("the C module is not built: nothing to compare pure Python with")
    m = tmp_path / "m.cm"
    flows = [*permutation(16, 512 << 10, seed=3), *incast(range(1, 6), 0, 256 << 10)]
    m.write_text(format_matrix([dataclasses.replace(f, id=i) for i, f in enumerate(flows)]))
    out = []
    for no_c in (False, True):
        env = {k: v for k, v in os.environ.items() if k != "MRCNET_NO_FASTPATH"}
        if no_c:
            env["MRCNET_NO_FASTPATH"] = "1"
        r = subprocess.run(
            [sys.executable, "-m", "mrcnet.sim.cli", "run", "-t",
             "leafspine:planes=2,spines=4,leaves=4,hosts=4,queue=4pkt", "-m", str(m),
             "--fail", "random:links=5%@10us", "--seed", "3", "--json"],
            capture_output=True, text=True, env=env, check=False)
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        out.append((d["flows"], d["ports"], d["hosts"], d["summary"]["events"]))
    assert sum(p["trimmed"] for p in out[0][1].values()) > 0
    assert out[0] == out[1]


def test_set_up_and_run_collect_young_objects_less_often_and_restore_the_thresholds(
        ) -> None:
    """The collector's thresholds while a SimRun builds and runs (seen from inside: the
    progress callback) and after: the young one raised to GC_YOUNG_THRESHOLD, the middle
    one to GC_MIDDLE_THRESHOLD, the oldest generation left alone, all given back; a
    collector switched off stays off."""
    spec = parse_topology("leafspine:planes=2,spines=2,leaves=2,hosts=2")
    flows = permutation(4, 64 << 10, seed=1)
    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []
    try:
        gc.set_threshold(700, 10, 10)
        run = SimRun(spec, flows, seed=1)
        assert gc.get_threshold() == (700, 10, 10)
        res = run.run(progress=lambda _: seen.append(gc.get_threshold()))
        assert res.summary()["completed"] == 4
        assert seen and all(t == (GC_YOUNG_THRESHOLD, GC_MIDDLE_THRESHOLD, 1 << 30)
                            for t in seen)
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(0, 10, 10)  # (switched off)
        seen.clear()
        SimRun(spec, flows, seed=1).run(progress=lambda _: seen.append(gc.get_threshold()))
        assert seen and all(t[0] == 0 for t in seen)
        assert gc.get_threshold() == (0, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_path_events_recorded_as_take_events_gives_them(monkeypatch: Any) -> None:
    """The runner records a host's path events alone (an ECN echo's or a trim's skip,
    most of its drains) without ``take_events``: the same list, times and order as
    draining every event through ``take_events``, through trims, ECN and a failure."""
    def once(reference: bool) -> list[Any]:
        spec = parse_topology("leafspine:planes=2,spines=4,leaves=2,hosts=4")
        flows = incast(range(1, 8), 0, 1 << 20)
        run = SimRun(spec, flows, seed=3, failures=[parse_failure("link:L0.1-S0.2@40us:down")])
        if reference:
            def drain(node: Any) -> None:
                host = run.hosts[node.index]
                for ev in host.take_events():
                    if isinstance(ev, PathStateChanged):
                        run.path_events.append((run.sim.now, host.name, ev))
                    elif isinstance(ev, WriteCompleted):
                        fid = run._by_qp.get((node.index, ev.qpn))
                        if fid is not None and run.results[fid].finish is None:
                            run.results[fid].finish = run.sim.now
                            run._pending -= 1
                if run._pending <= 0:
                    run.sim.stop()
            monkeypatch.setattr(run, "_drain_events", drain)
            for n in run.fabric.hosts:
                n.on_activity = drain
        run.run()
        assert all(r.finish is not None for r in run.results.values())
        return run.path_events

    got, want = once(False), once(True)
    assert len(want) > 50 and {e.cause for _, _, e in want} >= {"trim", "ecn"}
    assert got == want


@pytest.mark.skipif(not HAVE_C, reason="the C network needs the C module")
def test_an_elided_frame_after_a_whole_one_comes_back_byte_for_byte() -> None:
    """The C network keeps its host frame buffer zero but for the last frame's bytes (an
    elided frame's zeros are not written again): a whole frame with a payload that is
    not zero, longer than the elided frames' headers, does not show through them; the
    host gets what it gets on the Python network."""
    from mrcnet.sim.simnet import NativeSimulator
    from mrcnet.wire.frame import build_data

    class Once(Sink):
        def frames_to_send(self, now: float) -> list[tuple[int, bytes]]:
            out, self.raw = [(0, b) for b in self.raw], []
            return out

    def got(sim: Simulator) -> list[bytes]:
        fab = Fabric(sim, parse_topology("leafspine:planes=1,spines=1,leaves=2,hosts=2"))
        whole = build_data(fab.route(0, 3, 0, 0), ev=1, opcode=Opcode.WRITE_ONLY,
                           dest_qp=7, psn=1, va=0x1000, rkey=0x55, payload=b"\xab" * 6000)
        fab.hosts[0].elide = 0
        fab.hosts[1].elide = 256
        sink = Sink()
        fab.hosts[3].attach(sink)
        fab.hosts[0].attach(Once(raw=[whole]))
        fab.hosts[1].attach(Blaster(fab, 1, 3, 3, payload_len=4000, start=50e-6))
        fab.sim.run()
        return sink.raw

    c = got(NativeSimulator(seed=3))
    assert len(c) == 4 and b"\xab" * 6000 in c[0] and b"\xab" not in b"".join(c[1:])
    assert c == got(Simulator(seed=3))
