"""Hooks for the whole test session.

A run ended with SIGTERM (a CI timeout, ``kill PID``) would otherwise die at once and
skip every fixture's teardown, leaving its namespaces and the mrcds inside them behind.
Here SIGTERM ends the run as Ctrl-C does: pytest stops, runs every pending teardown (the
fabrics, mrcds and ranks the tests started, each removed by name or PID), reports, and
exits with status 2.

A run started in the background by a non-interactive shell (``.ci/run &``, nohup) inherits
SIGINT ignored, and so would every process the tests start: the tests that stop mrc-coll
or ``mrc-fabric status --watch`` with Ctrl-C would wait for an exit that never comes.
The session restores SIGINT's default (KeyboardInterrupt here; the default disposition in
what it starts).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import pytest


def _terminated(signum: int, frame: FrameType | None) -> None:
    # A second SIGTERM during the teardown must not cut it short; a Python handler (not
    # SIG_IGN) so that processes the teardown starts keep the default disposition.
    signal.signal(signal.SIGTERM, _teardown_in_progress)
    raise KeyboardInterrupt(f"terminated by signal {signum}: tearing down")


def _teardown_in_progress(signum: int, frame: FrameType | None) -> None:
    print(f"signal {signum} ignored: the teardown is running (SIGKILL ends it at once)")


def pytest_configure(config: pytest.Config) -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _verify_lane_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs with the receive loop's setup checks verified: each check that
    ``QueuePair.setup_ver`` lets it skip runs anyway and fails the test when it finds a
    change the version missed (a writer of the lane's setup without
    ``QueuePair.changed``; mrcnet/core/receive.py VERIFY_SETUP)."""
    from mrcnet.core import receive

    monkeypatch.setattr(receive, "VERIFY_SETUP", True)
