"""sd_notify for mrcd under systemd (``Type=notify``), without libsystemd.

systemd passes ``$NOTIFY_SOCKET``: a Unix datagram socket, a path or (``@...``) an
abstract name. Each message is newline-separated ``KEY=VALUE`` lines: ``READY=1`` once
mrcd serves, ``RELOADING=1`` (with ``MONOTONIC_USEC``, which systemd 253 and later want
beside it) when a SIGHUP reload begins, ``READY=1`` when it is done, ``STOPPING=1`` when
mrcd begins to stop; ``STATUS=`` is what ``systemctl status`` shows. Without
``$NOTIFY_SOCKET`` (not under systemd) every call does nothing.
"""

from __future__ import annotations

import os
import socket
import time

__all__ = ["notify", "ready", "reloading", "stopping"]


def notify(*fields: str) -> bool:
    """Send ``fields`` (``"READY=1"``...) to ``$NOTIFY_SOCKET``; False if there is none
    or it cannot be reached (mrcd keeps going either way)."""
    addr = os.environ.get("NOTIFY_SOCKET", "")
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    elif not addr.startswith("/"):
        return False  # unset, or a kind mrcd does not speak (vsock:...)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.sendto("\n".join(fields).encode(), addr)
    except OSError:
        return False
    return True


def ready(status: str = "serving") -> bool:
    return notify("READY=1", f"STATUS={status}")


def reloading() -> bool:
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify("RELOADING=1", f"MONOTONIC_USEC={usec}", "STATUS=reloading")


def stopping() -> bool:
    return notify("STOPPING=1", "STATUS=stopping")
