"""The fabric description file, under the name mrc-fabric's callers have always used.

It lives in :mod:`mrcnet.topology.description` (mrcd reads it without mrc-fabric's
namespace tooling); this module re-exports what its callers import.
"""

from mrcnet.topology.description import FabricDescription, default_path, load, save, usid_address

__all__ = ["FabricDescription", "default_path", "load", "save", "usid_address"]
