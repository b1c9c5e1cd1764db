"""Endpoint operations bound to the connection: the endpoint token (ERTH's reserved
word) and the probe confirmation of an "every plane down" PORT_STATUS."""

from __future__ import annotations

from typing import Any

from mrcnet.constants import EndpointOp
from mrcnet.core import PortStatusChanged, QPState
from mrcnet.core.endpoint import plane_ev
from mrcnet.core.evs import ev_path
from mrcnet.wire import build_endpoint, parse_frame
from mrcnet.wire.erth import TokenERTH, erth_token

from .harness import Net, connect

TOKEN = 0x5EC2E7AB


def _midway(net: Net) -> tuple[int, bytearray, bytearray]:
    """A tokened QP pair h0 -> h1 with a 1 MiB write under way: (qpn, src, dst)."""
    qa, _ = connect(net, 0, 1, token=TOKEN)
    ha, hb = net.h(0), net.h(1)
    size = 1 << 20
    src = bytearray(bytes(range(256)) * (size // 256))
    dst = bytearray(size)
    ms, md = ha.register_mr(src), hb.register_mr(dst)
    ha.post_write(qa, 1, ms, 0, size, md.addr, md.rkey)
    net.run(until=lambda: hb.counters().get("rx_data", 0) > 20, max_time=1.0)
    return qa, src, dst


def _forge_status(net: Net, mask: int, token: int, rid: int = 0x77) -> None:
    """A PORT_STATUS 'from h1' (its source address, its route) arriving at h0 on every
    plane, as a host on a leaf port would send it."""
    ha, hb = net.h(0), net.h(1)
    for plane, routes in hb._paths_to("h0").items():
        erth = TokenERTH(EndpointOp.PORT_STATUS, port_status_mask=mask, token=token)
        frame = build_endpoint(routes[0], ev=plane_ev(plane), request_id=rid, erth=erth)
        ha.receive(frame, ha._plane_port[plane], net.now)


def _status_events(host: Any) -> list[Any]:
    out = []
    while (e := host.next_event()) is not None:
        if isinstance(e, PortStatusChanged):
            out.append(e)
    return out


def test_token_rides_in_the_reserved_word() -> None:
    erth = TokenERTH(EndpointOp.PORT_STATUS, port_status_mask=3, timestamp=9, token=TOKEN)
    raw = erth.pack()
    assert erth_token(raw) == TOKEN
    assert raw[8:12] == TOKEN.to_bytes(4, "big")
    assert TokenERTH(EndpointOp.EV_PROBE).pack()[8:12] == bytes(4)


def test_endpoint_requests_carry_the_token() -> None:
    net = Net(planes=2, spines=2)
    connect(net, 0, 1, token=TOKEN)
    hb = net.h(1)
    sent: list[bytes] = []
    orig = net._send

    def spy(src: str, port: int, frame: bytes) -> None:
        f = parse_frame(frame)
        if f.erth is not None:
            sent.append(frame)
        orig(src, port, frame)

    net._send = spy  # type: ignore[method-assign]
    hb.set_port_state(1, False, net.now)
    net.run(max_time=0.05)
    assert sent
    assert all(TOKEN.to_bytes(4, "big") in frame for frame in sent)


def test_forged_port_status_with_a_wrong_token_is_dropped() -> None:
    net = Net(planes=2, spines=2)
    ha = net.h(0)
    qa, src, dst = _midway(net)
    _forge_status(net, 0, token=0)
    _forge_status(net, 0, token=TOKEN ^ 1)
    net.run(until=lambda: len(ha.qp(qa).cq) > 0, max_time=5.0)
    assert dst == src
    assert ha.qp(qa).state is QPState.RTS
    assert ha.counters()["rx_endpoint_bad_token"] == 4
    assert _status_events(ha) == []
    assert ha._planes_for("h1") == [0, 1]


def test_mask_zero_with_the_token_is_confirmed_by_probes() -> None:
    net = Net(planes=2, spines=2)
    ha = net.h(0)
    qa, src, dst = _midway(net)
    _forge_status(net, 0, token=TOKEN)
    assert ha._planes_for("h1") == [0, 1]  # kept while the probes are out
    net.run(until=lambda: len(ha.qp(qa).cq) > 0, max_time=5.0)
    net.run(until=lambda: not ha._ps_confirm, max_time=1.0)
    assert dst == src
    assert ha.qp(qa).state is QPState.RTS
    c = ha.counters()
    assert c["rx_port_status_unconfirmed"] == 1
    assert c.get("rx_endpoint_bad_token", 0) == 0
    assert ha._planes_for("h1") == [0, 1]
    assert _status_events(ha) == []


def test_genuine_port_down_with_the_token_still_stops_the_plane() -> None:
    net = Net(planes=2, spines=2)
    net.log_tx = True
    ha, hb = net.h(0), net.h(1)
    qa, src, dst = _midway(net)
    hb.set_port_state(1, False, net.now)  # a real port down: plane 1 goes, plane 0 stays
    since = net.now + 2 * net.imp.delay
    net.run(until=lambda: len(ha.qp(qa).cq) > 0, max_time=1.0)
    assert (dst == src, _status_events(ha)) == (True, [PortStatusChanged(None, 1, False, "h1")])
    assert "rx_endpoint_bad_token" not in ha.counters()
    assert {ev_path(f.ev)[0] for f in net.data_frames(since=since, src="h0")} == {0}


def test_claim_confirmed_when_the_planes_are_silent() -> None:
    """Every plane claimed down and no probe answered: the claim stands."""
    net = Net(planes=2, spines=2)
    connect(net, 0, 1, token=TOKEN)
    ha, hb = net.h(0), net.h(1)
    net.run(max_time=0.01)
    hb.set_port_state(0, False, net.now)  # h1 answers nothing any more
    hb.set_port_state(1, False, net.now)
    ha._peer_live.pop("h1", None)
    _forge_status(net, 0, token=TOKEN)
    assert ha._ps_confirm
    net.run(until=lambda: not ha._ps_confirm, max_time=1.0)
    assert ha._planes_for("h1") == []
    assert "rx_port_status_unconfirmed" not in ha.counters()
