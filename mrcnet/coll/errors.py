"""The exceptions of ``mrc-coll``: one tree under :class:`CollError` (an
:class:`~mrcnet.errors.MrcError`), each printed as one clear line by the tool."""

from __future__ import annotations

from mrcnet.errors import MrcError


class CollError(MrcError):
    """A collective could not run or finish; the message says why."""


class StepTimeout(CollError):
    """No progress for the per-step deadline (a peer stalled or a path is cut)."""


class PeerFailed(CollError):
    """A peer rank is gone: its connection failed or it aborted the run."""


class VerifyFailed(CollError):
    """A result differs from the exact expected output."""
