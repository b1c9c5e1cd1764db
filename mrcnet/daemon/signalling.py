"""Selective signalling for mrcd's clients (verbs' ``sq_sig_all`` false and
``IBV_SEND_SIGNALED``): the successful completion of a write posted unsignalled
(:data:`~mrcnet.api.shmqueues.F_UNSIGNALED`) on a QP created with ``sq_sig_all`` false is
dropped before it reaches the client's CQ. Nothing is written to the ring for it, no
doorbell rings and the application does not wake: in a ping-pong the pinger learns of the
echo from its receive, not from its own write's completion.

The core completes a QP's writes in post order (``Recovery._complete_wrs``), so a queue
of the slot flags of the QP's accepted writes, kept from its creation, says which write
each completion is for. A completion with an error is never dropped (a QP's failure
flushes its writes through ``CompletionQueue.push``, not ``push_row``; the check below
also keeps any row whose status is not success). A write mrcd refused never reached the
core: its flags are not queued (the client gets its ``post_error``).

An unsignalled write's resources in mrcd (its place among the QP's writes in flight, its
immediate's count against ``max_imm_outstanding``) are freed once it is acknowledged,
as a signalled write's; its send-queue slot was given back when mrcd took it, as every
post's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from mrcnet import core
from mrcnet.api.shmqueues import F_UNSIGNALED
from mrcnet.core.cq import CompletionRow
from mrcnet.core.events import WCOpcode, WCStatus

__all__ = ["Signalling"]

_WRITE = WCOpcode.RDMA_WRITE
_OK = WCStatus.SUCCESS


class Signalling:
    """The QPs created with ``sq_sig_all`` false and the flags of their writes."""

    def __init__(self) -> None:
        #: qpn -> the slot flags of its writes posted and not yet completed, in post
        #: order (only QPs created with ``sq_sig_all`` false are here).
        self.flags: dict[int, deque[int]] = {}

    def add_qp(self, qpn: int, cq: core.CompletionQueue) -> None:
        """QP ``qpn`` (its send completions go to ``cq``) was created with ``sq_sig_all``
        false."""
        self.flags[qpn] = deque()
        cq.keep_rows(self.pusher)  # (for good: a CQ's other QPs are not in ``flags``)

    def forget(self, qpn: int) -> None:
        """QP ``qpn`` is gone."""
        self.flags.pop(qpn, None)

    def reset(self, qpn: int) -> None:
        """QP ``qpn`` went back to RESET: its writes were discarded without completions."""
        f = self.flags.get(qpn)
        if f is not None:
            f.clear()

    def posted(self, qpn: int, flags: Iterable[int]) -> None:
        """The core accepted writes on ``qpn`` whose slots had ``flags``, in order."""
        f = self.flags.get(qpn)
        if f is not None:
            f.extend(flags)

    def pusher(self, append: Callable[[CompletionRow], Any]
               ) -> Callable[[CompletionRow], None]:
        """The ``push_row`` of a CQ of such a QP (:meth:`CompletionQueue.keep_rows
        <mrcnet.core.cq.CompletionQueue.keep_rows>`), which the core calls for each
        completion it pushes as a row (writes and receives alike): ``append`` the row
        unless it is a successful write posted unsignalled."""
        flags = self.flags  # (never replaced: QPs come and go in it)

        def push_row(row: CompletionRow) -> None:
            # a write of a QP with flags recorded (else: a QP that signals all, or none
            # recorded) takes its flags, in post order; kept if signalled or failed
            if (row[2] is not _WRITE or not (f := flags.get(row[5]))
                    or not f.popleft() & F_UNSIGNALED or row[0] is not _OK):
                append(row)
        return push_row
