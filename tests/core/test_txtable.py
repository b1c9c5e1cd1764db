"""The requester's table of packets in flight: the C table and its Python twin agree.

Random operation sequences (send runs, resends, losses, SACKs with cumulative points and
bitmaps, stale and forged ones, RACK scans) run on both; after every step their results
and their whole state (every entry, the flight order, the counters) must be equal, and the
Python twin must also agree with a plain reference model of what was acknowledged.
"""

from __future__ import annotations

import random

import pytest

from mrcnet.core.txtable import CTxTable, PyTxTable, TxTable, new_tx_table
from mrcnet.native import HAVE_C

needs_c = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")

WINDOW = 64
SEG = 1000


def _state(t: TxTable, lo: int, hi: int) -> tuple[object, ...]:
    return (
        [t.get(s) for s in range(lo - 2, hi + 2)],
        t.inflight(),
        t.oldest(),
        t.ninfl,
        t.infl_bytes,
        t.rack_sent,
        t.rack_rtt,
        [t.wr_unacked(w) for w in range(8)],
        [t.path_acked(k) for k in (0, 1, 2, 3, 0x1001, 0x1002, 0x1000, 7)],
    )


def _run(seed: int, tables: list[TxTable], start: int) -> None:
    rnd = random.Random(seed)
    now = 1.0
    next_seq = snd_una = start
    wr = 0
    acked: set[int] = set()
    for _step in range(400):
        now += rnd.random() * 0.001
        op = rnd.random()
        if op < 0.35 and next_seq - snd_una < WINDOW - 8:
            n = rnd.randint(1, 8)
            evs = [rnd.choice([0x1000, 0x2001, 0x1001002, 0x1002000]) for _ in range(n)]
            ops = [rnd.randint(6, 11) for _ in range(n)]
            total = rnd.randint(0, n * SEG)
            for t in tables:
                t.send(next_seq, evs, ops, wr, 0, SEG, total, now, int(now * 1000) & 0xFFFF)
            next_seq += n
            wr += 1
        elif op < 0.42 and next_seq - snd_una < WINDOW - 8:
            # single-packet work requests, several per call (send_msgs)
            n = rnd.randint(1, 8)
            evs = [rnd.choice([0x1000, 0x2001, 0x1001002, 0x1002000]) for _ in range(n)]
            ops = [rnd.choice([10, 11]) for _ in range(n)]
            lens = [rnd.randint(0, SEG) for _ in range(n)]
            wrs = list(range(wr, wr + n))
            for t in tables:
                t.send_msgs(next_seq, evs, ops, wrs, lens, now, int(now * 1000) & 0xFFFF)
            next_seq += n
            wr += n
        elif op < 0.45 and next_seq > snd_una:
            seq = rnd.randrange(snd_una - 2, next_seq + 2)
            res = [t.lose(seq) for t in tables]
            assert len(set(res)) == 1
        elif op < 0.55 and next_seq > snd_una:
            seq = rnd.randrange(snd_una - 2, next_seq + 2)
            res = [t.resend(seq, 0x3000, now, 7) for t in tables]
            assert len(set(res)) == 1
        elif op < 0.6 and next_seq > snd_una:
            seq = rnd.randrange(snd_una - 2, next_seq + 2)
            on = rnd.random() < 0.7
            res = [t.log(seq, on) for t in tables]
            assert len(set(res)) == 1
        elif op < 0.9:
            cack = rnd.randint(snd_una - 3, next_seq) if rnd.random() < 0.9 else snd_una
            off = 1 if rnd.random() < 0.8 else rnd.randint(-70, 70)
            bm = rnd.getrandbits(64) if rnd.random() < 0.8 else 0
            trig = rnd.randrange(snd_una - 2, next_seq + 2)
            entry = tables[0].get(trig)
            ev, ts = (entry[0], entry[2]) if entry and rnd.random() < 0.8 else (5, 5)
            res = []
            for t in tables:
                n = t.sack(now, snd_una, cack, next_seq, cack + off, bm, off == 1, trig, ev, ts)
                res.append((n, t.trig_tx, t.trig_sent if t.trig_tx else None,
                            sorted(t.paths()), t.specials()))
            assert all(r == res[0] for r in res), (res, seed)
            if cack > snd_una:
                acked.update(range(snd_una, cack))
                snd_una = cack
        else:
            limit, wait = now - rnd.random() * 0.01, rnd.random() * 0.01
            res2 = [t.rack(limit, wait, now) for t in tables]
            assert all(r == res2[0] for r in res2)
            # rack_prompt's walk: a bound at a packet's own send time (the tie-break's
            # case) as often as not, some opcodes marked as ends, due times on both
            # sides of now
            infl = tables[0].inflight()
            if infl and rnd.random() < 0.5:
                entry = tables[0].get(rnd.choice(infl))
                assert entry is not None
                limit = entry[1]
            ends = bytes(rnd.random() < 0.3 for _ in range(256))
            tied, tie_seq = rnd.random() < 0.5, rnd.randrange(snd_una, next_seq + 2)
            rtt, window = rnd.random() * 0.005, rnd.random() * 0.005
            res3 = [t.prompt_scan(limit, tied, tie_seq, snd_una, ends, rtt, window, now)
                    for t in tables]
            assert all(r == res3[0] for r in res3), (res3, seed)
        states = [_state(t, snd_una, next_seq) for t in tables]
        assert all(s == states[0] for s in states), seed
        # Everything below the cumulative point is gone from the table.
        assert all(tables[0].get(s) is None for s in range(max(start, snd_una - 8), snd_una))


@needs_c
@pytest.mark.parametrize("seed", range(40))
def test_c_table_matches_python_twin(seed: int) -> None:
    start = [0, 5, (1 << 24) - 20, 1 << 40][seed % 4]
    tables: list[TxTable] = [PyTxTable(WINDOW, start), CTxTable(WINDOW, start)]
    _run(seed, tables, start)


@pytest.mark.parametrize("seed", range(10))
def test_python_twin_alone(seed: int) -> None:
    """The twin on its own (the fallback's table): the same checks, one table."""
    _run(seed, [PyTxTable(WINDOW, 0)], 0)


def test_sack_bookkeeping() -> None:
    """A worked example: bytes, RTT trigger, newest send per path, RACK order."""
    for t in (PyTxTable(16, 100), new_tx_table(16, 100)):
        t.send(100, [0x1000, 0x2000, 0x1000, 0x2000], [6, 7, 7, 8], 0, 0, 1000, 3500, 1.0, 9)
        assert (t.ninfl, t.infl_bytes, t.wr_unacked(0)) == (4, 3500, 4)
        assert t.rack(2.0, 0.5, 1.2) == ([], 1.5)
        # cumulative 102, bit for 103 (base 103 = cack + 1): three packets, 2500 bytes
        assert t.sack(1.3, 100, 102, 104, 103, 1, True, 103, 0x2000, 9) == 2500
        assert t.trig_tx == 1 and t.trig_sent == 1.0
        assert sorted(t.paths()) == [(1, 1.0), (2, 1.0)]
        assert (t.path_acked(1), t.path_acked(2), t.path_acked(3)) == (1.0, 1.0, -1.0)
        assert (t.ninfl, t.infl_bytes, t.wr_unacked(0)) == (1, 1000, 1)
        assert t.rack_sent == 1.0 and t.rack_rtt == pytest.approx(0.3)
        assert t.inflight() == [102] and t.oldest() == 102
        # the same bit again is not walked twice
        assert t.sack(1.4, 102, 102, 104, 103, 1, True, 0, 0, 0) == 0
        assert t.lose(102) and t.get(102)[8] & 4  # type: ignore[index]
        assert t.inflight() == [] and t.infl_bytes == 0
        assert t.log(102, True)
        assert t.resend(102, 0x3000, 1.5, 11)
        assert t.get(102)[:4] == (0x3000, 1.5, 11, 2)  # type: ignore[index]
        assert t.sack(1.6, 102, 104, 104, 105, 0, True, 102, 0x3000, 11) == 1000
        assert t.trig_tx == 2 and t.specials() == [(102, 1.5, False)]
        assert t.ninfl == 0 and t.get(102) is None and t.wr_unacked(0) == 0


@pytest.mark.parametrize("seed", range(6))
def test_send_msgs_is_one_send_per_packet(seed: int) -> None:
    """Single-packet work requests given together (send_msgs) leave the table exactly as
    one send() each: entries, flight order, bytes, per work request counts."""
    rnd = random.Random(seed)
    n = rnd.randint(1, 30)
    evs = [rnd.choice([0x1000, 0x2001, 0x1001002]) for _ in range(n)]
    ops = [rnd.choice([10, 11]) for _ in range(n)]
    lens = [rnd.randint(0, SEG) for _ in range(n)]
    wrs = [rnd.randint(0, 7) for _ in range(n)]
    kinds = [PyTxTable] + ([CTxTable] if HAVE_C else [])
    for kind in kinds:
        one, many = kind(WINDOW, 40), kind(WINDOW, 40)
        for i in range(n):
            one.send(40 + i, evs[i:i + 1], ops[i:i + 1], wrs[i], 0, SEG, lens[i], 2.0, 5)
        many.send_msgs(40, evs, ops, wrs, lens, 2.0, 5)
        assert _state(many, 40, 40 + n) == _state(one, 40, 40 + n)
        assert many.ninfl == n and many.infl_bytes == sum(lens)
