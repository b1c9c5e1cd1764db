"""What a queue pair may see of the host it lives in, and what the parts of a queue pair
(sending, recovery, responding) may see of the queue pair that composes them.

Both are narrow on purpose: a QP never reaches into the host (no import of host.py),
and a part never imports qp.py, so the core has no import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from mrcnet.core.config import HostConfig, QPAttrs
from mrcnet.core.cq import CompletionQueue
from mrcnet.core.events import Event, PathStateChanged, WCStatus
from mrcnet.core.memory import MemoryTable
from mrcnet.core.states import QPState
from mrcnet.wire import Route


@dataclass(frozen=True, slots=True)
class HostContext:
    """The host's side of every QP on it (one instance per host, shared)."""

    name: str  #: the host's name (an ECMP EV set is keyed by it)
    config: HostConfig
    memory: MemoryTable  #: the regions remote writes may target
    count: Callable[[str, int], None]  #: bump a host counter
    emit: Callable[[Event], None]  #: queue an event for the application
    path_events: list[PathStateChanged]  #: where EV managers report EV state changes
    port_of_plane: Callable[[int], int]  #: the local port index of a plane
    #: the host's counters, the dict ``count`` bumps: a QP's counters bump it in place
    #: (QueuePair.count, once per trimmed packet and NACK: no second call)
    counters: dict[str, int]
    #: have the host look at QP ``qpn``'s timers and send queue (a QP acted on from
    #: outside its own frames and timers: ``HostConfig.verdict_inflight``)
    wake: Callable[[int], None] | None = None


class QPView(Protocol):
    """What sending, recovery and responding read from their queue pair (beyond the
    shared objects it hands them directly: EV manager, CC, table of packets)."""

    qpn: int
    cfg: HostConfig
    attrs: QPAttrs
    ctx: HostContext
    cq: CompletionQueue
    rcq: CompletionQueue
    state: QPState
    #: the timer version: bumped by every write of a timer ``deadline`` reads (the
    #: host's timer heap re-reads a QP's deadline only when it moved: qptimers.py)
    tv: int

    @property
    def srtt(self) -> float:
        """The QP's smoothed RTT (0 before any sample)."""

    @property
    def retry_budget(self) -> int:
        """Retry rounds without progress before the QP fails."""

    @property
    def retry_linear(self) -> int:
        """Retry rounds at the base timeout before exponential backoff."""

    def count(self, name: str, n: int = 1) -> None:
        """Bump a per-QP counter (and the host's)."""

    def route(self, ev: int) -> tuple[int, Route]:
        """(local port index, Route) of an EV."""

    def fail(self, status: WCStatus, reason: str) -> None:
        """Go to ERROR, flushing every outstanding work request."""

    def changed(self) -> None:
        """What the host's receive lane was set up with for this QP changed."""
