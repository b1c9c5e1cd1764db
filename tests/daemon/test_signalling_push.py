"""mrcd's selective signalling as the CQ's own ``push_row``
(:meth:`mrcnet.daemon.signalling.Signalling.pusher`, installed by
:meth:`mrcnet.core.cq.CompletionQueue.keep_rows`): one call per completion, and the rows
kept, and the flags taken, exactly those of the rule it replaced (a ``keep(row)``
predicate the CQ called for each row, written out here as the reference)."""

from __future__ import annotations

import random
import sys
from collections import deque
from types import FrameType

from mrcnet.api.shmqueues import F_UNSIGNALED
from mrcnet.core.cq import CompletionQueue, CompletionRow
from mrcnet.core.events import WCOpcode, WCStatus
from mrcnet.daemon.signalling import Signalling


def _keep(flags: dict[int, deque[int]], row: CompletionRow) -> bool:
    """The reference: does ``row`` go to the client (False: a successful write posted
    unsignalled)? Takes the write's flags from its QP's queue."""
    if row[2] is not WCOpcode.RDMA_WRITE:
        return True
    f = flags.get(row[5])
    if not f:
        return True
    return not f.popleft() & F_UNSIGNALED or row[0] is not WCStatus.SUCCESS


def test_the_push_keeps_what_the_rule_keeps() -> None:
    """Random rows (writes and receives, success and errors, QPs with flags, with none
    left, unknown) through the CQ's push_row and through the reference: the same rows
    kept, in order, and the same flags left."""
    rng = random.Random(5)
    sig, cq = Signalling(), CompletionQueue(1)
    sig.add_qp(1, cq)
    sig.add_qp(2, cq)
    cq.keep_rows(sig.pusher)  # (again: nothing changes)
    ref_flags: dict[int, deque[int]] = {1: deque(), 2: deque()}
    kept: list[CompletionRow] = []
    ops = (WCOpcode.RDMA_WRITE, WCOpcode.RDMA_WRITE, WCOpcode.RECV_RDMA_WITH_IMM)
    for i in range(4000):
        if rng.random() < 0.3:
            qpn = rng.choice((1, 2))
            fl = [rng.choice((0, F_UNSIGNALED, F_UNSIGNALED | 1)) for _ in range(rng.randrange(4))]
            sig.posted(qpn, fl)
            ref_flags[qpn].extend(fl)
            continue
        st = WCStatus.SUCCESS if rng.random() < 0.9 else WCStatus.REM_ACCESS_ERR
        row: CompletionRow = (st, i, rng.choice(ops), 8, None, rng.choice((1, 2, 3)))
        cq.push_row(row)
        if _keep(ref_flags, row):
            kept.append(row)
    assert list(cq.entries) == kept and len(kept) > 1000
    assert sig.flags == ref_flags


def test_a_cq_without_a_selective_qp_appends_every_row() -> None:
    """A CQ no selective QP uses: push_row is the queue's own append."""
    cq = CompletionQueue(1)
    row: CompletionRow = (WCStatus.SUCCESS, 1, WCOpcode.RDMA_WRITE, 8, None, 1)
    cq.push_row(row)
    assert list(cq.entries) == [row] and cq.push_row == cq.entries.append


def test_one_call_of_python_per_completion() -> None:
    """The filter is the push itself: a completion on a selective QP's CQ costs one call
    of Python (mrcd pushes one or two a round trip)."""
    sig, cq = Signalling(), CompletionQueue(1)
    sig.add_qp(1, cq)
    sig.posted(1, [F_UNSIGNALED, 0])
    calls: list[str] = []

    def prof(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            calls.append(frame.f_code.co_name)

    rows: list[CompletionRow] = [(WCStatus.SUCCESS, k, WCOpcode.RDMA_WRITE, 8, None, 1)
                                 for k in (1, 2)]
    sys.setprofile(prof)
    try:
        for row in rows:
            cq.push_row(row)
    finally:
        sys.setprofile(None)
    assert calls == ["push_row", "push_row"]
    assert list(cq.entries) == rows[1:]  # (the unsignalled one dropped)
