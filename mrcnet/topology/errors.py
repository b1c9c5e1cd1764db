"""The one error a topology, failure or traffic spec raises when it is written wrong.

mrc-fabric and mrc-sim both raise this class (``mrcnet.fabric.errors`` and
``mrcnet.sim.errors`` re-export it), so a spec error is caught the same way in either tool.
"""

from __future__ import annotations

from mrcnet.errors import MrcError


class SpecError(MrcError, ValueError):
    """A spec (topology, failure, traffic matrix, fabric name) is invalid.

    The message says what was wrong and shows the accepted forms. It is a ``ValueError``
    too: a bad spec is a bad value, and code that validates input catches that.
    """
