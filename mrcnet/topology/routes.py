"""The route builder: a path's uSIDs and a port's addresses -> a :class:`Route`.

mrcd (through a fabric description) and mrc-sim (through its built fabric) both turn the
uSID list of :func:`~mrcnet.topology.addressing.path_usids` into the route the transport
sends on, here: one uSID container in ``usid`` mode, one SID per hop in ``srh`` mode.
"""

from __future__ import annotations

from collections.abc import Sequence

from mrcnet.wire import Route, usid_container


def build_route(srv6: str, block: bytes, usids: Sequence[int], *, src_mac: bytes,
                dst_mac: bytes, src_ip: bytes, dst_ip: bytes) -> Route:
    """The route along ``usids`` (travel order) under the 4-byte uSID ``block``."""
    if srv6 == "srh":
        segs = tuple(usid_container(block, [u]) for u in usids)
        return Route(src_mac=src_mac, dst_mac=dst_mac, src_ip=src_ip, dst_ip=dst_ip,
                     segments=segs)
    return Route(src_mac=src_mac, dst_mac=dst_mac, src_ip=src_ip, dst_ip=dst_ip,
                 usid=usid_container(block, usids))
