"""mrcnet: a userspace implementation of MRC (Multipath Reliable Connection) over SRv6.

Three faces: ``mrcd`` (the daemon that owns the NIC ports), ``mrcnet.api`` (verbs-like and
socket-like client APIs) and ``mrc-fabric`` (real leaf-spine fabrics in network namespaces).
"""

__version__ = "0.1.0"


def version_text(prog: str = "%(prog)s") -> str:
    """``PROG VERSION`` for every tool's ``--version``: the installed package's version
    (its metadata), else :data:`__version__` (a source tree without an install)."""
    from importlib import metadata

    try:
        v = metadata.version("mrcnet")
    except metadata.PackageNotFoundError:
        v = __version__
    return f"{prog} {v}"
