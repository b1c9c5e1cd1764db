"""The exceptions of the client library, one tree under :class:`mrcnet.errors.MrcError`.

Two branches: :class:`ApiError` for the verbs API (mrcd reports errors by class name; the
client raises the same class, unknown names become :class:`ApiError`), and
:class:`SocketError` for the socket-like API (each also the matching builtin
:class:`OSError`, as socket errors are). The socket API's errors about mrcd itself are in
both branches (:class:`MrcdNotRunning` is a :class:`DaemonNotRunning`).
"""

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


class MemoryNotSealed(InvalidArgument):
    """mrcd refuses a memory region whose file is not a memfd sealed against shrinking
    (``F_SEAL_SHRINK``): a region that could shrink under mrcd's mapping would make its
    reads and writes fault. :meth:`Context.alloc_mr <mrcnet.api.Context.alloc_mr>` seals
    what it creates."""


class LimitExceeded(ApiError):
    """A per-client limit of mrcd was reached. ``key`` is the mrcd configuration key that
    raises it (e.g. ``limits.max_qps``), ``limit`` its current value."""

    def __init__(self, message: str, key: str = "", limit: int | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.limit = limit


class ConnectError(ApiError):
    """Connecting a QP to a peer failed (unknown peer, unreachable mrcd, refused)."""


class QueueFull(ApiError):
    """Too many outstanding work requests (or immediates) on the QP."""


# --- the socket-like API ----------------------------------------------------------


class SocketError(MrcError, OSError):
    """Base class of the socket API's errors (an :class:`OSError`, as socket errors)."""


class MrcdNotRunning(DaemonNotRunning, SocketError, ConnectionRefusedError):
    """No mrcd at the socket path (or it went away); ``path`` is where it was looked for."""

    def __init__(self, path: str, detail: str = "") -> None:
        self.path = path
        super().__init__(detail or f"mrcd is not running at {path} (start it with "
                         "mrcd --config FILE, or pass mrcd=PATH / set MRCD_SOCKET)")

    def __str__(self) -> str:
        return str(self.args[0])


class MrcdAccessDenied(AccessDenied, SocketError, PermissionError):
    """mrcd's socket exists, but its mode/group do not let this user in (``path``)."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        super().__init__(detail)

    def __str__(self) -> str:
        return str(self.args[0])


class PeerUnreachable(SocketError, ConnectionError):
    """The peer host is unknown to mrcd, or its mrcd cannot be reached."""


class ConnectionRefused(SocketError, ConnectionRefusedError):
    """The peer's mrcd answered, but nothing listens on that service (or it refused)."""


class ConnectionReset(SocketError, ConnectionResetError):
    """The connection's QP failed (``reason``: mrcd's words, e.g. the retry budget ran out
    because the peer's mrcd or QP disappeared)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"connection reset: {reason}")

    def __str__(self) -> str:
        return str(self.args[0])


class BrokenPipe(SocketError, BrokenPipeError):
    """Sending after this side shut down writing, or after the peer closed."""


class SocketClosed(SocketError):
    """The socket (or listener) was closed by this process."""


class EndOfStream(SocketError, EOFError):
    """``recv_message``: the peer closed (orderly); no more messages will come."""


class SocketTimeout(SocketError, TimeoutError):
    """A blocking call did not finish within the socket's timeout."""


class WouldBlock(SocketError, BlockingIOError):
    """A non-blocking socket (timeout 0) cannot do the call right now."""


#: Name -> class, for errors that travel from mrcd to the client.
BY_NAME: dict[str, type[ApiError]] = {
    c.__name__: c
    for c in (ApiError, DaemonNotRunning, AccessDenied, ProtocolError, BadLkey, OutOfBounds,
              InvalidQP, InvalidCQ, InvalidArgument, ConnectError, QueueFull, MemoryNotSealed,
              LimitExceeded)
}


def error_from(err: dict[str, object], prefix: str = "") -> ApiError:
    """The exception for an error mrcd sent (``{"type", "message"}``, and for
    :class:`LimitExceeded` ``key`` and ``limit``); ``prefix`` goes before the message."""
    cls = BY_NAME.get(str(err.get("type", "")), ApiError)
    text = prefix + str(err.get("message", "?"))
    if cls is LimitExceeded:
        limit = err.get("limit")
        return LimitExceeded(text, str(err.get("key", "")),
                             limit if isinstance(limit, int) else None)
    return cls(text)


def error_to(e: ApiError) -> dict[str, object]:
    """What mrcd sends for ``e`` (the inverse of :func:`error_from`)."""
    out: dict[str, object] = {"type": type(e).__name__, "message": str(e)}
    if isinstance(e, LimitExceeded):
        out["key"], out["limit"] = e.key, e.limit
    return out
