"""mrc-sim: a discrete-event network that runs the sans-I/O protocol core unchanged.

- :mod:`.engine`: the virtual clock and event heap
- :mod:`.net`: egress ports (queues, trimming, ECN, link failures), switches (uSID /
  SRH End forwarding from static tables), hosts (drive a sans-I/O stack)
- :mod:`.topology`: multi-plane leaf-spine specs, builder and per-host path providers
- :mod:`.failures`: timed failure specs (link down, blackholes, loss, switch failures, flaps)
- :mod:`.matrix`: htsim-style traffic matrices
- :mod:`.cli`: ``mrc-sim run``

See docs/SIM.md.
"""

from mrcnet.sim.engine import Simulator
from mrcnet.sim.errors import SimError, SpecError
from mrcnet.sim.failures import Failure, parse_failure, schedule_failure
from mrcnet.sim.matrix import Flow, load_matrix, parse_matrix
from mrcnet.sim.net import EgressPort, HostNode, Switch
from mrcnet.sim.topology import Fabric, LeafSpineSpec, SimPaths, parse_topology

__all__ = [
    "EgressPort",
    "Fabric",
    "Failure",
    "Flow",
    "HostNode",
    "LeafSpineSpec",
    "SimError",
    "SimPaths",
    "Simulator",
    "SpecError",
    "Switch",
    "load_matrix",
    "parse_failure",
    "parse_matrix",
    "parse_topology",
    "schedule_failure",
]
