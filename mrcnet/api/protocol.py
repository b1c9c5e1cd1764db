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

import array
import json
import mmap
import os
import re
import select
import socket
import time
from typing import Any, Final

from mrcnet.api.errors import InvalidArgument

__all__ = ["MAX_FDS", "MAX_MESSAGE", "MODERATION_COUNT_MAX", "MODERATION_PERIOD_MAX_US",
           "PROTOCOL_VERSION", "decode", "encode", "leading_id", "map_region",
           "moderation_error", "nesting_exceeds", "recv_msg", "recv_raw", "send_msg",
           "send_raw", "send_raw_by"]

#: 2: posts and completions travel in shared-memory queues (:mod:`mrcnet.api.shmqueues`).
PROTOCOL_VERSION: Final = 2
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


def encode(msg: Message, limit: int = MAX_MESSAGE) -> bytes:
    """One message as bytes (ValueError beyond ``limit`` bytes)."""
    data = json.dumps(msg, separators=(",", ":")).encode()
    if len(data) > limit:
        raise ValueError(f"message of {len(data)} bytes exceeds {limit}")
    return data


def decode(data: bytes) -> Message:
    """Bytes to a message (ValueError if it is not a JSON object, or nested beyond what
    the decoder can take)."""
    try:
        msg = json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not isinstance(msg, dict):
        raise ValueError("a message must be a JSON object")
    return msg


#: A JSON string (skipped whole: brackets inside do not count) or a bracket.
_NESTING = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')
#: The request id at the start of a message, as the library writes it (``{"id":7,``).
_LEADING_ID = re.compile(rb'\s*\{\s*"id"\s*:\s*(-?\d{1,18})\s*[,}]')


def nesting_exceeds(data: bytes, depth: int) -> bool:
    """Whether the JSON text ``data`` nests arrays/objects deeper than ``depth``, found
    without parsing it (a parser would recurse that deep first). Costs two ``count``
    calls unless the text has more than ``depth`` brackets at all."""
    if data.count(b"[") + data.count(b"{") <= depth:
        return False
    level = 0
    for m in _NESTING.finditer(data):
        c = m.group()
        if c in (b"[", b"{"):
            level += 1
            if level > depth:
                return True
        elif c in (b"]", b"}"):
            level -= 1
    return False


def leading_id(data: bytes) -> int | None:
    """The ``id`` of a request that cannot be decoded, if it starts with one (so its
    error still reaches the call that waits for it)."""
    m = _LEADING_ID.match(data)
    return int(m.group(1)) if m else None


def send_msg(sock: socket.socket, msg: Message, fds: list[int] | None = None,
             limit: int = MAX_MESSAGE) -> None:
    """Send one message, with ``fds`` attached (SCM_RIGHTS) when given."""
    send_raw(sock, encode(msg, limit), fds)


def send_raw(sock: socket.socket, data: bytes, fds: list[int] | None = None) -> None:
    """Send one encoded message, with ``fds`` attached when given."""
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def send_raw_by(sock: socket.socket, data: bytes, deadline: float,
                fds: list[int] | None = None) -> None:
    """:func:`send_raw` on a non-blocking socket, waiting for room in it until
    ``deadline`` (``time.monotonic``'s clock): TimeoutError past it, OSError as the
    socket's send raises it."""
    while True:
        try:
            send_raw(sock, data, fds)
            return
        except (BlockingIOError, InterruptedError):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no room in the socket") from None
            select.select([], [sock], [], left)


#: Ancillary bytes a message's fds need at most.
_ANC_SPACE: Final = socket.CMSG_LEN(MAX_FDS * array.array("i").itemsize)


def _fds_of(anc: list[tuple[int, int, bytes]]) -> list[int]:
    """The fds an ``SCM_RIGHTS`` message brought (a partial int at the end ignored)."""
    fds = array.array("i")
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    return list(fds)


def recv_raw(sock: socket.socket, size: int = MAX_MESSAGE,
             flags: int = 0) -> tuple[bytes, list[int], int] | None:
    """Receive one datagram of at most ``size`` bytes: its bytes, the fds that came with
    it (the caller owns them from here: it must close them, whatever happens next) and
    the flags (``MSG_TRUNC``: it was longer; ``MSG_CTRUNC``: more than :data:`MAX_FDS`
    fds were attached, the kernel closed the rest). None at end of stream. ``flags``:
    the call's (``MSG_DONTWAIT``: do not wait, whatever the socket's mode).

    Raises BlockingIOError on a non-blocking socket with nothing queued.
    """
    # (socket.recv_fds' work without its per-call array and loop when nothing came
    # along, the common case: a doorbell or a request; and it passes ``flags`` on, which
    # recv_fds of Python 3.11 drops)
    data, anc, flags, _addr = sock.recvmsg(size, _ANC_SPACE, flags)
    fds = _fds_of(anc) if anc else []
    if not data:
        for fd in fds:
            os.close(fd)
        return None
    return data, fds, flags


def recv_msg(sock: socket.socket, flags: int = 0) -> tuple[Message, list[int]] | None:
    """Receive one message and the fds that came with it; None at end of stream. The fds
    are closed if the message cannot be decoded (ValueError).

    Raises BlockingIOError on a non-blocking socket with nothing queued.
    """
    got = recv_raw(sock, MAX_MESSAGE, flags)
    if got is None:
        return None
    data, fds, _flags = got
    try:
        return decode(data), fds
    except ValueError:
        for fd in fds:
            os.close(fd)
        raise
