"""What mrcd's :class:`~mrcnet.daemon.posts.Posts` needs around it, for tests that drive
mrcd's posting code into a real core on the virtual clock: an engine and a session."""

from __future__ import annotations

from mrcnet.core import Host
from mrcnet.daemon.apiserver import Session
from mrcnet.daemon.config import DaemonConfig


class FakeEngine:
    """What Posts reads of mrcd's engine: a real core, a configuration, no logging."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.cfg = DaemonConfig(host="h0", ports=[], socket="/nonexistent")
        self.api = None
        self.log = None

    def guarded(self, what: str) -> None:
        raise AssertionError(f"internal error in {what}")

    def after_requests(self) -> None:
        """(Nothing sends here: the tests read the core.)"""


class OutboxSession(Session):
    """A session whose messages stay in its outbox (no socket to flush them to)."""

    def _flush(self) -> None:
        pass
