"""Smaller promises: frame byte identity, receives not posted (RNR), ACK coalescing, incast trims,
receiver window penalty, counters."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mrcnet.constants import NackReason, SackMode
from mrcnet.core import HostConfig, WCOpcode, WCStatus
from mrcnet.core.ctrl import NackTemplate, SackTemplate
from mrcnet.wire import CCState, Route, build_nack, build_sack, parse_frame, usid_container
from mrcnet.wire.neth import NETH
from mrcnet.wire.seth import SETH
from mrcnet.wire.template import FrameFinisher

from .harness import Impairments, Net, connect


def _write(net: Net, qa: int, size: int, wr_id: int = 1, imm: int | None = None
           ) -> tuple[bytearray, bytearray]:
    ha, hb = net.h(0), net.h(1)
    src = bytearray(random.Random(size).randbytes(size))
    dst = bytearray(size)
    ms, md = ha.register_mr(src), hb.register_mr(dst)
    ha.post_write(qa, wr_id, ms, 0, size, md.addr, md.rkey, imm=imm)
    return src, dst


def _tx(use_templates: bool) -> list[bytes]:
    net = Net(config=HostConfig(use_templates=use_templates), imp=Impairments(loss=0.05),
              seed=4)
    net.log_tx = True
    qa, _ = connect(net, 0, 1, recvs=1)
    _write(net, qa, 300_000, imm=5)
    net.run(until=lambda: len(net.h(0).qp(qa).cq) > 0, max_time=1.0)
    return [f for _, name, _, f in net.tx_log if name == "h0"]


def test_template_frames_are_byte_identical_to_the_reference_builder() -> None:
    a, b = _tx(True), _tx(False)
    assert len(a) == len(b) > 70
    assert a == b


def _route(mode: str, encap: bool) -> Route:
    """A route in SRv6 form ``mode`` (usid, srh or plain), with or without inner IPv6."""
    kw: dict[str, Any] = {}
    if mode == "usid":
        kw["usid"] = usid_container(b"\xfc\0\0\0", [1, 2, 3])
    elif mode == "srh":
        kw["segments"] = (bytes(15) + b"\x07", bytes(15) + b"\x01")
    return Route(b"\x02" * 6, b"\x04" * 6, bytes(15) + b"\x09", bytes(15) + b"\x01",
                 encap=encap, **kw)


@pytest.mark.parametrize("mode", ["usid", "srh", "plain"])
@pytest.mark.parametrize("encap", [True, False])
def test_sack_template_matches_build_sack(mode: str, encap: bool) -> None:
    r = _route(mode, encap)
    t = SackTemplate(r, dest_qp=7)
    py = SackTemplate(r, dest_qp=7)
    py._fin = FrameFinisher(*_finisher_args(py, r), use_c=False)  # the pure-Python finisher
    for i in range(5):
        ev = 0x80012345 + i * 0x10001
        rcv, ack_seq, base = 100 + i, 97 + i, 101 + i
        probe = 7 if i == 3 else -1
        s = SETH(entropy=i, cack_psn=99 + i, ack_psn_offset=7 if probe >= 0 else -2,
                 sack_offset=2, sack_bitmap=0xF0F0 << i,
                 m=SackMode.SKIP_ONCE if i & 1 else SackMode.NONE, pr=probe >= 0, dpdcid=7)
        c = CCState(5, 2, False, i, 99999 >> 8)
        ref = build_sack(r, ev=ev, dest_qp=7, seth=s, cc=c)
        assert t.build(ev, s, c) == ref
        assert py.build(ev, s, c) == ref
        for tm in (t, py):
            assert tm.build_fields(ev, i, rcv, ack_seq, base, bool(i & 1), probe,
                                   0xF0F0 << i, 5, 2, i, 99999) == ref


@pytest.mark.parametrize("mode", ["usid", "srh", "plain"])
@pytest.mark.parametrize("encap", [True, False])
def test_nack_template_matches_build_nack(mode: str, encap: bool) -> None:
    r = _route(mode, encap)
    t = NackTemplate(r, dest_qp=0xABCDE, src_qp=0x12345)
    assert t.matches(0xABCDE, 0x2345) and not t.matches(0xABCDF, 0x12345)
    py = NackTemplate(r, dest_qp=0xABCDE, src_qp=0x12345)
    py._fin = FrameFinisher(*_finisher_args(py, r), use_c=False)
    rng = random.Random(3)
    for reason in NackReason:
        ev, psn, ts = rng.getrandbits(32), rng.getrandbits(24), rng.getrandbits(16)
        trig = rng.getrandbits(32)
        ref = build_nack(r, ev=ev, dest_qp=0xABCDE, psn=psn, neth=NETH(
            reason, trig, psn, ts, spdcid=0x2345, dpdcid=0xBCDE))
        assert t.build(ev, psn, reason, trig, psn, ts) == ref
        assert py.build(ev, psn, reason, trig, psn, ts) == ref
        assert parse_frame(ref).neth == NETH(reason, trig, psn, ts, spdcid=0x2345,
                                             dpdcid=0xBCDE)
    with pytest.raises(ValueError, match="NackReason"):
        t.build(1, 2, 0x7F, 3, 2, 4)


def _finisher_args(t: SackTemplate | NackTemplate, r: Route) -> tuple[int, bool, int, bytes, bytes]:
    udp = t._udp_off
    if r.encap:  # pseudo-header: inner addresses, else the final destination
        return (udp - 40, True, udp, r.src_ip, r.dst_ip)
    return (udp, False, udp, r.src_ip, r.final_dst)


def test_an_immediate_without_a_posted_receive_is_resent_later() -> None:
    """No credit on the wire: an immediate that finds no receive posted is NACKed
    NO_RESOURCE and resent after a while (RNR), until the application posts one."""
    net = Net()
    qa, qb = connect(net, 0, 1, recvs=2)
    ha, hb = net.h(0), net.h(1)
    src = bytearray(100)
    dst = bytearray(100)
    ms, md = ha.register_mr(src), hb.register_mr(dst)
    for i in range(5):
        ha.post_write(qa, i, ms, i, 1, md.addr + i, md.rkey, imm=i)
    net.run(max_time=0.01)
    assert [c.wr_id for c in ha.poll_cq(ha.qp(qa).cq, 10)] == [0, 1]
    assert [c.imm for c in hb.poll_cq(hb.qp(qb).cq, 10)] == [0, 1]
    assert hb.counters().get("rx_no_recv_credit", 0) > 0
    assert ha.qp(qa).state.name == "RTS"
    for i in range(3):
        hb.post_recv(qb, 100 + i, now=net.now)
    net.run(max_time=net.now + 0.01)
    assert [c.wr_id for c in ha.poll_cq(ha.qp(qa).cq, 10)] == [2, 3, 4]
    got = hb.poll_cq(hb.qp(qb).cq, 10)
    assert [(c.wr_id, c.imm, c.opcode) for c in got] == [
        (100, 2, WCOpcode.RECV_RDMA_WITH_IMM), (101, 3, WCOpcode.RECV_RDMA_WITH_IMM),
        (102, 4, WCOpcode.RECV_RDMA_WITH_IMM)]


def test_max_imm_outstanding_limits_the_sender() -> None:
    net = Net()
    qa, _ = connect(net, 0, 1, recvs=10, attrs={"max_imm_outstanding": 1})
    ha = net.h(0)
    ms = ha.register_mr(bytearray(10))
    md = net.h(1).register_mr(bytearray(10))
    net.run(max_time=1e-4)
    for i in range(3):
        ha.post_write(qa, i, ms, 0, 1, md.addr, md.rkey, imm=i)
    qp = ha.qp(qa)
    net.flush()
    assert qp.imm_outstanding == 1 and len(qp.inflight) == 1
    net.run(max_time=0.01)
    assert [c.status for c in ha.poll_cq(qp.cq, 10)] == [WCStatus.SUCCESS] * 3


def test_ack_coalescing_knob() -> None:
    sacks = {}
    for every in (1, 8):
        net = Net(config=HostConfig(ack_every=every))
        qa, _ = connect(net, 0, 1)
        src, dst = _write(net, qa, 64 * 4096)
        cq = net.h(0).qp(qa).cq
        net.run(until=lambda: len(cq) > 0, max_time=1.0)  # noqa: B023
        assert dst == src
        sacks[every] = net.h(1).counters()["tx_sack"]
    assert sacks[1] >= 60
    assert sacks[8] <= sacks[1] / 4


def test_incast_trims_are_last_hop_and_shrink_the_window() -> None:
    imp = Impairments(trim_lasthop=True)  # the receiver's leaf port trims: incast
    net = Net(n_hosts=2, planes=1, spines=4, imp=imp, seed=2)
    qa, _ = connect(net, 0, 1)
    rng = random.Random(1)
    imp.trim_if = lambda f: len(f) > 1000 and rng.random() < 0.3
    net.log_tx = True
    src, dst = _write(net, qa, 1 << 20)
    ha, hb = net.h(0), net.h(1)
    net.run(until=lambda: len(ha.qp(qa).cq) > 0, max_time=1.0)
    assert dst == src
    nacks = [parse_frame(f).neth for _, name, _, f in net.tx_log
             if name == "h1" and parse_frame(f).neth is not None]
    reasons = [n.reason for n in nacks if n is not None]
    assert reasons and set(reasons) == {NackReason.TRIMMED_LASTHOP}
    penalties = [parse_frame(f).cc for _, name, _, f in net.tx_log if name == "h1"]
    assert any(c is not None and c.rcv_cwnd_pen > 0 for c in penalties)
    c = hb.counters()
    assert c["rx_trimmed"] == c["rx_trimmed_lasthop"] == c["tx_nack_lasthop"] == len(reasons)
    stats = ha.ev_stats(qa).values()
    assert sum(s["trimmed"] for s in stats) > 0  # trimmed packets were counted per EV
    assert all(s["state"] == "GOOD" for s in stats)  # ... and moved none


def test_counters_and_stats_shapes() -> None:
    net = Net()
    qa, _ = connect(net, 0, 1)
    _write(net, qa, 40_000)
    net.run(until=lambda: len(net.h(0).qp(qa).cq) > 0, max_time=1.0)
    c0, c1 = net.h(0).counters(), net.h(1).counters()
    assert c0["tx_data"] == c1["rx_data"] == 10
    assert c1["tx_sack"] >= 1 and c0["rx_frames"] == c1["tx_sack"]
    st = net.h(0).qp_stats(qa)
    assert st["state"] == "RTS" and st["inflight"] == 0
    evs = net.h(0).ev_stats(qa)
    assert len(evs) == 128 and sum(s["sent"] for s in evs.values()) == 10


def test_bad_rkey_from_the_application_fails_the_qp_with_a_clear_reason() -> None:
    net = Net()
    qa, _ = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    ms = ha.register_mr(bytearray(5000))
    md = hb.register_mr(bytearray(100))
    ha.post_write(qa, 1, ms, 0, 5000, md.addr, md.rkey)  # 5000 bytes into 100
    net.run(until=lambda: ha.qp(qa).error_reason is not None, max_time=1.0)
    reason = ha.qp(qa).error_reason
    assert reason is not None and "remote access error" in reason and "wr_id 1" in reason
    (c,) = ha.poll_cq(ha.qp(qa).cq, 4)
    assert c.status is WCStatus.REM_ACCESS_ERR
    assert hb.counters()["rx_out_of_bounds"] >= 1
    assert net.now < 0.01  # at once, not after the retry budget


def test_port_down_then_up_brings_the_plane_back() -> None:
    net = Net(planes=2, spines=2)
    net.log_tx = True
    qa, _ = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    hb.set_port_state(1, False, 0.0)
    net.run(max_time=1e-4)
    hb.set_port_state(1, True, net.now)
    net.run(max_time=2e-4)
    t0 = net.now
    src, dst = _write(net, qa, 256 * 1024)
    net.run(until=lambda: len(ha.qp(qa).cq) > 0, max_time=1.0)
    assert dst == src
    from mrcnet.core import ev_path

    planes = {ev_path(f.ev)[0] for f in net.data_frames(since=t0, src="h0")}
    assert planes == {0, 1}


