"""Typed exceptions shared across mrcnet.

Every error says what was wrong; the wire parser raises only :class:`MalformedFrame`.
"""

from __future__ import annotations

import enum


class MrcError(Exception):
    """Base class of every exception mrcnet raises on purpose."""


class MalformedReason(enum.Enum):
    """Why a frame was rejected. mrcd counts drops per reason."""

    TRUNCATED = "truncated"
    BAD_ETHERTYPE = "bad_ethertype"
    BAD_IP_VERSION = "bad_ip_version"
    BAD_LENGTH = "bad_length"
    BAD_NEXT_HEADER = "bad_next_header"
    BAD_SRH = "bad_srh"
    BAD_UDP_PORT = "bad_udp_port"
    BAD_CHECKSUM = "bad_checksum"
    BAD_ICRC = "bad_icrc"
    BAD_OPCODE = "bad_opcode"
    BAD_VERSION = "bad_version"
    BAD_FIELD = "bad_field"


class MalformedFrame(MrcError):
    """A frame (or header) that is not valid MRC. ``reason`` says which check failed."""

    def __init__(self, reason: MalformedReason, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason.value}: {detail}" if detail else reason.value)


# --- API misuse: raised to the caller, never for what arrives from the network ---------


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
