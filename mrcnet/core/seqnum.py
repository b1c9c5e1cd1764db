"""Sequence numbers and stamps: unbounded PSNs inside, 24-bit PSNs on the wire.

Internally PSNs are unbounded integers ("sequence numbers", ``seq``): the wire PSN is
``seq & PSN_MASK``, and a received 24-bit PSN is unwrapped against the nearest reference
(:func:`unwrap`), so wraparound needs no special case anywhere else.
"""

from __future__ import annotations

from mrcnet.constants import PSN_MASK, PSN_MOD, TIMESTAMP_MOD

HALF = PSN_MOD >> 1  # a received PSN further than this from the reference is behind it
MSN_MASK = 0xFFFF  # METH's RQMSN and MSN are 16 bits on the wire


def unwrap(psn: int, ref: int) -> int:
    """The unbounded sequence number nearest ``ref`` whose low 24 bits are ``psn``."""
    d = (psn - ref) & PSN_MASK
    if d >= HALF:
        d -= PSN_MASK + 1
    return ref + d


def unwrap16(v: int, ref: int) -> int:
    """The unbounded value nearest ``ref`` whose low 16 bits are ``v`` (METH RQMSN)."""
    d = (v - ref) & MSN_MASK
    if d >= 1 << 15:
        d -= 1 << 16
    return ref + d


def ts16(now: float) -> int:
    """The 16-bit microsecond timestamp carried in TSETH."""
    return int(now * 1e6) % TIMESTAMP_MOD
