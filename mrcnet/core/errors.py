"""Exceptions the core raises to its caller (API misuse), all subclasses of ``MrcError``.

Nothing that arrives from the network ever raises: bad frames are counted and dropped.
These belong in :mod:`mrcnet.errors` eventually (see docs/CORE.md); they live here until
the owner of that module adds them.
"""

from __future__ import annotations

from mrcnet.errors import MrcError


class IllegalTransition(MrcError):
    """``modify_qp`` asked for a QP state change the state table does not allow."""

    def __init__(self, qpn: int, from_state: str, to_state: str) -> None:
        self.qpn = qpn
        self.from_state = from_state
        self.to_state = to_state
        super().__init__(
            f"QP {qpn}: illegal transition {from_state} -> {to_state} "
            "(allowed: RESET->INIT->RTR->RTS, any->ERROR, any->RESET)"
        )


class InvalidAttribute(MrcError):
    """A QP attribute is missing, unknown for this transition, or out of range."""


class InvalidRequest(MrcError):
    """An API call that cannot be carried out (unknown QPN, bad MR range, wrong state)."""
