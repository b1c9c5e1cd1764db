"""The sender's SACK decisions in C: :class:`CRecovery`, the requester's recovery with the
common case of each SACK the receive lane took made by ``mrcnet/_csrc/sackrec.c``.

The receive lane does a SACK's table work and leaves a record (rxlane.h ``struct
mrc_rx_ack``); :meth:`mrcnet.core.recovery.Recovery.on_sack_records` makes the decisions
for each record in Python. Most records are the common case: the QP keeps no "declared
lost" record and suspects no path (the lane takes SACKs only then), the SACK's EV is not
ASSUMED_BAD, its mode is not ALWAYS_SKIP, the QP is not in retry rounds. Then a record's
decisions are arithmetic on numbers: the RTT samples of the EV and the QP, RACK's tie,
the EV's counters, NSCC's update (already in C), the burst's counters, the reorder
allowance's decay, and a skip of the EV for an ECN echo. :class:`CRecovery` keeps those
numbers in a ``struct mrc_snd`` (behind Recovery's attribute names; the EVs' numbers are
:class:`mrcnet.core.evs.CEVInfo`'s) and hands the records to ``mrc_sack_records``, which
makes them in order up to the first that is not the common case; Python makes that one
(``Recovery._sack_news``, the reference) and C goes on after it. The ECN skips C asks for
are made by the EV manager in Python, in order, before anything else.

The same numbers serve the rest of the sender's per-frame decisions in C: the end of a
burst (:meth:`CRecovery.after_sacks`: RACK and its tie pass, the retransmission timer,
the tail-loss probe, as long as nothing is found lost), each packet's timeout
(:meth:`CRecovery.rto`), the tie pass's path RTTs, and a trimmed packet's NACK
(:meth:`CRecovery.on_nack`: its table and CC work). What they leave to Python (a loss to
declare, another NACK reason, the end of retry rounds) is ``Recovery``'s own code.

:func:`new_recovery` gives a QP its recovery: this class with the C module
(``mrcnet.core.evs.NATIVE``), else :class:`Recovery`, the pure-Python reference;
tests/core/test_sackrec.py compares the two record by record.
"""

from __future__ import annotations

from typing import Any

from mrcnet.constants import NackReason
from mrcnet.core import evs
from mrcnet.core.cc import CNSCC
from mrcnet.core.context import QPView
from mrcnet.core.recovery import Recovery
from mrcnet.core.rxlane import RX_ACK_INTS
from mrcnet.core.seqnum import unwrap
from mrcnet.core.states import RTS
from mrcnet.core.txtable import CTxTable
from mrcnet.native import C, c_field, ffi
from mrcnet.wire.parsed import PyParsed

__all__ = ["CRecovery", "new_recovery"]


# mrc_sack_records()'s return value (sackrec.h MRC_SACK_*): the index of the first
# record not made, and flags saying which results to read
SACK_INDEX = 0xFFFF
SACK_ACKED = 0x10000
SACK_SKIP = 0x20000
SACK_STALE = 0x40000
SACK_REO = 0x80000
SACK_OOM = 0x100000
_INF = float("inf")
_RARE = SACK_STALE | SACK_REO | SACK_OOM
_TRIMS = (NackReason.TRIMMED, NackReason.TRIMMED_LASTHOP)


class CRecovery(Recovery):
    """:class:`Recovery` with the common case of the lane's SACK records in C (see the
    module docstring). Same decisions, same numbers to the bit."""

    def __init__(self, qp: QPView) -> None:
        self.c = ffi.new("struct mrc_snd *")
        self._out = ffi.new("struct mrc_sack_out *")
        self._skip = ffi.new("uint32_t[]", 64)
        self._out.skip = self._skip
        self._records, self._rto = C.mrc_sack_records, C.mrc_sack_rto
        self._after, self._trim = C.mrc_sack_after, C.mrc_sack_trim
        self._timers = ffi.new("struct mrc_sack_timers *")
        #: mrc_sack_after's config inputs, and what they were filled from (the config
        #: object and the QP's ack timeout exponent): _after_config
        self._acfg = ffi.new("struct mrc_sack_cfg *")
        self._acfg_of: tuple[object, int] | None = None
        self._tab: evs.EVTable | None = None
        super().__init__(qp)

    srtt = c_field("srtt", float)
    rttvar = c_field("rttvar", float)
    min_rtt = c_field("min_rtt", float)

    @property
    def rack_tie(self) -> tuple[float, int]:  # type: ignore[override]
        """(send time, sequence) of the newest packet that triggered a SACK."""
        c = self.c
        return (c.tie_sent, c.tie_seq)

    @rack_tie.setter
    def rack_tie(self, tie: tuple[float, int]) -> None:
        self.c.tie_sent, self.c.tie_seq = tie

    def set_evm(self, evm: evs.EVManager | None) -> None:
        """:meth:`Recovery.set_evm`, and ``_tab``: its table of the EVs' numbers in C
        (None: no EV manager, or a pure-Python one), an attribute read per frame."""
        super().set_evm(evm)
        self._tab = evm.tab if evm is not None else None

    @property
    def c_records(self) -> int:
        """How many SACK records C made (tests: the comparison is not vacuous)."""
        return int(self.c.handled)

    def on_sack_records(self, ints: list[int], sents: list[float], now: float) -> None:
        """:meth:`Recovery.on_sack_records`, the common records in C."""
        self._c_records(ints, sents, len(sents), now)

    def _c_records(self, recs: Any, sents: Any, n: int, now: float) -> None:
        """The records ``0 .. n`` of ``recs``/``sents`` (lists, or the lane's C arrays),
        C making the common ones, :meth:`Recovery.on_sack_records` the rest."""
        evm, cc, tab = self.evm, self.cc, self._tab
        if tab is None or not isinstance(cc, CNSCC) or n > SACK_INDEX:
            Recovery.on_sack_records(self, *_lists(recs, sents, 0, n), now)
            return
        if n > len(self._skip):
            self._skip = ffi.new("uint32_t[]", n)
            self._out.skip = self._skip
        out, i = self._out, 0
        while i < n:
            if self.lost_log or self.suspects:  # (a decision in Python left some)
                Recovery.on_sack_records(self, *_lists(recs, sents, i, n), now)
                return
            r = self._records(self.c, tab.c, cc._c, recs, sents, i, n, now, self.snd_una,
                              self.retries, self.reo_scale, self.reo_clean,
                              self.reo_learned, self.reo_last, out)
            k = r & SACK_INDEX
            self.snd_una = out.una
            if k > i:
                self.sack_pending = True
            if r & SACK_ACKED:
                self.sack_acked += out.acked
                self.tlp_sent = False
            if r & SACK_SKIP:
                evm.skip_all(ffi.unpack(out.skip, out.nskip), "ecn")  # type: ignore[union-attr]
            if r & _RARE:
                if r & SACK_REO:
                    self.reo_scale, self.reo_clean = out.reo_scale, out.reo_clean
                    self.reo_learned = out.reo_learned
                if r & SACK_STALE:
                    self.qp.count("rx_sack_stale", out.stale)
                if r & SACK_OOM:
                    raise MemoryError("NSCC state")
            if k == n:
                return
            # record k is not the common case: Python's decisions
            Recovery.on_sack_records(self, *_lists(recs, sents, k, k + 1), now)
            i = k + 1

    #: :meth:`Recovery.on_lane_records`: the lane's arrays go to C as they are (no lists
    #: made and converted back); only records Python makes are unpacked. (The method
    #: itself, not a hop to it: once per batch of SACKs the lane took.)
    on_lane_records = _c_records

    def after_sacks(self, now: float) -> None:
        """:meth:`Recovery.after_sacks`, its common case in C (``mrc_sack_after``: RACK
        and its tie pass finding nothing lost, the retransmission timer, the tail-loss
        probe); with a loss found, Python's (which declares it)."""
        txt, cfg, tab = self.txt, self.cfg, self._tab
        if (tab is None or not isinstance(txt, CTxTable) or self.cc is None
                or self.qp.state is not RTS):
            Recovery.after_sacks(self, now)
            return
        head_at = _INF
        if cfg.rack_prompt and txt.rack_sent >= 0:
            # (Recovery._detect_losses's first step, the same Python for both)
            head_at = self._prompt_losses(txt.rack_sent,
                                          txt.rack_rtt + self._reorder_allowance(), now,
                                          declare=False)
            if head_at <= now:
                Recovery.after_sacks(self, now)  # a loss found: Python declares it
                return
        acked = self.sack_acked
        o = self._timers
        o.rack_at, o.rto_at, o.tlp_at = self.rack_at, self.rto_at, self.tlp_at
        buf, cap = txt.scratch
        of = self._acfg_of
        if of is None or of[0] is not cfg or of[1] != self.attrs.timeout:
            self._after_config()
        if self._after(self.c, tab.c, txt.c, self._acfg, now, acked, bool(self.rtx_q),
                       self.reo_scale, self.reo_learned,
                       self.backoff() if self.retries else 1.0, self.tlp_sent, buf, cap, o):
            Recovery.after_sacks(self, now)  # a loss found: Python declares it
            return
        self.sack_pending = False
        self.sack_acked = 0
        ra, ro, tl = o.rack_at, o.rto_at, o.tlp_at
        if ra != self.rack_at or ro != self.rto_at or tl != self.tlp_at:  # (C moved one)
            self.rack_at, self.rto_at, self.tlp_at = ra, ro, tl
            self.qp.tv += 1
        if head_at < self.rack_at:
            self.rack_at = head_at
            self.qp.tv += 1
        if acked and (cfg.tlp_srtts_queued or (cfg.tlp_fail_rtt and self._fail_rtt_on(now))
                      ) and (txt.ninfl or self.rtx_q):
            # (the probe's timeout from the newest RTT or by the QP's queueing:
            # TailLoss.pto's, which C's does not compute; re-armed as Python's would)
            self.arm_tlp(now)
        if acked:
            self._complete_wrs()

    def _after_config(self) -> None:
        """Fill ``mrc_sack_after``'s config inputs (``struct mrc_sack_cfg``) from the
        host's config and the QP's ack timeout: once, and again when the QP's timeout
        exponent changes (modify_qp) or it has another config object (a host's config is
        not changed in place once it runs: the receive lane copies it too)."""
        cfg, k, attrs = self.cfg, self._acfg, self.attrs
        k.rack_floor = cfg.reorder_floor if cfg.rack_floor is None else cfg.rack_floor
        k.hold = cfg.ack_delay if cfg.rack_hold is None else cfg.rack_hold
        k.ack_timeout = attrs.ack_timeout_s
        k.timeout_floor = cfg.timeout_floor
        k.base_rtt_hint = cfg.base_rtt_hint
        k.tlp_srtts = cfg.tlp_srtts
        k.tlp_hold = cfg.ack_delay if cfg.tlp_hold is None else cfg.tlp_hold
        k.tie_break = cfg.rack_tie_break
        k.tail_probe = cfg.tail_probe
        k.prompt = (1 + (not cfg.ack_with_data)) if cfg.tlp_prompt else 0
        self._acfg_of = (cfg, attrs.timeout)

    def on_nack(self, n: PyParsed, now: float) -> None:
        """:meth:`Recovery.on_nack`, a trimmed packet's table and CC work in C
        (``mrc_sack_trim``); other NACKs, and a trim that ends retry rounds, Python's."""
        evm, cc, txt, tab = self.evm, self.cc, self.txt, self._tab
        reason = n.nack_reason
        if (reason not in _TRIMS or tab is None or not isinstance(cc, CNSCC)
                or not isinstance(txt, CTxTable) or self.retries
                or self.qp.state is not RTS):
            Recovery.on_nack(self, n, now)
            return
        seq = unwrap(n.nack_psn, self.snd_una)
        ev = n.nack_ev
        r = self._trim(txt.c, tab.c, cc._c, seq, ev)
        count = self.qp.count
        if r < 0:
            count("rx_nack_stale")  # not the latest transmission of a packet in flight
            return
        self._trim_signal(evm, ev, reason == NackReason.TRIMMED_LASTHOP)  # type: ignore[arg-type]
        if r:
            self.rtx_q.appendleft(seq)
            count("lost_trim")

    def rto(self, ev: int) -> float:
        """:meth:`Recovery.rto` over the numbers in C (``mrc_sack_rto``)."""
        tab = self._tab
        if tab is None:
            return super().rto(ev)
        return float(self._rto(self.c, tab.c, ev, self.attrs.ack_timeout_s,
                               self.cfg.timeout_floor))

    def _detect_tied(self, limit: float, tie_seq: int, wait: float, now: float) -> None:
        """:meth:`TailLoss._detect_tied` in one C pass (``mrc_rack_tied``): which tied
        packets are lost and when the next is due do not depend on the losses declared
        before them in the pass (declaring one moves no EV's RTT estimate, no path's
        newest acknowledgement), so C finds them all and Python declares them, in order."""
        txt, tab = self.txt, self._tab
        if tab is None or not isinstance(txt, CTxTable):
            super()._detect_tied(limit, tie_seq, wait, now)
            return
        buf, cap = txt.scratch
        at = self._timers
        at.rack_at = self.rack_at
        n = C.mrc_rack_tied(txt.c, tab.c, limit, tie_seq, wait, now, buf, cap,
                            ffi.addressof(at, "rack_at"))
        lost, self.rack_at = ffi.unpack(buf, n), at.rack_at
        self.qp.tv += 1
        for seq in lost:
            self.qp.count("loss_rack_tie")
            self._mark_lost(seq, now, "loss")

    def _path_srtt(self, ev: int, paths: dict[int, float] | None = None) -> float:
        """:meth:`TailLoss._path_srtt` over the EVs' numbers in C (the same answers)."""
        tab = self._tab
        if tab is None:
            return super()._path_srtt(ev, paths)
        r = tab.path_srtt(ev)
        if paths is not None and not paths and not r:
            # (the caller then asks for every path's: TailLoss._detect_tied)
            paths.update(tab.paths())
        return r


def new_recovery(qp: QPView) -> Recovery:
    """A QP's recovery: :class:`CRecovery` when the EVs' numbers are in C
    (``mrcnet.core.evs.NATIVE``), else the pure-Python :class:`Recovery`."""
    return CRecovery(qp) if evs.NATIVE else Recovery(qp)


def _lists(ints: Any, sents: Any, i: int, j: int) -> tuple[list[int], list[float]]:
    """Records ``i .. j`` of ``ints``/``sents`` (lists, or C arrays) as lists."""
    return list(ints[i * RX_ACK_INTS : j * RX_ACK_INTS]), list(sents[i:j])
