"""What mrcd checks before it trusts a client with its memory and its resources.

Memory regions: mrcd maps a client's memfd and reads (sends) and writes (placement, in
Python and in the C receive lane) through that mapping. If the file could shrink after
the mapping was made, every access past the new end would fault (SIGBUS) and take mrcd,
and every client and QP on the host, down with it. So a region's file must be a memfd
on the kernel's shared-memory filesystem (not hugetlbfs, whose pages can run out at
fault time) sealed with ``F_SEAL_SHRINK``, and at least ``length`` long once sealed: the
mapping then stays backed for its whole life. See docs/SECURITY.md.

Per-client quotas: :func:`over_limit` builds the typed error a client gets, naming the
limit and the configuration key that raises it.
"""

from __future__ import annotations

import fcntl
import functools
import os

from mrcnet.api.errors import InvalidArgument, LimitExceeded, MemoryNotSealed, OutOfBounds

__all__ = ["check_region_fd", "over_limit"]

#: What a client must do to make a region mrcd accepts (every refusal says it).
HOW_TO_SEAL = ("create it with memfd_create(name, MFD_ALLOW_SEALING), size it with "
               "ftruncate, then fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) before registering "
               "(mrcnet.api.Context.alloc_mr does all of this)")


@functools.cache
def _shmem_dev() -> int:
    """The device number of memfds on the kernel's internal shared-memory mount (the
    same for every ordinary memfd on the machine; hugetlbfs memfds differ)."""
    fd = os.memfd_create("mrcd-probe", os.MFD_CLOEXEC)
    try:
        return os.fstat(fd).st_dev
    finally:
        os.close(fd)


def check_region_fd(fd: int, length: int) -> None:
    """Raise unless ``fd`` may back a region of ``length`` bytes in mrcd: a shmem memfd
    (:class:`MemoryNotSealed` otherwise), sealed against shrinking, at least ``length``
    bytes long (:class:`OutOfBounds`). Checked in this order: once the seal is there the
    size cannot go down, so the size check cannot be raced."""
    if length <= 0:
        raise InvalidArgument(f"a memory region needs a positive length, got {length}")
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        raise MemoryNotSealed(f"the file given for the memory region is not a memfd: "
                              f"{HOW_TO_SEAL}") from None
    if not seals & fcntl.F_SEAL_SHRINK:
        raise MemoryNotSealed(f"the memory region's memfd is not sealed against "
                              f"shrinking (F_SEAL_SHRINK): {HOW_TO_SEAL}")
    st = os.fstat(fd)
    if st.st_dev != _shmem_dev():
        raise MemoryNotSealed(f"the memory region's memfd is not ordinary shared memory "
                              f"(huge-page memfds are refused: their pages can run out "
                              f"when first touched): {HOW_TO_SEAL}")
    if st.st_size < length:
        raise OutOfBounds(f"the memfd ({st.st_size} bytes) is smaller than the {length} "
                          "bytes to register")


def over_limit(what: str, key: str, limit: int) -> LimitExceeded:
    """The error of a request that would take a client over a per-client limit:
    ``what`` happened, which limit (``key``, the configuration key) and its value."""
    return LimitExceeded(f"{what}: mrcd's per-client limit {key} is {limit} (an "
                         "administrator can raise it in mrcd's configuration)", key, limit)
