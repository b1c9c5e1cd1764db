"""mrc-perf server/client between two mrcds: a table of rates and verified bytes."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator

from mdnsutil import BIN, MrcdPair, VethPair, needs_root

from mrcnet.perf import PING_FLAG
from mrcnet.perf_pattern import (
    PATTERN_BLOCK,
    fill_pattern,
    pattern_matches,
    prefix_imm,
    prefix_of,
)

PERF = os.path.join(BIN, "mrc-perf")


@needs_root
def test_perf_client_and_server(mrcd_pair: MrcdPair) -> None:
    v = mrcd_pair.veth
    # Each side runs in its host's namespace, as an application would (the TCP baseline
    # goes between the hosts' plain addresses).
    server = subprocess.Popen(["ip", "netns", "exec", v.ns_b,
                               PERF, "--socket", mrcd_pair.b.socket, "--timeout", "60",
                               "server", "--size", "262144", "--verify"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert "waiting on service" in server.stdout.readline()  # it listens now
        r = subprocess.run(["ip", "netns", "exec", v.ns_a,
                            PERF, "--socket", mrcd_pair.a.socket, "--timeout", "60",
                            "client", "hb", "--size", "262144", "--iters", "8",
                            "--tx-depth", "4", "--tcp", "--json"],
                           capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        records = [json.loads(line) for line in r.stdout.splitlines()]
        assert all("type" in x for x in records)
        (start,) = [x for x in records if x["type"] == "start"]
        assert start["sizes"] == [262144] and start["tx_depth"] == 4 and start["tcp"]
        (row,) = [x for x in records if x["type"] == "result"]
        (tcp,) = [x for x in records if x["type"] == "tcp_baseline"]
        assert row["size"] == 262144 and row["iters"] == 8
        assert row["errors"] == 0 and row["gbps"] > 0 and row["error"] is None
        assert row["gbps_peak"] >= row["gbps"] * 0.99
        assert tcp["size"] == -1 and tcp["gbps"] > 0  # the kernel TCP baseline
        out, err = server.communicate(timeout=60)
        assert server.returncode == 0, err
        assert "connected: ha" in out and "verify: ok" in out
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@needs_root
def test_perf_latency(mrcd_pair: MrcdPair) -> None:
    server = subprocess.Popen([PERF, "--socket", mrcd_pair.b.socket, "--timeout", "60",
                               "server", "--size", "65536"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert "waiting on service" in server.stdout.readline()
        r = subprocess.run([PERF, "--socket", mrcd_pair.a.socket, "--timeout", "60",
                            "client", "hb", "--lat", "--size", "4096", "--iters", "150",
                            "--json"],  # (150: past SIGNAL_EVERY twice, a signalled ping)
                           capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        (row,) = [x for x in map(json.loads, r.stdout.splitlines())
                  if x["type"] == "latency"]
        assert row["size"] == 4096 and row["iters"] == 150
        assert 0 < row["t_min"] <= row["t_typical"] <= row["t_99"] <= row["t_max"]
        assert row["t_99"] <= row["t_999"] <= row["t_max"] and row["t_stdev"] >= 0
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@contextlib.contextmanager
def _server(pair: MrcdPair, *extra: str) -> Iterator[subprocess.Popen[str]]:
    """``mrc-perf server`` on hb, listening when this yields; killed (by PID) if the
    test left it running."""
    server = subprocess.Popen([PERF, "--socket", pair.b.socket, "--timeout", "30",
                               "server", *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert "waiting on service" in server.stdout.readline()  # it listens now
        yield server
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@needs_root
def test_perf_several_qps_for_a_duration_verified_with_intervals(mrcd_pair: MrcdPair) -> None:
    with _server(mrcd_pair, "--qps", "2", "--size", "1M") as server:
        r = subprocess.run([PERF, "--socket", mrcd_pair.a.socket, "--timeout", "30",
                            "client", "hb", "-q", "2", "-s", "256K", "--seconds", "1.5",
                            "--interval", "0.25", "--json", "--paths", "--events"],
                           capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        records = [json.loads(line) for line in r.stdout.splitlines()]
        intervals = [x for x in records if x.get("type") == "interval"]
        (row,) = [x for x in records if x["type"] == "result"]
        # Timed: about 1.5 s of writes over both QPs, every byte range checked.
        assert 1.4 <= row["seconds"] <= 3.0 and row["qps"] == 2
        assert row["verified"] is True and row["errors"] == 0
        assert row["bytes"] == row["iters"] * 262144 > 0
        # Progress while it ran: interval records with the paths (one plane, one path
        # here: directly cabled) and a human line per interval on stderr.
        assert len(intervals) >= 4
        assert [x["t"] for x in intervals] == sorted(x["t"] for x in intervals)
        assert intervals[-1]["bytes"] == row["bytes"]
        assert sum(p["sent"] for p in intervals[-1]["paths"].values()) > 0
        assert r.stderr.count("Gb/s") >= 4
        assert server.wait(timeout=30) == 0
        assert "verify: ok" in (server.stdout.read() if server.stdout else "")


@needs_root
def test_perf_bytes_and_a_table(mrcd_pair: MrcdPair) -> None:
    with _server(mrcd_pair, "--size", "4M") as server:
        r = subprocess.run([PERF, "--socket", mrcd_pair.a.socket, "--timeout", "30",
                            # the peer by its address: mrcd finds the host it belongs to
                            "client", mrcd_pair.veth.ip_b, "-s", "64K", "--bytes", "6M",
                            "--quiet"],
                           capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        assert r.stderr == ""  # --quiet: no progress lines
        header, line = r.stdout.splitlines()
        assert "verified" in header and "rtx" in header and "BW peak[Gb/s]" in header
        cols = line.split()
        # 6 MiB of 64 KiB writes: 96 of them, cycling over (and checked in) 4 MiB.
        assert cols[0] == "65536" and cols[1] == "96" and cols[6] == "yes"
        assert server.wait(timeout=30) == 0


@needs_root
def test_perf_message_rate_without_verification(mrcd_pair: MrcdPair) -> None:
    """--rate: 64-byte writes, a deep window, Mmsg/s printed; --no-verify: the server
    checks nothing and the row says so ("-", not "yes")."""
    with _server(mrcd_pair, "--size", "64K") as server:
        r = subprocess.run([PERF, "--socket", mrcd_pair.a.socket, "--timeout", "30",
                            "client", "hb", "--rate", "--no-verify", "-n", "2000",
                            "--quiet"],
                           capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        header, row, rate = r.stdout.splitlines()
        assert "MsgRate[Mpps]" in header
        cols = row.split()
        assert cols[0] == "64" and cols[1] == "2000" and cols[6] == "-"
        assert rate.startswith("message rate, 64-byte writes: ") and "Mmsg/s" in rate
        assert float(rate.split(": ")[1].split()[0]) > 0
        assert server.wait(timeout=30) == 0


@needs_root
def test_perf_qps_mismatch_is_a_clear_error(mrcd_pair: MrcdPair) -> None:
    with _server(mrcd_pair):  # one QP
        r = subprocess.run([PERF, "--socket", mrcd_pair.a.socket, "--timeout", "10",
                            "client", "hb", "-q", "2", "--quiet"],
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 1
        assert r.stderr.startswith("mrc-perf: ") and "--qps 2" in r.stderr, r.stderr


@needs_root
def test_perf_to_an_unknown_address_is_a_clear_error(mrcd_pair: MrcdPair) -> None:
    r = subprocess.run([PERF, "--socket", mrcd_pair.a.socket, "client", "fd00::dead",
                        "--quiet"], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 1
    assert r.stderr.strip() == ("mrc-perf: no host of this mrcd's fabric or [peers] has the "
                                "address fd00::dead"), r.stderr


def test_perf_rejects_bad_arguments() -> None:
    for bad in (["client", "hb", "-s", "12X"], ["client", "hb", "-q", "0"],
                ["client", "hb", "--seconds", "-1"], ["client", "hb", "-n", "5", "-D", "1"],
                ["client", "hb", "-s", "2G"], ["client", "hb", "-s", "0"],
                ["server", "-s", "0"]):
        r = subprocess.run([PERF, *bad], capture_output=True, text=True,
                           timeout=30, check=False)
        assert r.returncode == 2, bad
        assert "error:" in r.stderr and "Traceback" not in r.stderr, bad


@needs_root
def test_perf_region_of_512_mib(mrcd_pair: MrcdPair) -> None:
    """A region of 512 MiB (256 MiB and more overflowed making the pattern): sparse
    memfds on both sides, a few writes in it, verified."""
    with _server(mrcd_pair, "--size", "512M") as server:
        r = subprocess.run([PERF, "--socket", mrcd_pair.a.socket, "--timeout", "30",
                            "client", "hb", "-s", "1M", "-n", "4", "--json", "--quiet"],
                           capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
        (row,) = [x for x in map(json.loads, r.stdout.splitlines())
                  if x["type"] == "result"]
        assert row["size"] == 1 << 20 and row["verified"] is True and row["errors"] == 0
        assert server.wait(timeout=30) == 0
        assert "verify: ok" in (server.stdout.read() if server.stdout else "")
        assert "Traceback" not in (server.stderr.read() if server.stderr else "")


def test_perf_pattern_and_prefix_of_any_size() -> None:
    buf = memoryview(bytearray(3 * PATTERN_BLOCK))
    fill_pattern(buf, 7, 0, 2 * PATTERN_BLOCK + 5)
    fill_pattern(buf, 7, 2 * PATTERN_BLOCK, 3 * PATTERN_BLOCK)  # continued later
    assert pattern_matches(buf, 7, 3 * PATTERN_BLOCK)
    assert not pattern_matches(buf, 8, 100)
    assert bytes(buf[:PATTERN_BLOCK]) != bytes(buf[PATTERN_BLOCK:2 * PATTERN_BLOCK])
    buf[PATTERN_BLOCK + 3] ^= 1
    assert not pattern_matches(buf, 7, 3 * PATTERN_BLOCK)
    # How far the pattern reaches, in a 32-bit immediate that never looks like a ping
    # or the end: bytes below 1 GiB, KiB above.
    for n in (0, 64, (1 << 30) - 1, 1 << 30, 3 << 30, (5 << 30) + 1000, (1 << 40) - 1):
        imm = prefix_imm(n)
        assert 0 <= imm < PING_FLAG
        assert n - 1024 < prefix_of(imm) <= n
    assert prefix_of(prefix_imm(1 << 42)) == (1 << 40) - 1024  # past 1 TiB: the first TiB


def test_perf_without_mrcd(tmp_path: object) -> None:
    r = subprocess.run([PERF, "--socket", "/nonexistent/mrcd.sock", "client", "hb"],
                       capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 1
    assert r.stderr.startswith("mrc-perf: mrcd is not running at /nonexistent/mrcd.sock")


@needs_root
def test_raw_ceiling_on_veth(veth: VethPair) -> None:
    sink = subprocess.Popen(["ip", "netns", "exec", veth.ns_b, PERF, "raw-sink",
                             "--ifname", veth.if_b, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert sink.stderr is not None
        assert "listening on" in sink.stderr.readline()
        r = subprocess.run(["ip", "netns", "exec", veth.ns_a, PERF, "raw-send",
                            "--ifname", veth.if_a, "--dst-mac", veth.mac_b,
                            "--src-ip", veth.ip_a, "--dst-ip", veth.ip_b,
                            "--size", "1024", "--seconds", "0.5", "--json"],
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0, r.stderr
        sent = json.loads(r.stdout)
        out, err = sink.communicate(timeout=30)
        assert sink.returncode == 0, err
        got = json.loads(out)
        assert sent["frames"] > 1000 and got["frames"] > 0
        assert got["frames"] <= sent["frames"]
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
