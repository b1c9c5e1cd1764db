"""What mrc-perf's client and server agree on (:mod:`mrcnet.perf`): immediates, the
regions, the rows they report, and how a failed run carries what it measured."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ALL_SIZES", "DEFAULT_ITERS", "DEFAULT_REGION", "DEFAULT_SERVICE", "DEFAULT_SIZE",
           "END_IMM", "END_TCP_IMM", "MAX_WRITE", "PING_FLAG", "RECV_DEPTH", "REPORT",
           "VERDICT_BAD", "VERDICT_FLAG", "VERDICT_UNCHECKED", "Amount", "Latency",
           "Progress", "Result", "RunFailed"]

DEFAULT_SERVICE = 18515  # perftest's port, as a service number
DEFAULT_SIZE = 65536
ALL_SIZES = [1 << k for k in range(6, 21, 2)]  # 64 B .. 1 MiB, x4 steps
END_IMM = 0xFFFFFFFF  # the last write: done
END_TCP_IMM = 0xFFFFFFFE  # the last write: done, a TCP baseline stream follows
PING_FLAG = 0x80000000  # latency mode: imm = PING_FLAG | size, the server writes it back
RECV_DEPTH = 64
#: Latency mode: the pings and pongs are posted unsignalled (their QPs made with
#: sq_sig_all=False: each side learns of the other's write by its receive, not of its
#: own by a completion, and neither wakes for it), every SIGNAL_EVERY-th signalled: a
#: run of unsignalled writes must stay shorter than the send queue (QueueFull).
SIGNAL_EVERY = 64
VERDICT_FLAG = 0x40000000  # the server's answer to a size's last write: flag | verdict
VERDICT_BAD = 1  # ... the bytes differ from the client's pattern
VERDICT_UNCHECKED = 2  # ... the server runs with --no-verify
DEFAULT_ITERS = 200
DEFAULT_REGION = 16 << 20  # bytes the server exposes per QP (writes cycle over them)
#: The largest single write (its size travels in a 32-bit immediate in --lat; the
#: region the server exposes may be any size).
MAX_WRITE = 1 << 30
#: With -b, the server's verdict write carries its own direction's figures for the
#: size, (bytes, nanoseconds), into the client's small region at 64 + 16 x QP index.
REPORT = struct.Struct("<QQ")
REPORT_AT = 64
#: The client's small region: verdicts land at 0, -b reports after them.
BACK_REGION = 4096
MAX_QPS = (BACK_REGION - REPORT_AT) // REPORT.size


@dataclass(frozen=True)
class Latency:
    """One row of the latency table (microseconds, one-way = half the round trip)."""

    size: int
    iters: int
    t_min: float
    t_typical: float
    t_avg: float
    t_99: float
    t_max: float
    t_stdev: float = 0.0
    t_999: float = 0.0  #: the 99.9th percentile


@dataclass(frozen=True)
class Result:
    """One row of the client's table: one message size (or, ``size == -1``, the kernel
    TCP baseline). ``verified``: the server found every byte it checked equal to the
    client's pattern (None: not checked); ``retransmissions``, ``trims`` (trimmed
    packets NACKed to the sender) and ``ev_changes`` (EV state changes) are summed over
    the run's QPs for this size. ``gbps_peak``: the best interval (``--interval``);
    ``gbps_back``/``bytes_back``: with -b, what the server wrote the other way meanwhile.
    ``error``: why the size did not finish (mrcd's reason when it has one); the other
    fields then hold what was done until then. ``cpu_s``: this client's CPU seconds for
    the size (warm-up included; not the process's start-up)."""

    size: int
    iters: int
    seconds: float
    gbps: float
    mpps: float
    errors: int
    bytes: int = 0
    qps: int = 1
    verified: bool | None = None
    retransmissions: int = 0
    trims: int = 0
    ev_changes: int = 0
    packets: int = 0  #: data packets sent, retransmissions included
    gbps_peak: float = 0.0
    gbps_back: float | None = None
    bytes_back: int = 0
    error: str | None = None
    cpu_s: float = 0.0


class RunFailed(Exception):
    """A run that did not finish: ``results`` holds every row measured (the last one
    partial, with its ``error``); the message is the reason."""

    def __init__(self, reason: str, results: list[Result] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.results = results or []


@dataclass
class Amount:
    """How much to send per size: ``iters`` writes, ``nbytes`` bytes or ``seconds``."""

    iters: int | None = None
    nbytes: int | None = None
    seconds: float | None = None

    def writes(self, size: int) -> int | None:
        """Writes for ``size`` (None: until ``seconds`` have passed)."""
        if self.nbytes is not None:
            return max(1, -(-self.nbytes // size))
        if self.seconds is not None:
            return None
        return self.iters if self.iters is not None else DEFAULT_ITERS


#: What the progress callback gets, about once per interval: seconds since the size
#: started (``t``) and ``clock`` (time.monotonic(), to line up with other processes),
#: bytes completed, the interval's Gb/s, counters so far; with ``paths`` also "paths":
#: {"p0s1": {"sent": n, "states": {"GOOD": n, ...}}} (sent: cumulative).
Progress = Callable[[dict[str, Any]], None]
