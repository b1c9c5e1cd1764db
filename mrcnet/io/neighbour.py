"""Next-hop MAC resolution from the kernel's neighbour table.

A port's frames all go to one next hop (its leaf switch). With a fabric description the
MAC is written there (``Port.neighbor_mac``) and no lookup is needed; otherwise mrcd asks
the kernel (pyroute2, RTM_GETNEIGH) and, when the entry is missing, makes the kernel run
neighbour discovery by sending one datagram to the next hop's discard port.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import time
from typing import Final

from pyroute2 import IPRoute

from mrcnet.io.errors import NeighbourError
from mrcnet.wire.ethernet import mac_to_bytes

__all__ = ["neighbour_mac"]

# <linux/neighbour.h> NUD states with a usable link-layer address.
_NUD_USABLE: Final = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80  # REACHABLE STALE DELAY
#                                                              PROBE NOARP PERMANENT
_DISCARD_PORT: Final = 9
_POLL_S: Final = 0.02


def _lookup(ipr: IPRoute, ifindex: int, addr: str) -> bytes | None:
    for n in ipr.get_neighbours(ifindex=ifindex, family=socket.AF_INET6):
        if n.get_attr("NDA_DST") == addr and n["state"] & _NUD_USABLE:
            lladdr = n.get_attr("NDA_LLADDR")
            if lladdr:
                return mac_to_bytes(lladdr)
    return None


def neighbour_mac(ifname: str, address: str, *, timeout: float = 1.0) -> bytes:
    """The MAC of ``address`` on ``ifname``, resolving it through the kernel if needed.

    Raises :class:`NeighbourError` when no answer comes within ``timeout`` seconds.
    """
    addr = str(ipaddress.IPv6Address(address.split("%")[0]))
    ifindex = socket.if_nametoindex(ifname)
    with IPRoute() as ipr:
        mac = _lookup(ipr, ifindex, addr)
        if mac is not None:
            return mac
        _solicit(ifname, ifindex, addr)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(_POLL_S)
            mac = _lookup(ipr, ifindex, addr)
            if mac is not None:
                return mac
    raise NeighbourError(f"no neighbour entry for {addr} on {ifname} after {timeout} s: "
                         "is the next hop up and on this link?")


def _solicit(ifname: str, ifindex: int, addr: str) -> None:
    # Sending anything to the address makes the kernel start neighbour discovery.
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
        # Unreachable right now: the poll then times out with a message.
        with contextlib.suppress(OSError):
            s.sendto(b"", (addr, _DISCARD_PORT, 0, ifindex))
