"""MRC 1.0's acknowledgements end to end: the RoCE cumulative ACK (AETH) where that is all
there is to say, the SACK's meanings (CACK = last PSN in order, offsets from it, M as the
ECN echo), and the reliability probe answered by a SACK with PR."""

from __future__ import annotations

from typing import Any

from mrcnet.constants import ECN, Opcode, SackMode
from mrcnet.core import HostConfig, make_ev
from mrcnet.wire import PETH, build_ack, build_data, build_probe, parse_frame

from .harness import Net, connect

#: The held-ACK tests' hold: their answers follow a ping 10 us later, within this.
HOLD = 20e-6


def _world() -> tuple[Net, int, int, Any]:
    net = Net()
    qa, qb = connect(net, 0, 1, psn_a=1000)
    md = net.h(1).register_mr(bytearray(8192))
    return net, qa, qb, md


def _answers(net: Net) -> list[Any]:
    """The responder's control frames, parsed."""
    return [parse_frame(f) for _, f in net.h(1).frames_to_send(net.now)]


def _data(net: Net, qb: int, md: Any, psn: int, **kw: Any) -> bytes:
    route = net.fabric.provider("h0").routes("h1", 0)[1]
    kw.setdefault("ack_req", True)
    kw.setdefault("opcode", Opcode.WRITE_ONLY)
    return build_data(route, ev=make_ev(0, 1, 0), dest_qp=qb,
                      psn=psn, va=md.addr + 64 * (psn - 1000), rkey=md.rkey,
                      payload=b"y" * 64, **kw)


def test_in_order_data_without_a_timestamp_is_answered_by_a_cumulative_ack() -> None:
    """Nothing to echo, nothing out of order, no CE: a RoCE ACK, PSN = last in order."""
    net, _qa, qb, md = _world()
    hb = net.h(1)
    hb.receive(_data(net, qb, md, 1000), 0, 0.0)
    [f] = _answers(net)
    assert f.opcode is Opcode.ACK and f.aeth is not None and f.seth is None
    assert f.bth.psn == 1000 and f.aeth.msn == 1  # one message completed
    assert hb.counters()["tx_ack"] == 1


def test_timestamped_or_ce_or_out_of_order_data_gets_a_sack() -> None:
    """A timestamp to echo, a CE mark (M = SKIP_ONCE) or a gap: a SACK, whose CACK is the
    last PSN in order and whose bitmap bit i covers CACK + sack_offset + i."""
    net, _qa, qb, md = _world()
    hb = net.h(1)
    hb.receive(_data(net, qb, md, 1000, timestamp=7), 0, 0.0)
    [f] = _answers(net)
    assert f.opcode is Opcode.SACK and f.seth is not None and f.cc is not None
    assert (f.seth.cack_psn, f.seth.ack_psn_offset, f.cc.timestamp) == (1000, 0, 7)
    assert f.seth.m == SackMode.NONE and not f.seth.pr
    hb.receive(_data(net, qb, md, 1003, ecn=ECN.CE), 0, 1e-6)
    [f] = _answers(net)
    assert f.opcode is Opcode.SACK and f.seth is not None
    assert f.seth.m == SackMode.SKIP_ONCE  # the ECN echo
    assert f.seth.cack_psn == 1000 and f.seth.ack_psn_offset == 3
    base = f.seth.cack_psn + f.seth.sack_offset
    assert {base + i for i in range(64) if f.seth.sack_bitmap >> i & 1} == {1003}


def test_the_sender_takes_a_cumulative_ack() -> None:
    """An ACK retires what it covers (no RTT sample, no path news)."""
    net, qa, qb, md = _world()
    ha, hb = net.h(0), net.h(1)
    ms = ha.register_mr(bytearray(64 * 3))
    for i in range(3):
        ha.post_write(qa, i, ms, 64 * i, 64, md.addr + 64 * i, md.rkey)
    sent = [parse_frame(f) for _, f in ha.frames_to_send(0.0)]
    assert len(sent) == 3 and ha.qp(qa).snd_una == 1000
    for f in sent[:2]:  # what a peer answers with an ACK: data it need not echo
        hb.receive(_data(net, qb, md, f.bth.psn), 0, 1e-6)
    acks = [f for f in _answers(net) if f.opcode is Opcode.ACK]
    assert acks and acks[-1].bth.psn == 1001
    route = net.fabric.provider("h1").routes("h0", 0)[0]
    ha.receive(build_ack(route, ev=make_ev(0, 0, 0), dest_qp=qa, psn=1001), 0, 2e-6)
    assert ha.qp(qa).snd_una == 1002
    ha.frames_to_send(3e-6)  # the burst ends: completions
    assert [c.wr_id for c in ha.poll_cq(ha.qp(qa).cq, 10)] == [0, 1]


def test_a_reliability_probe_is_answered_by_a_sack_with_pr() -> None:
    """PETH: the answer is a SACK with PR = 1, the probe id in ack_psn_offset, the probe's
    timestamp echoed and its EV reflected; the sender takes it without an RTT sample."""
    net, qa, qb, _md = _world()
    ha, hb = net.h(0), net.h(1)
    route = net.fabric.provider("h0").routes("h1", 0)[2]
    ev = make_ev(0, 2, 0)
    hb.receive(build_probe(route, ev=ev, dest_qp=qb, peth=PETH(probe_id=77, timestamp=0x55),
                           psn=1000), 0, 0.0)
    [(_, raw)] = hb.frames_to_send(0.0)
    f = parse_frame(raw)
    assert f.opcode is Opcode.SACK and f.seth is not None and f.cc is not None
    assert f.seth.pr and f.seth.ack_psn_offset == 77 and f.cc.timestamp == 0x55
    assert f.seth.entropy == ev and f.seth.cack_psn == 999  # nothing received yet
    qp = ha.qp(qa)
    before = (qp.snd_una, qp.srtt)
    ha.receive(raw, 0, 1e-6)
    assert (qp.snd_una, qp.srtt) == before
    assert net.internal_errors() == 0


def test_the_other_ev_order_is_a_host_setting() -> None:
    """HostConfig(ev_order="sport-high") puts the EV's high half in the source port, for
    the whole process; a transfer works the same, and the default comes back."""
    from mrcnet.core import HostConfig
    from mrcnet.wire import ev_order

    try:
        net = Net(config=HostConfig(ev_order="sport-high"))
        qa, _qb = connect(net, 0, 1)
        ha = net.h(0)
        src = bytearray(range(256)) * 64
        dst = bytearray(len(src))
        ms, md = ha.register_mr(src), net.h(1).register_mr(dst)
        ha.post_write(qa, 1, ms, 0, len(src), md.addr, md.rkey)
        net.log_tx = True
        net.run(until=lambda: len(ha.qp(qa).cq) > 0, max_time=0.1)
        assert dst == src and ev_order() == 1
        f = parse_frame(net.tx_log[0][3])
        assert f.udp.sport == f.ev >> 16 and f.outer.flow_label == f.ev & 0xFFFF
    finally:
        Net(config=HostConfig())  # the default again, for every later test
    assert ev_order() == 0


def test_a_lone_packet_is_acknowledged_in_its_pass_only_with_ack_lone() -> None:
    """ack_lone (mrcd's setting): a receive burst of one packet that asks for nothing is
    acknowledged when the host next sends; without it, at ack_delay (a NIC-like host
    handed one packet per call)."""
    for lone in (False, True):
        net = Net(config=HostConfig(ack_lone=lone))
        _qa, qb = connect(net, 0, 1, psn_a=1000)
        md = net.h(1).register_mr(bytearray(8192))
        hb = net.h(1)
        hb.receive(_data(net, qb, md, 1000, ack_req=False), 0, 0.0)
        acks = [f for f in _answers(net) if f.opcode in (Opcode.ACK, Opcode.SACK)]
        assert len(acks) == (1 if lone else 0)
        if not lone:  # the delayed acknowledgement still comes
            hb.handle_timer(hb.config.ack_delay + 1e-6)
            assert [f for f in _answers(net) if f.opcode in (Opcode.ACK, Opcode.SACK)]


def test_a_burst_is_acknowledged_at_its_end_once() -> None:
    """Data that arrived with others in one receive pass is acknowledged when the host
    next sends (the burst counted from the responder's accepted packets), once: the
    next pass without data sends nothing; a lone packet after it waits for ack_delay.
    The same with the C receive lane and without it."""
    for lane in (True, False):
        net, _qa, qb, md = _world()
        hb = net.h(1)
        if not lane:
            hb._lane = None
        burst = [_data(net, qb, md, 1000 + i, ack_req=False, timestamp=5) for i in range(3)]
        hb.receive_batch(burst, 0, 1e-6)
        assert len(_ack_frames(hb.frames_to_send(1e-6))) == 1
        assert not hb.frames_to_send(2e-6)  # (the burst was reset)
        hb.receive_batch([_data(net, qb, md, 1003, ack_req=False, timestamp=5)], 0, 3e-6)
        assert not _ack_frames(hb.frames_to_send(3e-6))
        assert hb.qp(qb).resp.rx_packets == 4
        if lane:
            assert hb._lane is not None and hb._lane.placed > 0  # (not vacuous)


def _ack_frames(frames: list[tuple[int, bytes]]) -> list[Any]:
    return [p for p in (parse_frame(f) for _, f in frames)
            if p.opcode in (Opcode.ACK, Opcode.SACK)]


def _ping(net: Net, hb: Any, qb: int, md: Any, i: int, t: float) -> list[Any]:
    """Ping ``i`` (a write-with-immediate asking for an ACK) reaches h1 at ``t``; the
    acknowledgements h1 sends in that pass."""
    hb.post_recv(qb, i, t)
    hb.receive(_data(net, qb, md, 1000 + i, opcode=Opcode.WRITE_ONLY_IMM, imm=i, rqmsn=i),
               0, t)
    return _ack_frames(hb.frames_to_send(t))


def _answer(hb: Any, qb: int, md: Any, i: int, t: float) -> list[tuple[int, bytes]]:
    hb.post_write(qb, 100 + i, md, 0, 64, 0x1000, 0x1234, i)
    frames = hb.frames_to_send(t)
    assert any(parse_frame(f).opcode is Opcode.WRITE_ONLY_IMM for _, f in frames)
    return frames


def _warm_up(net: Net, hb: Any, qb: int, md: Any) -> None:
    """One ping-pong: the ping is acknowledged at once (nothing known yet), its answer
    follows within ack_delay, so the QP holds the next pings' AckReqs."""
    assert len(_ping(net, hb, qb, md, 0, 0.0)) == 1
    _answer(hb, qb, md, 0, 1e-5)


def test_ack_with_data_holds_a_pings_ackreq_for_the_answer() -> None:
    """ack_with_data (mrcd's setting): once a QP has answered a write-with-immediate
    within ack_delay, the AckReq of the next in-order one is not answered in its own pass
    but by the responder's next data (the answer) in the same frames_to_send call; a
    plain write's AckReq, and every AckReq without the knob, is answered at once."""
    for hold in (False, True):
        net = Net(config=HostConfig(ack_lone=True, ack_with_data=hold, ack_delay=HOLD))
        _qa, qb = connect(net, 0, 1, psn_a=1000)
        hb = net.h(1)
        md = hb.register_mr(bytearray(8192))
        _warm_up(net, hb, qb, md)
        t = 1e-4
        assert len(_ping(net, hb, qb, md, 1, t)) == (0 if hold else 1)
        frames = _answer(hb, qb, md, 1, t + 1e-6)
        assert [f.bth.psn for f in _ack_frames(frames)] == ([1001] if hold else [])
        # a plain write's AckReq: at once, with the knob too
        hb.receive(_data(net, qb, md, 1002), 0, 2e-4)
        assert len(_ack_frames(hb.frames_to_send(2e-4))) == 1
        assert hb.qp(qb).counters().get("ack_held", 0) == (1 if hold else 0)


def test_ack_with_data_stops_holding_for_a_qp_that_does_not_answer() -> None:
    """A held AckReq that no answer took leaves at ack_delay, and the QP's next AckReqs
    are acknowledged at once again (a writer that waits for each completion pays
    ack_delay once, not per write) until an answer follows one within ack_delay."""
    net = Net(config=HostConfig(ack_with_data=True, ack_delay=HOLD))
    _qa, qb = connect(net, 0, 1, psn_a=1000)
    hb = net.h(1)
    md = hb.register_mr(bytearray(8192))
    _warm_up(net, hb, qb, md)
    t = 1e-3
    assert _ping(net, hb, qb, md, 1, t) == []  # held: the QP answered the last one
    due = hb.next_timer()
    assert due is not None and due <= t + hb.config.ack_delay
    hb.handle_timer(t + hb.config.ack_delay)
    assert [f.bth.psn for f in _ack_frames(hb.frames_to_send(t + hb.config.ack_delay))] \
        == [1001]
    for i in range(2, 6):  # no answers: every ping acknowledged in its own pass
        assert [f.bth.psn for f in _ping(net, hb, qb, md, i, i * 1e-2)] == [1000 + i]
    _answer(hb, qb, md, 5, 5e-2 + 1e-5)  # answered again: holding resumes
    assert _ping(net, hb, qb, md, 6, 6e-2) == []
    c = hb.qp(qb).counters()
    assert (c.get("ack_held"), c.get("ack_held_expired")) == (2, 1)


def test_a_held_ack_leaves_when_its_qp_is_destroyed() -> None:
    """ack_with_data: a responder that destroys its QP before answering (the last
    message of a session) still acknowledges what it received."""
    net = Net(config=HostConfig(ack_with_data=True, ack_delay=HOLD))
    _qa, qb = connect(net, 0, 1, psn_a=1000)
    hb = net.h(1)
    md = hb.register_mr(bytearray(8192))
    _warm_up(net, hb, qb, md)
    assert _ping(net, hb, qb, md, 1, 1e-4) == []  # held
    hb.destroy_qp(qb)
    assert [f.bth.psn for f in _ack_frames(hb.frames_to_send(2e-4))] == [1001]


def test_a_held_ack_leaves_on_the_answers_plane() -> None:
    """ack_with_data: the held ACK travels on the plane (port) of the answer it leaves
    with, whichever plane the ping came on, and still reflects the ping's EV: one batch
    of one port carries both."""
    net = Net(config=HostConfig(ack_with_data=True, ack_delay=HOLD))
    _qa, qb = connect(net, 0, 1, psn_a=1000)
    hb = net.h(1)
    md = hb.register_mr(bytearray(8192))
    _warm_up(net, hb, qb, md)
    ports_seen = set()
    for i in range(1, 9):
        hb.post_recv(qb, i, 0.0)
        t = i * 1e-4
        hb.receive(_data(net, qb, md, 1000 + i, opcode=Opcode.WRITE_ONLY_IMM, imm=i,
                         rqmsn=i, timestamp=7), 0, t)  # (a timestamp: a SACK answers)
        assert not _ack_frames(hb.frames_to_send(t))
        hb.post_write(qb, 100 + i, md, 0, 64, 0x1000, 0x1234, i)
        out = hb.frames_to_send(t + 1e-6)
        [(ack_port, ack)] = [(p, f) for p, f in out
                             if parse_frame(f).opcode in (Opcode.ACK, Opcode.SACK)]
        [data_port] = [p for p, f in out if parse_frame(f).opcode is Opcode.WRITE_ONLY_IMM]
        assert ack_port == data_port
        ports_seen.add(data_port)
        sack = parse_frame(ack)
        assert sack.seth is not None and sack.seth.entropy == make_ev(0, 1, 0)  # reflected
    assert ports_seen == {0, 1}  # the answers took both planes
