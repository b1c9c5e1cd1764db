"""NACKs at the requester: what a trimmed, refused or unanswerable packet's NACK makes
the sender do.

:class:`NackRecovery` holds :meth:`NackRecovery.on_nack`, mixed into
:class:`mrcnet.core.recovery.Recovery` (the pure-Python reference; its C twin for the
trimmed case is :class:`mrcnet.core.sackrec.CRecovery`'s). A trimmed packet is resent at
once (its EV skipped once unless the trim was at the last hop: an incast at the
receiver's port says nothing about the path); an access error fails the QP once the
evidence is consistent (:class:`mrcnet.core.forged.AccessRefusals`); no receive posted
(RNR) resends it later; anything else is left to the timer.
"""

from __future__ import annotations

from mrcnet.constants import EV_PATH_SHIFT, NackReason
from mrcnet.core.cc import CongestionControl
from mrcnet.core.config import QPAttrs
from mrcnet.core.context import QPView
from mrcnet.core.events import WCStatus
from mrcnet.core.evs import EVManager
from mrcnet.core.forged import AccessRefusals
from mrcnet.core.sender import Sender
from mrcnet.core.seqnum import unwrap
from mrcnet.core.states import RTS
from mrcnet.core.txtable import E_EV, E_FLAGS, E_OFF, E_TX, E_WR, PEND, TxTable
from mrcnet.wire.parsed import PyParsed


class NackRecovery:
    """The requester's NACK handling, mixed into ``Recovery``: the parts of ``Recovery``
    it uses, declared here."""

    qp: QPView
    attrs: QPAttrs
    snd: Sender
    txt: TxTable
    cc: CongestionControl | None
    evm: EVManager | None
    snd_una: int
    retries: int
    refusals: AccessRefusals

    def _mark_lost(self, seq: int, now: float, cause: str) -> None:
        raise NotImplementedError

    def _silence_over(self, now: float) -> None:
        raise NotImplementedError

    def _trim_signal(self, evm: EVManager, ev: int, lasthop: bool) -> None:
        """What a trim says about the path of ``ev``: nothing when it was at the last hop
        (incast at the receiver's port), else its EV is skipped once. (The one rule for
        both recoveries: this one and :class:`mrcnet.core.sackrec.CRecovery`.)"""
        if lasthop:
            self.qp.count("rx_nack_lasthop")
        else:
            evm.skip_all((ev,), "trim")  # (skip's decisions, without its _set call)
            self.qp.count("ev_skip_trim")

    def on_nack(self, n: PyParsed, now: float) -> None:
        """A NACK: trimmed packets are retransmitted at once; an access error is fatal once
        the evidence is consistent (:class:`mrcnet.core.forged.AccessRefusals`)."""
        if self.qp.state is not RTS or self.evm is None or self.cc is None:
            return
        seq = unwrap(n.nack_psn, self.snd_una)
        e = self.txt.get(seq)
        if e is None or e[E_EV] != n.nack_ev:
            # Not about the latest transmission of an outstanding packet: stale or forged.
            self.qp.count("rx_nack_stale")
            return
        reason = n.nack_reason
        if reason in (NackReason.TRIMMED, NackReason.TRIMMED_LASTHOP):
            lasthop = reason == NackReason.TRIMMED_LASTHOP
            # A trim proves the path and the peer alive: the timeout retry budget is for
            # silence, not congestion (the resend waits for the window like new data).
            if self.retries:
                self._silence_over(now)
            self._trim_signal(self.evm, e[E_EV], lasthop)
            self.cc.on_trim(now, lasthop)
            if not e[E_FLAGS] & PEND:
                self._mark_lost(seq, now, "trim")
        elif reason == NackReason.UNEXP_EVENT:
            npaths = len({i.ev >> EV_PATH_SHIFT for lst in self.evm.active.values()
                          for i in lst})
            if not self.refusals.refused(seq, e[E_EV], e[E_TX], npaths):
                # Not yet consistent evidence (forged.AccessRefusals): resend it.
                self.qp.count("rx_nack_access_unconfirmed")
                if not e[E_FLAGS] & PEND:
                    self._mark_lost(seq, now, "access")
                return
            wr = self.snd.wr_of[e[E_WR]]
            self.qp.fail(
                WCStatus.REM_ACCESS_ERR,
                f"remote access error: {self.attrs.peer} refused the write of wr_id "
                f"{wr.wr_id} (rkey {wr.rkey:#x}, address {wr.remote_addr + e[E_OFF]:#x}): "
                "check the rkey and that the range lies inside the peer's memory region",
            )
        elif reason == NackReason.NO_RESOURCE:
            # No receive posted for an immediate (RNR): resend it, no path blame.
            if not e[8] & PEND:
                self._mark_lost(seq, now, "rnr")
        else:
            # Resource shortage or window: let the timer resend it later (no path blame).
            self.qp.count("rx_nack_other")
