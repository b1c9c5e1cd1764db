"""Parsing of the quantities specs are written in: times, rates, byte counts, fractions.

Every parser raises :class:`~mrcnet.sim.errors.SpecError` with a message that shows the
accepted forms, so a CLI user sees what to type instead of a traceback.
"""

from __future__ import annotations

import re

from mrcnet.sim.errors import SpecError

_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_BYTE_UNITS = {
    "": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20,
    "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
}
_NUM = r"(\d+(?:\.\d*)?|\.\d+)(?:e([+-]?\d+))?"


def _number(m: re.Match[str]) -> float:
    value = float(m.group(1))
    if m.group(2):
        value *= 10.0 ** int(m.group(2))
    return value


def parse_time(text: str, *, default_unit: str = "s") -> float:
    """``"0.5ms"`` -> 0.0005 s. A bare number is in ``default_unit`` (s, ms, us or ns)."""
    t = text.strip().lower()
    m = re.fullmatch(_NUM + r"\s*(s|ms|us|ns)?", t)
    if not m:
        raise SpecError(f"bad time {text!r}: use e.g. 1.5ms, 200us, 800ns, 2s")
    return _number(m) * _TIME_UNITS[m.group(3) or default_unit]


def parse_rate(text: str) -> float:
    """``"100gbit"`` -> 1e11 bits/s (tc-style units; a bare number is bits/s)."""
    t = text.strip().lower()
    m = re.fullmatch(_NUM + r"\s*(bit|kbit|mbit|gbit|tbit)?(?:ps|/s)?", t)
    if not m:
        raise SpecError(f"bad rate {text!r}: use e.g. 100gbit, 25gbit, 400mbit")
    rate = _number(m) * _RATE_UNITS[m.group(3) or "bit"]
    if rate <= 0:
        raise SpecError(f"rate {text!r} must be positive")
    return rate


def parse_bytes(text: str, *, packet: int | None = None) -> int:
    """``"64k"`` -> 65536; ``"8pkt"`` -> 8 x ``packet`` bytes (when ``packet`` is given).

    Suffixes are 1024-based (k, m, g); ``off``/``none`` mean 0.
    """
    t = text.strip().lower()
    if t in ("off", "none"):
        return 0
    if packet is not None:
        m = re.fullmatch(r"(\d+)\s*(pkt|pkts|p)", t)
        if m:
            return int(m.group(1)) * packet
    m = re.fullmatch(_NUM + r"\s*([kmg]?i?b?)", t)
    if not m or m.group(3) not in _BYTE_UNITS:
        more = ", 8pkt (MTU-sized packets)" if packet is not None else ""
        raise SpecError(f"bad byte count {text!r}: use e.g. 4096, 64k, 2m{more}")
    return int(_number(m) * _BYTE_UNITS[m.group(3)])


def parse_fraction(text: str) -> float:
    """``"1%"`` -> 0.01, ``"0.001"`` -> 0.001; must lie in [0, 1]."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise SpecError(f"bad probability {text!r}: use e.g. 1%, 0.1%, 0.001") from None
    if not 0.0 <= value <= 1.0:
        raise SpecError(f"probability {text!r} must lie between 0 and 100%")
    return value


def parse_bool(text: str) -> bool:
    """on/off, true/false, yes/no, 1/0."""
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise SpecError(f"bad switch {text!r}: use on or off")


def format_time(seconds: float) -> str:
    """A time in the most readable unit: 12.5us, 3.2ms, 1.05s."""
    a = abs(seconds)
    if a >= 1.0:
        return f"{seconds:.3f}s"
    if a >= 1e-3:
        return f"{seconds * 1e3:.3f}ms"
    if a >= 1e-6:
        return f"{seconds * 1e6:.3f}us"
    return f"{seconds * 1e9:.1f}ns"


def format_rate(bps: float) -> str:
    """Bits per second in tc units: 100gbit, 2.5gbit, 400mbit."""
    for unit, scale in (("tbit", 1e12), ("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g}{unit}"
    return f"{bps:g}bit"
