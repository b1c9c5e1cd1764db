"""Forged or malformed input is dropped and counted; the QP's state and memory stay as
they were, and nothing raises to the caller."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnet.constants import Opcode
from mrcnet.core import make_ev
from mrcnet.wire import CCState, Route, build_data, build_sack
from mrcnet.wire.seth import SETH

from .harness import Net, connect, ip


def _world() -> tuple[Net, int, int, bytearray, Any, Route]:
    net = Net()
    qa, qb = connect(net, 0, 1, psn_a=1000)
    hb = net.h(1)
    dst = bytearray(8192)
    md = hb.register_mr(dst)
    route = net.fabric.provider("h0").routes("h1", 0)[1]
    return net, qa, qb, dst, md, route


def _snapshot(net: Net, qpn: int) -> tuple[object, ...]:
    qp = net.h(1).qp(qpn)
    return (qp.state, qp.rcv_nxt, dict(qp.ooo), qp.imm_done, qp.rcvd_bytes, qp.snd_una,
            qp.next_seq, len(qp.cq))


def _data(route: Route, qpn: int, psn: int, va: int, rkey: int, payload: bytes = b"x" * 64,
          **kw: Any) -> bytes:
    return build_data(route, ev=make_ev(0, 1, 0), opcode=Opcode.WRITE_ONLY, dest_qp=qpn,
                      psn=psn, va=va, rkey=rkey, payload=payload, timestamp=1, **kw)


def test_wrong_qpn_psn_rkey_bounds_and_source_are_dropped_and_counted() -> None:
    net, _qa, qb, dst, md, route = _world()
    hb = net.h(1)
    before = _snapshot(net, qb)
    cases = {
        "rx_unknown_qpn": _data(route, qb + 77, 1000, md.addr, md.rkey),
        "rx_psn_out_of_window": _data(route, qb, 1000 + 100_000, md.addr, md.rkey),
        "rx_bad_rkey": _data(route, qb, 1000, md.addr, md.rkey ^ 0x1234),
        "rx_out_of_bounds": _data(route, qb, 1000, md.addr + 8192 - 10, md.rkey),
        "rx_wrong_peer": _data(
            Route(route.src_mac, route.dst_mac, ip(5, 0), route.dst_ip, usid=route.usid),
            qb, 1000, md.addr, md.rkey),
    }
    cases["rx_out_of_bounds_low"] = _data(route, qb, 1000, md.addr - 1, md.rkey)
    for name, frame in cases.items():
        hb.receive(frame, 0, 0.0)
        key = "rx_out_of_bounds" if name == "rx_out_of_bounds_low" else name
        assert hb.counters().get(key, 0) >= 1, name
    assert hb.counters()["rx_out_of_bounds"] == 2
    assert dst == bytearray(8192)
    assert _snapshot(net, qb) == before
    assert hb.counters().get("rx_data", 0) == 0
    # the legitimate peer is told about the access errors (not the forged source)
    assert hb.counters()["tx_nack"] == 3


def test_forged_sack_beyond_what_was_sent_is_ignored() -> None:
    net, qa, _qb, _dst, _md, _route = _world()
    ha = net.h(0)
    back = net.fabric.provider("h1").routes("h0", 0)[0]
    qp = ha.qp(qa)
    before = (qp.snd_una, qp.next_seq, qp.imm_outstanding)
    seth = SETH(entropy=make_ev(0, 0, 0), cack_psn=5000, sack_bitmap=0xFF)
    ha.receive(build_sack(back, ev=make_ev(0, 0, 0), dest_qp=qa, seth=seth, cc=CCState()),
               0, 0.0)
    assert ha.counters()["rx_sack_out_of_window"] == 1
    assert (qp.snd_una, qp.next_seq, qp.imm_outstanding) == before


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_truncated_and_fuzzed_frames_never_raise_nor_write(data: st.DataObject) -> None:
    net, _qa, qb, dst, md, route = _world()
    hb = net.h(1)
    good = _data(route, qb, 1000, md.addr, md.rkey, payload=bytes(range(200)))
    before = _snapshot(net, qb)
    mode = data.draw(st.sampled_from(["truncate", "flip", "garbage"]))
    if mode == "truncate":
        frame = good[: data.draw(st.integers(0, len(good) - 1))]
    elif mode == "flip":
        b = bytearray(good)
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(b) - 1))
            b[i] ^= data.draw(st.integers(1, 255))
        frame = bytes(b)
    else:
        frame = data.draw(st.binary(max_size=300))
    hb.receive(frame, 0, 0.0)
    c = hb.counters()
    assert c.get("rx_internal_error", 0) == 0
    if c.get("rx_data", 0) == 0:
        # dropped: memory and QP untouched, and the drop was counted
        assert dst == bytearray(8192)
        assert _snapshot(net, qb) == before
        assert sum(v for k, v in c.items() if k.startswith("rx_") and k != "rx_frames") >= 1
    else:
        # a flip the checks cannot see (e.g. in the payload with checksums off) would
        # land only inside the registered region
        assert len(dst) == 8192


def test_truncated_frames_counted_by_reason() -> None:
    net, _qa, qb, _dst, md, route = _world()
    hb = net.h(1)
    good = _data(route, qb, 1000, md.addr, md.rkey)
    rng = random.Random(3)
    for _ in range(50):
        hb.receive(good[: rng.randrange(0, 120)], 0, 0.0)
    c = hb.counters()
    malformed = sum(v for k, v in c.items() if k.startswith("rx_malformed_"))
    assert malformed == 50
    assert c.get("rx_data", 0) == 0


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_fuzzed_frames_without_checksums_never_escape_the_region(data: st.DataObject) -> None:
    """With checksum verification off (as the simulator runs), a flipped field reaches
    the protocol logic: it may still not raise, nor write outside the target region."""
    from mrcnet.core import HostConfig

    net = Net(config=HostConfig(verify_checksums=False))
    qa, qb = connect(net, 0, 1, psn_a=1000)
    ha, hb = net.h(0), net.h(1)
    guard = bytearray(4096)
    hb.register_mr(guard)
    dst = bytearray(8192)
    md = hb.register_mr(dst)
    route = net.fabric.provider("h0").routes("h1", 0)[1]
    back = net.fabric.provider("h1").routes("h0", 0)[1]
    kind = data.draw(st.sampled_from(["data", "sack"]))
    if kind == "data":
        frame = bytearray(_data(route, qb, 1000 + data.draw(st.integers(0, 5)),
                                md.addr + 100, md.rkey, payload=b"\xab" * 200))
        target = hb
    else:
        seth = SETH(entropy=make_ev(0, 1, 0), cack_psn=1000, sack_bitmap=3)
        frame = bytearray(build_sack(back, ev=make_ev(0, 1, 0), dest_qp=qa, seth=seth,
                                     cc=CCState()))
        target = ha
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(14, len(frame) - 1))
        frame[i] ^= data.draw(st.integers(1, 255))
    target.receive(bytes(frame), 0, 0.0)
    net.run(max_time=1e-3)  # whatever it triggered plays out
    assert net.internal_errors() == 0
    # the other region (adjacent addresses, another rkey) is never touched; a flip that
    # keeps VA, rkey and length valid is indistinguishable from a real write to dst
    assert guard == bytearray(4096)
    assert len(dst) == 8192
