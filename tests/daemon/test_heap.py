"""mrcd keeps its heap mapped (mrcnet/daemon/heap.py): buffers of a run's size, made and
freed over and over as the sender does, stop costing page faults."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A run's frames and the batch joined from them, 200 times (zero-filled: every page is
# touched); prints the minor page faults it took.
_CHURN = """
import resource, sys
if sys.argv[1] == "1":
    from mrcnet.daemon.heap import keep_heap
    assert keep_heap()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(200):
    a = bytearray(300_000 + 1000 * (i % 50))
    b = bytes(a)
    del a, b
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def _faults(keep: bool) -> int:
    r = subprocess.run([sys.executable, "-c", _CHURN, "1" if keep else "0"],
                       capture_output=True, text=True, timeout=60, check=True)
    return int(r.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_kept_heap_takes_no_page_fault_per_buffer() -> None:
    plain, kept = _faults(False), _faults(True)
    assert plain > 200 * 50  # glibc's defaults: fresh pages for (nearly) every buffer
    assert kept < plain / 20


# Start-up's long-lived objects, then the containers of many passes;
# prints the collections of each generation during the churn and the frozen count.
_GC_CHURN = """
import gc, sys
if sys.argv[1] == "1":
    from mrcnet.daemon.heap import settle_gc
keep = [[i] for i in range(200_000)]
if sys.argv[1] == "1":
    settle_gc()
before = [g["collections"] for g in gc.get_stats()]
held = []  # (the collector counts allocations net of frees: a pass's objects live on a while)
for i in range(300_000):
    held.append((i, [i]))
after = [g["collections"] for g in gc.get_stats()]
print(*(a - b for a, b in zip(after, before)), gc.get_freeze_count())
"""


def _collections(settled: bool) -> list[int]:
    r = subprocess.run([sys.executable, "-c", _GC_CHURN, "1" if settled else "0"],
                       capture_output=True, text=True, timeout=60, check=True)
    return [int(x) for x in r.stdout.split()]


def test_settled_gc_leaves_startup_objects_and_collects_young_rarely() -> None:
    young, _, full, frozen = _collections(False)
    assert young > 300  # every 700 allocations by default
    assert frozen == 0
    young_s, _, full_s, frozen_s = _collections(True)
    assert frozen_s >= 200_000  # start-up's objects: out of the collector's walks
    assert young_s < young / 10
    assert full_s <= full
