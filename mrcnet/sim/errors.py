"""Errors raised by mrc-sim. Each message says what was wrong and how to write it right."""

from __future__ import annotations

from mrcnet.errors import MrcError
from mrcnet.topology.errors import SpecError

__all__ = ["SimError", "SpecError"]


class SimError(MrcError):
    """A simulation could not be set up or run."""

