"""The addressing plan: the uSID block, every node's uSID, locators and port addresses.

Fabric ``F`` (a non-zero 16-bit id; mrc-sim's fabric is 1) uses:

- uSID block ``fc00:F::/32`` (F3216: 32-bit block, 16-bit uSIDs);
- spine uSID ``0x1PSS``, leaf ``0x2PLL`` (P = plane, SS/LL = index), host ``0x4000 +
  index`` (up to 0x7FFF);
- a node's locator ``<block>:<uSID>::/48``;
- host port addresses ``fd00:F:<plane>::<host uSID>`` (plain IPv6, one per plane);
- MACs ``02:fb:<F>:<n>``, n counting cable ends in build order.

A path from host A to host B through spine S of plane P is the uSID list
``[A's leaf, S, B's leaf, B]`` (see :func:`path_usids`).
"""

from __future__ import annotations

import ipaddress

from mrcnet.constants import (
    HOST_USID_BASE,
    LEAF_USID_BASE,
    SPINE_USID_BASE,
    USID_BITS,
    USID_BLOCK_BITS,
    USID_MAX_PER_CONTAINER,
)
from mrcnet.topology.errors import SpecError

#: The fabric id mrc-sim uses (its block is fc00:1::/32).
SIM_FABRIC_ID = 1


def spine_usid(plane: int, index: int) -> int:
    """``0x1PSS``."""
    return SPINE_USID_BASE + (plane << 8) + index


def leaf_usid(plane: int, index: int) -> int:
    """``0x2PLL``."""
    return LEAF_USID_BASE + (plane << 8) + index


def switch_usid(role: str, plane: int, index: int) -> int:
    """The uSID of a ``"leaf"`` or ``"spine"``."""
    return leaf_usid(plane, index) if role == "leaf" else spine_usid(plane, index)


def host_usid(index: int) -> int:
    """``0x4HHH``."""
    return HOST_USID_BASE + index


def check_fabric_id(fabric_id: int) -> None:
    """A fabric id is a non-zero 16-bit value (it is the block's second group)."""
    if not 0 < fabric_id < (1 << 16):
        raise SpecError(f"fabric id {fabric_id} must be a non-zero 16-bit value")


def usid_block(fabric_id: int) -> ipaddress.IPv6Network:
    """``fc00:<id>::/32``."""
    return ipaddress.IPv6Network(f"fc00:{fabric_id:x}::/{USID_BLOCK_BITS}")


def host_prefix(fabric_id: int) -> ipaddress.IPv6Network:
    """``fd00:<id>::/32``: every host port address of the fabric."""
    return ipaddress.IPv6Network(f"fd00:{fabric_id:x}::/32")


def plane_prefix(fabric_id: int, plane: int) -> ipaddress.IPv6Network:
    """``fd00:<id>:<plane>::/48``: the host port addresses of one plane."""
    return ipaddress.IPv6Network(f"fd00:{fabric_id:x}:{plane:x}::/48")


def port_address(fabric_id: int, plane: int, usid: int) -> ipaddress.IPv6Address:
    """``fd00:<id>:<plane>::<host uSID>``."""
    return ipaddress.IPv6Address(f"fd00:{fabric_id:x}:{plane:x}::{usid:x}")


def usid_address(block: ipaddress.IPv6Network, usids: list[int]) -> ipaddress.IPv6Address:
    """The address ``<block>:<usid0>:<usid1>:...::`` (F3216 container)."""
    if len(usids) > USID_MAX_PER_CONTAINER:
        raise SpecError(f"{len(usids)} uSIDs do not fit one container")
    value = int(block.network_address)
    shift = 128 - USID_BLOCK_BITS
    for usid in usids:
        if not 0 < usid < (1 << USID_BITS):
            raise SpecError(f"uSID {usid:#x} is not a non-zero {USID_BITS}-bit value")
        shift -= USID_BITS
        value |= usid << shift
    return ipaddress.IPv6Address(value)


def locator(block: ipaddress.IPv6Network, usid: int) -> str:
    """``<block>:<usid>::/48``, where a switch's End behaviour sits."""
    return f"{usid_address(block, [usid])}/{USID_BLOCK_BITS + USID_BITS}"


def mac(fabric_id: int, n: int) -> bytes:
    """The ``n``-th MAC of a fabric.

    Locally administered unicast (0x02), "fb" for fabric, then the fabric id and a counter:
    unique across fabrics and readable in captures.
    """
    return bytes([0x02, 0xFB, fabric_id >> 8 & 0xFF, fabric_id & 0xFF, n >> 8 & 0xFF, n & 0xFF])


def mac_text(fabric_id: int, n: int) -> str:
    """:func:`mac` as ``02:fb:..``."""
    return ":".join(f"{x:02x}" for x in mac(fabric_id, n))


def path_usids(src_leaf: int, spine: int | None, dst_leaf: int, dst_host: int) -> list[int]:
    """The uSIDs of a path in travel order: ``[src leaf, spine, dst leaf, dst host]``.

    With ``spine=None`` (hosts on one leaf only) the direct path ``[leaf, dst host]``.
    """
    if spine is None:
        return [src_leaf, dst_host]
    return [src_leaf, spine, dst_leaf, dst_host]
