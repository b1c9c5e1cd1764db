"""Small-message round trips h0 <-> h1 on a shaped fabric: mrcd (socket API and verbs)
against a kernel UDP ping-pong between the same hosts, same run (tools/bench_latency.py).
"""

from __future__ import annotations

from pathlib import Path

import bench_latency as bl


def test_round_trips_mrcd_vs_kernel_udp(tmp_path: Path) -> None:
    rows = bl.run_latency(tmp_path, [8, 4096], iters=100, warmup=20)
    print("\n" + bl.table(rows))
    by = {(r.method, r.size): r for r in rows}
    assert {r.method for r in rows} == set(bl.METHODS)
    for r in rows:
        assert r.iters == 100
        assert r.mismatches == 0  # every echo came back byte for byte
        assert 0 < r.p50_us <= r.p99_us <= r.max_us
        # generous: one round trip through both mrcds is ~1-2 ms here
        assert r.p50_us < 50_000, r
    for size in (8, 4096):
        # the kernel's UDP path is the floor the daemon's latency is measured against
        assert by[("udp", size)].p50_us < by[("mrc", size)].p50_us
        assert by[("udp", size)].p50_us < by[("mrc-verbs", size)].p50_us
