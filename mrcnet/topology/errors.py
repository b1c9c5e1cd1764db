"""The errors of topologies: a spec written wrong, a fabric that is not as asked.

mrc-fabric and mrc-sim both raise :class:`SpecError` (``mrcnet.fabric.errors`` and
``mrcnet.sim.errors`` re-export it), so a spec error is caught the same way in either tool.
:class:`FabricError` is mrc-fabric's base error, here because a fabric description
(:mod:`mrcnet.topology.description`) raises it too.
"""

from __future__ import annotations

from mrcnet.errors import MrcError


class FabricError(MrcError):
    """A fabric could not be built, found, changed or removed, or its description is wrong."""


class SpecError(MrcError, ValueError):
    """A spec (topology, failure, traffic matrix, fabric name) is invalid.

    The message says what was wrong and shows the accepted forms. It is a ``ValueError``
    too: a bad spec is a bad value, and code that validates input catches that.
    """
