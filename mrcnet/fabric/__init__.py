"""mrc-fabric: multi-plane leaf-spine SRv6 (uSID) fabrics in network namespaces.

Main entry points (see docs/FABRIC.md):

- :class:`Fabric` (``Fabric.up(spec, name=...)``, ``Fabric.load(name)``): build, break,
  observe and remove a fabric;
- :func:`load` -> :class:`FabricDescription`: read a fabric description file (what mrcd
  uses: ports, MACs, addresses, ``path_container`` / ``path_segments``).
"""

from __future__ import annotations

from mrcnet.fabric.errors import FabricError
from mrcnet.fabric.fabric import Fabric, down, down_all, list_fabrics
from mrcnet.topology.description import FabricDescription, load

__all__ = ["Fabric", "FabricDescription", "FabricError", "down", "down_all", "list_fabrics", "load"]
