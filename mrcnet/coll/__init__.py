"""Collectives over MRC (``mrc-coll``): ring all-reduce, all-gather and pairwise
all-to-all, written once against a small transport interface
(:class:`mrcnet.coll.transport.Transport`) and run over MRC verbs
(:mod:`mrcnet.coll.transport_mrc`), kernel TCP (:mod:`mrcnet.coll.transport_tcp`) or the
simulator (:mod:`mrcnet.sim.collective`). docs/COLLECTIVES.md says how to run them and
what the nccl-tests-style columns mean.
"""

from mrcnet.coll.errors import CollError, PeerFailed, StepTimeout, VerifyFailed

__all__ = ["CollError", "PeerFailed", "StepTimeout", "VerifyFailed"]
