"""Errors raised by mrc-fabric. Each message says what was wrong and what to do."""

from __future__ import annotations

from mrcnet.topology.errors import FabricError, SpecError

__all__ = ["FabricError", "PermissionProblem", "SpecError", "ToolMissing"]


class PermissionProblem(FabricError):
    """Not root, or CAP_NET_ADMIN missing."""


class ToolMissing(FabricError):
    """A required external program (clang, ip, tc) is not installed."""
