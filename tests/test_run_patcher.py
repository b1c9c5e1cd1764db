"""RunPatcher (one C call per run of data frames) == CTemplate.frame per packet, byte for
byte: random runs over uSID, SRH and plain paths, with and without the inner IPv6 header,
every data opcode, immediates, AckReq, PSN wraparound and a short last payload."""

from __future__ import annotations

import random

import pytest

from mrcnet.constants import DATA_OPCODES, IMM_OPCODES, LAST_OPCODES, PSN_MASK
from mrcnet.native import HAVE_C
from mrcnet.wire import Route, usid_container
from mrcnet.wire.bth import F_ACKREQ, F_TS
from mrcnet.wire.template import CTemplate, DataTemplate, PathSpec, RunPatcher, run_patcher

pytestmark = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")

_EXT_IMM, _EXT_TSETH = 1, 2


def _paths() -> list[tuple[CTemplate, PathSpec | None]]:
    out: list[tuple[CTemplate, PathSpec | None]] = []
    for encap in (True, False):
        for mode in ("usid", "srh", "plain"):
            for spine in range(2):
                kw: dict[str, object] = {}
                if mode == "usid":
                    kw["usid"] = usid_container(b"\xfc\0\0\0", [0x10, 0x100 + spine, 0x20])
                elif mode == "srh":
                    kw["segments"] = (bytes(15) + bytes([7 + spine]), bytes(15) + b"\x01")
                r = Route(b"\x02" * 6, b"\x04" * 6, bytes(15) + b"\x09", bytes(15) + b"\x01",
                          encap=encap, **kw)  # type: ignore[arg-type]
                t = CTemplate(DataTemplate.for_route(r, dest_qp=0x1234, rkey=77))
                spec = None
                if mode == "usid":
                    spec = t.path(usid=r.usid)
                elif mode == "srh":
                    spec = t.path(segments=r.segments)
                out.append((t, spec))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_run_frames_equal_frame_by_frame(seed: int) -> None:
    rng = random.Random(seed)
    paths = _paths()
    rp = RunPatcher(size=2)  # small: the table has to grow
    slots_of = [rp.add(t, spec) for t, spec in paths]
    n = rng.randint(1, 40)
    seg = rng.choice([256, 1024, 8192])
    payload = rng.randbytes(seg * (n - 1) + rng.randint(0, seg))
    psn0 = rng.choice([0, PSN_MASK - 3, rng.randint(0, PSN_MASK)])
    va0 = rng.randint(0, 1 << 63)
    ts = rng.randint(0, 0xFFFF)
    meth, imm = rng.randint(0, (1 << 32) - 1), rng.randint(0, (1 << 32) - 1)  # RQMSN|MSN
    ops = [rng.choice(sorted(DATA_OPCODES)) for _ in range(n)]
    which = [rng.randrange(len(paths)) for _ in range(n)]
    evs = [rng.randint(0x80000000, 0xFFFFFFFF) for _ in range(n)]
    flags = [F_TS | F_ACKREQ if op in LAST_OPCODES else F_TS for op in ops]
    exts = [_EXT_TSETH | _EXT_IMM if op in IMM_OPCODES else _EXT_TSETH for op in ops]
    got = rp.frames([slots_of[w] for w in which], evs, ops, flags, exts, psn0, va0,
                    memoryview(payload), seg, meth, imm, ts)
    assert len(got) == n
    for i in range(n):
        t, spec = paths[which[i]]
        has_imm = ops[i] in IMM_OPCODES
        want = t.frame(ops[i], (psn0 + i) & PSN_MASK, evs[i], va0 + i * seg,
                       payload[i * seg : (i + 1) * seg], spec, meth,
                       imm if has_imm else None, ts, False, ops[i] in LAST_OPCODES)
        assert got[i].readonly
        assert got[i] == want, f"frame {i} of {n}"


def test_run_patcher_is_c_only() -> None:
    assert isinstance(run_patcher(), RunPatcher)
