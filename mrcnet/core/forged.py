"""Consistency checks on what the network says about a requester's own packets.

A host on the fabric can send frames with a peer's source address and a PSN it sniffed
(docs/SECURITY.md, "Frames from the network"). These checks drop, and count, what
cannot be the peer's honest answer to what this QP really sent, so that one forged
frame cannot end a connection:

- :func:`sack_verdict`: a SACK or ACK that acknowledges PSNs never sent, names a
  triggering packet never sent, or acknowledges a packet sooner than the fabric's round
  trip allows (:func:`early_floor`; the usual forgery: a SACK made from a data frame
  sniffed a moment ago);
- :class:`AccessRefusals`: the rule by which a "remote access error" NACK fails the QP
  only on consistent evidence.

The C receive lane (rxlane.c ``ack_take``) applies the same SACK checks and stops at a
SACK that fails one, so that Python counts and drops it here.
"""

from __future__ import annotations

from mrcnet.constants import EV_PATH_SHIFT
from mrcnet.core.txtable import E_SENT, E_TX, TxTable


def early_floor(ack_rtt_floor: float) -> float:
    """The "too early" floor (seconds): an acknowledgement of a first transmission sent
    less than this ago is forged (0: no such check).

    The floor is configured, never learned from the traffic: a forger can only make
    answers look faster than the peer's, never slower, so any floor learned from what
    arrives could be pulled down by forged answers; and a floor learned from the smallest
    RTT measured so far is too high under endpoint jitter (early samples carry the
    jitter), so it dropped the peer's genuine fast SACKs and was never corrected (the
    simulator's jitter scenario: P100 +57 %). A configured floor at or below the fabric's
    propagation RTT cannot be moved by either, and drops no genuine acknowledgement."""
    return max(0.0, ack_rtt_floor)


#: Refusals ("remote access error" NACKs) of one PSN, each naming its latest
#: transmission, before the QP fails ...
ACCESS_REFUSALS = 3
#: ... coming over at least this many distinct paths (when the QP has that many).
ACCESS_PATHS = 2
_REFUSED_MAX = 1024  # PSNs with refusals remembered


def sack_verdict(txt: TxTable, una: int, next_seq: int, txcap: int, cack: int, base: int,
                 bitmap: int, trig: int | None, now: float, early: float) -> str | None:
    """Why a SACK (cumulative point ``cack``, bitmap ``bitmap`` over ``[base, base +
    64)``, triggering packet ``trig``: None for a probe response or an ACK) must be
    dropped, as the counter's name; None if it is consistent with what was sent
    (``early``: :func:`early_floor`, 0 for no such check)."""
    if cack > next_seq or cack <= una - txcap:
        return "rx_sack_out_of_window"
    if bitmap and base + bitmap.bit_length() - 1 >= next_seq:
        return "rx_sack_unsent"  # a bit for a PSN never sent
    if trig is not None and trig >= next_seq:
        return "rx_sack_unsent"  # triggered by a packet never sent
    if cack > una and early > 0.0:
        e = txt.get(cack - 1)
        if e is not None and e[E_TX] == 1 and now - e[E_SENT] < early:
            return "rx_sack_too_early"
    return None


class AccessRefusals:
    """The evidence for failing a QP with a remote access error.

    The peer's responder refuses (NACK "unexpected event": a bad rkey or a range outside
    its region) every transmission of a write it cannot accept. A forged NACK is one
    frame. So a refusal only takes the packet out of flight for a retransmission (on
    another EV, so on another path when there is one); the QP fails once one PSN has
    been refused ``ACCESS_REFUSALS`` times in a row, each refusal naming the latest
    transmission of a packet really outstanding (stale ones are dropped before), over at
    least ``ACCESS_PATHS`` distinct paths when the QP has that many. An acknowledgement
    of the PSN ends its record (the table forgets it; :meth:`refused` then starts over).
    """

    def __init__(self) -> None:
        self._by_seq: dict[int, tuple[int, set[int], int]] = {}  # seq -> (n, paths, tx)

    def clear(self) -> None:
        self._by_seq.clear()

    def refused(self, seq: int, ev: int, tx: int, npaths: int) -> bool:
        """Record a refusal of ``seq``'s transmission number ``tx`` on ``ev``; True if
        the evidence is now enough to fail the QP (``npaths``: paths the QP has)."""
        rec = self._by_seq.get(seq)
        if rec is not None and tx <= rec[2]:
            return False  # that transmission was refused already: a duplicate
        if rec is None:
            if len(self._by_seq) >= _REFUSED_MAX:
                for k in list(self._by_seq)[: _REFUSED_MAX // 2]:
                    del self._by_seq[k]
            rec = (0, set(), 0)
        n, paths, _ = rec
        n += 1
        paths.add(ev >> EV_PATH_SHIFT)
        self._by_seq[seq] = (n, paths, tx)
        return n >= ACCESS_REFUSALS and len(paths) >= min(ACCESS_PATHS, max(1, npaths))
