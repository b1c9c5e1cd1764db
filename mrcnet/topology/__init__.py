"""Topologies for every mrcnet tool: mrc-fabric, mrc-sim, mrcd and the tests.

- :mod:`~mrcnet.topology.spec`: the spec grammar and parser (one line or TOML);
- :mod:`~mrcnet.topology.units`: rates, times, byte counts, fractions, switches;
- :mod:`~mrcnet.topology.naming`: node and link names (``h3``, ``L0.1``, ``S0.3``);
- :mod:`~mrcnet.topology.addressing`: the uSID block, uSIDs, port addresses, MACs;
- :mod:`~mrcnet.topology.routes`: the route builder;
- :mod:`~mrcnet.topology.description`: the fabric description file mrcd reads;
- :mod:`~mrcnet.topology.errors`: :class:`SpecError` (and :class:`FabricError`).

Per-tool defaults and what each tool emulates: docs/TOPOLOGY.md.
"""

from mrcnet.topology.errors import SpecError
from mrcnet.topology.spec import FABRIC, SIM, TopologySpec, parse_spec

__all__ = ["FABRIC", "SIM", "SpecError", "TopologySpec", "parse_spec"]
