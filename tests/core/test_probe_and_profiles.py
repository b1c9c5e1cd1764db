"""Host-level operator tools on the virtual clock: standalone EV probes down every path to
a peer (no QP), and switching a live QP's CC / EV profile mid-transfer."""

from __future__ import annotations

import pytest

from mrcnet.constants import EndpointOp
from mrcnet.core import InvalidAttribute, InvalidRequest, QPState, ev_path
from mrcnet.core.cc import NSCC, FixedWindow
from mrcnet.core.host import PathProbe
from mrcnet.wire import build_endpoint
from mrcnet.wire.eeth import EETH

from .harness import Impairments, Net, connect

DELAY = 5e-6  # the harness pipe's one-way delay


def _wait(net: Net, probes: list[PathProbe], limit: float = 0.01) -> None:
    net.run(until=lambda: all(p.rtt is not None for p in probes), max_time=net.now + limit)


def test_probe_every_path_without_a_qp() -> None:
    net = Net(planes=2, spines=4)
    h0, h1 = net.h(0), net.h(1)
    # h1 has never heard of h0: it cannot route an answer, so it counts and drops.
    probes = h0.probe_paths("h1", net.now)
    assert len(probes) == 8
    assert {(p.plane, p.path) for p in probes} == {(pl, s) for pl in (0, 1) for s in range(4)}
    assert all(ev_path(p.ev)[:2] == (p.plane, p.path) for p in probes)
    _wait(net, probes)
    assert all(p.rtt is None for p in probes)
    assert h1.counters()["rx_endpoint_unknown_peer"] == 8
    h0.forget_probes(probes)

    assert h1.learn_peer("h0")
    probes = h0.probe_paths("h1", net.now)
    _wait(net, probes)
    for p in probes:
        assert p.rtt == pytest.approx(2 * DELAY), p
    c0 = h0.counters()
    assert c0["tx_path_probe"] == 16 and c0["rx_path_probe_answer"] == 8
    assert h1.counters()["tx_probe_response"] == 8
    assert h0._path_probes == {}  # answered probes are not kept
    assert net.internal_errors() == 0


def test_a_dead_path_goes_unanswered_and_a_late_answer_is_stale() -> None:
    net = Net(planes=2, spines=4, imp=Impairments(dead_paths={(0, 2)}))
    h0 = net.h(0)
    net.h(1).learn_peer("h0")
    probes = h0.probe_paths("h1", net.now)
    _wait(net, probes)
    dead = [p for p in probes if p.rtt is None]
    assert [(p.plane, p.path) for p in dead] == [(0, 2)]
    h0.forget_probes(probes)

    # The path heals; an answer to a probe already given up on is only counted.
    net.imp.dead_paths.clear()
    only_1 = h0.probe_paths("h1", net.now, planes=[1])
    assert {p.plane for p in only_1} == {1} and len(only_1) == 4
    h0.forget_probes(only_1)
    net.run(max_time=net.now + 0.01)
    assert all(p.rtt is None for p in only_1)
    assert h0.counters()["rx_probe_stale"] == 4


def test_an_answer_from_another_host_does_not_count() -> None:
    net = Net(n_hosts=3, planes=1, spines=2)
    h0, h2 = net.h(0), net.h(2)
    h0.learn_peer("h2")
    (probe, _) = h0.probe_paths("h1", net.now)  # h1 does not know h0: it never answers
    # h2 answers in h1's place, with the right request id and EV.
    route = h2.paths.routes("h0", 0)[probe.path]
    forged = build_endpoint(route, ev=probe.ev, request_id=probe.request_id,
                            eeth=EETH(EndpointOp.EV_PROBE))
    h0.receive(forged, 0, net.now)
    assert probe.rtt is None
    assert h0.counters()["rx_path_probe_mismatch"] == 1
    assert probe.request_id in h0._path_probes  # still waiting for the real answer


def _transfer(net: Net, qa: int, size: int) -> tuple[bytearray, bytearray]:
    ha, hb = net.h(0), net.h(1)
    src = bytearray(bytes(range(256)) * (size // 256))
    dst = bytearray(size)
    ms, md = ha.register_mr(src), hb.register_mr(dst)
    ha.post_write(qa, 1, ms, 0, size, md.addr, md.rkey)
    return src, dst


def test_switch_cc_and_ev_profile_mid_transfer() -> None:
    net = Net(planes=2, spines=4)
    ha = net.h(0)
    qa, _ = connect(net, 0, 1)
    qp = ha.qp(qa)
    assert isinstance(qp.cc, NSCC) and len(qp.evm.evs) == 128  # type: ignore[union-attr]
    src, dst = _transfer(net, qa, 4 << 20)
    net.run(until=lambda: qp.tx_packets > 100, max_time=1.0)
    assert qp.inflight  # mid-transfer

    ha.set_qp_profiles(qa, cc_profile="fixed", now=net.now)
    assert isinstance(qp.cc, FixedWindow) and qp.attrs.cc_profile == "fixed"
    sent_before = qp.tx_packets
    net.run(until=lambda: qp.tx_packets > sent_before + 100, max_time=net.now + 1.0)

    ha.set_qp_profiles(qa, ev_profile="ecmp", now=net.now)
    evm = qp.evm
    assert evm is not None and evm.ecmp and len(evm.evs) == 1
    (only,) = evm.evs
    net.run(until=lambda: len(qp.cq) > 0, max_time=net.now + 5.0)
    (wc,) = qp.cq.poll(1)
    assert wc.status.value == "SUCCESS"
    assert dst == src
    # After the switch new packets went on the single ECMP EV.
    assert evm.evs[only].sent > 0
    assert net.internal_errors() == 0


def test_profile_changes_are_checked() -> None:
    net = Net(planes=1, spines=2)
    ha = net.h(0)
    qa, _ = connect(net, 0, 1)
    with pytest.raises(InvalidAttribute, match="CC profile 'bogus' unknown"):
        ha.set_qp_profiles(qa, cc_profile="bogus")
    with pytest.raises(InvalidAttribute, match="EV profile 'bogus' unknown"):
        ha.set_qp_profiles(qa, ev_profile="bogus")
    with pytest.raises(InvalidRequest):
        ha.set_qp_profiles(999, cc_profile="fixed")
    assert ha.qp(qa).attrs.cc_profile is None  # nothing changed by a refused request

    # Before connect the profile is only recorded, and the QP is built with it at RTR.
    q = ha.create_qp(ha.create_cq())
    ha.modify_qp(q, QPState.INIT)
    ha.set_qp_profiles(q, cc_profile="fixed", ev_profile="ecmp")
    assert ha.qp(q).cc is None
    ha.modify_qp(q, QPState.RTR, peer="h1", dest_qp_num=1, rq_psn=0)
    assert isinstance(ha.qp(q).cc, FixedWindow) and ha.qp(q).evm.ecmp  # type: ignore[union-attr]

    ha.modify_qp(q, QPState.ERROR)
    with pytest.raises(InvalidRequest, match="ERROR"):
        ha.set_qp_profiles(q, cc_profile="nscc")
