"""The requester's table of packets sent and not yet acknowledged.

One entry per PSN: its EV, send time, TSETH stamp, transmission count, length, offset and
opcode within its work request, the work request's slot, and whether it is in flight or
waiting for a retransmission. The packets in flight are also kept in transmission order
(RACK walks them from the oldest).

:class:`~mrcnet.core.qp.QueuePair` calls in once per run of new packets and once per
SACK, never per packet: the per-packet bookkeeping of sending and acknowledging is the
table's, every decision (loss, paths, congestion) the QP's. With the C fast path the table
is ``mrcnet/_csrc/tx.c`` (:class:`mrcnet.fastpath.CTxTable`); :class:`PyTxTable` here is
its pure-Python twin with the same interface and results (``tests/core/test_txtable.py``
runs both on the same operations and compares).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Protocol

from mrcnet import fastpath

# Entry flags (mrcnet/_csrc/tx.h MRC_TX_*)
LIVE, INFL, PEND, LOGGED = 1, 2, 4, 8

#: (ev, sent, ts, tx, length, off, opcode, wr slot, flags) of one packet
Entry = tuple[int, float, int, int, int, int, int, int, int]


class TxTable(Protocol):
    """What :class:`PyTxTable` and :class:`mrcnet.fastpath.CTxTable` both offer."""

    trig_tx: int
    trig_sent: float

    @property
    def ninfl(self) -> int: ...
    @property
    def infl_bytes(self) -> int: ...
    @property
    def rack_sent(self) -> float: ...
    @property
    def rack_rtt(self) -> float: ...
    def send(self, seq0: int, evs: list[int], ops: list[int], wr: int, off0: int, seg: int,
             total: int, now: float, ts: int) -> None: ...
    def resend(self, seq: int, ev: int, now: float, ts: int) -> bool: ...
    def lose(self, seq: int) -> bool: ...
    def log(self, seq: int, on: bool) -> bool: ...
    def get(self, seq: int) -> Entry | None: ...
    def sack(self, now: float, snd_una: int, cack: int, next_seq: int, base: int, bm: int,
             first: bool, trig: int, ev: int, ts: int) -> int: ...
    def paths(self) -> list[tuple[int, float]]: ...
    def specials(self) -> list[tuple[int, float, bool]]: ...
    def rack(self, limit: float, wait: float, now: float) -> tuple[list[int], float]: ...
    def inflight(self) -> list[int]: ...
    def oldest(self) -> int | None: ...
    def wr_unacked(self, wr: int) -> int: ...
    def path_acked(self, key: int) -> float: ...


class PyTxTable:
    """Pure-Python :class:`TxTable` (the C one's twin)."""

    def __init__(self, capacity: int, seq: int, paths: int = 16) -> None:
        self._path_acked: dict[int, float] = {}  # path -> newest send time acknowledged
        self._pk: dict[int, list[Any]] = {}  # seq -> [ev, sent, ts, tx, len, off, op, wr, flags]
        self._infl: OrderedDict[int, None] = OrderedDict()  # in transmission order
        self._wr: dict[int, int] = {}
        self._wr_mask = 2 * capacity - 1
        self.infl_bytes = 0
        self.rack_sent = -1.0
        self.rack_rtt = 0.0
        self._seen_base, self._seen_bm = seq, 0
        self.trig_tx, self.trig_sent = 0, 0.0
        self._paths: dict[int, float] = {}
        self._specials: list[tuple[int, float, bool]] = []

    @property
    def ninfl(self) -> int:
        """Packets in flight."""
        return len(self._infl)

    def send(self, seq0: int, evs: list[int], ops: list[int], wr: int, off0: int, seg: int,
             total: int, now: float, ts: int) -> None:
        """New packets ``seq0 ..`` (one per EV) of work request slot ``wr``, sent now."""
        pk, infl = self._pk, self._infl
        off = off0
        for k, ev in enumerate(evs):
            length = max(0, min(seg, total - off))
            pk[seq0 + k] = [ev, now, ts, 1, length, off, ops[k], wr, LIVE | INFL]
            infl[seq0 + k] = None
            self.infl_bytes += length
            off += seg
        slot = wr & self._wr_mask
        self._wr[slot] = self._wr.get(slot, 0) + len(evs)

    def resend(self, seq: int, ev: int, now: float, ts: int) -> bool:
        """A retransmission of ``seq`` on ``ev`` (to the end of the flight order)."""
        e = self._pk.get(seq)
        if e is None:
            return False
        self._unlink(seq, e)
        e[0], e[1], e[2] = ev, now, ts
        e[3] += 1
        e[8] = (e[8] & ~PEND) | INFL
        self._infl[seq] = None
        self.infl_bytes += e[4]
        return True

    def _unlink(self, seq: int, e: list[Any]) -> None:
        if e[8] & INFL:
            del self._infl[seq]
            self.infl_bytes -= e[4]
            e[8] &= ~INFL

    def lose(self, seq: int) -> bool:
        """``seq`` is declared lost: out of flight, waiting for a retransmission."""
        e = self._pk.get(seq)
        if e is None:
            return False
        self._unlink(seq, e)
        e[8] |= PEND
        return True

    def log(self, seq: int, on: bool) -> bool:
        """Mark (or unmark) ``seq`` as having a "declared lost" record."""
        e = self._pk.get(seq)
        if e is None:
            return False
        e[8] = e[8] | LOGGED if on else e[8] & ~LOGGED
        return True

    def get(self, seq: int) -> Entry | None:
        """The entry of an unacknowledged ``seq``, else None."""
        e = self._pk.get(seq)
        return None if e is None else tuple(e)  # type: ignore[return-value]

    def _acked(self, seq: int, e: list[Any], now: float) -> int:
        self._unlink(seq, e)
        del self._pk[seq]
        key, sent = e[0] >> 12, e[1]
        if sent > self._paths.get(key, -1.0):
            self._paths[key] = sent
        if sent > self._path_acked.get(key, -1.0):
            self._path_acked[key] = sent
        if e[8] & LOGGED:
            self._specials.append((seq, sent, bool(e[8] & PEND)))
        slot = e[7] & self._wr_mask
        self._wr[slot] -= 1
        if sent > self.rack_sent:
            self.rack_sent = sent
            self.rack_rtt = now - sent
        return e[4] or 1

    def sack(self, now: float, snd_una: int, cack: int, next_seq: int, base: int, bm: int,
             first: bool, trig: int, ev: int, ts: int) -> int:
        """A SACK: acknowledge ``[snd_una, cack)`` and the bits of ``bm`` over ``[base,
        base + 64)`` (``first``: the window right after the cumulative point, whose bits
        already walked are skipped). Returns the bytes acknowledged (1 for a packet
        without payload); :attr:`trig_tx` / :attr:`trig_sent` describe ``trig`` if the
        SACK is about its latest transmission (``ev`` and TSETH ``ts``)."""
        pk = self._pk
        self._paths = {}
        self._specials = []
        self.trig_tx = 0
        e = pk.get(trig)
        if e is not None and e[0] == ev and e[2] == ts and e[3]:
            self.trig_tx, self.trig_sent = e[3], e[1]
        total = 0
        for seq in range(snd_una, cack):
            e = pk.get(seq)
            if e is not None:
                total += self._acked(seq, e, now)
        if not bm:
            return total
        d = base - self._seen_base
        if d >= 0 and first:
            if next_seq - base < 64:  # bits past next_seq: ignored
                bm &= (1 << max(0, next_seq - base)) - 1
            seen = self._seen_bm >> d if d < 64 else 0
            self._seen_base, self._seen_bm = base, bm | seen
            bm &= ~seen
        while bm:
            low = bm & -bm
            seq = base + low.bit_length() - 1
            bm ^= low
            if seq >= next_seq:
                break
            e = pk.get(seq)
            if e is not None:
                total += self._acked(seq, e, now)
        return total

    def paths(self) -> list[tuple[int, float]]:
        """(path key, newest send time) of what the last :meth:`sack` acknowledged."""
        return list(self._paths.items())

    def specials(self) -> list[tuple[int, float, bool]]:
        """(seq, send time, was waiting for a retransmission) of the packets with a
        "declared lost" record that the last :meth:`sack` acknowledged."""
        return self._specials

    def rack(self, limit: float, wait: float, now: float) -> tuple[list[int], float]:
        """Packets in flight sent before ``limit`` and at least ``wait`` ago, and when the
        next would be (inf: none)."""
        lost = []
        pk = self._pk
        for seq in self._infl:
            sent = pk[seq][1]
            if sent >= limit:
                break
            if sent + wait <= now:
                lost.append(seq)
            else:
                return lost, sent + wait
        return lost, float("inf")

    def inflight(self) -> list[int]:
        """The packets in flight, oldest first."""
        return list(self._infl)

    def oldest(self) -> int | None:
        """The packet in flight longest, if any."""
        for seq in self._infl:
            return seq
        return None

    def wr_unacked(self, wr: int) -> int:
        """Packets of work request slot ``wr`` not yet acknowledged."""
        return self._wr.get(wr & self._wr_mask, 0)

    def path_acked(self, key: int) -> float:
        """The newest send time of a packet acknowledged on path ``key`` (-1: none)."""
        return self._path_acked.get(key, -1.0)


def new_tx_table(window: int, seq: int, paths: int = 16) -> TxTable:
    """A table for a send window of ``window`` PSNs starting at ``seq`` over at most
    ``paths`` paths: the C one when the fast path is built."""
    capacity = 1 << max(4, (window - 1).bit_length())
    if fastpath.HAVE_C:
        return fastpath.CTxTable(capacity, seq, paths)
    return PyTxTable(capacity, seq, paths)
