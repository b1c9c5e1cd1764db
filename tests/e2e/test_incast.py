"""3 -> 1 incast through the socket API on a shaped fabric, trimming on and off.

Fabric ``leafspine:planes=2,spines=2,leaves=2,hosts=3,rate=200mbit,host_rate=100mbit,
mtu=9000,queue=8pkt`` (``trim=off`` for the second run): h1, h3, h4 each send 4 MiB to
one ``create_server`` listener on h0 through ``create_connection``; the leaf -> h0 ports
(2 x 100 Mbit/s) are the bottleneck. A victim stream h5 -> h2 shares the leaf 1 -> spine
and spine -> leaf 0 links with h3/h4 but not the incast port. See docs/INCAST.md.

mrcd runs with ``[core] timeout_floor = 0.5`` here, not its default 20 ms. Measured on
this 2-vCPU machine (docs/INCAST.md): with 20 ms (and with 100 or 250 ms) the senders'
retransmission timers fire on packets that are not lost but still queued outside the
switch program's view: the real tbf/pfifo_fast queue of a leaf -> h0 port held 0.2-2.4 MB
while the program's virtual queue (which decides the trims) said 30-70 KB, and the
receiving mrcd's packet sockets held up to 15 MB (truesize) of frames it had not read
yet. Every such resend is ``timeout_unblamed`` (nothing newer acknowledged on any
path). With the 0.5 s floor most runs resend nothing by timer; when some are, they
were really lost at the receiving host (the kernel drops frames at mrcd's full packet
sockets when mrcd falls behind: ``ss -0 -m`` ``d``, counted per host by the tool) or
held up by a stalled mrcd; the fabric dropped nothing in any trim-on run.
"""

from __future__ import annotations

from pathlib import Path

import bench_incast as bi
import pytest

CORE = {"timeout_floor": 0.5}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bi.IncastResult]:
    base = tmp_path_factory.mktemp("incast")
    out = {}
    for trim in (True, False):
        r = bi.run_incast(trim, Path(base) / ("on" if trim else "off"), mib=4, core=CORE)
        out["on" if trim else "off"] = r
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
    assert r.receiver["tx_nack"] > 0, r.receiver
    assert r.senders["lost_trim"] > 0, r.senders
    assert r.senders["tx_retransmit"] > 0, r.senders
    # Resends are NACK-driven, not timer-driven. In 8 of 13 measured runs not a single
    # packet was resent by the timer; in the others 17-91 were, against 1300-1900 NACK
    # resends: packets really lost at the receiving host (its kernel dropped 67-120
    # frames at mrcd's full packet sockets, `ss -0 -m`) or held past 0.5 s by a stalled
    # mrcd (91 with no drop anywhere, once). With mrcd's default 20 ms floor the same run
    # resends 2100-5000 packets by timer against 380-920 by NACK, so this bound
    # separates the two regimes by a wide margin.
    assert r.senders["lost_trim"] > 4 * r.senders["lost_timeout"], r.senders_all
    # generous: 8 Mbit/s of goodput per sender would already pass
    assert r.over_ideal < 8, r.completion_s


def test_victim_keeps_its_share_beside_the_incast(runs: dict[str, bi.IncastResult]) -> None:
    r = runs["on"]
    assert r.victim_byte_exact
    assert r.victim_baseline_bps > 0, r.victim_baseline_bps
    # Its own port is not the incast's: it keeps most of what it had alone (measured
    # 0.42-0.89, median ~0.8; the low ones when the incast's first unshaped bursts and
    # the six mrcds compete for this machine's 2 CPUs). Generous bound for the noise.
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
