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
from mrcnet.wire.template import (
    CTemplate,
    DataTemplate,
    PathSpec,
    RunPatcher,
    _views,
    run_patcher,
)

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


@pytest.mark.parametrize("seed", range(20))
def test_msgs_frames_equal_frame_by_frame(seed: int) -> None:
    """Single-packet messages of several work requests in one C call (msgs_frames and
    msgs_queue) == CTemplate.frame per packet: each its own address, METH, immediate
    and payload length (0 included), PSNs across the wrap."""
    rng = random.Random(1000 + seed)
    paths = _paths()
    rp = RunPatcher(size=4)
    slots_of = [rp.add(t, spec) for t, spec in paths]
    n = rng.randint(1, 40)
    ops = [rng.choice([int(o) for o in DATA_OPCODES if o in LAST_OPCODES]) for _ in range(n)]
    plens = [rng.choice([0, 1, 64, rng.randint(0, 8192)]) for _ in range(n)]
    payload = rng.randbytes(sum(plens))
    psn0 = rng.choice([0, PSN_MASK - 3, rng.randint(0, PSN_MASK)])
    vas = [rng.randint(0, (1 << 64) - 1) for _ in range(n)]
    meths = [rng.randint(0, (1 << 32) - 1) for _ in range(n)]
    imms = [rng.randint(0, (1 << 32) - 1) for _ in range(n)]
    ts = rng.randint(0, 0xFFFF)
    which = [rng.randrange(len(paths)) for _ in range(n)]
    evs = [rng.randint(0x80000000, 0xFFFFFFFF) for _ in range(n)]
    flags = [F_TS | F_ACKREQ] * n
    exts = [_EXT_TSETH | _EXT_IMM if op in IMM_OPCODES else _EXT_TSETH for op in ops]
    slots = [slots_of[w] for w in which]
    got = rp.msgs_frames(slots, evs, ops, flags, exts, psn0, vas, meths, imms, payload,
                         plens, ts)

    class Queue:
        def add_run(self, buf: object, lens: object, ports: list[int]) -> None:
            self.frames = [bytes(f) for f in _views(buf, lens, len(ports))]
            self.ports = ports

    q = Queue()
    rp.msgs_queue(q, list(range(n)), slots, evs, ops, flags, exts, psn0, vas, meths, imms,
                  payload, plens, ts)
    assert len(got) == n and q.ports == list(range(n))
    at = 0
    for i in range(n):
        t, spec = paths[which[i]]
        has_imm = ops[i] in IMM_OPCODES
        want = t.frame(ops[i], (psn0 + i) & PSN_MASK, evs[i], vas[i],
                       payload[at : at + plens[i]], spec, meths[i],
                       imms[i] if has_imm else None, ts, False, True)
        at += plens[i]
        assert got[i].readonly
        assert got[i] == want, f"frame {i} of {n}"
        assert q.frames[i] == want


def test_msgs_frames_refuse_a_payload_of_the_wrong_size() -> None:
    rp = RunPatcher()
    t, spec = _paths()[0]
    slot = rp.add(t, spec)
    with pytest.raises(ValueError, match="payload bytes"):
        rp.msgs_frames([slot], [0x80000001], [10], [F_TS], [_EXT_TSETH], 0, [0], [0], [0],
                       b"abc", [4], 0)
