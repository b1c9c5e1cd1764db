"""SRv6 micro-SID containers, F3216 format (RFC 9800 NEXT-C-SID).

A container is an IPv6 destination address: a 32-bit locator block followed by up to six
16-bit micro-SIDs, zero-filled. A switch whose locator (block + its uSID, a /48) matches
shifts the remaining uSIDs left by 16 bits and routes on the result, exactly as Linux's
``seg6local action End flavors next-csid lblen 32 nflen 16`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

from mrcnet.constants import USID_BITS, USID_BLOCK_BITS, USID_MAX_PER_CONTAINER

_BLOCK_BYTES = USID_BLOCK_BITS // 8
_USID_BYTES = USID_BITS // 8


def usid_container(block: bytes, usids: Sequence[int]) -> bytes:
    """Build the container ``block:u1:u2:...::`` (16 bytes) from a 4-byte block."""
    if len(block) != _BLOCK_BYTES:
        raise ValueError(f"a uSID block is {_BLOCK_BYTES} bytes, got {len(block)}")
    if not usids:
        raise ValueError("a uSID container needs at least one uSID")
    if len(usids) > USID_MAX_PER_CONTAINER:
        raise ValueError(
            f"{len(usids)} uSIDs do not fit one container (max {USID_MAX_PER_CONTAINER})"
        )
    out = bytearray(block)
    for u in usids:
        if not 0 < u < (1 << USID_BITS):
            raise ValueError(f"uSID {u:#x} must be a nonzero 16-bit value")
        out += u.to_bytes(_USID_BYTES, "big")
    out += bytes(16 - len(out))
    return bytes(out)


def usid_block(container: bytes) -> bytes:
    """The 4-byte locator block of a container."""
    return bytes(container[:_BLOCK_BYTES])


def usid_list(container: bytes) -> list[int]:
    """The uSIDs still to be visited, up to the first zero (end of carrier)."""
    out = []
    for i in range(_BLOCK_BYTES, 16, _USID_BYTES):
        u = int.from_bytes(container[i : i + _USID_BYTES], "big")
        if u == 0:
            break
        out.append(u)
    return out


def usid_shift(container: bytes) -> bytes:
    """One NEXT-C-SID step: drop the active uSID, shift the rest left, zero-fill."""
    if len(container) != 16:
        raise ValueError("a uSID container is 16 bytes")
    rest = container[_BLOCK_BYTES + _USID_BYTES :]
    return bytes(container[:_BLOCK_BYTES]) + bytes(rest) + bytes(_USID_BYTES)


def usid_final(container: bytes) -> bytes:
    """The address the packet carries when it arrives: only the last uSID left."""
    ids = usid_list(container)
    if not ids:
        raise ValueError("container holds no uSID")
    return usid_container(usid_block(container), ids[-1:])
