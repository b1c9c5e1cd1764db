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
