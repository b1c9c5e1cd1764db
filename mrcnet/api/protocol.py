"""The client <-> mrcd protocol on the local Unix socket.

The socket is ``AF_UNIX`` ``SOCK_SEQPACKET``: every message is one datagram, kept whole,
so a file descriptor (a memory region's memfd, sent with SCM_RIGHTS) arrives with exactly
the request it belongs to. A message is one UTF-8 JSON object:

- request (client -> mrcd): ``{"id": n, "op": "<name>", ...arguments}``; with
  ``"reply": "errors"`` mrcd answers only a failure (pipelined posts)
- response (mrcd -> client): ``{"id": n, "ok": {...}}`` or
  ``{"id": n, "error": {"type": "<ApiError subclass>", "message": "..."}}``
- push (mrcd -> client, unsolicited): ``{"push": "wc" | "event" | "connected", ...}``;
  completions and events carry the core's dataclasses (:mod:`mrcnet.api.messages`)

The first request must be ``hello`` with ``"v": PROTOCOL_VERSION``. Who may talk to mrcd
is decided by the socket file's permissions (``socket_mode`` in mrcd's configuration).
"""

from __future__ import annotations

import json
import mmap
import socket
from typing import Any, Final

from mrcnet.api.errors import InvalidArgument

__all__ = ["MAX_FDS", "MAX_MESSAGE", "MODERATION_COUNT_MAX", "MODERATION_PERIOD_MAX_US",
           "PROTOCOL_VERSION", "decode", "encode", "map_region", "moderation_error",
           "recv_msg", "send_msg"]

PROTOCOL_VERSION: Final = 1
#: Bytes per message: control only (payload bytes live in shared memory, never here).
MAX_MESSAGE: Final = 1 << 16
MAX_FDS: Final = 4
#: Completion moderation limits (``modify_cq``), those of ibv_modify_cq's 16-bit count
#: and a period of at most one second.
MODERATION_COUNT_MAX: Final = 0xFFFF
MODERATION_PERIOD_MAX_US: Final = 1_000_000


def moderation_error(count: object, period_us: object) -> str | None:
    """What is wrong with a completion moderation (``modify_cq``), or None: the client
    checks before sending, mrcd again on receipt."""
    if type(count) is not int or not 1 <= count <= MODERATION_COUNT_MAX:
        return (f"completion moderation count {count!r} is not an integer from 1 to "
                f"{MODERATION_COUNT_MAX}")
    if type(period_us) is not int or not 0 <= period_us <= MODERATION_PERIOD_MAX_US:
        return (f"completion moderation period {period_us!r} us is not an integer from 0 "
                f"to {MODERATION_PERIOD_MAX_US}")
    return None

Message = dict[str, Any]


def map_region(fd: int, length: int, who: str) -> mmap.mmap:
    """Map ``length`` bytes of a region's memfd shared and writable (both the client and
    mrcd do); :class:`InvalidArgument` naming ``who`` when the kernel refuses."""
    try:
        return mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, OverflowError) as e:
        why = e.strerror if isinstance(e, OSError) else str(e)
        raise InvalidArgument(f"{who} cannot map {length} bytes of shared memory: "
                              f"{why}") from None


def encode(msg: Message) -> bytes:
    """One message as bytes."""
    data = json.dumps(msg, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    return data


def decode(data: bytes) -> Message:
    """Bytes to a message (ValueError if it is not a JSON object)."""
    msg = json.loads(data)
    if not isinstance(msg, dict):
        raise ValueError("a message must be a JSON object")
    return msg


def send_msg(sock: socket.socket, msg: Message, fds: list[int] | None = None) -> None:
    """Send one message, with ``fds`` attached (SCM_RIGHTS) when given."""
    data = encode(msg)
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def recv_msg(sock: socket.socket) -> tuple[Message, list[int]] | None:
    """Receive one message and the fds that came with it; None at end of stream.

    Raises BlockingIOError on a non-blocking socket with nothing queued.
    """
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
    if not data:
        for fd in fds:
            socket.close(fd)
        return None
    return decode(data), fds
