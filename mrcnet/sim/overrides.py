"""``--set KEY=VALUE``: the command lines' overrides of protocol-core settings.

mrc-sim's subcommands and the benchmarks under tools/ take them; the keys are
:class:`mrcnet.core.HostConfig`'s fields (checked where the hosts are built).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mrcnet.sim.errors import SimError
from mrcnet.topology.units import parse_bool, parse_time


def parse_set(items: Sequence[str]) -> dict[str, Any]:
    """``--set key=value`` for HostConfig fields: numbers, booleans or strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        if not eq:
            raise SimError(f"bad --set {item!r}: expected key=value (e.g. probe_interval=250us)")
        value: Any = raw
        low = raw.lower()
        if low in ("true", "false", "on", "off", "yes", "no"):
            value = parse_bool(low)
        else:
            try:
                value = int(raw)
            except ValueError:
                try:
                    value = float(raw)
                except ValueError:
                    if raw[-1:] == "s" and raw[:1].isdigit():
                        value = parse_time(raw)
        out[key.strip()] = value
    return out
