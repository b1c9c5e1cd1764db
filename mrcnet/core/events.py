"""What the core tells its caller: completions (for CQs) and events (``Host.next_event``).

Events are small frozen dataclasses, one docstring line per field, pulled by the caller.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mrcnet.core.states import EVState


class WCStatus(enum.Enum):
    """Work-completion status (verbs names)."""

    SUCCESS = "SUCCESS"
    RETRY_EXC_ERR = "RETRY_EXC_ERR"  # retry budget ran out: the peer is unreachable
    REM_ACCESS_ERR = "REM_ACCESS_ERR"  # the peer refused the rkey or the address range
    WR_FLUSH_ERR = "WR_FLUSH_ERR"  # the QP went to ERROR before this request finished
    GENERAL_ERR = "GENERAL_ERR"  # the stack hit an internal error on this QP (a bug)


class WCOpcode(enum.Enum):
    """What a completion completes."""

    RDMA_WRITE = "RDMA_WRITE"  # requester: a write (with or without immediate) finished
    RECV_RDMA_WITH_IMM = "RECV_RDMA_WITH_IMM"  # responder: a write-with-immediate arrived


@dataclass(frozen=True, slots=True)
class Completion:
    """One work completion, as ``poll_cq`` returns it."""

    status: WCStatus
    wr_id: int
    opcode: WCOpcode
    byte_len: int
    imm: int | None
    qpn: int


@dataclass(frozen=True, slots=True)
class WriteCompleted:
    """A posted write finished: every packet acknowledged (requester side)."""

    qpn: int
    """Local QP number."""
    wr_id: int
    """The caller's work-request id."""
    byte_len: int
    """Bytes written."""


@dataclass(frozen=True, slots=True)
class ImmediateReceived:
    """A write-with-immediate arrived completely, in order (responder side)."""

    qpn: int
    """Local QP number."""
    wr_id: int
    """The posted receive it consumed."""
    imm: int
    """The 32-bit immediate value."""
    byte_len: int
    """Bytes of the write that carried it."""


@dataclass(frozen=True, slots=True)
class QPError:
    """A QP went to ERROR; its outstanding work requests were flushed."""

    qpn: int
    """Local QP number."""
    reason: str
    """What happened and what to check, for humans."""


@dataclass(frozen=True, slots=True)
class PathStateChanged:
    """An EV of a QP changed state."""

    qpn: int
    """Local QP number."""
    ev: int
    """The entropy value (see :mod:`mrcnet.core.evs` for its path)."""
    old: EVState
    """State before."""
    new: EVState
    """State after."""
    cause: str
    """``loss``, ``timeout``, ``trim``, ``ecn``, ``probe``, ``deny``, ``allow``, ``port``."""


@dataclass(frozen=True, slots=True)
class PortStatusChanged:
    """A plane became (un)usable: a local port changed, or a peer reported its ports."""

    port: int | None
    """Local port index, or None for a peer's report."""
    plane: int
    """The plane concerned."""
    up: bool
    """Usable again (True) or not (False)."""
    peer: str | None
    """The peer whose port changed, or None for a local port."""


Event = WriteCompleted | ImmediateReceived | QPError | PathStateChanged | PortStatusChanged
