"""Port carrier state from the kernel (rtnetlink link notifications), without polling.

mrcd tells the core when a NIC port loses its link (``Host.set_port_state``): the core
then stops using that plane at once and tells its peers, instead of discovering the loss
one timed-out packet at a time. A raw ``NETLINK_ROUTE`` socket subscribed to
``RTMGRP_LINK`` is all it takes; the messages are parsed here (header + ifinfomsg flags).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from typing import Final

__all__ = ["LinkWatch", "link_is_up"]

RTMGRP_LINK: Final = 0x1
RTM_NEWLINK: Final = 16
RTM_DELLINK: Final = 17
IFF_UP: Final = 0x1
IFF_LOWER_UP: Final = 0x10000  # carrier present
_NLMSGHDR = struct.Struct("=IHHII")
_IFINFOMSG = struct.Struct("=BxHiII")


def link_is_up(flags: int) -> bool:
    """Administratively up and with carrier."""
    return bool(flags & IFF_UP) and bool(flags & IFF_LOWER_UP)


class LinkWatch:
    """Link up/down changes of a set of interfaces (by ifindex), non-blocking.

    Readable when the kernel sent notifications; :meth:`changes` returns
    ``[(ifindex, up)]`` for the watched interfaces whose state changed.
    """

    def __init__(self, ifindexes: Iterable[int], initial: dict[int, bool] | None = None) -> None:
        self._state: dict[int, bool] = {i: True for i in ifindexes}
        if initial:
            self._state.update(initial)
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self._sock.bind((0, RTMGRP_LINK))
        self._sock.setblocking(False)

    def fileno(self) -> int:
        """The netlink socket's fd."""
        return self._sock.fileno()

    def close(self) -> None:
        """Stop listening."""
        self._sock.close()

    def changes(self) -> list[tuple[int, bool]]:
        """Drain the notifications; the watched interfaces whose up/down state changed."""
        out: list[tuple[int, bool]] = []
        while True:
            try:
                data = self._sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return out
            except OSError:  # ENOBUFS: notifications lost; the next ones resync us
                continue
            off = 0
            while off + _NLMSGHDR.size <= len(data):
                length, mtype, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data, off)
                if length < _NLMSGHDR.size:
                    break
                if mtype in (RTM_NEWLINK, RTM_DELLINK) and \
                        off + _NLMSGHDR.size + _IFINFOMSG.size <= len(data):
                    _fam, _type, index, flags, _change = _IFINFOMSG.unpack_from(
                        data, off + _NLMSGHDR.size)
                    up = mtype == RTM_NEWLINK and link_is_up(flags)
                    if index in self._state and self._state[index] != up:
                        self._state[index] = up
                        out.append((index, up))
                off += (length + 3) & ~3
