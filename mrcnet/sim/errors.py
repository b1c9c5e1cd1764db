"""Errors raised by mrc-sim. Each message says what was wrong and how to write it right."""

from __future__ import annotations

from mrcnet.errors import MrcError


class SimError(MrcError):
    """A simulation could not be set up or run."""


class SpecError(SimError):
    """A topology, failure or traffic-matrix spec is invalid."""
