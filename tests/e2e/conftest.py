"""Fixtures for tests/e2e: end-to-end runs on mrc-fabric fabrics with mrcd on the hosts.

The experiments themselves live in ``tools/bench_incast.py`` and ``tools/bench_latency.py``
(the benches and these tests run the same code). Every fabric is named ``ic`` + random
hex and recorded in a state directory under the test's ``tmp_path``; the mrcds are
stopped by the PIDs these helpers started and the fabric is removed by its own API
(exactly its recorded namespaces). Nothing is deleted or killed by name pattern.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))


@pytest.fixture(autouse=True)
def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, raw sockets)")
