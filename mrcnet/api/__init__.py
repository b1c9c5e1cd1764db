"""Client library of mrcd: a verbs-like API after ``mrc.h`` (see :mod:`mrcnet.api.client`).

Talks to the local mrcd over its Unix socket; memory regions are shared memfds.
"""

from mrcnet.api.client import (
    Access,
    CompletionQueue,
    Context,
    MemoryRegion,
    PeerInfo,
    QueuePair,
    RemoteRegion,
    WorkCompletion,
    default_socket_path,
)
from mrcnet.api.errors import (
    AccessDenied,
    ApiError,
    BadLkey,
    ConnectError,
    DaemonNotRunning,
    InvalidArgument,
    InvalidCQ,
    InvalidQP,
    OutOfBounds,
    ProtocolError,
    QueueFull,
)

__all__ = [
    "Access",
    "AccessDenied",
    "ApiError",
    "BadLkey",
    "CompletionQueue",
    "ConnectError",
    "Context",
    "DaemonNotRunning",
    "InvalidArgument",
    "InvalidCQ",
    "InvalidQP",
    "MemoryRegion",
    "OutOfBounds",
    "PeerInfo",
    "ProtocolError",
    "QueueFull",
    "QueuePair",
    "RemoteRegion",
    "WorkCompletion",
    "default_socket_path",
]
