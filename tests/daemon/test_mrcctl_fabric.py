"""mrcctl against mrcds on a real fabric: EV probes to a host over every (plane, spine)
path with no QP, a downed link seen as that path's probes unanswered, per-plane stats,
and a live QP's CC / EV profile changed mid-transfer.

One fabric for the module (2 planes x 2 spines, 2 leaves x 1 host, 500 Mbit/s, MTU 9000),
named ``ha<hex>`` (fabric names are lowercase), an mrcd on both hosts. h0 and h1 sit on
different leaves: four distinct (plane, spine) paths between them.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from mdfabric import MIB, Conn, FabricMrcds, connect, fabric_with_mrcds
from mdnsutil import needs_root, ns_prefix
from test_mrcctl import Transfer, ctl_json, mrcctl

SPEC = "leafspine:planes=2,spines=2,leaves=2,hosts=1,rate=500mbit,mtu=9000"
ALL_PATHS = [(0, 0), (0, 1), (1, 0), (1, 1)]
#: Microseconds: a generous bound for a probe's round trip through two mrcds on a noisy
#: shared 2-core machine (typically 0.3-3 ms).
RTT_BOUND_US = 500_000

pytestmark = [needs_root]


@pytest.fixture(scope="module")
def fm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FabricMrcds]:
    """The fabric ``ha<hex>`` with an mrcd per host; stopped by PID and removed after."""
    with fabric_with_mrcds(tmp_path_factory.mktemp("hactl"), SPEC, prefix=ns_prefix("ha")) as f:
        yield f


def ctl(sock: str, *args: str) -> subprocess.CompletedProcess[str]:
    """mrcctl as its own process (nothing to keep going meanwhile)."""
    return subprocess.run([sys.executable, "-m", "mrcnet.ctl", *args, "--socket", sock],
                          capture_output=True, text=True, timeout=60)


def ctl_json_plain(sock: str, *args: str) -> Any:
    r = ctl(sock, *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def probe(sock: str, *args: str) -> tuple[int, dict[str, Any]]:
    r = ctl(sock, "probe", *args, "--json")
    assert r.returncode in (0, 2), r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return r.returncode, out


def by_path(result: dict[str, Any]) -> dict[tuple[int, int], dict[str, Any]]:
    return {(p["plane"], p["path"]): p for p in result["paths"]}


def assert_all_answered(result: dict[str, Any], paths: list[tuple[int, int]],
                        count: int) -> None:
    got = by_path(result)
    assert sorted(got) == paths, result
    for key, p in got.items():
        assert (p["sent"], p["answered"], p["lost"]) == (count, count, 0), (key, p)
        assert 0 < p["rtt_min_us"] <= p["rtt_avg_us"] <= p["rtt_max_us"] < RTT_BOUND_US, p


def test_probe_answers_on_every_path_with_no_qp_open(fm: FabricMrcds) -> None:
    s0 = fm.sock("h0")
    assert ctl_json_plain(s0, "qps")["qps"] == []
    assert ctl_json_plain(fm.sock("h1"), "qps")["qps"] == []
    rc, r = probe(s0, "h1", "--count", "4")
    assert rc == 0 and r["peer"] == "h1" and r["hello"] == "ok", r
    assert_all_answered(r, ALL_PATHS, 4)

    # By address (h1's plane-1 port), one plane only; the human table lists each path.
    addr = fm.fab.description.host("h1").port(1).address
    rc, r = probe(s0, addr, "--plane", "1")
    assert rc == 0 and r["peer"] == "h1"
    assert_all_answered(r, [(1, 0), (1, 1)], 5)
    table = ctl(s0, "probe", "h1", "-c", "2")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert "h0 -> h1" in lines[0] and "RTT_AVG_US" in lines[1]
    assert len(lines) == 2 + len(ALL_PATHS), table.stdout
    # The peer answered from its own mrcd's core, with no QP on either side.
    h1 = ctl_json_plain(fm.sock("h1"), "ports")["host"]
    assert h1["tx_probe_response"] >= 4 * 4 + 2 * 5 + 2 * 4
    assert ctl_json_plain(s0, "qps")["qps"] == []


def test_probe_sees_a_downed_link_on_its_path_only(fm: FabricMrcds) -> None:
    s0 = fm.sock("h0")
    link = fm.fab.link("p0l0", "p0s1")  # h0's leaf to spine 1 of plane 0
    link.down()
    try:
        rc, r = probe(s0, "h1", "--count", "5")
        assert rc == 2, r  # some probes unanswered
        got = by_path(r)
        dead = got.pop((0, 1))
        assert (dead["sent"], dead["answered"], dead["lost"]) == (5, 0, 5), dead
        assert dead["rtt_avg_us"] is None
        assert_all_answered({"paths": list(got.values())}, [(0, 0), (1, 0), (1, 1)], 5)
        table = ctl(s0, "probe", "h1", "-c", "1")
        assert table.returncode == 2 and " - " in table.stdout  # no RTT on the dead path
    finally:
        link.up()
    # Back: every path answers again (the restored link may need a moment).
    deadline = time.monotonic() + 10
    while True:
        rc, r = probe(s0, "h1", "--count", "3")
        if rc == 0 or time.monotonic() > deadline:
            break
    assert_all_answered(r, ALL_PATHS, 3)


def test_probe_with_a_local_port_down(fm: FabricMrcds) -> None:
    """h0's plane-0 port down: its paths are lost and marked so, plane 1 answers, and the
    hello still reaches h1's mrcd (over plane 1's address)."""
    s0 = fm.sock("h0")
    port = fm.fab.port("h0", 0)
    port.down()
    try:
        deadline = time.monotonic() + 5
        while ctl_json_plain(s0, "planes")["planes"][0]["link"] != "down":
            assert time.monotonic() < deadline, "mrcd never saw its port down"
        rc, r = probe(s0, "h1", "--count", "3")
    finally:
        port.up()
    assert rc == 2 and r["hello"] == "ok", r
    got = by_path(r)
    for key in ((0, 0), (0, 1)):
        assert (got[key]["answered"], got[key]["port"]) == (0, "down"), got[key]
    assert_all_answered({"paths": [got[(1, 0)], got[(1, 1)]]}, [(1, 0), (1, 1)], 3)


def test_probe_errors_are_one_clear_line(fm: FabricMrcds) -> None:
    s0 = fm.sock("h0")
    for args, text in ((["h9"], "h9"), (["h0"], "this host"),
                       (["fd00:dead::1"], "no host"), (["h1", "--plane", "7"], "plane 7"),
                       (["h1", "--count", "0"], "count 0")):
        r = ctl(s0, "probe", *args)
        assert r.returncode == 1 and r.stdout == "", (args, r)
        assert r.stderr.count("\n") == 1 and text in r.stderr, (args, r.stderr)
    gone = ctl(str(fm.tmp / "nobody.sock"), "probe", "h1")
    assert gone.returncode == 1 and gone.stderr.startswith("mrcctl: mrcd is not running at")
    assert gone.stderr.count("\n") == 1


_service = iter(range(300, 400))


@pytest.fixture
def conn(fm: FabricMrcds) -> Iterator[Conn]:
    c = connect(fm.sock("h0"), fm.sock("h1"), "h1", next(_service), 4 * MIB)
    try:
        yield c
    finally:
        c.close()


def qp_row(t: Transfer, sock: str, qpn: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = ctl_json(t, sock, "qps")["qps"]
    (row,) = [q for q in rows if q["qpn"] == qpn]
    return row


def test_set_profile_on_a_live_qp_moving_data(fm: FabricMrcds, conn: Conn) -> None:
    s0 = fm.sock("h0")
    qpn = conn.qp_a.qpn
    t = Transfer(conn.qp_a, conn.cq_a, conn.mr_a, conn.peer.regions[0])
    t.run_for(0.5)
    row = qp_row(t, s0, qpn)
    assert (row["ev_profile"], row["cc_profile"]) == ("spray", "nscc"), row
    assert " nscc " in mrcctl(t, s0, "qps").stdout

    # CC: fixed from now on. Its window is a constant (NSCC's moves with every ACK).
    r = ctl_json(t, s0, "set-profile", str(qpn), "--cc", "fixed")
    assert (r["qpn"], r["cc_profile"], r["ev_profile"], r["state"]) == \
        (qpn, "fixed", "spray", "RTS"), r
    done = t.done
    t.run_for(0.5)
    first = qp_row(t, s0, qpn)
    t.run_for(0.5)
    second = qp_row(t, s0, qpn)
    assert first["cc_profile"] == "fixed" and first["cwnd"] == second["cwnd"] > 0
    assert t.done > done, "no write completed after the CC change"

    # EV: ecmp is a single EV; every packet from now on goes on it.
    r = ctl_json(t, s0, "set-profile", str(qpn), "--ev", "ecmp")
    assert r["ev_profile"] == "ecmp" and r["evs"] == 1, r
    t.run_for(0.3)
    before = {e["ev"]: e["sent"] for e in ctl_json(t, s0, "evs", str(qpn))["evs"]}
    t.run_for(0.7)
    after = {e["ev"]: e["sent"] for e in ctl_json(t, s0, "evs", str(qpn))["evs"]}
    assert list(after) == list(before) and len(after) == 1, after
    assert sum(after.values()) > sum(before.values()), (before, after)

    # Both back, in one command; the table shows the change.
    out = mrcctl(t, s0, "set-profile", str(qpn), "--cc", "nscc", "--ev", "spray")
    assert out.returncode == 0 and "spray" in out.stdout and "nscc" in out.stdout, out
    assert len(ctl_json(t, s0, "evs", str(qpn))["evs"]) > 1
    t.run_for(0.5)

    # Errors: one clean line, non-zero exit, nothing changed.
    for args, text in (([str(qpn), "--cc", "bogus"], "unknown CC profile 'bogus'"),
                       ([str(qpn), "--ev", "bogus"], "unknown EV profile 'bogus'"),
                       (["999999", "--cc", "fixed"], "no QP 999999"),
                       ([str(qpn)], "needs --cc")):
        bad = mrcctl(t, s0, "set-profile", *args)
        assert bad.returncode == 1 and bad.stdout == "", (args, bad)
        assert bad.stderr.count("\n") == 1 and text in bad.stderr, (args, bad.stderr)
    row = qp_row(t, s0, qpn)
    assert (row["ev_profile"], row["cc_profile"], row["state"]) == ("spray", "nscc", "RTS")

    # Drain, then one whole-region write must land byte for byte.
    while t.outstanding:
        for w in conn.cq_a.wait(timeout=1.0):
            assert w.ok, w
            t.outstanding -= 1
    conn.qp_a.post_write(conn.mr_a, 0, 4 * MIB, conn.peer.regions[0], wr_id=1)
    (w,) = conn.cq_a.wait(timeout=30.0)
    assert w.ok, w
    assert hashlib.sha256(conn.mr_a.buf).digest() == hashlib.sha256(conn.mr_b.buf).digest()


def test_planes_summarise_ports_and_evs_per_plane(fm: FabricMrcds, conn: Conn) -> None:
    s0 = fm.sock("h0")
    t = Transfer(conn.qp_a, conn.cq_a, conn.mr_a, conn.peer.regions[0])
    t.run_for(1.0)
    r = ctl_json(t, s0, "planes")
    assert [p["plane"] for p in r["planes"]] == [0, 1]
    evs = ctl_json(t, s0, "evs", str(conn.qp_a.qpn))["evs"]
    for p in r["planes"]:
        assert p["link"] == "up" and p["tx_frames"] > 0 and p["rx_frames"] > 0, p
        assert p["qps"] >= 1 and p["sent"] > 0 and p["acked"] > 0, p
        assert p["evs"] == p["good"] + p["skip"] + p["assumed_bad"] + p["denied"], p
        mine = [e for e in evs if e["plane"] == p["plane"]]
        assert p["evs"] >= len(mine) > 0
    # Deny one EV: the plane's DENIED count shows it.
    victim = evs[0]
    ctl_json(t, s0, "deny", str(conn.qp_a.qpn), str(victim["ev"]))
    r = ctl_json(t, s0, "planes")
    assert r["planes"][victim["plane"]]["denied"] >= 1
    table = mrcctl(t, s0, "planes")
    assert table.returncode == 0 and "DENIED" in table.stdout
    assert len(table.stdout.splitlines()) == 3

    # A NIC port down shows as the plane's link.
    port = fm.fab.port("h0", 1)
    port.down()
    try:
        deadline = time.monotonic() + 5
        while ctl_json(t, s0, "planes")["planes"][1]["link"] != "down":
            assert time.monotonic() < deadline, "plane 1 never showed its link down"
    finally:
        port.up()
    deadline = time.monotonic() + 5
    while ctl_json(t, s0, "planes")["planes"][1]["link"] != "up":
        assert time.monotonic() < deadline, "plane 1 never showed its link up again"
    assert t.done > 0
