"""The completion ring's slots written in bulk (encode_completions) hold exactly what
encode_completion gives each completion, then zeros; and the client decodes them back."""

from __future__ import annotations

import random

from mrcnet.api.shmqueues import (
    COMPLETION,
    CQ_SLOT,
    F_IMM,
    OPCODES,
    STATUSES,
    encode_completion,
    encode_completions,
)
from mrcnet.core.events import Completion, WCOpcode, WCStatus


def _random(rng: random.Random, n: int) -> list[Completion]:
    return [Completion(rng.choice(list(WCStatus)), rng.randrange(1 << 64),
                       rng.choice(list(WCOpcode)), rng.randrange(1 << 32),
                       rng.choice([None, 0, 1, rng.randrange(1 << 32), (1 << 32) - 1]),
                       rng.randrange(1 << 32)) for _ in range(n)]


def test_bulk_slots_are_single_encodings_padded() -> None:
    rng = random.Random(5)
    for n in (0, 1, 2, 17, 500):
        wcs = _random(rng, n)
        data = encode_completions([(c.status, c.wr_id, c.opcode, c.byte_len, c.imm, c.qpn)
                                   for c in wcs])
        assert len(data) == n * CQ_SLOT
        for i, c in enumerate(wcs):
            slot = data[i * CQ_SLOT:(i + 1) * CQ_SLOT]
            assert slot == encode_completion(c) + bytes(CQ_SLOT - COMPLETION.size)
            st, op, flags, qpn, wr_id, byte_len, imm = COMPLETION.unpack_from(slot)
            assert (STATUSES[st], OPCODES[op], qpn, wr_id, byte_len) == (
                c.status, c.opcode, c.qpn, c.wr_id, c.byte_len)
            assert (imm if flags & F_IMM else None) == c.imm
