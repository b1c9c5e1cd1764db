"""Typed exceptions of the client library. mrcd reports errors by class name; the client
raises the same class (unknown names become :class:`ApiError`)."""

from __future__ import annotations

from mrcnet.errors import MrcError


class ApiError(MrcError):
    """A call mrcd (or the library) refused; the message says why."""


class DaemonNotRunning(ApiError):
    """No mrcd listens at the socket path (or it went away)."""


class AccessDenied(ApiError):
    """The socket file's permissions do not let this user talk to mrcd."""


class ProtocolError(ApiError):
    """mrcd and the library do not speak the same protocol (version or message)."""


class BadLkey(ApiError):
    """The local key names no memory region of this client."""


class OutOfBounds(ApiError):
    """An address range does not fit inside its memory region."""


class InvalidQP(ApiError):
    """No such QP for this client, or the call is not allowed in its state."""


class InvalidCQ(ApiError):
    """No such completion queue for this client."""


class InvalidArgument(ApiError):
    """An argument is missing or out of range."""


class ConnectError(ApiError):
    """Connecting a QP to a peer failed (unknown peer, unreachable mrcd, refused)."""


class QueueFull(ApiError):
    """Too many outstanding work requests (or immediates) on the QP."""


#: Name -> class, for errors that travel from mrcd to the client.
BY_NAME: dict[str, type[ApiError]] = {
    c.__name__: c
    for c in (ApiError, DaemonNotRunning, AccessDenied, ProtocolError, BadLkey, OutOfBounds,
              InvalidQP, InvalidCQ, InvalidArgument, ConnectError, QueueFull)
}
