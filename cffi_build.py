"""Build ``mrcnet._fastpath`` (cffi API mode) from mrcnet/_csrc during ``pip install``.

cffi's declarations are read from the headers themselves (fastpath.h, spray.h, tx.h,
rx.h, sendq.h, nscc.h: the part between their ``cffi: begin`` / ``cffi: end`` markers,
plain declarations and #defines of integers), so they cannot drift from what the C code
compiles against.
Needs only a C compiler and the Python headers (the CRC is in mrcnet/_csrc/crc32.c).
"""

from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
CSRC = HERE / "mrcnet" / "_csrc"

ffibuilder = FFI()


def _cdef_of(header: Path) -> str:
    """The declarations of ``header`` between its ``cffi: begin`` / ``cffi: end`` markers."""
    text = header.read_text()
    return text.split("/* cffi: begin */", 1)[1].split("/* cffi: end */", 1)[0]


# System structs stay opaque (``...;``): API mode takes their sizes from the system
# headers at build time. Then fastpath.h's own declarations.
ffibuilder.cdef(
    """
    struct mmsghdr { ...; };
    struct iovec { ...; };
    struct sockaddr_ll { ...; };
    """
)
# (rx.h and sendq.h use fastpath.h's declarations)
for _header in ("fastpath.h", "spray.h", "tx.h", "rx.h", "sendq.h", "nscc.h"):
    ffibuilder.cdef(_cdef_of(CSRC / _header))
ffibuilder.set_source(
    "mrcnet._fastpath",
    '#include "fastpath.h"\n#include "spray.h"\n#include "tx.h"\n#include "rx.h"\n'
    '#include "sendq.h"\n#include "nscc.h"',
    sources=[str(p.relative_to(HERE)) for p in sorted(CSRC.glob("*.c"))],
    include_dirs=[str(CSRC.relative_to(HERE))],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
