"""Errors of the raw-socket layer. Each message says what was wrong and what to do."""

from __future__ import annotations

from mrcnet.errors import MrcError


class IOSetupError(MrcError):
    """A port, kernel rule or neighbour could not be set up (the message says why)."""


class CapabilityError(IOSetupError):
    """The process lacks a capability (CAP_NET_RAW for packet sockets, CAP_NET_ADMIN for
    kernel rules)."""


class NeighbourError(IOSetupError):
    """The next hop's MAC address could not be resolved."""
