"""Build ``mrcnet._native`` (cffi API mode) from mrcnet/_csrc during ``pip install``.

Each C source is named after the Python file that binds it (checksum.c for
mrcnet/wire/checksum.py, batch.c for mrcnet/io/batch.py, rxlane.c for
mrcnet/core/rxlane.py, ...); mrcnet/native.py loads the compiled module once.
cffi's declarations are read from the headers themselves (the part between their
``cffi: begin`` / ``cffi: end`` markers, plain declarations and #defines of integers),
so they cannot drift from what the C code compiles against.
Needs only a C compiler and the Python headers (the CRC is in mrcnet/_csrc/crc32.c).
"""

from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
CSRC = HERE / "mrcnet" / "_csrc"

# In dependency order: a header's declarations may use those of the ones before it
# (rxlane.h uses buffers.h, parsed.h, recvq.h, shmqueues.h and txtable.h; shmqueues.h
# uses shmring.h; batch.h uses buffers.h; rxread.h uses batch.h and rxlane.h; sackrec.h
# uses cc.h; sender.h uses batch.h, template.h and txtable.h).
HEADERS = ("checksum.h", "icrc.h", "template.h", "parsed.h", "buffers.h", "batch.h",
           "spray.h", "txtable.h", "shmring.h", "shmqueues.h", "recvq.h", "rxlane.h",
           "rxread.h", "cc.h", "sackrec.h", "posts.h", "sender.h", "simnet.h")

ffibuilder = FFI()


def _cdef_of(header: Path) -> str:
    """The declarations of ``header`` between its ``cffi: begin`` / ``cffi: end`` markers."""
    text = header.read_text()
    return text.split("/* cffi: begin */", 1)[1].split("/* cffi: end */", 1)[0]


# System structs stay opaque (``...;``): API mode takes their sizes from the system
# headers at build time. Then the headers' own declarations.
ffibuilder.cdef(
    """
    struct mmsghdr { ...; };
    struct iovec { ...; };
    struct sockaddr_ll { ...; };
    """
)
for _header in HEADERS:
    ffibuilder.cdef(_cdef_of(CSRC / _header))

# Every call wrapper lets go of the GIL around its C call (cffi's Py_BEGIN_ALLOW_THREADS)
# unless the simulator's loop asked it not to (simnet.h simnet_keep_gil): mrcd's calls
# still let other threads run; the simulator's, a quarter of a million a 128-host run,
# skip a release and a retake each.
_GIL = """
#undef Py_BEGIN_ALLOW_THREADS
#undef Py_END_ALLOW_THREADS
#define Py_BEGIN_ALLOW_THREADS { PyThreadState *_save = \\
    __atomic_load_n(&simnet_gil_kept, __ATOMIC_RELAXED) > 0 ? NULL : PyEval_SaveThread();
#define Py_END_ALLOW_THREADS if (_save) PyEval_RestoreThread(_save); }
"""

ffibuilder.set_source(
    "mrcnet._native",
    "".join(f'#include "{h}"\n' for h in HEADERS) + _GIL,
    sources=[str(p.relative_to(HERE)) for p in sorted(CSRC.glob("*.c"))],
    include_dirs=[str(CSRC.relative_to(HERE))],
    # (no fused multiply-add: the C twins' doubles must be Python's to the bit)
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-ffp-contract=off"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
