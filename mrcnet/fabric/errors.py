"""Errors raised by mrc-fabric. Each message says what was wrong and what to do."""

from __future__ import annotations

from mrcnet.errors import MrcError
from mrcnet.topology.errors import SpecError

__all__ = ["FabricError", "PermissionProblem", "SpecError", "ToolMissing"]


class FabricError(MrcError):
    """A fabric could not be built, found, changed or removed."""


class PermissionProblem(FabricError):
    """Not root, or CAP_NET_ADMIN missing."""


class ToolMissing(FabricError):
    """A required external program (clang, ip, tc) is not installed."""
