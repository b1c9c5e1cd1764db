"""3 -> 1 incast through the socket API on a shaped fabric, trimming on and off.

Fabric ``leafspine:planes=2,spines=2,leaves=2,hosts=3,rate=200mbit,host_rate=100mbit,
mtu=9000,queue=8pkt`` (``trim=off`` for the second run): h1, h3, h4 each send 4 MiB to
one ``create_server`` listener on h0 through ``create_connection``; the leaf -> h0 ports
(2 x 100 Mbit/s) are the bottleneck. A victim stream h5 -> h2 shares the leaf 1 -> spine
and spine -> leaf 0 links with h3/h4 but not the incast port. See docs/INCAST.md.

The fabric keeps its real queues within the queue its trimming program believes in
(docs/FABRIC.md, "Real and virtual queues"): the shapers charge a trimmed frame its
trimmed length (a size table on the root qdisc; before, each trimmed header cost the
shaper a full frame of link time) and the virtual queue counts every frame atomically.
Before, the real tbf queue of a leaf -> h0 port held up to 30x the virtual one, senders'
timers fired on packets that were only waiting there, and this test ran mrcd with a
0.5 s timeout floor and asserted only ``lost_trim > 4 x lost_timeout``.

mrcd runs with ``[core] timeout_floor = 0.1`` (its default is 20 ms). Measured
(docs/INCAST.md, 22 Nov): at 0.1 s no packet was resent by timer in any trim-on run
(10 of 10 runs now, 20 of 20 with the earlier drain margin); at 20 ms none in 33 of 33
runs now, but with the earlier fabric, under other engineers' benchmarks, 5-19 in 3 of
26 runs, every one ``timeout_unblamed`` with no frame lost anywhere (no fabric, qdisc or
socket drop; the real queue at most 10 ms) and most arriving twice: mrcds this 2-CPU
machine did not run for tens of ms (those runs took 1.4-1.8x the ideal time against a
median of 1.2x). 0.1 s keeps the test about the fabric, not the machine's load.

Fabrics are named ``$MRC_E2E_PREFIX<hex>`` (default ``ic``).
"""

from __future__ import annotations

from pathlib import Path

import bench_incast as bi
import pytest

CORE = {"timeout_floor": 0.1}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bi.IncastResult]:
    base = tmp_path_factory.mktemp("incast")
    out = {}
    for trim in (True, False):
        r = bi.run_incast(trim, Path(base) / ("on" if trim else "off"), mib=4, core=CORE)
        out["on" if trim else "off"] = r
    # the two runs side by side (pytest -s shows it; also in the failure output)
    print("\n" + bi.table(list(out.values())))
    return out


def test_incast_with_trimming_recovers_by_nacks_not_timeouts(
        runs: dict[str, bi.IncastResult]) -> None:
    r = runs["on"]
    assert not r.errors, r.errors
    assert r.byte_exact  # sha256 of each sender's 4 MiB as the receiver read it
    # the switches trimmed on the incast port, the receiver NACKed, the senders resent
    assert r.fabric_incast_port["trims"] > 0, r.fabric_incast_port
    assert r.fabric_incast_port["drops"] == 0, r.fabric_incast_port
    assert sum(r.queue_drops.values()) == 0, r.queue_drops  # nor did the qdiscs
    assert r.receiver["tx_nack"] > 0, r.receiver
    # every trimmed packet that reached the receiver was NACKed ...
    assert r.receiver["tx_nack"] == r.receiver["rx_trimmed"], r.receiver
    # The incast port is the leaf's port to the receiver: its switch marks those trims
    # TRIMMED_LASTHOP, the receiver NACKs them with that reason, and no sender moves an
    # EV for them (a last-hop trim says nothing about the path).
    assert r.receiver["tx_nack_lasthop"] == r.receiver["tx_nack"], r.receiver
    assert r.senders["rx_nack_lasthop"] > 0, r.senders
    assert r.senders["ev_skip_trim"] == 0, r.senders_all
    # ... and resent on that NACK (measured: all but at most one per run, a stale NACK)
    assert r.senders["lost_trim"] >= 0.9 * r.receiver["tx_nack"], (r.senders, r.receiver)
    assert r.senders["tx_retransmit"] >= r.senders["lost_trim"], r.senders
    # No retransmission waited for a timer (floor 0.1 s, module docstring): every
    # trimmed packet was NACKed and resent, and no packet waited anywhere long enough
    # for its timer to fire.
    assert r.senders["lost_timeout"] == 0, r.senders_all
    assert r.senders["rto_rounds"] == 0, r.senders_all
    # The real queue of the incast ports (sampled every 5 ms) stays with the virtual one
    # that decides the trims: measured 50-67 KB at most against its 72 KB trim threshold
    # (0.34-1.08 MB on the morning of 22 Nov, 58-200 KB before the shaper's size table).
    # Bound: twice the trim threshold, half the drop threshold.
    assert r.queue_real_max, "no queue samples"
    assert max(r.queue_real_max.values()) <= 2 * r.trim_thresh, (r.queue_real_max,
                                                                 r.queue_virtual_max)
    # generous: 8 Mbit/s of goodput per sender would already pass
    assert r.over_ideal < 8, r.completion_s


def test_victim_keeps_its_share_beside_the_incast(runs: dict[str, bi.IncastResult]) -> None:
    r = runs["on"]
    assert r.victim_byte_exact
    assert r.victim_baseline_bps > 0, r.victim_baseline_bps
    # Its own port is not the incast's: it keeps most of what it had alone (measured
    # 0.47-1.28, median 0.9, in 46 runs; the low ones when the incast's first unshaped
    # bursts and the six mrcds compete for this machine's 2 CPUs). Generous bound for
    # the noise.
    assert r.victim_share_of_baseline > 0.25, (r.victim_during_bps, r.victim_baseline_bps)
    assert r.victim_share_of_capacity > 0.15, (r.victim_during_bps, r.victim_capacity_bps)


def test_same_incast_with_trimming_off_drops_and_still_delivers(
        runs: dict[str, bi.IncastResult]) -> None:
    r = runs["off"]
    assert not r.errors, r.errors
    assert r.byte_exact and r.victim_byte_exact
    assert r.fabric_incast_port["trims"] == 0
    assert r.fabric_incast_port["drops"] > 0, r.fabric_incast_port
    assert r.receiver["tx_nack"] == 0
    assert r.senders["lost_trim"] == 0
    # every loss is found by SACK/RACK or the timer instead of a NACK
    assert r.senders["lost_loss"] + r.senders["lost_timeout"] > 0, r.senders_all
