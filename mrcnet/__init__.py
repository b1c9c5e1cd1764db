"""mrcnet: a userspace implementation of MRC (Multipath Reliable Connection) over SRv6.

Three faces: ``mrcd`` (the daemon that owns the NIC ports), ``mrcnet.api`` (verbs-like and
socket-like client APIs) and ``mrc-fabric`` (real leaf-spine fabrics in network namespaces).
"""

__version__ = "0.1.0"
