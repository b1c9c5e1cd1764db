"""The requester's table of packets sent and not yet acknowledged.

One entry per PSN: its EV, send time, TSETH stamp, transmission count, length, offset and
opcode within its work request, the work request's slot, and whether it is in flight or
waiting for a retransmission. The packets in flight are also kept in transmission order
(RACK walks them from the oldest).

:class:`~mrcnet.core.qp.QueuePair` calls in once per run of new packets and once per
SACK, never per packet: the per-packet bookkeeping of sending and acknowledging is the
table's, every decision (loss, paths, congestion) the QP's. With the C fast path the table
is ``mrcnet/_csrc/txtable.c`` (:class:`CTxTable`, below); :class:`PyTxTable` is its
pure-Python twin with the same interface and results (``tests/core/test_txtable.py``
runs both on the same operations and compares).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final, Protocol

from mrcnet.constants import EV_PATH_SHIFT
from mrcnet.native import HAVE_C, NOT_BUILT, C, ffi

_INF = float("inf")

# Entry flags (mrcnet/_csrc/txtable.h MRC_TX_*)
LIVE, INFL, PEND, LOGGED = 1, 2, 4, 8

#: (ev, sent, ts, tx, length, off, opcode, wr slot, flags) of one packet
Entry = tuple[int, float, int, int, int, int, int, int, int]
# Where each field is in an Entry (and in PyTxTable's per-packet lists): names that cost
# what the bare index costs (a NamedTuple would cost its constructor per packet and get)
E_EV: Final = 0  # the EV of the latest transmission
E_SENT: Final = 1  # its send time
E_TS: Final = 2  # its TSETH stamp
E_TX: Final = 3  # transmissions so far
E_LEN: Final = 4  # payload bytes
E_OFF: Final = 5  # offset within the work request
E_OP: Final = 6  # opcode
E_WR: Final = 7  # the work request's slot
E_FLAGS: Final = 8  # LIVE | INFL | PEND | LOGGED


class TxTable(Protocol):
    """What :class:`PyTxTable` and :class:`CTxTable` both offer."""

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
    def send_msgs(self, seq0: int, evs: list[int], ops: list[int], wrs: list[int],
                  lens: list[int], now: float, ts: int) -> None: ...
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
    def prompt_scan(self, limit: float, tied: bool, tie_seq: int, una: int, ends: bytes,
                    rtt: float, window: float, now: float) -> tuple[list[int], float]: ...
    def oldest(self) -> int | None: ...
    def wr_unacked(self, wr: int) -> int: ...
    def path_acked(self, key: int) -> float: ...


class PyTxTable:
    """Pure-Python :class:`TxTable` (the C one's twin)."""

    def __init__(self, capacity: int, seq: int, paths: int = 16) -> None:
        self._path_acked: dict[int, float] = {}  # path -> newest send time acknowledged
        self._pk: dict[int, list[Any]] = {}  # seq -> its fields, at E_EV .. E_FLAGS
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

    def send_msgs(self, seq0: int, evs: list[int], ops: list[int], wrs: list[int],
                  lens: list[int], now: float, ts: int) -> None:
        """New packets ``seq0 ..`` (one per EV), each a whole work request: packet i is
        the ``lens[i]`` bytes of work request slot ``wrs[i]`` (as one :meth:`send` per
        packet)."""
        pk, infl, wr_count, mask = self._pk, self._infl, self._wr, self._wr_mask
        for k, ev in enumerate(evs):
            length = lens[k]
            pk[seq0 + k] = [ev, now, ts, 1, length, 0, ops[k], wrs[k], LIVE | INFL]
            infl[seq0 + k] = None
            self.infl_bytes += length
            slot = wrs[k] & mask
            wr_count[slot] = wr_count.get(slot, 0) + 1

    def resend(self, seq: int, ev: int, now: float, ts: int) -> bool:
        """A retransmission of ``seq`` on ``ev`` (to the end of the flight order)."""
        e = self._pk.get(seq)
        if e is None:
            return False
        self._unlink(seq, e)
        e[E_EV], e[E_SENT], e[E_TS] = ev, now, ts
        e[E_TX] += 1
        e[E_FLAGS] = (e[E_FLAGS] & ~PEND) | INFL
        self._infl[seq] = None
        self.infl_bytes += e[E_LEN]
        return True

    def _unlink(self, seq: int, e: list[Any]) -> None:
        if e[E_FLAGS] & INFL:
            del self._infl[seq]
            self.infl_bytes -= e[E_LEN]
            e[E_FLAGS] &= ~INFL

    def lose(self, seq: int) -> bool:
        """``seq`` is declared lost: out of flight, waiting for a retransmission."""
        e = self._pk.get(seq)
        if e is None:
            return False
        self._unlink(seq, e)
        e[E_FLAGS] |= PEND
        return True

    def log(self, seq: int, on: bool) -> bool:
        """Mark (or unmark) ``seq`` as having a "declared lost" record."""
        e = self._pk.get(seq)
        if e is None:
            return False
        e[E_FLAGS] = e[E_FLAGS] | LOGGED if on else e[E_FLAGS] & ~LOGGED
        return True

    def get(self, seq: int) -> Entry | None:
        """The entry of an unacknowledged ``seq``, else None."""
        e = self._pk.get(seq)
        return None if e is None else tuple(e)  # type: ignore[return-value]

    def _acked(self, seq: int, e: list[Any], now: float) -> int:
        self._unlink(seq, e)
        del self._pk[seq]
        key, sent = e[E_EV] >> EV_PATH_SHIFT, e[E_SENT]
        if sent > self._paths.get(key, -1.0):
            self._paths[key] = sent
        if sent > self._path_acked.get(key, -1.0):
            self._path_acked[key] = sent
        if e[E_FLAGS] & LOGGED:
            self._specials.append((seq, sent, bool(e[E_FLAGS] & PEND)))
        slot = e[E_WR] & self._wr_mask
        self._wr[slot] -= 1
        if sent > self.rack_sent:
            self.rack_sent = sent
            self.rack_rtt = now - sent
        return e[E_LEN] or 1

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
        if e is not None and e[E_EV] == ev and e[E_TS] == ts and e[E_TX]:
            self.trig_tx, self.trig_sent = e[E_TX], e[E_SENT]
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
            sent = pk[seq][E_SENT]
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

    def prompt_scan(self, limit: float, tied: bool, tie_seq: int, una: int, ends: bytes,
                    rtt: float, window: float, now: float) -> tuple[list[int], float]:
        """RACK's walk for the packets the peer reports at once
        (``TailLoss._prompt_losses``), its common case: over the packets in flight,
        oldest first, up to the first sent after ``limit`` (one sent at ``limit`` only if
        ``tied`` and below ``tie_seq``), a packet sent before ``limit`` that was
        retransmitted or has an opcode ``ends`` marks (``ends[op]`` nonzero) is due at
        sent + ``rtt`` + ``window``. Returns the packets left for the caller (such a
        packet sent at ``limit``, and ``una``), in the walk's order, and the earliest
        due time still to come (inf: none); -1.0 and no packets if one is due by
        ``now``."""
        out = []
        at = _INF
        pk = self._pk
        for seq in self._infl:
            e = pk[seq]
            sent = e[E_SENT]
            if sent > limit or (sent == limit and (not tied or seq >= tie_seq)):
                break
            end = e[E_TX] > 1 or ends[e[E_OP]]
            if end and sent < limit:
                due = sent + rtt + window
                if due <= now:
                    return [], -1.0
                at = min(at, due)
            elif end or seq == una:
                out.append(seq)
        return out, at

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


class CTxTable:
    """The requester's table of packets in flight in C (``mrcnet/_csrc/txtable.c``): the
    interface and results of :class:`PyTxTable`, which documents it."""

    __slots__ = ("_at", "_cap", "_get", "_gi", "_gs", "_keep", "_lost", "_o", "_t", "_unpack",
                 "_wr", "c", "scratch", "trig_sent", "trig_tx")

    def __init__(self, capacity: int, seq: int, paths: int = 16) -> None:
        if not HAVE_C:
            raise RuntimeError(NOT_BUILT)
        t = self._t = ffi.new("struct mrc_txq *")
        pk = ffi.new("struct mrc_txpkt[]", capacity)
        pslots = 1 << max(4, (2 * paths - 1).bit_length())
        ptab = ffi.new("struct mrc_txpath[]", pslots)
        t.paths, t.pmask = ptab, pslots - 1
        self._wr = ffi.new("int32_t[]", 2 * capacity)
        t.pk, t.mask = pk, capacity - 1
        t.wr_unacked, t.wr_mask = self._wr, 2 * capacity - 1
        o = self._o = ffi.new("struct mrc_txsack *")
        keep = [pk, ffi.new("uint32_t[]", capacity), ffi.new("double[]", capacity),
                ffi.new("uint64_t[]", capacity), ffi.new("double[]", capacity),
                ffi.new("uint8_t[]", capacity)]
        o.path_key, o.path_sent, o.special_seq, o.special_sent, o.special_pend = keep[1:]
        self._keep = [*keep, ptab]
        self._lost = ffi.new("uint64_t[]", capacity)
        self._cap = capacity
        # What the sender's decisions in C (mrcnet/core/sackrec.py) read per frame, plain
        # attributes (no property call): its ``struct mrc_txq *``, and a ``uint64_t[]``
        # of the table's capacity for C to list sequence numbers in (the one rack and
        # inflight fill) with that capacity
        self.c: Any = t
        self.scratch: tuple[Any, int] = (self._lost, capacity)
        C.mrc_tx_init(t, seq)
        self.trig_tx, self.trig_sent = 0, 0.0
        # get()'s C entry and its two out arrays
        self._get, self._unpack = C.mrc_tx_get, ffi.unpack
        self._gi, self._gs = ffi.new("int64_t[8]"), ffi.new("double[1]")
        self._at = ffi.new("double[1]")  # (prompt_scan's earliest due time)

    @property
    def ninfl(self) -> int:
        """Packets in flight."""
        return int(self._t.ninfl)

    @property
    def infl_bytes(self) -> int:
        """Payload bytes in flight."""
        return int(self._t.infl_bytes)

    @property
    def rack_sent(self) -> float:
        """Newest send time of any acknowledged packet (-1: none yet)."""
        return float(self._t.rack_sent)

    @property
    def rack_rtt(self) -> float:
        """RTT of that packet."""
        return float(self._t.rack_rtt)

    def send(self, seq0: int, evs: list[int], ops: list[int], wr: int, off0: int, seg: int,
             total: int, now: float, ts: int) -> None:
        """New packets ``seq0 ..`` (one per EV) of work request slot ``wr``, sent now."""
        C.mrc_tx_send(self._t, seq0, len(evs), evs, bytes(ops), wr, off0, seg, total, now,
                       ts)

    def send_msgs(self, seq0: int, evs: list[int], ops: list[int], wrs: list[int],
                  lens: list[int], now: float, ts: int) -> None:
        """New packets ``seq0 ..``, each a whole work request (see
        :meth:`PyTxTable.send_msgs`)."""
        C.mrc_tx_send_msgs(self._t, seq0, len(evs), evs, bytes(ops), wrs, lens, now, ts)

    def resend(self, seq: int, ev: int, now: float, ts: int) -> bool:
        """A retransmission of ``seq`` on ``ev`` (to the end of the flight order)."""
        return bool(C.mrc_tx_resend(self._t, seq, ev, now, ts))

    def lose(self, seq: int) -> bool:
        """``seq`` is declared lost: out of flight, waiting for a retransmission."""
        return bool(C.mrc_tx_lose(self._t, seq))

    def log(self, seq: int, on: bool) -> bool:
        """Mark (or unmark) ``seq`` as having a "declared lost" record."""
        return bool(C.mrc_tx_log(self._t, seq, on))

    def get(self, seq: int) -> tuple[int, float, int, int, int, int, int, int, int] | None:
        """The entry of an unacknowledged ``seq``, else None."""
        # (one C call filling two arrays: cheaper than a cdata read per field)
        if not self._get(self._t, seq, self._gi, self._gs):
            return None
        ev, ts, tx, ln, off, op, wr, fl = self._unpack(self._gi, 8)
        return (ev, self._gs[0], ts, tx, ln, off, op, wr, fl)

    def sack(self, now: float, snd_una: int, cack: int, next_seq: int, base: int, bm: int,
             first: bool, trig: int, ev: int, ts: int) -> int:
        """A SACK (see :meth:`PyTxTable.sack`)."""
        o = self._o
        n = C.mrc_tx_sack(self._t, now, snd_una, cack, next_seq, base, bm, first, trig, ev,
                           ts, o)
        tx = self.trig_tx = o.trig_tx
        if tx:
            self.trig_sent = o.trig_sent
        return int(n)

    def paths(self) -> list[tuple[int, float]]:
        """(path key, newest send time) of what the last :meth:`sack` acknowledged."""
        o = self._o
        k = o.npaths
        return list(zip(ffi.unpack(o.path_key, k), ffi.unpack(o.path_sent, k),
                        strict=True))

    def specials(self) -> list[tuple[int, float, bool]]:
        """Packets with a "declared lost" record the last :meth:`sack` acknowledged."""
        o = self._o
        k = o.nspecial
        if not k:
            return []
        return [(o.special_seq[i], o.special_sent[i], bool(o.special_pend[i]))
                for i in range(k)]

    def rack(self, limit: float, wait: float, now: float) -> tuple[list[int], float]:
        """Packets in flight sent before ``limit`` and at least ``wait`` ago, and when the
        next would be (inf: none)."""
        at = ffi.new("double *")
        n = C.mrc_tx_rack(self._t, limit, wait, now, self._lost, self._cap, at)
        return ffi.unpack(self._lost, n), at[0]

    def inflight(self) -> list[int]:
        """The packets in flight, oldest first."""
        n = C.mrc_tx_inflight(self._t, self._lost, self._cap)
        return ffi.unpack(self._lost, n)  # type: ignore[no-any-return]

    def prompt_scan(self, limit: float, tied: bool, tie_seq: int, una: int, ends: bytes,
                    rtt: float, window: float, now: float) -> tuple[list[int], float]:
        """See :meth:`PyTxTable.prompt_scan` (one C walk, no entry read per packet)."""
        at = self._at
        at[0] = _INF
        n = C.mrc_tx_prompt_scan(self._t, limit, tied, tie_seq, una, ends, rtt, window,
                                 now, at, self._lost, self._cap)
        return (ffi.unpack(self._lost, n) if n else []), at[0]

    def oldest(self) -> int | None:
        """The packet in flight longest, if any."""
        t = self._t
        return int(t.pk[t.head].seq) if t.head >= 0 else None

    def wr_unacked(self, wr: int) -> int:
        """Packets of work request slot ``wr`` not yet acknowledged."""
        return int(self._wr[wr & self._t.wr_mask])

    def path_acked(self, key: int) -> float:
        """The newest send time of a packet acknowledged on path ``key`` (-1: none)."""
        return float(C.mrc_tx_path_acked(self._t, key))



def new_tx_table(window: int, seq: int, paths: int = 16) -> TxTable:
    """A table for a send window of ``window`` PSNs starting at ``seq`` over at most
    ``paths`` paths: the C one when the fast path is built."""
    capacity = 1 << max(4, (window - 1).bit_length())
    if HAVE_C:
        return CTxTable(capacity, seq, paths)
    return PyTxTable(capacity, seq, paths)
