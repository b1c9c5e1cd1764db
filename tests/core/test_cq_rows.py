"""A completion queue holds objects and rows alike (mrcnet/core/cq.py): whatever was
pushed, poll gives Completion objects and poll_rows their fields, in push order."""

from __future__ import annotations

from mrcnet.core.cq import CompletionQueue
from mrcnet.core.events import Completion, WCOpcode, WCStatus


def test_objects_and_rows_come_out_alike_in_order() -> None:
    made = [Completion(WCStatus.SUCCESS, i, WCOpcode.RDMA_WRITE, 64 * i, i or None, 7)
            for i in range(6)]
    for take in ("poll", "poll_rows"):
        cq = CompletionQueue(1)
        for i, c in enumerate(made):  # every other one as a row
            if i % 2:
                cq.push_row((c.status, c.wr_id, c.opcode, c.byte_len, c.imm, c.qpn))
            else:
                cq.push(c)
        assert cq.peek() == made and len(cq) == 6
        if take == "poll":
            assert cq.poll(4) + cq.poll(10) == made
        else:
            assert cq.poll_rows(4) + cq.poll_rows(10) == [
                (c.status, c.wr_id, c.opcode, c.byte_len, c.imm, c.qpn) for c in made]
        assert len(cq) == 0


def test_has_error_sees_rows() -> None:
    cq = CompletionQueue(1)
    cq.push_row((WCStatus.SUCCESS, 1, WCOpcode.RDMA_WRITE, 8, None, 3))
    assert not cq.has_error()
    cq.push_row((WCStatus.RETRY_EXC_ERR, 2, WCOpcode.RDMA_WRITE, 0, None, 3))
    assert cq.has_error()


def test_rows_only_come_out_as_pushed_whole_or_in_parts() -> None:
    rows = [(WCStatus.SUCCESS, i, WCOpcode.RDMA_WRITE, 8, None, 3) for i in range(5)]
    cq = CompletionQueue(1)
    for r in rows:
        cq.push_row(r)
    assert cq.poll_rows(2) == rows[:2] and len(cq) == 3
    assert cq.poll_rows(3) == rows[2:] and len(cq) == 0  # (exactly what is left)
    assert cq.poll_rows(4) == [] and cq.poll(4) == []
    for r in rows:
        cq.push_row(r)
    assert cq.poll(0) == [] and len(cq) == 5
    assert cq.poll(99) == [Completion(*r) for r in rows] and len(cq) == 0
