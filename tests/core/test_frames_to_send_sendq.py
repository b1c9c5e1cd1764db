"""Host.frames_to_send with the caller's send queues: the frames queued since the last
call are counted (``tx_frames``) through ``take_added`` only when there are any, and a
full queue's frames (``tx_sendq_full``) are counted at once even when nothing else was
queued."""

from __future__ import annotations

from .harness import Net


class FakeSendQueue:
    """What frames_to_send reads of mrcd's SendQueue (mrcnet.io.batch)."""

    def __init__(self) -> None:
        self.added = 0
        self.overflow = 0
        self.takes = 0

    def take_added(self) -> int:
        self.takes += 1
        k, self.added = self.added, 0
        return k


def test_queued_frames_and_overflow_are_counted() -> None:
    h = Net().h(0)
    sq = FakeSendQueue()
    assert h.frames_to_send(0.0, sendq=sq) == []
    assert sq.takes == 0  # nothing queued: not even the call
    base = h.counters().get("tx_frames", 0)
    sq.added = 3
    h.frames_to_send(0.0, sendq=sq)
    assert sq.takes == 1 and sq.added == 0
    assert h.counters()["tx_frames"] == base + 3
    sq.overflow = 2  # a run that did not fit at all: nothing added, two frames lost
    h.frames_to_send(0.0, sendq=sq)
    assert sq.takes == 1 and sq.overflow == 0
    assert h.counters()["tx_sendq_full"] == 2
    sq.added = -1  # (the engine's ACK behind the data: counted by the host already)
    h.frames_to_send(0.0, sendq=sq)
    assert sq.takes == 2 and h.counters()["tx_frames"] == base + 2
