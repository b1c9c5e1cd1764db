"""One rank of a collective run: warm-up, timed iterations, a check of every result.

``mrc-coll rank`` runs this on one host (by hand on a real machine, or started by the
launcher on each fabric host); it prints one JSON object per line on stdout:

- ``{"type": "ready", ...}`` once connected to every peer;
- ``{"type": "start", "size": S, "clock": T}`` when the timed iterations of a size begin
  (``clock``: this host's ``time.monotonic()``, the clock of ``--fail`` times);
- ``{"type": "size", "size": S, "steps": [[clock, seconds], ...], "verified": true}``
  per size: every timed iteration's start and duration on this rank;
- ``{"type": "error", "error": "..."}`` when the run stops (exit status 3).

A rank that fails tells every peer (:meth:`Transport.abort`), so the others stop at once
with "rank R aborted" instead of waiting for their deadline.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from mrcnet.coll.algorithms import barrier, layout, prepare, run_iteration, verify
from mrcnet.coll.errors import CollError
from mrcnet.coll.options import CollOptions
from mrcnet.coll.transport import Transport

__all__ = ["Emit", "buffer_sizes", "run_rank"]

Emit = Callable[[dict[str, Any]], None]


def print_json(rec: dict[str, Any]) -> None:
    """One JSON line on stdout, flushed (the launcher reads it as it comes)."""
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()


def buffer_sizes(opts: CollOptions, world: int) -> tuple[int, int]:
    """(data, inbox) bytes the largest size needs."""
    lays = [layout(opts.op, s, world) for s in opts.sizes]
    return max(x.data_bytes for x in lays), max(x.inbox_bytes for x in lays)


def run_rank(t: Transport, opts: CollOptions, emit: Emit = print_json) -> None:
    """Run every size of ``opts`` on transport ``t``; raises :class:`CollError` (after
    telling the peers) when the run cannot finish."""
    base = {"rank": t.rank, "host": t.names[t.rank]}
    try:
        emit({"type": "ready", **base, "clock": time.monotonic()})
        k = 0  # iteration number across sizes: tags and inbox parity never repeat in a row
        for n_size, size in enumerate(opts.sizes):
            lay = layout(opts.op, size, t.world)
            # A new size has a new inbox layout: nobody may write it while a peer still
            # reads the last size's (parity alone only separates iterations of one size).
            barrier(t, 2 * n_size)
            for _ in range(opts.warmup):
                prepare(t, lay, k)
                run_iteration(t, lay, k)
                verify(t, lay, k)
                k += 1
            barrier(t, 2 * n_size + 1)  # the timed steps start together
            emit({"type": "start", **base, "size": size, "clock": time.monotonic()})
            steps = []
            for _ in range(opts.iters):
                prepare(t, lay, k)
                t0 = time.monotonic()
                run_iteration(t, lay, k)
                steps.append([t0, time.monotonic() - t0])
                verify(t, lay, k)
                k += 1
            emit({"type": "size", **base, "size": size, "steps": steps, "verified": True})
        barrier(t, 2 * len(opts.sizes))  # nobody leaves while a peer still needs it
    except CollError as e:
        t.abort(str(e))
        raise
    except KeyboardInterrupt:
        t.abort("interrupted")
        raise
