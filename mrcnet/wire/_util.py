"""Small helpers shared by the header codecs (range checks, truncation checks)."""

from __future__ import annotations

from mrcnet.errors import MalformedFrame, MalformedReason

Buffer = bytes | bytearray | memoryview


def check_range(name: str, value: int, bits: int) -> None:
    """Raise ``ValueError`` naming the field when ``value`` does not fit in ``bits`` bits."""
    if not 0 <= value < (1 << bits):
        raise ValueError(f"{name}={value!r} does not fit in {bits} bits")


def check_signed(name: str, value: int, bits: int) -> None:
    """Raise ``ValueError`` when ``value`` does not fit a signed ``bits``-bit field."""
    lim = 1 << (bits - 1)
    if not -lim <= value < lim:
        raise ValueError(f"{name}={value!r} does not fit in signed {bits} bits")


def need(buf: Buffer, offset: int, length: int, what: str) -> None:
    """Raise ``MalformedFrame(TRUNCATED)`` unless ``buf`` holds ``length`` bytes at ``offset``."""
    if offset < 0 or offset + length > len(buf):
        raise MalformedFrame(
            MalformedReason.TRUNCATED,
            f"{what} needs {length} bytes at offset {offset}, frame has {len(buf)}",
        )


def addr16(name: str, value: bytes) -> bytes:
    """Validate a 16-byte IPv6 address given as bytes."""
    if len(value) != 16:
        raise ValueError(f"{name} must be 16 bytes, got {len(value)}")
    return bytes(value)
