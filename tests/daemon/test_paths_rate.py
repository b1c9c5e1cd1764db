"""mrcd sizes its congestion control for the fabric's shaped link rate (no root)."""

from __future__ import annotations

from mrcnet.daemon.paths import FabricPaths
from mrcnet.fabric.spec import allocate, parse_spec


def _paths(spec: str) -> FabricPaths:
    return FabricPaths(allocate(parse_spec(spec), "lab", 0x1A2B), "h0", [])


def test_port_rate_is_the_fabrics_shaped_rate() -> None:
    assert _paths("leafspine:planes=2,spines=2,leaves=2,hosts=1,rate=500mbit"
                  ).port_rate() == 500e6 / 8


def test_an_unshaped_fabric_gives_no_rate() -> None:
    assert _paths("leafspine:planes=2,spines=2,leaves=2,hosts=1,rate=0").port_rate() == 0.0
