"""The quantities specs are written in: rates, times, byte counts, fractions, switches.

One set of units for mrc-fabric and mrc-sim. Rates use tc's words (``100mbit``, ``1gbit``;
``none`` is an unshaped link), times ``s/ms/us/ns``, byte counts are 1024-based
(``64k``, ``1m``) or a number of MTU-sized packets (``8pkt``). Every parser raises
:class:`~mrcnet.topology.errors.SpecError` with a message that shows the accepted forms.
"""

from __future__ import annotations

import re

from mrcnet.topology.errors import SpecError

_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_BYTE_UNITS = {
    "": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20,
    "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
}
_NUM = r"(\d+(?:\.\d*)?|\.\d+)(?:e([+-]?\d+))?"
_OFF = ("off", "none")


def _number(m: re.Match[str]) -> float:
    value = float(m.group(1))
    if m.group(2):
        value *= 10.0 ** int(m.group(2))
    return value


def parse_int(text: str | int) -> int:
    """A plain integer (``"4"``, or an int from a TOML file)."""
    if isinstance(text, bool):
        raise SpecError(f"bad integer {text!r}")
    if isinstance(text, int):
        return text
    try:
        return int(text)
    except ValueError:
        raise SpecError(f"bad integer {text!r}") from None


def parse_time(text: str | int | float, *, default_unit: str = "s") -> float:
    """``"0.5ms"`` -> 0.0005 s. A bare number is in ``default_unit`` (s, ms, us or ns)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text) * _TIME_UNITS[default_unit]
    t = str(text).strip().lower()
    m = re.fullmatch(_NUM + r"\s*(s|ms|us|ns)?", t)
    if not m:
        raise SpecError(f"bad time {text!r}: use e.g. 1.5ms, 200us, 800ns, 2s")
    return _number(m) * _TIME_UNITS[m.group(3) or default_unit]


def parse_rate(text: str | int) -> int:
    """``"100gbit"`` -> 100_000_000_000 bits/s (tc units; a bare number is bits/s).

    ``none``, ``off``, ``unlimited`` and ``0`` give 0: an unshaped link (mrc-fabric only;
    mrc-sim needs a rate for every link and says so).
    """
    if isinstance(text, bool):
        raise SpecError(f"bad rate {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise SpecError(f"rate {text} is negative")
        return text
    t = text.strip().lower()
    if t in (*_OFF, "unlimited", "0"):
        return 0
    m = re.fullmatch(_NUM + r"\s*(bit|kbit|mbit|gbit|tbit)?(?:ps|/s)?", t)
    if not m:
        raise SpecError(f"bad rate {text!r}: use e.g. 100mbit, 1gbit, 100gbit, or none")
    return round(_number(m) * _RATE_UNITS[m.group(3) or "bit"])


def parse_bytes(text: str | int, *, packet: int | None = None) -> int:
    """``"64k"`` -> 65536; ``"8pkt"`` -> 8 x ``packet`` bytes (when ``packet`` is given).

    Suffixes are 1024-based (k, m, g); ``off``/``none`` mean 0.
    """
    if isinstance(text, bool):
        raise SpecError(f"bad byte count {text!r}")
    if isinstance(text, int):
        return text
    t = text.strip().lower()
    if t in _OFF:
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


def parse_fraction(text: str | int | float, *, what: str = "probability") -> float:
    """``"1%"`` -> 0.01, ``"0.001"`` -> 0.001; must lie in [0, 1]. ``what`` names it."""
    if isinstance(text, bool):
        raise SpecError(f"bad {what} {text!r}")
    if isinstance(text, int | float):
        value = float(text)
    else:
        t = text.strip()
        try:
            value = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
        except ValueError:
            raise SpecError(f"bad {what} {text!r}: use e.g. 1%, 0.1%, 0.001") from None
    if not 0.0 <= value <= 1.0:
        raise SpecError(f"{what} {text!r} must lie between 0 and 100%")
    return value


def parse_bool(text: str | bool) -> bool:
    """on/off, true/false, yes/no, 1/0."""
    if isinstance(text, bool):
        return text
    t = str(text).strip().lower()
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
    """Bits per second in tc units, exact where it can be: 100gbit, 2.5gbit, none (0)."""
    if not bps:
        return "none"
    for unit, scale in (("tbit", 1e12), ("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bps >= scale:
            # 12 significant digits: any rate a spec can hold prints back exactly.
            return f"{bps / scale:.12g}{unit}"
    return f"{bps:.12g}bit"
