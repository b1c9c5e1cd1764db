"""Build ``mrcnet._fastpath`` (cffi API mode) from mrcnet/_csrc during ``pip install``."""

from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
CSRC = HERE / "mrcnet" / "_csrc"

ffibuilder = FFI()
ffibuilder.cdef(
    """
    uint16_t mrc_udp6_checksum(const uint8_t *src, const uint8_t *dst,
                               const uint8_t *udp, size_t udp_len);
    """
)
ffibuilder.set_source(
    "mrcnet._fastpath",
    '#include "fastpath.h"',
    sources=[str(p.relative_to(HERE)) for p in sorted(CSRC.glob("*.c"))],
    include_dirs=[str(CSRC.relative_to(HERE))],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
