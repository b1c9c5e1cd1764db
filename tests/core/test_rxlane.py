"""The receive lane (mrcnet/_csrc/rxlane.c, and its Python oracle tests/core/pylane.py) makes
the decisions of the frame-by-frame receive path: the same frames out (SACKs, NACKs),
the same memory written, the same completions, counters and responder state, frame for
frame, for the edge cases it has to hand back (window and ring wrap, PSN wrap at 2^24,
duplicates, trims, immediates out of order, bad rkey and bounds, a region deregistered
between batches, junk)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mrcnet import native
from mrcnet.buffers import SlotFrames
from mrcnet.constants import PSN_MASK, SACK_BITMAP_BITS
from mrcnet.core import HostConfig, QPState, rxlane
from mrcnet.core.ctrl import SackTemplate
from mrcnet.core.rxlane import CRxLane, ring_size, sack_bases
from mrcnet.io.batch import CBatchIO, recv_slots
from mrcnet.native import HAVE_C
from mrcnet.wire.parsed import py_parse

from .harness import Net, connect, trim
from .pylane import PyRxLane, install
from .test_hotpath_batch import _reference_receive

needs_c = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")
MODES = ["c", "py", "nolane", "ref"]


def _config(mode: str, **kw: Any) -> HostConfig:
    return HostConfig(**{"fast_parse": mode != "py", "ack_every": 8, **kw})


def _setup(mode: str, psn: int, kw: dict[str, Any], size: int) -> tuple[Net, Any, Any]:
    net = Net(n_hosts=2, planes=2, spines=2, config=_config(mode, **kw))
    qa, qb = connect(net, 0, 1, psn_a=psn, recvs=64)
    ha, hb = net.h(0), net.h(1)
    src = bytearray(random.Random(7).randbytes(size))
    ms, md = ha.register_mr(src), hb.register_mr(bytearray(size))
    hb.register_mr(bytearray(4096))  # a second region (its rkey unused by the sender)
    if mode == "py":  # (production has no Python lane: the tests' oracle)
        install(hb)
    return net, (qa, qb, ms, md, src), hb


def _generate(psn: int, kw: dict[str, Any], size: int = 600_000,
              writes: int = 5) -> list[tuple[int, bytes]]:
    """The data frames h0 sends for a few writes (some with an immediate), in order."""
    net, (qa, _qb, ms, md, _src), _hb = _setup("c" if HAVE_C else "py", psn, kw,
                                               size)
    _send_writes(net, qa, ms, md, size, writes)
    frames = [(p, bytes(f)) for _, s, p, f in net.tx_log if s == "h0"]
    return [(p, f) for p, f in frames if py_parse(f, False).is_data]


def _send_writes(net: Net, qa: int, ms: Any, md: Any, size: int, writes: int) -> None:
    """h0 writes ``ms`` to ``md`` in ``writes`` writes (some with an immediate), every
    frame sent logged (``net.tx_log``), until all are complete."""
    net.log_tx = True
    ha = net.h(0)
    chunk = size // writes
    for k in range(writes):
        ha.post_write(qa, k, ms, k * chunk, chunk, md.addr + k * chunk, md.rkey,
                      imm=k if k % 2 else None)
    net.run(until=lambda: len(ha.qp(qa).cq) >= writes, max_time=5.0)


def _replay(mode: str, batches: list[list[tuple[int, bytes]]], psn: int,
            kw: dict[str, Any], size: int = 600_000,
            dereg_at: int | None = None) -> dict[str, Any]:
    """Feed ``batches`` to a fresh receiver (``mode``: C lane, Python lane, the batch
    path without a lane, or frame by frame) and record everything it does."""
    _net, (_qa, qb, _ms, md, _src), hb = _setup(mode, psn, kw, size)
    if mode == "nolane":
        hb._lane = None
    built = [0]
    if mode in ("c", "py"):
        lane = hb._lane
        assert isinstance(lane, CRxLane if mode == "c" else PyRxLane)
        take = lane.take_sacks

        def counting() -> list[tuple[int, bytes]]:
            sacks = take()
            built[0] += len(sacks)
            return sacks

        lane.take_sacks = counting  # type: ignore[method-assign]
    out: list[tuple[int, int, bytes]] = []
    now, frozen = 1.0, None
    for b, batch in enumerate(batches):
        if b == dereg_at:
            hb.deregister_mr(md)
            frozen = bytes(md.view)
        now += 7e-6
        feed(hb, batch, now, mode == "ref")
        t = hb.next_timer()
        if t is not None and t <= now:
            hb.handle_timer(now)
        out += [(b, p, bytes(f)) for p, f in hb.frames_to_send(now)]
    qp = hb.qp(qb)
    cq = qp.rcq.poll(100)
    if frozen is not None:
        assert bytes(md.view) == frozen  # nothing written after deregistration
    return {
        "out": out, "counters": hb.counters(), "dst": bytes(md.view),
        "state": (qp.rcv_nxt, qp.rx_high, qp.ooo, qp.imm_done, qp.rcvd_bytes, qp.unreported,
                  qp.rx_msg_bytes, qp.since_ack, qp.ack_at, qp.hole_at, qp.hole_old),
        "cq": [(c.wr_id, c.byte_len, c.imm) for c in cq],
        "placed": hb._lane.placed if hb._lane is not None else 0,
        "lane_sacks": built[0],
    }


def feed(hb: Any, batch: list[tuple[int, bytes]], now: float, ref: bool) -> None:
    """Hand ``batch`` ((port, frame) each) to host ``hb`` at ``now``: frame by frame
    through the reference path (``ref``), else to receive_batch in runs of one port."""
    if ref:
        for port, f in batch:
            _reference_receive(hb, f, port, now)
        return
    i = 0
    while i < len(batch):  # runs of one port, in order
        port = batch[i][0]
        j = i
        while j < len(batch) and batch[j][0] == port:
            j += 1
        hb.receive_batch([memoryview(f) for _, f in batch[i:j]], port, now)
        i = j


def _batches(frames: list[tuple[int, bytes]], rng: random.Random, *, reorder: int = 6,
             dup: float = 0.05, trim_p: float = 0.05, batch: int = 11
             ) -> list[list[tuple[int, bytes]]]:
    """Reordered (within ``reorder`` frames), duplicated and trimmed, cut into batches
    of random length."""
    fs = list(frames)
    for i in range(len(fs)):
        j = min(len(fs) - 1, i + rng.randrange(reorder))
        fs[i], fs[j] = fs[j], fs[i]
    out: list[tuple[int, bytes]] = []
    for p, f in fs:
        out.append((p, trim(f) if rng.random() < trim_p else f))
        if rng.random() < dup:
            out.append((p, f))
    res, i = [], 0
    while i < len(out):
        k = rng.randrange(1, batch + 1)
        res.append(out[i : i + k])
        i += k
    return res


def _compare(batches: list[list[tuple[int, bytes]]], psn: int, kw: dict[str, Any],
             **extra: Any) -> dict[str, dict[str, Any]]:
    res = {m: _replay(m, batches, psn, kw, **extra)
           for m in MODES if m != "c" or HAVE_C}
    ref = res["ref"]
    for m, r in res.items():
        for k in ("out", "counters", "dst", "state", "cq"):
            assert r[k] == ref[k], (m, k)
    for m in ("c", "py"):
        if m in res:
            assert res[m]["placed"] > 0, m  # the lane did handle data
    if "c" in res:
        assert res["c"]["lane_sacks"] == res["py"]["lane_sacks"]
    return res


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("psn", [0, PSN_MASK - 40])  # PSN wrap at 2^24 mid-transfer
def test_lane_is_frame_by_frame(seed: int, psn: int) -> None:
    kw: dict[str, Any] = {}
    frames = _generate(psn, kw)
    rng = random.Random(seed)
    res = _compare(_batches(frames, rng), psn, kw)
    c = res["ref"]["counters"]
    assert c.get("rx_duplicate", 0) > 0 and c.get("rx_trimmed", 0) > 0
    assert res["py"]["lane_sacks"] > 0  # the lane built SACKs itself


@pytest.mark.parametrize("seed", [4, 5])
def test_small_window_wraps_the_ring(seed: int) -> None:
    """A 128-PSN window: the ring wraps every 128 packets; far reordering and late
    duplicates fall outside the window."""
    kw = {"rx_window": 128}
    frames = _generate(0, kw, size=1_200_000)
    rng = random.Random(seed)
    res = _compare(_batches(frames, rng, reorder=40, dup=0.1, batch=40), 0, kw,
                   size=1_200_000)
    assert len(frames) > 2 * ring_size(128)
    assert res["ref"]["counters"].get("rx_psn_out_of_window", 0) > 0


def test_immediates_out_of_order() -> None:
    """Every write's last packet (with its immediate, when it has one) first: it waits
    in the ring, and the in-order packet that reaches it takes the full path."""
    kw: dict[str, Any] = {}
    frames = _generate(0, kw)
    ends = [i for i, (_, f) in enumerate(frames) if py_parse(f, False).opcode in (0xC8, 0xC9)]
    order = [frames[i] for i in ends] + [f for i, f in enumerate(frames) if i not in ends]
    batches = [order[i : i + 9] for i in range(0, len(order), 9)]
    res = _compare(batches, 0, kw)
    assert len(res["ref"]["cq"]) >= 2


def _tamper(frames: list[tuple[int, bytes]], rng: random.Random) -> list[tuple[int, bytes]]:
    """Some frames with a wrong rkey or an address outside the region (checksums not
    redone: the receiver does not verify them in this test)."""
    out = []
    for p, f in frames:
        b = bytearray(f)
        pf = py_parse(f, False)
        reth = pf.udp_off + 8 + 12 + 4 + 4 * pf.has_tseth  # UDP, BTH, METH, TSETH
        r = rng.random()
        if r < 0.04:
            b[reth + 8 : reth + 12] = (pf.rkey ^ 0x55).to_bytes(4, "big")  # bad rkey
        elif r < 0.08:
            b[reth : reth + 8] = (pf.va + (1 << 30)).to_bytes(8, "big")  # out of bounds
        elif r < 0.10:
            b[reth : reth + 8] = (pf.va - 1).to_bytes(8, "big")  # misplaced, in bounds
        out.append((p, bytes(b)))
    return out


def test_bad_rkey_bounds_and_deregistration() -> None:
    kw = {"verify_checksums": False}
    frames = _generate(0, kw)
    rng = random.Random(9)
    batches = _batches(_tamper(frames, rng), rng)
    res = _compare(batches, 0, kw)
    c = res["ref"]["counters"]
    assert c.get("rx_bad_rkey", 0) > 0 and c.get("rx_out_of_bounds", 0) > 0
    assert c.get("tx_nack", 0) > 0
    # The region goes away between two batches: from then on nothing is written.
    res = _compare(batches, 0, kw, dereg_at=len(batches) // 2)
    assert res["ref"]["counters"].get("rx_bad_rkey", 0) > c.get("rx_bad_rkey", 0)


@pytest.mark.parametrize("verify", [True, False])
def test_lane_stops_at_junk_and_other_qps(verify: bool) -> None:
    """Junk (truncated, bad ICRC, another QP, a stranger) between good frames."""
    kw = {"verify_checksums": verify}
    frames = _generate(0, kw)
    rng = random.Random(3)
    mixed: list[tuple[int, bytes]] = []
    for p, f in frames:
        mixed.append((p, f))
        r = rng.random()
        if r < 0.05:
            mixed.append((p, f[:50]))
        elif r < 0.1:
            mixed.append((p, f[:-1] + bytes([f[-1] ^ 1])))
        elif r < 0.15:
            b = bytearray(f)
            b[14 + 80 + 8 + 5] ^= 0x40  # BTH destination QP
            mixed.append((p, bytes(b)))
        elif r < 0.2:
            b = bytearray(f)
            b[14 + 40 + 8] ^= 1  # inner source address
            mixed.append((p, bytes(b)))
    batches = [mixed[i : i + 13] for i in range(0, len(mixed), 13)]
    res = _compare(batches, 0, kw)
    c = res["ref"]["counters"]
    assert c.get("rx_malformed_truncated", 0) > 0
    if verify:
        assert c.get("rx_malformed_bad_icrc", 0) > 0
    else:
        assert c.get("rx_wrong_peer", 0) > 0 and c.get("rx_unknown_qpn", 0) > 0


def test_many_packets_per_sack() -> None:
    """ack_every above what the record keeps of the packets since the last SACK (the
    rest in a Python list): the lane stops, the SACKs carry every window."""
    kw = {"ack_every": 100, "ack_delay": 1.0}
    frames = _generate(0, kw, writes=1)  # (a message's last packet asks for an ACK)
    # backwards, 100 a batch: no packet is 32 beyond the first since the last SACK
    _compare([frames[i : i + 100][::-1] for i in range(0, len(frames), 100)], 0, kw)


def test_qp_destroyed_and_reset_between_batches() -> None:
    """The lane's QP goes away (and a new one takes its number): nothing of the old
    state is used."""
    frames = _generate(0, {})
    for mode in [m for m in MODES[:3] if m != "c" or HAVE_C]:
        _net, (_qa, qb, _ms, _md, _src), hb = _setup(mode, 0, {}, 600_000)
        if mode == "nolane":
            hb._lane = None
        hb.receive_batch([f for _, f in frames[:20]], 0, 1.0)
        hb.modify_qp(qb, QPState.ERROR)
        hb.receive_batch([f for _, f in frames[20:40]], 0, 1.1)
        hb.destroy_qp(qb)
        hb.receive_batch([f for _, f in frames[40:60]], 0, 1.2)
        c = hb.counters()
        assert c.get("rx_qp_not_ready", 0) == 20 and c.get("rx_unknown_qpn", 0) == 20, mode


# --- the pieces, C against Python ---------------------------------------------------


@needs_c
def test_constants_match_the_header() -> None:
    lib = native.C
    assert lib.MRC_RX_UNREP_MAX == rxlane.RX_UNREP_MAX
    assert lib.MRC_RX_PEERS_MAX == rxlane.RX_PEERS_MAX
    assert (lib.MRC_RX_END, lib.MRC_RX_SACK, lib.MRC_RX_STOP, lib.MRC_RX_SACKS,
            lib.MRC_RX_ACKS) == (rxlane.RX_END, rxlane.RX_SACK, rxlane.RX_STOP,
                                 rxlane.RX_SACKS, rxlane.RX_ACKS)
    assert max(rxlane.RX_END, rxlane.RX_SACK, rxlane.RX_STOP) | rxlane.RX_SACKS | \
        rxlane.RX_ACKS | rxlane.RX_IMM | rxlane.RX_ACKAT < 1 << rxlane.RX_POS_SHIFT
    assert lib.MRC_RX_ACK_INTS == rxlane.RX_ACK_INTS
    names = ["NONE", "PARSE", "OTHER", "PEER", "WINDOW", "MR_MISS", "MR_BAD", "DUP",
             "TRIMMED", "IMM", "FULL", "DELIVER", "SHORT", "ACK"]
    assert [getattr(lib, f"MRC_RX_WHY_{n}") for n in names] == [
        getattr(rxlane, f"WHY_{n}") for n in names]
    assert lib.MRC_RX_SACK_MAX == 512


def _fill(rx: Any, rng: random.Random, rcv: int, n: int) -> None:
    rx.rcv_nxt = rcv
    m = rx.ooo_cap - 1
    for s in rng.sample(range(rcv + 1, rcv + rx.ooo_cap), n):
        j = s & m
        rx.ooo_seq[j], rx.ooo_len[j], rx.ooo_op[j] = s, rng.randrange(9000), 0xC7
        rx.ooo_msn[j], rx.ooo_imm[j] = rng.getrandbits(24), rng.getrandbits(32)
        rx.ooo_n += 1
        rx.rx_high = max(rx.rx_high, s)


def _ring(rx: Any) -> dict[int, tuple[int, ...]]:
    return {int(rx.ooo_seq[i]): (int(rx.ooo_len[i]), int(rx.ooo_op[i]), int(rx.ooo_msn[i]),
                                 int(rx.ooo_imm[i]))
            for i in range(rx.ooo_cap) if rx.ooo_seq[i] >= 0}


@needs_c
@pytest.mark.parametrize("seed", range(5))
def test_ring_grow_and_bitmap(seed: int) -> None:
    rng = random.Random(seed)
    C, P = CRxLane, PyRxLane
    c, p = C.new_state(128), P.new_state(128)
    rcv = rng.choice([0, (1 << 24) - 60, 123_456_789])
    for rx in (c, p):
        _fill(rx, random.Random(seed), rcv, 40)
    assert _ring(c) == _ring(p)
    for base in range(rcv - 70, rcv + 200, 7):
        assert C.bitmap(c, base) == P.bitmap(p, base)
    C.grow(c, 512)
    P.grow(p, 512)
    assert c.ooo_cap == p.ooo_cap == 512 and _ring(c) == _ring(p)
    for base in range(rcv - 70, rcv + 200, 3):
        assert C.bitmap(c, base) == P.bitmap(p, base)
    assert ring_size(1) == ring_size(64) == 64 and ring_size(65) == 128
    assert ring_size(4096) == 4096


@needs_c
@pytest.mark.parametrize("seed", range(8))
def test_sack_frames_c_and_python(seed: int) -> None:
    """mrc_rx_sack == SackTemplate.build_fields, for random states (extra windows,
    clamped offsets, byte counts past 2^32, bases given by Python)."""
    rng = random.Random(seed)
    net = Net(n_hosts=2, planes=2, spines=2)
    connect(net, 0, 1)
    route = net.fabric.provider("h1").routes("h0", rng.randrange(2))[rng.randrange(2)]
    st = SackTemplate(route, dest_qp=rng.getrandbits(24), src_qp=rng.getrandbits(24),
                      mpr=rng.getrandbits(8))
    C, P = CRxLane, PyRxLane
    c, p = C.new_state(256), P.new_state(256)
    rcv = rng.choice([5, (1 << 24) - 3, 1 << 40])
    for rx in (c, p):
        r2 = random.Random(seed)
        _fill(rx, r2, rcv, r2.randrange(0, 100))
        rx.ack_seq = rcv + r2.randrange(-40_000, 40_000)
        rx.ack_ev, rx.ack_ts, rx.ack_ce = r2.getrandbits(32), r2.getrandbits(16), r2.randrange(2)
        rx.rcvd_bytes = r2.getrandbits(40)
        k = r2.randrange(0, 40)
        for i in range(k):
            rx.unrep[i] = rcv + r2.randrange(-10, 250)
        rx.unrep_n = k
    ev, pen = rng.getrandbits(32), rng.randrange(128)
    probe = rng.choice([-1, rng.getrandbits(16)])  # a probe response (PR) or not
    assert sack_bases(c, []) == sack_bases(p, [])
    assert C.sack(c, C.sack_template(st), ev, pen, probe, None) == \
        P.sack(p, P.sack_template(st), ev, pen, probe, None)
    assert c.unrep_n == p.unrep_n == 0
    bases = [rcv + 1, rcv + 1 + SACK_BITMAP_BITS, rcv + 500]
    assert C.sack(c, C.sack_template(st), ev, pen, probe, bases) == \
        P.sack(p, P.sack_template(st), ev, pen, probe, bases)


@needs_c
def test_lane_never_reads_or_writes_out_of_bounds() -> None:
    """Frames cut anywhere, and regions of every size: the lane stops or places, and
    what it places is what the frame-by-frame path places."""
    frames = _generate(0, {}, size=40_000)
    rng = random.Random(11)
    cut = []
    for p, f in frames:
        cut.append((p, f[: rng.randrange(len(f) + 1)] if rng.random() < 0.3 else f))
    batches = [cut[i : i + 7] for i in range(0, len(cut), 7)]
    _compare(batches, 0, {}, size=40_000)


@needs_c
def test_slot_frames_view_a_c_batch() -> None:
    """recv_slots + SlotFrames (mrcd's receive without per-frame views) show the frames
    the batch received, and a Host takes them like a list of the same frames."""
    import socket

    frames = _generate(0, {})[:12]
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b, CBatchIO(b.fileno(), max_batch=8, bufsize=9216) as io:
        for _, f in frames[:5]:
            a.send(f)
        assert recv_slots(io) == 5 == io.last_received
        sf = SlotFrames(io, 5)
        assert [bytes(v) for v in sf] == [f for _, f in frames[:5]]
        assert bytes(sf[-1]) == frames[4][1] and len(sf[1:3]) == 2
        with pytest.raises(IndexError):
            sf[5]
        assert recv_slots(io) == 0
        results = []
        for use_slots in (True, False):
            _net, (_qa, _qb, _ms, md, _src), hb = _setup("c", 0, {}, 600_000)
            for _, f in frames:
                a.send(f)
            k = recv_slots(io)
            assert k == 8
            hb.receive_batch(SlotFrames(io, k) if use_slots
                             else [bytes(v) for v in SlotFrames(io, k)], 0, 1.0,
                             io if use_slots else None)
            k = recv_slots(io)
            hb.receive_batch(SlotFrames(io, k), 0, 1.1, io if use_slots else None)
            results.append((hb.counters(), bytes(md.view), hb.frames_to_send(1.2)))
        assert results[0] == results[1]
        assert results[0][0]["rx_data"] == 12


@pytest.mark.parametrize("seed", range(4))
def test_mutated_frames_same_decisions(seed: int) -> None:
    """Random bytes of the headers changed (no checksum verification, so they get past
    the parser: odd PSNs, lengths, addresses, keys, opcodes, flags): the lane decides
    like the frame-by-frame path, and never writes outside the region."""
    kw = {"verify_checksums": False}
    frames = _generate(0, kw, size=300_000)
    rng = random.Random(seed)
    out = []
    for p, f in frames:
        b = bytearray(f)
        for _ in range(rng.randrange(3) if rng.random() < 0.4 else 0):
            i = rng.randrange(14, min(len(b), 200))
            b[i] ^= 1 << rng.randrange(8)
        out.append((p, bytes(b)))
    _compare([out[i : i + 9] for i in range(0, len(out), 9)], 0, kw, size=300_000)


@pytest.mark.parametrize("lone", [False, True])
def test_ack_req_burst_answers_a_burst_with_one_sack(lone: bool) -> None:
    """``ack_req_burst``: small writes, each with its AckReq, arriving in bursts are
    answered by one SACK per burst (at its end), in the C lane, the Python lane, the
    batch path and frame by frame alike; and with far fewer SACKs than without it."""
    n, size = 60, 60 * 64
    base = {"ack_lone": lone}
    frames = _generate(0, base, size=size, writes=n)  # 60 single-packet writes
    assert len(frames) == n
    batches = _batches(frames, random.Random(11), trim_p=0.0, dup=0.0, batch=12)
    on = _compare(batches, 0, {**base, "ack_req_burst": True}, size=size)
    off = _compare(batches, 0, base, size=size)
    assert on["ref"]["dst"] == off["ref"]["dst"] and on["ref"]["cq"] == off["ref"]["cq"]
    assert on["ref"]["state"][0] == off["ref"]["state"][0]  # everything acknowledged
    acks_on, acks_off = len(on["ref"]["out"]), len(off["ref"]["out"])
    # (a burst's SACK, and one more where reordering leaves a hole: 16 for 12 bursts)
    assert acks_on <= 2 * len(batches) and 2 * acks_on < acks_off, (
        acks_on, len(batches), acks_off)


@pytest.mark.parametrize("fill", [True, False])
def test_a_gap_that_completes_a_message_is_acknowledged_at_once(fill: bool) -> None:
    """``ack_gap_fill``: a write's last packet (its AckReq) arrives before its first; the
    first then completes the message and is SACKed in the same batch (C lane, Python
    lane, batch path and frame by frame alike), not ``ack_delay`` later."""
    # (holds longer than the batches' gaps: the ACK delay, and the hole's age that SACKs
    # an out-of-order arrival at once)
    kw = {"ack_gap_fill": fill, "ack_delay": 20e-6, "reorder_floor": 20e-6}
    size = 3 * 4096  # one write of three packets: FIRST, MIDDLE, LAST
    frames = _generate(0, kw, size=size, writes=1)
    assert len(frames) == 3
    batches = [[frames[2]], [frames[1]], [frames[0]]]  # last first, the gap closes last
    res = _compare(batches, 0, kw, size=size)
    sent_after = [b for b, _p, _f in res["ref"]["out"]]
    assert sent_after.count(0) == 1  # the AckReq, out of order: SACKed at once
    # the batch that completes the message: SACKed there, or only at ack_delay (20 us,
    # the test's batches are 7 us apart: not within these three)
    assert (2 in sent_after) is fill, sent_after


@pytest.mark.skipif(not HAVE_C, reason="the C lane's one-frame entry")
def test_one_frame_a_call_runs_the_lane_without_loading_it() -> None:
    """mrc-sim's hosts get a frame per call (a bytearray, or bytes): the C lane runs it
    in place (``run_one``, mrc_rx_one) instead of loading it; the same decisions as
    loading each frame alone, and as the per-frame path."""
    kw: dict[str, Any] = {}
    frames = _generate(0, kw)
    batches = [[pf] for b in _batches(frames, random.Random(6)) for pf in b]
    res = {m: _replay(m, batches, 0, kw) for m in ("c", "ref")}
    loaded = res["c"]
    for kind in (bytearray, bytes):
        _net, (_qa, _qb, _ms, md, _src), hb = _setup("c", 0, kw, 600_000)
        runs = [0]
        one = hb._lane.one  # (run_one's C entry, which the receive loop calls)

        def counted(buf: Any, n: int, now: float, plane: int, runs: list[int] = runs,
                    one: Any = one) -> int:
            runs[0] += 1
            return one(buf, n, now, plane)  # type: ignore[no-any-return]

        hb._lane.one = counted
        out: list[tuple[int, int, bytes]] = []
        now = 1.0
        for b, batch in enumerate(batches):
            now += 7e-6
            port, f = batch[0]
            hb.receive_batch((kind(f),), port, now)
            t = hb.next_timer()
            if t is not None and t <= now:
                hb.handle_timer(now)
            out += [(b, p, bytes(x)) for p, x in hb.frames_to_send(now)]
        assert runs[0] == len(batches)
        assert out == loaded["out"] == res["ref"]["out"]
        assert hb.counters() == loaded["counters"] == res["ref"]["counters"]
        assert bytes(md.view) == loaded["dst"]
