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

__all__ = ["use_batch_policy"]


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
