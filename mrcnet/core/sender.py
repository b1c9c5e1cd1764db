"""Sending: work requests -> runs of packets -> data frames.

:meth:`Sender.emit` cuts posted writes (:class:`WorkRequest`) lazily into MTU-sized
packets, each with its own RETH address, as many of one work request at a time as the
window takes (a "run"), picks their EVs together, records them in the table of packets
in flight and builds their frames (one C call per run when built). Retransmissions that
recovery queued go first. Immediates in flight are bounded by the QP's static
``max_imm_outstanding``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from itertools import accumulate, islice, repeat
from operator import add, attrgetter, is_, itemgetter
from typing import Any, Protocol

from mrcnet.constants import (
    DATA_EXT_IMM,
    DATA_EXT_TSETH,
    EV_PATH_SHIFT,
    IMM_OPCODES,
    LAST_OPCODES,
    MPR_UNIT,
    PSN_MASK,
    Opcode,
)
from mrcnet.core.cc import CNSCC, CongestionControl
from mrcnet.core.context import QPView
from mrcnet.core.evs import EVInfo, EVManager
from mrcnet.core.seqnum import MSN_MASK, ts16
from mrcnet.core.spray import CSpray, PathSlots
from mrcnet.core.txtable import E_EV, E_FLAGS, E_LEN, E_OFF, E_OP, E_WR, PEND, Entry, TxTable
from mrcnet.core.workrequest import WorkRequest
from mrcnet.native import C, ffi
from mrcnet.wire import build_data
from mrcnet.wire.bth import F_ACKREQ, F_TS
from mrcnet.wire.template import (
    ALLOC_FRAMES,
    FRAME_ROOM,
    DataTemplate,
    RunPatcher,
    make_template,
    run_patcher,
)

_INF = float("inf")
# Opcodes as plain ints for the per-packet path (an enum member lookup costs more)
_OP_FIRST, _OP_MIDDLE = int(Opcode.WRITE_FIRST), int(Opcode.WRITE_MIDDLE)
_OP_LAST, _OP_LAST_IMM = int(Opcode.WRITE_LAST), int(Opcode.WRITE_LAST_IMM)
_OP_ONLY, _OP_ONLY_IMM = int(Opcode.WRITE_ONLY), int(Opcode.WRITE_ONLY_IMM)
_TEMPLATE_CACHE_MAX = 1 << 14  # (EV, rkey) entries before the cache starts over
TAIL_RUNS = 8  # runs whose paths a QP's tail may take (tail_path: TailLoss.tail_ev)
_U64 = 1 << 64
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_RKEY, _VA = attrgetter("rkey"), attrgetter("remote_addr")
_IMM, _NPKTS, _LEN = attrgetter("imm"), attrgetter("npkts"), attrgetter("length")
_VIEW, _OFF = attrgetter("view"), attrgetter("offset")


def _opbits() -> Any:
    """How mrcnet/_csrc/sender.c derives a new packet's BTH flags and extensions from
    its opcode, as :meth:`Sender._run_frames` does (None without the C module)."""
    if ffi is None:
        return None
    bits = ffi.new("struct mrc_opbits *")
    for op in range(256):
        bits.flags[op] = F_TS | F_ACKREQ if op in LAST_OPCODES else F_TS
        bits.ext[op] = DATA_EXT_TSETH | DATA_EXT_IMM if op in IMM_OPCODES else DATA_EXT_TSETH
    return bits


_OPBITS = _opbits()
_SEND_MAX: int = C.MRC_SEND_MAX if C is not None else 0
_GATHER_MIN: int = C.MRC_GATHER_MIN if C is not None else 0
# The frames' lengths of one fused call: read by C during the call only (the queues keep
# their own copies), so one array serves every call.
_LENS = ffi.new("uint32_t[]", _SEND_MAX) if ffi is not None else None
# A run's op codes for the fused call (:meth:`Sender._send_taken`), WRITE_MIDDLE but its
# first and last: copied from _MIDDLES, then those two set.
_OPS: Any = ffi.new("uint8_t[]", _SEND_MAX) if ffi is not None else None
_MIDDLES = bytes([_OP_MIDDLE]) * _SEND_MAX


def _last_op(imm: int | None, end: int) -> int:
    """The opcode of a work request's last packet (packet ``end - 1``): ONLY or LAST,
    with or without an immediate."""
    if imm is None:
        return _OP_ONLY if end == 1 else _OP_LAST
    return _OP_ONLY_IMM if end == 1 else _OP_LAST_IMM


def _payloads(batch: list[WorkRequest], lens: list[int]) -> bytes:
    """The payloads of ``batch`` end to end: one slice when they lie end to end in one
    region (a doorbell's writes from consecutive offsets), else one per write."""
    view = batch[0].view
    offs = list(map(_OFF, batch))
    if all(map(is_, map(_VIEW, batch), repeat(view))) \
            and list(map(add, offs[:-1], lens[:-1])) == offs[1:]:
        return bytes(view[offs[0]:offs[-1] + lens[-1]])
    return b"".join([wr.view[wr.offset:wr.offset + wr.length] for wr in batch])


class SendGuard(Protocol):
    """What sending needs from recovery: the acknowledged point, the queue of packets
    to resend, and the retransmission timer it arms for new packets."""

    snd_una: int
    rtx_q: deque[int]
    rto_at: float
    tlp_log: dict[int, tuple[float, bool]]

    def rto(self, ev: int) -> float:
        """Per-path timeout of a packet on ``ev``."""

    def backoff(self) -> float:
        """The retry phase's timeout multiplier."""

    def arm_sent(self, now: float, ev: int = -1) -> None:
        """New packets went at ``now``, the first on ``ev``: the retransmission timer
        from them unless one is armed, and the tail-loss probe from now."""

    def base_timeout(self) -> float:
        """The QP's timeout (RTT based, never below the floor)."""

    def tail_ev(self, ev: int, runs: deque[tuple[list[int], float]], now: float) -> int:
        """The EV for a QP's last packet before it goes idle, sprayed onto ``ev``; ``runs``:
        the QP's last runs (their EVs, sent when)."""

    def probe_ev(self, info: EVInfo, avoid: int, now: float) -> EVInfo:
        """The EV for a tail-loss probe's resend, sprayed onto ``info``, not on the
        path of ``avoid`` (the original's EV)."""


class Sender:
    """The requester's send side of one QP (see the module docstring)."""

    def __init__(self, qp: QPView, rec: SendGuard) -> None:
        self.qp = qp
        self.rec = rec
        self.cfg = qp.cfg
        self.attrs = qp.attrs
        # shared with recovery, set by the QP whenever it makes new ones
        self.evm: EVManager | None = None
        self.cc = None
        self.txt: TxTable
        #: The table's counts (``ninfl``, ``infl_bytes``): its C struct when it is C's
        #: (a property each costs a Python call per run), else the table itself; and
        #: the C table, or None (:meth:`use_table`)
        self.tq: Any = None
        self.ctab: Any = None
        self._txcap = 0
        self._tmpl: dict[tuple[object, ...], Any] = {}
        self._tmpl_first: dict[int, DataTemplate] = {}  # rkey -> the first one built
        self._tmpl_ev: dict[tuple[int, int], tuple[int, Any, Any]] = {}
        # (path, rkey) -> (port, slot in self._runs): new data frames built a run at a
        # time in C (None without the C fast path: one frame per call then); and the
        # same per rkey and EV, for the per-packet lookup
        self._run_slot: dict[tuple[int, int], tuple[int, int] | None] = {}
        self._run_slot_ev: dict[int, dict[int, tuple[int, int] | None]] = {}
        # rkey -> the run slots above laid out as the spray's paths, for C
        # (mrc_spray_take_slots: a run's EVs and slots without a Python list)
        self._path_slots: dict[int, PathSlots] = {}
        self._runs: RunPatcher | None = None
        self.tx_packets = 0  # hot counter: a plain attribute, folded into counters()
        #: Single-packet work requests queued together go out as one run
        #: (:meth:`_emit_msgs`; off only to compare with one at a time, same results).
        self.batch_msgs = True
        #: A run going to mrcd's send queues is recorded in a C table, built and queued
        #: in one C call (mrcnet/_csrc/sender.c; off only to compare: the same frames
        #: and table as the three calls it replaces).
        self.fused = True
        #: The fused runs' payloads go to the socket from the work request's region, not
        #: copied into the frames (mrcnet/_csrc/template.h, mrc_patch_run_gather; off
        #: only to compare: the same bytes on the wire).
        self.gather = True
        #: The ports (bits: port i, bit i) whose send queue grew by what emit queued on
        #: the caller's send queues since the caller zeroed it: the fused calls OR them in
        #: (as SendQueue.mark / grown around them would give), the other queueing paths
        #: through mark / grown themselves (mrcnet/core/answer.py: where the data went).
        self.grew: Any = ffi.new("uint32_t *") if ffi is not None else None
        self.reset()

    def reset(self) -> None:
        """Forget every work request and the send sequence space (QP reset)."""
        self.sq: deque[WorkRequest] = deque()  # not yet fully sent
        # post_writes is the queue's own extend (no call of ours per doorbell)
        self.post_writes = self.sq.extend  # type: ignore[method-assign,assignment]
        self.wrs: deque[WorkRequest] = deque()  # sent, not yet completed (in order)
        self.next_seq = self.attrs.sq_psn
        self.wr_ctr = 0  # work requests started (their table slots)
        self.wr_of: dict[int, WorkRequest] = {}  # slot -> started, not completed
        self.next_msn = 0  # the next RQMSN (write-with-immediate messages started)
        self.imm_outstanding = 0
        # the last TAIL_RUNS runs' EVs and send times, for the tail's path (tail_path)
        self.tail_runs: deque[tuple[list[int], float]] | None = (
            deque(maxlen=TAIL_RUNS) if self.cfg.tail_path else None)

    @property
    def cc(self) -> CongestionControl | None:
        """The QP's congestion control (shared with recovery, set by the QP)."""
        return self._cc

    @cc.setter
    def cc(self, cc: CongestionControl | None) -> None:
        self._cc = cc
        # What holds its window as a plain field, for emit: CNSCC's C struct (its
        # ``cwnd`` property costs a Python call per emit), else the CC itself.
        self._cwnd_of: Any = cc._c if isinstance(cc, CNSCC) else cc

    def clear_templates(self) -> None:
        """Forget every frame template (the routes changed: INIT -> RTR)."""
        self._tmpl.clear()
        self._tmpl_first.clear()
        self._tmpl_ev.clear()
        self._run_slot.clear()
        self._run_slot_ev.clear()
        self._path_slots.clear()
        self._runs = None

    def use_table(self, txt: TxTable, cap: int) -> None:
        """Send through the table of packets in flight ``txt`` (a new one: the QP's
        window is final, or it was reset), which holds at least ``cap`` PSNs."""
        self.txt = txt
        self._txcap = cap
        self.ctab = getattr(txt, "c", None)
        self.tq = txt if self.ctab is None else self.ctab

    @property
    def tx_window(self) -> int:
        """PSNs the requester may have outstanding (mrc.h MPR x 128, else the host's)."""
        mpr = self.attrs.mpr
        return mpr * MPR_UNIT if mpr else self.cfg.rx_window


    def post_write(self, wr: WorkRequest) -> None:
        """Queue a write; it is sent from :meth:`emit` once the QP is in RTS."""
        self.sq.append(wr)

    def post_writes(self, wrs: list[WorkRequest]) -> None:
        """Queue several writes, in order (as :meth:`post_write` each)."""
        self.sq.extend(wrs)

    def has_work(self) -> bool:
        """Anything to (re)transmit?"""
        return bool(self.sq or self.rec.rtx_q)

    def emit(self, now: float, out: list[tuple[int, bytes]], sendq: Any = None) -> None:
        """Append data frames the window allows: retransmissions first, then new data
        (into ``sendq``, the caller's send queues, when given and built in C).

        New data goes out a run at a time: as many packets of one work request as the
        window allows (exactly where checking it packet by packet would stop), their EVs
        chosen together (:meth:`EVManager.take`), accounted for in the table of packets
        in flight in one call and, with the C fast path, built in one C call
        (:meth:`_run_frames`). In mrcd (send queues, C's spray and table) the EVs and
        their paths' run slots come from C too and go to the build without a Python
        list (:meth:`_take_run`, :meth:`_send_taken`)."""
        evm = self.evm
        if self._cc is None or evm is None:
            return
        cwnd: float = self._cwnd_of.cwnd
        rec = self.rec
        rtx_q, sq, txt = rec.rtx_q, self.sq, self.txt
        while rtx_q:
            seq = rtx_q[0]
            e = txt.get(seq)
            if e is None or not e[E_FLAGS] & PEND:  # acknowledged meanwhile
                rtx_q.popleft()
                continue
            if txt.ninfl and txt.infl_bytes + e[E_LEN] > cwnd:
                return
            rtx_q.popleft()
            info = evm.next_ev(avoid=e[E_EV])
            if self.cfg.tlp_fail_path and seq in rec.tlp_log:  # (a probe's resend)
                info = rec.probe_ev(info, e[E_EV], now)
            self._resend(seq, e, now, out, info)
        mtu = self.cfg.mtu_payload
        mpr = self.attrs.mpr  # (tx_window's, without the property's call per emit)
        win = min(mpr * MPR_UNIT if mpr else self.cfg.rx_window, self._txcap)
        ts = ts16(now)
        tq = self.tq
        # mrcd's common case, a run from the spray to the send queues without a Python
        # list per run (_take_run, _send_taken): C's spray, table and send queues
        fast = (sendq is not None and self.fused and self.ctab is not None
                and self.tail_runs is None and type(evm.spray) is CSpray)
        while sq:
            # Packets the window takes: each new one needs inflight + mtu <= cwnd unless
            # nothing is in flight (inside a run every packet but a message's last is a
            # whole mtu, and the last ends the run).
            ninfl = tq.ninfl
            k = int((cwnd - tq.infl_bytes) // mtu) if ninfl else max(1, int(cwnd // mtu))
            seq = self.next_seq
            wr = sq[0]
            idx = wr.next_pkt
            k = min(k, rec.snd_una + win - seq, wr.npkts - idx)
            if k <= 0:
                break
            if wr.npkts == 1 and len(sq) > 1 and self.batch_msgs and self._emit_msgs(
                    now, ts, cwnd, win, out, sendq):
                continue
            if idx == 0:
                # The QP's static limit (the applications agree on it from the receives
                # each side posts); nothing about the peer's receives travels in MRC's
                # headers.
                if wr.imm is not None and \
                        self.imm_outstanding >= self.attrs.max_imm_outstanding:
                    break
                # Started: its table slot and METH (_send_msgs does the same for a run
                # of single-packet work requests). RQMSN numbers the immediates (a plain
                # write carries the next one's), MSN every message (docs/DECISIONS.md
                # "Wire format").
                self.wrs.append(wr)
                wr.slot = slot = self.wr_ctr & 0xFFFFFFFF
                self.wr_ctr += 1
                self.wr_of[slot] = wr
                wr.meth = (self.next_msn & MSN_MASK) << 16 | (slot & MSN_MASK)
                if wr.imm is not None:
                    self.next_msn += 1
                    self.imm_outstanding += 1
            if fast and (n := self._take_run(evm, k, wr.rkey)):
                end = idx + n
                if end == wr.npkts:
                    sq.popleft()
                wr.next_pkt = end
                self.next_seq = seq + n
                rec.arm_sent(now, self._send_taken(evm.spray, wr, seq, idx, n, ts, out, sendq,
                                                   now))
                self.tx_packets += n
                continue
            evs = evm.take(k)
            if not evs:  # the next EV is not the plain round robin's: the full choice
                info = evm.next_ev()
                info.sent += 1
                evs = [info.ev]
            k = len(evs)
            ops = [_OP_MIDDLE] * k
            if idx == 0:
                ops[0] = _OP_FIRST
            end = idx + k
            if end == wr.npkts:
                sq.popleft()
                if not sq and self.tail_runs is not None:  # (the QP's tail: tail_path)
                    evs[-1] = rec.tail_ev(evs[-1], self.tail_runs, now)
                ops[-1] = _last_op(wr.imm, end)
            wr.next_pkt = end
            self.next_seq = seq + k
            if not self._run_frames(wr, seq, idx, evs, ops, ts, out, sendq, now):
                txt.send(seq, evs, ops, wr.slot, idx * mtu, mtu, wr.length, now, ts)
            rec.arm_sent(now, evs[0])  # (the retransmission timer unless armed, the probe)
            if self.tail_runs is not None:
                self.tail_runs.append((evs, now))
            self.tx_packets += k

    def _take_run(self, evm: EVManager, k: int, rkey: int) -> int:
        """The EVs of up to ``k`` new packets with ``rkey`` and their paths' run slots,
        in one C call (:meth:`CSpray.take_slots`); a path without a slot yet gets one
        (:meth:`_run_path`) and the take goes on. 0 when the next EV is not the plain
        rotation's or its path has no run slot: the caller's Python way then (nothing
        was taken)."""
        table = self._path_slots.get(rkey)
        if table is None:
            table = self._path_slots[rkey] = PathSlots(
                lambda key: self._run_slot[(key, rkey)])
        while True:
            n = evm.take_slots(k, table)
            path = table.stop[0]
            if n or path < 0 or table.path_slot[path] == PathSlots.NONE:
                return n
            spray: CSpray[EVInfo] = evm.spray  # type: ignore[assignment]  # (emit's test)
            table.set(path, self._run_path(spray.path_ev(path), rkey))

    def _send_taken(self, spray: Any, wr: WorkRequest, seq: int, idx: int, n: int, ts: int,
                    out: list[tuple[int, bytes]], txq: Any, now: float) -> int:
        """Record, build and queue the run :meth:`_take_run` took (packets ``idx ..
        idx + n`` of ``wr`` from ``seq``) in one C call, as :meth:`_run_frames` would
        with lists (its way when the call cannot take the run); returns its first EV."""
        evs, table = spray.taken, self._path_slots[wr.rkey]
        end = idx + n
        ops = _OPS
        ffi.memmove(ops, _MIDDLES, n)
        if idx == 0:
            ops[0] = _OP_FIRST
        if end == wr.npkts:
            ops[n - 1] = _last_op(wr.imm, end)
        mtu = self.cfg.mtu_payload
        if wr.remote_addr + (end - 1) * mtu < _U64 and self._fused_run(
                wr, seq, idx, n, table.ports, table.slots, evs, ops, ts, txq, now):
            return int(evs[0])
        ev_list, op_list = ffi.unpack(evs, n), list(ops[0:n])
        if not self._run_frames(wr, seq, idx, ev_list, op_list, ts, out, txq, now):
            self.txt.send(seq, ev_list, op_list, wr.slot, idx * mtu, mtu, wr.length, now, ts)
        return ev_list[0]  # type: ignore[no-any-return]

    def _fused_run(self, wr: WorkRequest, seq: int, idx: int, n: int, ports: Any, slots: Any,
                   evs: Any, ops: Any, ts: int, txq: Any, now: float) -> bool:
        """Record, build and queue packets ``idx .. idx + n`` of ``wr`` from ``seq`` in
        one C call (mrcnet/_csrc/sender.c; their ports, run slots, EVs and opcodes as
        lists or C arrays), when the frames go to send queues, the table is C's (``c``:
        its struct) and ``fused``. False when it cannot take the run (then nothing was
        recorded or queued)."""
        tab, runs = self.ctab, self._runs
        if tab is None or txq is None or runs is None or not self.fused or n > _SEND_MAX:
            return False
        mtu = self.cfg.mtu_payload
        off0 = idx * mtu
        start = wr.offset + off0
        plen = wr.offset + min(wr.length, off0 + n * mtu) - start
        # Gathered, the frames' payloads stay where they are (only an odd-length last
        # one is copied): the buffer holds their headers and ICRCs.
        gather = self.gather and not mtu & 1 and mtu >= _GATHER_MIN
        cap = n * FRAME_ROOM + (min(plen, mtu) if gather else plen)
        buf = ALLOC_FRAMES("uint8_t[]", cap)
        payload = ffi.from_buffer(wr.view[start:start + plen])
        k = C.mrc_send_run(tab, txq.queues, txq.nports, runs.paths, _OPBITS, ports, slots, n,
                           seq, evs, ops, wr.slot, off0, wr.length, wr.remote_addr + off0,
                           payload, plen, mtu, wr.meth, wr.imm if wr.imm is not None else 0,
                           now, ts, buf, cap, _LENS, self.grew, gather)
        if k < 0:
            return False
        txq.queued(buf, n, k, payload if gather else None)
        return True

    def _emit_msgs(self, now: float, ts: int, cwnd: float, win: int,
                   out: list[tuple[int, bytes]], sendq: Any) -> bool:
        """New single-packet work requests at the head of the send queue (several small
        writes) as one run: the packets :meth:`emit`'s loop would send one at a time,
        with the same window checks, EVs, table entries and frames (each its own
        WRITE_ONLY[_IMM] with AckReq), but one EV choice, one table call and one frame
        build for all. False when it sent nothing (the loop's own path decides then)."""
        sq, rec = self.sq, self.rec
        mtu = self.cfg.mtu_payload
        tq = self.tq  # (as emit reads them)
        ninfl, infl = tq.ninfl, tq.infl_bytes
        room = rec.snd_una + win - self.next_seq
        imms = self.attrs.max_imm_outstanding - self.imm_outstanding
        n = min(len(sq), room)
        if n < 2:
            return False
        # The common case without a Python step per write: every one of the first n is
        # a single packet and their immediates fit; then the window's check (write k
        # goes if nothing is in flight or cwnd - bytes in flight leaves a whole mtu) is
        # monotonic in k: the first write it stops is found by bisection on the bytes'
        # running sums.
        head = list(islice(sq, n))
        if (list(map(_NPKTS, head)).count(1) == n
                and n - list(map(_IMM, head)).count(None) <= imms):
            sums = list(accumulate(map(_LEN, head), initial=infl))  # in flight before k

            def stops(k: int) -> bool:
                return bool(ninfl + k) and int((cwnd - sums[k]) // mtu) <= 0

            n = bisect_left(range(n), True, key=stops)
        else:
            n = self._msgs_room(head, ninfl, infl, cwnd, imms)
        if n < 2:
            return False
        # As n calls of take(1) would give them; fewer when one is not the plain round
        # robin's (a take that gives nothing changes nothing: the loop then asks again).
        evs = self.evm.take(n)  # type: ignore[union-attr]
        if not evs:
            return False
        self._send_msgs(now, ts, evs, out, sendq)
        return True

    def _msgs_room(self, head: list[WorkRequest], ninfl: int, infl: float, cwnd: float,
                   imms: int) -> int:
        """How many of ``head`` :meth:`emit`'s loop would send one at a time (what it
        checks per packet, on the counts it would see)."""
        mtu = self.cfg.mtu_payload
        n = 0
        for wr in head:
            if wr.npkts != 1:
                break
            if ninfl and int((cwnd - infl) // mtu) <= 0:
                break
            if wr.imm is not None:
                if imms <= 0:
                    break
                imms -= 1
            ninfl += 1
            infl += wr.length
            n += 1
        return n

    def _send_msgs(self, now: float, ts: int, evs: list[int], out: list[tuple[int, bytes]],
                   sendq: Any) -> None:
        """Send the next ``len(evs)`` work requests of the send queue (one packet each)
        on ``evs``: each started as :meth:`emit` starts one, with the per-write lists made by C
        iterators where they can be."""
        sq, rec = self.sq, self.rec
        n = len(evs)
        if n == len(sq):
            batch = list(sq)
            sq.clear()
        else:
            batch = [sq.popleft() for _ in range(n)]
        self.wrs.extend(batch)
        ctr = self.wr_ctr
        self.wr_ctr = ctr + n
        if ctr + n <= 1 << 32:
            slots = list(range(ctr, ctr + n))
        else:
            slots = [(ctr + i) & 0xFFFFFFFF for i in range(n)]
        self.wr_of.update(zip(slots, batch, strict=True))
        imms = list(map(_IMM, batch))
        nimm = n - imms.count(None)
        msn = self.next_msn
        # METH: RQMSN (the immediates started before) << 16 | MSN, as emit's
        if not nimm:
            ops = [_OP_ONLY] * n
            hi = (msn & MSN_MASK) << 16
            meths = [hi | slot & MSN_MASK for slot in slots]
        else:
            ops, meths = [], []
            for slot, imm in zip(slots, imms, strict=True):
                meths.append((msn & MSN_MASK) << 16 | (slot & MSN_MASK))
                if imm is None:
                    ops.append(_OP_ONLY)
                else:
                    msn += 1
                    ops.append(_OP_ONLY_IMM)
            self.next_msn = msn
            self.imm_outstanding += nimm
        for wr, slot, meth in zip(batch, slots, meths, strict=True):
            wr.slot = slot
            wr.meth = meth
            wr.next_pkt = 1
        lens = list(map(_LEN, batch))
        seq = self.next_seq
        self.next_seq = seq + n
        if not self._msgs_frames(batch, seq, evs, ops, lens, meths, imms, nimm, ts, out,
                                 sendq, slots, now):
            self.txt.send_msgs(seq, evs, ops, slots, lens, now, ts)
        rec.arm_sent(now, evs[0])
        self.tx_packets += n

    def _msgs_frames(self, batch: list[WorkRequest], seq: int, evs: list[int],
                     ops: list[int], lens: list[int], meths: list[int],
                     imms: list[int | None], nimm: int, ts: int,
                     out: list[tuple[int, bytes]], txq: Any, wrs: list[int],
                     now: float) -> bool:
        """The frames of single-packet work requests ``batch`` (PSNs ``seq ..``, one per
        EV; ``nimm`` of them with an immediate; table slots ``wrs``): one C call when
        every path has a run slot, else one at a time. True when that call also
        recorded them in the table (as :meth:`_run_frames`)."""
        rkeys = list(map(_RKEY, batch))
        if rkeys.count(rkeys[0]) == len(rkeys):
            at = self._run_slots(rkeys[0], evs)
        else:
            at = [self._run_slots(rkey, [ev])[0] for rkey, ev in zip(rkeys, evs, strict=True)]
        runs = self._runs
        if runs is None or None in at:
            for i, wr in enumerate(batch):
                out.append(self._frame(seq + i, wr, 0, wr.length, ops[i], evs[i], ts, False))
            return False
        n = len(batch)
        imm_words = [0 if imm is None else imm for imm in imms] if nimm else [0] * n
        payload = _payloads(batch, lens)
        vas = list(map(_VA, batch))
        slots = list(map(_SECOND, at))  # type: ignore[arg-type]
        ports = list(map(_FIRST, at))  # type: ignore[arg-type]
        # (the fused call's checks inline, as in _run_frames: a call less per run)
        tab = self.ctab if txq is not None and self.fused and n <= _SEND_MAX else None
        if tab is not None:
            cap = n * FRAME_ROOM + len(payload)
            buf = ALLOC_FRAMES("uint8_t[]", cap)
            k = C.mrc_send_msgs(tab, txq.queues, txq.nports, runs.paths, _OPBITS, ports,
                                slots, n, seq, evs, ops, wrs, vas, meths, imm_words,
                                payload, len(payload), lens, now, ts, buf, cap, _LENS,
                                self.grew)
            if k >= 0:
                txq.queued(buf, n, k)
                return True
        flags = [F_TS | F_ACKREQ] * n
        if nimm:
            exts = [DATA_EXT_TSETH if op == _OP_ONLY else DATA_EXT_TSETH | DATA_EXT_IMM
                    for op in ops]
        else:
            exts = [DATA_EXT_TSETH] * n
        if txq is not None:
            txq.mark()
            runs.msgs_queue(txq, ports, slots, evs, ops, flags, exts, seq & PSN_MASK, vas,
                            meths, imm_words, payload, lens, ts)
            self.grew[0] |= txq.grown()
            return False
        frames = runs.msgs_frames(slots, evs, ops, flags, exts, seq & PSN_MASK, vas, meths,
                                  imm_words, payload, lens, ts)
        out.extend(zip(ports, frames, strict=True))  # type: ignore[arg-type]
        return False

    def _run_slots(self, rkey: int, evs: list[int]) -> list[tuple[int, int] | None]:
        """(port, run slot) of each EV's path for frames with ``rkey``."""
        by_ev = self._run_slot_ev.get(rkey)
        if by_ev is None:
            by_ev = self._run_slot_ev[rkey] = {}
        # (map and itemgetter: per packet no Python bytecode, only C)
        try:
            return list(map(by_ev.__getitem__, evs))
        except KeyError:
            for ev in evs:
                if ev not in by_ev:
                    by_ev[ev] = self._run_path(ev, rkey)
            return list(map(by_ev.__getitem__, evs))

    def _run_frames(self, wr: WorkRequest, seq: int, idx: int, evs: list[int], ops: list[int],
                    ts: int, out: list[tuple[int, bytes]], txq: Any, now: float) -> bool:
        """Append the frames of new packets ``seq ..`` (packets ``idx ..`` of ``wr``, one
        per EV): one C call when every path has a run slot, else one at a time. With the
        send queues ``txq`` a run built in C goes into them instead of ``out``; True
        when that call also recorded the packets in the table."""
        mtu = self.cfg.mtu_payload
        by_ev = self._run_slot_ev.get(wr.rkey)
        try:  # (_run_slots' common case, without its call per run)
            at = list(map(by_ev.__getitem__, evs))  # type: ignore[union-attr,index]
        except (AttributeError, KeyError):  # a new rkey or path
            at = self._run_slots(wr.rkey, evs)
        n = len(evs)
        off0 = idx * mtu
        va = wr.remote_addr + off0
        runs = self._runs
        if runs is None or None in at or va + (n - 1) * mtu >= _U64:
            for i in range(n):  # raises as one at a time did
                off = off0 + i * mtu
                out.append(self._frame(seq + i, wr, off, min(mtu, wr.length - off), ops[i],
                                       evs[i], ts, False))
            return False
        ports, slots = list(map(_FIRST, at)), list(map(_SECOND, at))  # type: ignore[arg-type]
        if self._fused_run(wr, seq, idx, n, ports, slots, evs, ops, ts, txq, now):
            return True
        start = wr.offset + off0
        end = wr.offset + min(wr.length, off0 + n * mtu)
        imm = wr.imm if wr.imm is not None else 0
        # Inside a run of one work request every packet but the first and the last is a
        # WRITE_MIDDLE, which carries no AckReq and no immediate.
        flags, exts = [F_TS] * n, [DATA_EXT_TSETH] * n
        for i in (0, n - 1):
            op = ops[i]
            if op in LAST_OPCODES:
                flags[i] = F_TS | F_ACKREQ
            if op in IMM_OPCODES:
                exts[i] = DATA_EXT_TSETH | DATA_EXT_IMM
        if txq is not None:  # mrcd: straight to the ports' queues, no object per frame
            txq.mark()
            runs.queue(txq, ports, slots, evs, ops, flags, exts, seq & PSN_MASK, va,
                       wr.view[start:end], mtu, wr.meth, imm, ts)
            self.grew[0] |= txq.grown()
            return False
        frames = runs.frames(slots, evs, ops, flags, exts, seq & PSN_MASK, va,
                             wr.view[start:end], mtu, wr.meth, imm, ts)
        # (read-only views, not bytes: every taker of frames_to_send's frames, the
        # ports' batch send and the simulator, takes any buffer)
        out.extend(zip(ports, frames, strict=True))  # type: ignore[arg-type]
        return False

    def _resend(self, seq: int, e: Entry, now: float, out: list[tuple[int, bytes]],
                info: EVInfo) -> None:
        """Retransmit ``seq`` (its table entry ``e``) on ``info``."""
        ts = ts16(now)
        off = e[E_OFF]
        out.append(self._frame(seq, self.wr_of[e[E_WR]], off, e[E_LEN], e[E_OP], info.ev, ts, True))
        self.txt.resend(seq, info.ev, now, ts)
        info.sent += 1
        if self.rec.rto_at == _INF:
            self.rec.rto_at = now + self.rec.rto(info.ev) * self.rec.backoff()
            self.qp.tv += 1
        self.tx_packets += 1
        self.qp.count("tx_retransmit")

    def _frame(self, seq: int, wr: WorkRequest, off: int, length: int, opcode: int, ev: int,
               ts: int, rtx: bool) -> tuple[int, bytes]:
        """(local port, data frame) of packet ``seq`` (bytes ``off ..`` of ``wr``) on
        ``ev``."""
        start = wr.offset + off
        imm = opcode in IMM_OPCODES
        payload = wr.view[start : start + length]
        tp = None
        if self.cfg.use_templates:  # (_data_path's cache hit read here: a call less)
            tp = self._tmpl_ev.get((ev >> EV_PATH_SHIFT, wr.rkey)) or self._data_path(ev, wr.rkey)
        if tp is not None:
            port, tmpl, spec = tp
            frame = tmpl.frame(
                opcode, seq & PSN_MASK, ev, wr.remote_addr + off, payload, spec,
                wr.meth, wr.imm if imm else None, ts, rtx,
                opcode in LAST_OPCODES)
        else:
            port, route = self.qp.route(ev)
            frame = build_data(
                route,
                ev=ev,
                opcode=opcode,
                dest_qp=self.attrs.dest_qp_num or 0,
                psn=seq & PSN_MASK,
                va=wr.remote_addr + off,
                rkey=wr.rkey,
                payload=payload,
                rqmsn=wr.meth >> 16,
                msn=wr.meth & MSN_MASK,
                imm=wr.imm if imm else None,
                timestamp=ts,
                rtx=rtx,
                ack_req=opcode in LAST_OPCODES,
            )
        return port, frame

    def _data_path(self, ev: int, rkey: int) -> tuple[int, Any, Any] | None:
        """(port, template, path spec) for data frames on ``ev`` with ``rkey``: the
        headers are built once per (route shape, rkey) and patched per packet (C when
        built); None when the route cannot be templated (then build_data is used)."""
        key = (ev >> EV_PATH_SHIFT, rkey)  # the path (plane, path index), not the instance
        hit = self._tmpl_ev.get(key)
        if hit is not None:
            return hit
        port, route = self.qp.route(ev)
        shape = (route.src_mac, route.dst_mac, route.src_ip, route.dst_ip, route.encap,
                 route.hop_limit, route.usid is None, route.usid_srh is None,
                 len(route.segments) if route.segments else 0, rkey)
        try:
            tmpl = self._tmpl.get(shape)
            if tmpl is None:
                # Another plane's: the first one's headers patched when the routes allow
                first = self._tmpl_first.get(rkey)
                py = first.along(route) if first is not None else None
                if py is None:
                    py = DataTemplate.for_route(route, dest_qp=self.attrs.dest_qp_num or 0,
                                                rkey=rkey)
                    self._tmpl_first.setdefault(rkey, py)
                tmpl = make_template(py)
                self._tmpl[shape] = tmpl
            if route.usid is not None:
                spec = tmpl.path(usid=route.usid, usid_srh=route.usid_srh)
            elif route.segments is not None:
                spec = tmpl.path(segments=route.segments)
            else:
                spec = None
        except ValueError:
            return None
        hit = (port, tmpl, spec)
        if len(self._tmpl_ev) > _TEMPLATE_CACHE_MAX:
            self._tmpl_ev.clear()
            self._run_slot.clear()
            self._run_slot_ev.clear()
            self._path_slots.clear()
            self._runs = None
        self._tmpl_ev[key] = hit
        return hit

    def _run_path(self, ev: int, rkey: int) -> tuple[int, int] | None:
        """(port, slot) for building new data frames on ``ev`` with ``rkey`` in a run
        (:class:`mrcnet.wire.template.RunPatcher`); None when they are built one at a time
        (no C fast path, templates off, or a route that cannot be templated)."""
        key = (ev >> EV_PATH_SHIFT, rkey)
        if key in self._run_slot:
            return self._run_slot[key]
        hit = self._data_path(ev, rkey) if self.cfg.use_templates else None
        slot = None
        if hit is not None:
            if self._runs is None:
                self._runs = run_patcher()
            if self._runs is not None:
                port, tmpl, spec = hit
                slot = (port, self._runs.add(tmpl, spec))
        self._run_slot[key] = slot
        return slot

