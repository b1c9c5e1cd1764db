"""Node and link names, the same in mrc-fabric and mrc-sim.

Hosts are ``h<i>`` (numbered across the fabric), leaves ``L<plane>.<i>``, spines
``S<plane>.<i>``. A link is named after its two nodes, the lower tier first (``h3-L0.1``,
``L0.1-S0.3``).

Where a user types a switch name, the compact form ``p<plane>l<i>`` / ``p<plane>s<i>``
(mrc-fabric's names before both tools shared one naming) is accepted too; mrc-fabric
still uses it in network namespace names (``lab-p0l1``), which want plain ``[a-z0-9-]``.
"""

from __future__ import annotations

import re

_COMPACT = re.compile(r"^p(\d+)([ls])(\d+)$")
_CANONICAL = re.compile(r"^([LS])(\d+)\.(\d+)$")


def host_name(index: int) -> str:
    """``h<index>``."""
    return f"h{index}"


def leaf_name(plane: int, index: int) -> str:
    """``L<plane>.<index>``."""
    return f"L{plane}.{index}"


def spine_name(plane: int, index: int) -> str:
    """``S<plane>.<index>``."""
    return f"S{plane}.{index}"


def switch_name(role: str, plane: int, index: int) -> str:
    """The name of a ``"leaf"`` or ``"spine"``."""
    return leaf_name(plane, index) if role == "leaf" else spine_name(plane, index)


def link_name(lower: str, upper: str) -> str:
    """``<lower tier>-<upper tier>``: ``h3-L0.1``, ``L0.1-S0.3``."""
    return f"{lower}-{upper}"


def canonical(name: str) -> str:
    """The name as both tools print it: ``p0l1`` -> ``L0.1``, ``l0.1`` -> ``L0.1``.

    Names that are not switch names (hosts, typos) come back unchanged, so the lookup that
    follows reports them as unknown.
    """
    m = _COMPACT.match(name)
    if m:
        return switch_name("leaf" if m.group(2) == "l" else "spine", int(m.group(1)),
                           int(m.group(3)))
    m = _CANONICAL.match(name.upper()) if name[:1] in "ls" else None
    if m:
        return f"{m.group(1)}{int(m.group(2))}.{int(m.group(3))}"
    return name


def compact(name: str) -> str:
    """The ``[a-z0-9]`` spelling of a node name (``L0.1`` -> ``p0l1``; hosts unchanged)."""
    m = _CANONICAL.match(name)
    if not m:
        return name
    return f"p{m.group(2)}{m.group(1).lower()}{m.group(3)}"
