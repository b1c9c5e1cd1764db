"""mrcd's CPU scheduling policy: ``SCHED_BATCH`` when asked (``sched_batch``, off by
default).

A frame mrcd sends wakes the peer's mrcd from inside the sending ``sendmmsg`` when both
run on one machine (a netns fabric): the fabric's forwarding runs in that syscall, frame
after frame, up to the peer's packet socket. Woken on the same CPU, a ``SCHED_OTHER``
mrcd preempts the sender there and then, between two frames of one batch: a round
trip's answer and the acknowledgement that rides behind it (``ack_with_data``) reach the
peer in two loop passes, not one (measured, tools/bench_latency.py: 1.6-1.8 port passes
per verbs round trip on each mrcd, 1.00-1.06 under ``SCHED_BATCH`` with the CPUs lightly
loaded, and a fifth less CPU per round trip; docs/PERFORMANCE.md, session 11). A
``SCHED_BATCH`` thread does not preempt the running one when it wakes (sched(7)): the
sender's batch is all delivered before the peer runs, or the peer runs on another CPU.

Off by default: the same rule keeps mrcd waiting for the end of the running thread's
time slice whenever every CPU is busy with other work (an application's compute
threads, or, here, other jobs): measured with the machine's other jobs at a load of
6-11, the round trips' P50 got worse (4 KiB: 1.7-2x), the CPU per round trip did not
fall, though the 64-byte rate's CPU per write did (a fifth on the sending mrcd, two
fifths on the receiving one). Between two hosts the peer is not woken by the sender's
syscall at all.

Any user may choose the policy for itself (nice value unchanged); threads started after
inherit it.
"""

from __future__ import annotations

import os

__all__ = ["BulkBatch", "use_batch_policy"]

#: ``sched_batch = "bulk"``: the frames per port pass (a moving average over the last
#: few passes) at which mrcd moves to SCHED_BATCH ...
BULK_FRAMES = 8.0
#: ... and back to SCHED_OTHER (a round trip's passes read one frame each).
CALM_FRAMES = 1.5
#: The average's weight of the newest pass: 1/4 with a way back at 2 frames changed the
#: policy 325 times in one 384 MiB transfer on the receiving side (its passes alternate
#: between many frames and runs of one); 1/8 and 1.5: 2 and 83 times in two such
#: transfers (bench_goodput prints the count).
BULK_WEIGHT = 0.125


def use_batch_policy(on: bool) -> str | None:
    """Put the calling process's thread under ``SCHED_BATCH`` (``on``) or leave its
    policy as it is; returns None, or why the policy could not be set (mrcd keeps
    running under the one it has)."""
    if not on:
        return None
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is None:
        return "this platform has no SCHED_BATCH"
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError as e:
        return str(e)
    return None


class BulkBatch:
    """``sched_batch = "bulk"``: SCHED_BATCH only while mrcd's port passes read bulk.

    A stream of data frames reaches the receiving mrcd a few at a time when each frame
    that wakes it lets it preempt the sender (a netns fabric forwards inside the
    sender's ``sendmmsg``): many small passes, each with its Python and its SACK, and the
    sender's own passes small too. Under SCHED_BATCH the passes grow (tools/bench_goodput.py,
    docs/PERFORMANCE.md session 12); but a round trip's mrcd must not wait out another
    thread's time slice (mrcnet/daemon/sched.py's module docstring). So: SCHED_BATCH while
    the average of frames per pass is at least :data:`BULK_FRAMES`, SCHED_OTHER again
    once it is at most :data:`CALM_FRAMES`. One ``sched_setscheduler`` per change."""

    def __init__(self) -> None:
        self.on = False  #: under SCHED_BATCH now
        self.changes = 0  #: policy changes made
        self.failed: str | None = None  #: why a change failed (then: no more tries)
        self.average = 0.0  #: frames per pass, moving average

    def note(self, frames: int) -> str | None:
        """A port pass read ``frames`` frames. Returns why a policy change failed, the
        one time it does (no change is tried after that), for the caller to log."""
        avg = self.average = self.average + BULK_WEIGHT * (frames - self.average)
        if (avg >= BULK_FRAMES) if not self.on else (avg <= CALM_FRAMES):
            return self._set(not self.on)
        return None

    def _set(self, on: bool) -> str | None:
        if self.failed is not None:
            return None
        policy = getattr(os, "SCHED_BATCH" if on else "SCHED_OTHER", None)
        if policy is None:
            self.failed = "this platform has no SCHED_BATCH"
            return self.failed
        try:
            os.sched_setscheduler(0, policy, os.sched_param(0))
        except OSError as e:
            self.failed = str(e)
            return self.failed
        self.on = on
        self.changes += 1
        return None
