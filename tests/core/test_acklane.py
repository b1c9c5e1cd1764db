"""The receive lane's SACK side (rxlane.h ``struct mrc_rx_ack``): the C lane and its
Python oracle (tests/core/pylane.py) take the same SACKs, leave the same records and
leave the table of packets in flight in the same state, through random SACK streams with
stale, duplicate, forged (another QP, a stranger's source, junk), out-of-window and
2^24-wrapping cumulative points, and batches of more SACKs than the lane keeps records
for. That the records' decisions are on_sack's is checked end to end in
test_hotpath_batch.py (the lanes against the frame-by-frame path, whole transfers)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mrcnet.constants import PSN_MASK, SackMode
from mrcnet.core.ctrl import SackTemplate
from mrcnet.core.rxlane import (
    RX_ACK_INTS,
    RX_ACK_MAX,
    RX_ACKS,
    RX_END,
    RX_PEERS_MAX,
    RX_POS_SHIFT,
    RX_STOP,
    WHY_ACK,
    WHY_OTHER,
    WHY_PARSE,
    CRxLane,
)
from mrcnet.core.txtable import CTxTable, PyTxTable
from mrcnet.native import HAVE_C
from mrcnet.wire.parsed import py_parse
from mrcnet.wire.seth import SETH, CCState

from .harness import Net, connect, ip
from .pylane import PyRxLane
from .test_txtable import _state

needs_c = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")

QPN = 0x1234
CAP = 256  # table slots (the send window)


def _sack_frames(rng: random.Random, st: list[SackTemplate], una: int, nxt: int,
                 sent: dict[int, tuple[int, int]], k: int) -> list[bytes]:
    """``k`` SACKs around the window [una, nxt): mostly plausible (a cumulative point in
    it, a bitmap after it, the trigger a packet sent with its EV and stamp), some stale,
    out of window, with ECE, a mode or a penalty, or about a packet never sent."""
    out = []
    for _ in range(k):
        r = rng.random()
        if r < 0.7:
            cack = rng.randint(una, nxt)
        elif r < 0.85:
            cack = rng.randint(una - 40, una)  # stale
        else:
            cack = rng.choice([nxt + rng.randint(1, 50), una - CAP - rng.randint(0, 9)])
        trig = rng.randint(min(cack, una) - 3, max(cack, nxt) + 2)
        ev, ts = sent.get(trig, (rng.getrandbits(32), rng.getrandbits(16)))
        if rng.random() < 0.1:
            ts ^= 1  # another transmission's stamp: no RTT sample
        off = 1 if rng.random() < 0.8 else rng.randint(-70, 70)
        # (SETH's CACK is the last PSN in order: the table's cumulative point minus 1)
        seth = SETH(entropy=ev, cack_psn=(cack - 1) & PSN_MASK,
                    ack_psn_offset=max(-32768, min(32767, trig - cack + 1)),
                    sack_offset=off + 1, mpr=1,
                    m=rng.choice([SackMode.NONE] * 8 + [SackMode.SKIP_ONCE,
                                                         SackMode.ALWAYS_SKIP]),
                    pr=rng.random() < 0.05,
                    sack_bitmap=_bits(rng, cack - 1 + off, nxt) if r < 0.9 else 0)
        cc = CCState(timestamp=ts, ooo_count=rng.randrange(256),
                     rcv_cwnd_pen=rng.randrange(128) if rng.random() < 0.1 else 0,
                     rcvd_bytes=rng.getrandbits(24))
        out.append(rng.choice(st).build(rng.getrandbits(32), seth, cc))
    return out


def _bits(rng: random.Random, base: int, nxt: int) -> int:
    """A SACK bitmap over [base, base + 64): mostly bits only for PSNs sent (below
    ``nxt``), sometimes any (a SACK about PSNs never sent: forged.sack_verdict)."""
    bm = rng.getrandbits(64)
    if rng.random() < 0.9 and nxt - base < 64:
        bm &= (1 << max(0, nxt - base)) - 1
    return bm


def _spoil(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    """Some frames forged or broken: another QP, a stranger's source, cut, junk."""
    out = []
    for f in frames:
        kind = rng.randrange(12)
        b = bytearray(f)
        p = py_parse(f, False)
        if kind == 0:
            b[p.src_off + 15] ^= 0x55  # a stranger (checksums not verified here)
        elif kind == 1:
            b[p.udp_off + 8 + 5] ^= 0x40  # another destination QP (BTH after UDP)
        elif kind == 2:
            b = b[: rng.randrange(len(b))]
        elif kind == 3:
            b = bytearray(rng.randbytes(rng.randrange(20, 200)))
        out.append(bytes(b))
    return out


def _run_lane(lane: Any, frames: list[bytes], now: float) -> list[Any]:
    """Every run of a batch: its result, why it stopped and the records it left."""
    lane.load(frames)
    got, i, n = [], 0, len(frames)
    while i < n:
        r = lane.run(i, n, now, 0)
        k, st = r >> RX_POS_SHIFT, r & 3
        recs = lane.take_acks() if r & RX_ACKS else ([], [])
        got.append((r, lane.why if st == RX_STOP else None, recs))
        i = k + 1 if st != RX_END else n
    lane.release()
    return got


@needs_c
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("start", [0, PSN_MASK - 90, 1 << 40])
def test_ack_lane_c_and_python(seed: int, start: int) -> None:
    rng = random.Random(seed)
    net = Net(n_hosts=2, planes=2, spines=2)
    connect(net, 0, 1)
    prov = net.fabric.provider("h1")
    st = [SackTemplate(r, dest_qp=QPN) for p in (0, 1) for r in prov.routes("h0", p)]
    peers = frozenset({ip(1, 0), ip(1, 1)})
    tables = [CTxTable(CAP, start), PyTxTable(CAP, start)]
    lanes = [CRxLane(), PyRxLane()]
    for lane, t in zip(lanes, tables, strict=True):
        lane.verify = False  # forged sources get past the parser (the lane checks them)
        assert lane.set_ack(QPN, t, peers, CAP)
    una = nxt = start
    now = 1.0
    sent: dict[int, tuple[int, int]] = {}
    taken = stops = others = 0
    for _step in range(60):
        now += rng.random() * 1e-4
        k = rng.randint(0, min(40, CAP - 8 - (nxt - una)))
        if k:  # a run of new packets
            evs = [rng.choice([0x1000, 0x2001, 0x1001002, 0x1002000]) for _ in range(k)]
            ts = int(now * 1e5) & 0xFFFF
            for t in tables:
                t.send(nxt, evs, [0xC7] * k, 1, 0, 1000, k * 1000, now, ts)
            for i, ev in enumerate(evs):
                sent[nxt + i] = (ev, ts)
            nxt += k
        now += rng.random() * 1e-4
        frames = _sack_frames(rng, st, una, nxt, sent, rng.randint(1, 90))
        if rng.random() < 0.3:
            frames = _spoil(rng, frames)
        for lane in lanes:
            lane.ack_sync(una, nxt, 0.0)
        res = [_run_lane(lane, frames, now) for lane in lanes]
        assert res[0] == res[1]
        assert lanes[0]._ack.una == lanes[1].ack_una
        assert _state(tables[0], una, nxt) == _state(tables[1], una, nxt)
        for _r, why, (ints, sents) in res[0]:
            assert len(ints) == RX_ACK_INTS * len(sents) and len(sents) <= RX_ACK_MAX
            taken += len(sents)
            if why is not None:
                assert why in (WHY_ACK, WHY_OTHER, WHY_PARSE)
                stops += why == WHY_ACK
                others += why == WHY_OTHER
        una = lanes[1].ack_una
    assert taken > 500 and stops > 10 and others > 3  # every side of the lane was met


@needs_c
def test_paused_lane_takes_no_sacks() -> None:
    """Paused (or never synced), every SACK of the QP stops the lane; synced again, they
    go to the table."""
    net = Net(n_hosts=2, planes=2, spines=2)
    connect(net, 0, 1)
    route = net.fabric.provider("h1").routes("h0", 0)[0]
    st = SackTemplate(route, dest_qp=QPN)
    frame = st.build(0x1000, SETH(entropy=0x1000, cack_psn=2, sack_offset=2), CCState())
    for lane, t in ((CRxLane(), CTxTable(64, 0)),
                    (PyRxLane(), PyTxTable(64, 0))):
        t.send(0, [0x1000] * 5, [0xC7] * 5, 0, 0, 100, 500, 1.0, 7)
        assert lane.set_ack(QPN, t, frozenset({ip(1, 0)}), 64)
        assert _run_lane(lane, [frame], 2.0)[0][1] == WHY_OTHER  # not synced yet
        lane.ack_sync(0, 5, 0.0)
        lane.ack_pause()
        assert _run_lane(lane, [frame], 2.0)[0][1] == WHY_OTHER
        lane.ack_sync(0, 5, 0.0)
        [(r, why, (ints, _sents))] = _run_lane(lane, [frame], 2.0)
        assert why is None and r & 3 == RX_END and ints[:2] == [3, 300]
        assert t.ninfl == 2
        assert not lane.set_ack(QPN, t, frozenset(ip(1, p) for p in range(9)), 64)


@needs_c
def test_ack_sync_takes_sacks_only_with_a_table() -> None:
    """``ack_sync`` (``mrc_rx_ack_sync``, no Python frame) against the Python lane's:
    before any ``set_ack`` and after a refused one the lane takes no SACKs; after an
    accepted one, with the window given; ``take_ack_n`` finds none waiting then."""
    c, py = CRxLane(), PyRxLane()
    peers = frozenset({ip(1, 0)})
    c.ack_sync(3, 9, 0.5)
    py.ack_sync(3, 9, 0.5)
    assert not c.ack_state()[3] and not py.ack_on
    assert c.set_ack(QPN, CTxTable(64, 0), peers, 64)
    assert py.set_ack(QPN, PyTxTable(64, 0), peers, 64)
    c.ack_sync(3, 9, 0.5)
    py.ack_sync(3, 9, 0.5)
    assert c.ack_state() == (3, 9, 0.5, True) and py.ack_on
    assert (py.ack_una, py.ack_next, py.ack_early) == (3, 9, 0.5)
    assert c.take_ack_n() == 0 and py.take_acks() == ([], [])
    too_many = frozenset({ip(1, k) for k in range(RX_PEERS_MAX + 1)})
    assert not c.set_ack(QPN, CTxTable(64, 0), too_many, 64)
    assert not py.set_ack(QPN, PyTxTable(64, 0), too_many, 64)
    c.ack_sync(4, 10, 0.0)
    py.ack_sync(4, 10, 0.0)
    assert c.ack_state() == (3, 9, 0.5, False) and not py.ack_on
