"""``sched_batch = "bulk"``: mrcd under SCHED_BATCH only while its port passes read many
frames (mrcnet/daemon/sched.py BulkBatch): the policy a real process gets as passes of
each size go by, the configuration's values, and two mrcds whose round trips (one frame
per pass) never leave the policy they started with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mdnsutil import VethPair, needs_root
from test_mrcd_shm import _ping_pong, _two_mrcds

from mrcnet.daemon.config import ConfigError, parse_config

GOOD = {
    "host": "h0",
    "port": [{"ifname": "eth0", "plane": 0}],
    "peers": {"h1": {"control": "fd00::b", "addresses": ["fd00::b"]}},
}

#: In a process of its own (the policy is the process's): passes of the given sizes, and
#: after each the policy the kernel reports.
PASSES = """
import json, os, sys
from mrcnet.daemon.sched import BulkBatch
b = BulkBatch()
out = []
for n in json.loads(sys.argv[1]):
    b.note(n)
    out.append(os.sched_getscheduler(0) == os.SCHED_BATCH)
print(json.dumps({"batch": out, "changes": b.changes, "failed": b.failed}))
"""


def _passes(sizes: list[int]) -> dict[str, object]:
    r = subprocess.run([sys.executable, "-c", PASSES, json.dumps(sizes)],
                       capture_output=True, text=True, timeout=60, check=True)
    return dict(json.loads(r.stdout))


def test_bulk_passes_batch_and_single_frames_do_not() -> None:
    # round-trip passes (one frame each) never move the policy
    calm = _passes([1] * 50)
    assert calm == {"batch": [False] * 50, "changes": 0, "failed": None}
    # a transfer's passes (16 frames): SCHED_BATCH once the average reaches 8 (the sixth
    # pass: 2, 3.75, 5.3, 6.6, 7.8, 8.8), and back after enough one-frame passes bring
    # it down to 1.5 (some twenty)
    r = _passes([16] * 10 + [1] * 30)
    batch = r["batch"]
    assert isinstance(batch, list)
    assert not any(batch[:5]) and all(batch[5:10])
    back = batch.index(False, 10)
    assert 20 < back < 40 and not any(batch[back:])
    assert r["changes"] == 2 and r["failed"] is None


def test_one_large_pass_among_round_trips_does_not_batch() -> None:
    """A burst now and then (a pass of 20 frames between one-frame passes) stays under
    the average's threshold."""
    r = _passes(([1] * 8 + [20]) * 4)
    assert r["changes"] == 0 and not any(r["batch"])  # type: ignore[arg-type]


def test_config_takes_bulk_and_says_what_else() -> None:
    assert parse_config({**GOOD, "sched_batch": "bulk"}).sched_batch == "bulk"
    assert parse_config({**GOOD, "sched_batch": False}).sched_batch is False
    with pytest.raises(ConfigError, match='sched_batch must be bool or "bulk"'):
        parse_config({**GOOD, "sched_batch": "sometimes"})


@needs_root
def test_round_trips_under_bulk_keep_the_policy(veth: VethPair, tmp_path: Path) -> None:
    """Two mrcds with ``sched_batch = "bulk"``: 40 round trips (a frame per pass) work
    and leave both under the policy they started with."""
    assert os.sched_getscheduler(0) != os.SCHED_BATCH
    bulk = 'sched_batch = "bulk"'
    with _two_mrcds(veth, tmp_path, bulk, bulk) as (socks, mrcds):
        _ping_pong(socks, 40)
        for m in mrcds:
            assert os.sched_getscheduler(m.proc.pid) == os.sched_getscheduler(0)


def test_a_failed_change_is_reported_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A policy the kernel refuses: ``note`` returns why, once (mrcd logs it), and no
    change is tried again."""
    from mrcnet.daemon import sched

    calls = []

    def refuse(pid: int, policy: int, param: object) -> None:
        calls.append(policy)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(sched.os, "sched_setscheduler", refuse)
    b = sched.BulkBatch()
    said = [b.note(64) for _ in range(40)]
    assert [w for w in said if w is not None] == ["[Errno 1] Operation not permitted"]
    assert len(calls) == 1 and not b.on and b.changes == 0
