"""Keep mrcd's heaps quiet: no page fault per packet (C heap), no collector walk of
the long-lived objects every few passes (Python heap: :func:`settle_gc`).

The sender builds each run of data frames in a fresh buffer of up to ~600 KiB
(:class:`mrcnet.wire.template.RunPatcher`), and each port batch is joined into another
(:meth:`mrcnet.io.batch.CBatchIO.send`). With glibc's defaults a freed block at the top
of the heap beyond ``M_TRIM_THRESHOLD`` is given back to the kernel (``brk``), and the
next run's buffer takes fresh pages again: measured on a sending mrcd, 56,000 page
faults and 370 ``brk`` calls per second, 0.8 faults per 8 KiB packet, and about a tenth
of its system time (each fault zeroes a page). Keeping the heap's high-water mark mapped
(and large blocks on the heap rather than in their own mappings) removes them; mrcd's
heap is a few MiB, so the memory kept is small.

glibc only (``mallopt``); elsewhere nothing changes.

The Python collector runs a young collection every 700 allocations of container objects
(a loop pass makes dozens: tuples, lists, frames' bound methods) and a full one every
100 of those, each full one walking every QP, EV, route and template mrcd holds
(measured with ``perf`` on an mrcd in a verbs ping-pong: 6-7 % of its samples in the
collector). Once mrcd serves, :func:`settle_gc` moves what it built at start-up out of
the collector's sight (``gc.freeze``) and makes the young collections rarer; cycles made
later are still collected.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc

__all__ = ["keep_heap", "settle_gc"]

# glibc malloc.h
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

#: Free bytes at the heap's top that glibc keeps instead of returning them.
TRIM_THRESHOLD = 64 << 20
#: Extra bytes each heap growth asks for (fewer brk calls while it grows).
TOP_PAD = 8 << 20
#: Blocks from this size get a mapping of their own (glibc's maximum: 32 MiB on 64-bit);
#: below it they come from the heap, whose pages stay mapped.
MMAP_THRESHOLD = 32 << 20
#: Allocations of container objects between two young collections once mrcd serves
#: (the interpreter's default: 700).
GC_YOUNG_THRESHOLD = 20_000


def keep_heap() -> bool:
    """Tune glibc's malloc as the module docstring says; False where that is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = True
    for param, value in ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                         (_M_TRIM_THRESHOLD, TRIM_THRESHOLD), (_M_TOP_PAD, TOP_PAD)):
        ok = bool(mallopt(param, value)) and ok
    return ok


def settle_gc() -> None:
    """Freeze what exists now (start-up's long-lived objects: never walked again) and
    collect the young generation every :data:`GC_YOUNG_THRESHOLD` allocations, the
    older ones at the interpreter's ratios (see the module docstring)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
