"""The work and completion queues a client shares with mrcd: what one slot of each holds.

A client context makes one sealed memfd with its *send queue*: a ring
(:class:`~mrcnet.api.shmring.Ring`) of work requests, client -> mrcd, for every QP of the
context. Each completion queue is a memfd of its own holding a ring of completions,
mrcd -> client. Two eventfds are the doorbells (client -> mrcd, mrcd -> client). All of
them go to mrcd with SCM_RIGHTS: the send queue and the doorbells with ``hello``, a CQ's
ring with ``create_cq``. Posts, completions and their doorbells never touch the Unix
socket; a post mrcd refuses comes back on it as a ``post_error`` push (it is raised by a
later call of the context, as before).

Slots are little-endian ``struct`` records:

- work request (64 bytes): ``op`` (:data:`OP_WRITE`, :data:`OP_RECV`), ``flags``
  (:data:`F_IMM`, :data:`F_UNSIGNALED`), ``qpn``, ``wr_id``, ``lkey``, ``length``,
  ``addr``, ``remote_addr``, ``rkey``, ``imm``;
- completion (32 bytes): the index of its status in :data:`STATUSES` and of its opcode
  in :data:`OPCODES`, ``flags`` (:data:`F_IMM`), ``qpn``, ``wr_id``, ``byte_len``,
  ``imm``.
"""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Sequence
from typing import Final

from mrcnet.api.shmring import ring_bytes
from mrcnet.core.cq import CompletionRow
from mrcnet.core.events import Completion, WCOpcode, WCStatus

__all__ = ["COMPLETION", "COMPLETION_SLOT", "CQ_SLOT", "F_IMM", "F_UNSIGNALED", "MAX_SLOTS",
           "OPCODES", "OP_RECV", "OP_WRITE", "SQ_SLOT", "SQ_SLOTS", "STATUSES", "WORK_REQUEST",
           "WORK_REQUEST_SLOT", "encode_completion", "encode_completions", "ring_slots",
           "sealed_memfd"]

#: Work request opcodes.
OP_WRITE: Final = 1
OP_RECV: Final = 2
#: The request or completion carries an immediate.
F_IMM: Final = 1
#: A write posted unsignalled (verbs: without IBV_SEND_SIGNALED on a QP made with
#: ``sq_sig_all`` false): mrcd writes its completion only if it fails. mrcd honours it
#: only on a QP created with ``sq_sig_all`` false (and ignores it on any other).
F_UNSIGNALED: Final = 2

WORK_REQUEST: Final = struct.Struct("<BB2xIQIIQQII")
SQ_SLOT: Final = 64
WORK_REQUEST_SLOT: Final = struct.Struct(WORK_REQUEST.format + f"{SQ_SLOT - WORK_REQUEST.size}x")
COMPLETION: Final = struct.Struct("<BBBxIQII")
CQ_SLOT: Final = 32
#: Whole slots: the record, then padding to the slot's end (zeros when written, never
#: read), for reading or writing many slots at once.
COMPLETION_SLOT: Final = struct.Struct(COMPLETION.format + f"{CQ_SLOT - COMPLETION.size}x")
#: Slots of a context's send queue (a post waits while it is full).
SQ_SLOTS: Final = 1024
#: The largest ring mrcd maps (slots).
MAX_SLOTS: Final = 1 << 16

STATUSES: Final = tuple(WCStatus)
OPCODES: Final = tuple(WCOpcode)
_STATUS_INDEX: Final = {s: i for i, s in enumerate(STATUSES)}
_OPCODE_INDEX: Final = {o: i for i, o in enumerate(OPCODES)}
# The same by the members' ids (enum members are singletons; an int hashes in C, a
# member's hash is a call of Enum.__hash__)
_STATUS_BY_ID: Final = {id(s): i for i, s in enumerate(STATUSES)}
_OPCODE_BY_ID: Final = {id(o): i for i, o in enumerate(OPCODES)}


def ring_slots(depth: int) -> int:
    """The power-of-two number of slots (at least 16, at most :data:`MAX_SLOTS`) of a
    ring that holds ``depth`` entries."""
    n = 16
    while n < depth and n < MAX_SLOTS:
        n *= 2
    return n


def encode_completion(c: Completion) -> bytes:
    """One completion as its slot's bytes."""
    imm = c.imm
    return COMPLETION.pack(_STATUS_INDEX[c.status], _OPCODE_INDEX[c.opcode],
                           0 if imm is None else F_IMM, c.qpn, c.wr_id, c.byte_len,
                           0 if imm is None else imm)


def encode_completions(wcs: Sequence[CompletionRow]) -> bytes:
    """Completions (as rows: :data:`mrcnet.core.cq.CompletionRow`) as whole slots
    (:data:`CQ_SLOT` bytes each, end to end): each slot starts with what
    :func:`encode_completion` gives and ends in zeros. One pack per completion and no call
    of ours (measured: half the time of encode_completion each), in a loop rather than a
    list comprehension (Python 3.11 makes and calls a function for one: 350 against 225
    ns for mrcd's common single completion, measured)."""
    pack, st, op = COMPLETION_SLOT.pack, _STATUS_BY_ID, _OPCODE_BY_ID
    slots: list[bytes] = []
    for s, wr_id, o, n, imm, qpn in wcs:
        slots.append(pack(st[id(s)], op[id(o)], 0 if imm is None else F_IMM, qpn, wr_id,
                          n, imm or 0))
    return b"".join(slots)


def sealed_memfd(name: str, length: int) -> int:
    """A memfd of ``length`` bytes sealed at that size (shrink, grow, seal): what mrcd
    maps (docs/SECURITY.md). OSError if the kernel refuses."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, length)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def queue_bytes(nslots: int, slot_size: int) -> int:
    """Bytes of the memfd of a queue of ``nslots`` slots (a whole number of pages)."""
    size = ring_bytes(nslots, slot_size)
    return -(-size // 4096) * 4096
