"""``HostConfig.verdict_uplink`` (mrcnet/core/verdicts.py ``PathVerdicts``;
docs/COLLECTIVES.md, "session 14"): routes through one leaf-to-spine hop to N
destination leaves held failing make every route through that hop failing, and every
QP with one retires it; a route to one destination leaf failing (what a link down
between the spine and that leaf shows) does not."""

from __future__ import annotations

from mrcnet.core.verdicts import PathVerdicts
from mrcnet.wire import Route, usid_container

from .harness import BLOCK, SPINE_USID, ip, mac

SRC_LEAF, SPINES = 0x10, 4


class _EVM:
    """What PathVerdicts asks of an EV manager: its retirements, recorded."""

    ecmp = False

    def __init__(self) -> None:
        self.verdicts: object = None
        self.retired: list[tuple[int, int]] = []

    def retire_path(self, plane: int, path: int, now: float, cause: str) -> bool:
        assert cause == "shared"
        self.retired.append((plane, path))
        return True


def _routes(dst_leaf: int, host: int) -> dict[int, list[Route]]:
    """Plane 0's routes from a host under SRC_LEAF to ``host`` under ``dst_leaf``, one
    per spine (uSIDs: source leaf, spine, destination leaf, host)."""
    return {0: [Route(mac(0, 0), b"\x02\xff\x00\x00\x00\x00", ip(0, 0), ip(host, 0),
                      usid=usid_container(BLOCK, [SRC_LEAF, SPINE_USID + s, dst_leaf,
                                                  0x200 + host]))
                for s in range(SPINES)]}


def _table(uplink: int) -> tuple[PathVerdicts, list[_EVM]]:
    """QPs 1-4 to hosts under destination leaves 0x11-0x14, QP 5 to a second host under
    0x14."""
    pv = PathVerdicts(uplink)
    evms = [_EVM() for _ in range(5)]
    for i, evm in enumerate(evms):
        leaf = 0x11 + min(i, 3)
        pv.attach(i + 1, evm, f"h{i + 1}", _routes(leaf, i + 1), 0.0)  # type: ignore[arg-type]
    return pv, evms


def test_two_leaves_through_one_spine_fail_the_hop() -> None:
    pv, evms = _table(2)
    pv._views[1].failed(0, 2, 1.0)  # QP 1 (leaf 0x11) retires spine 2: one leaf
    assert [e.retired for e in evms] == [[], [], [], [], []]
    pv._views[2].failed(0, 2, 2.0)  # QP 2 (leaf 0x12), the same spine: the hop
    assert [e.retired for e in evms] == [[], [], [(0, 2)], [(0, 2)], [(0, 2)]]
    assert len(pv.bad) == 4 and max(pv.bad.values()) == 2.0
    pv._views[1].failed(0, 3, 3.0)  # another spine, one leaf: nothing more
    assert [len(e.retired) for e in evms] == [0, 0, 1, 1, 1]


def test_off_by_default() -> None:
    pv, evms = _table(0)
    pv._views[1].failed(0, 2, 1.0)
    pv._views[2].failed(0, 2, 2.0)
    assert [e.retired for e in evms] == [[], [], [], [], []]
    assert len(pv.bad) == 2
