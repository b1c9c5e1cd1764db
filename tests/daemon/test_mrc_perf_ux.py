"""mrc-perf and mrcctl as a user meets them: options on either side of the mode, mrcd
found through MRCD_SOCKET (and a clear word when it is not running), EVs in hex, a
closed pipe, --version, perftest's habits (BW peak, -b, --run_infinitely, interval
records, --lat stdev and 99.9 %), the -q check on both sides, a run that outlives the
server's timeout, a run whose peer dies (partial results with mrcd's reason), --plot."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mdnsutil import BIN, MrcdPair, needs_root, ns_prefix

from mrcnet.api import Context

PERF = os.path.join(BIN, "mrc-perf")
CTL = os.path.join(BIN, "mrcctl")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MRCD_SOCKET"}
    env.update(extra)
    return env


def _run(cmd: list[str], timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          **kw)


def _records(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


@contextlib.contextmanager
def _server(sock: str, *extra: str, env: dict[str, str] | None = None
            ) -> Iterator[subprocess.Popen[str]]:
    """``mrc-perf server`` (options after the mode), listening when this yields; killed
    by PID if the test left it running."""
    server = subprocess.Popen([PERF, "server", "--socket", sock, *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "waiting on service" in line, line + (server.stderr.read()
                                                     if server.stderr else "")
        yield server
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_version_of_every_tool() -> None:
    for tool in ("mrc-perf", "mrcctl", "mrcd", "mrc-fabric", "mrc-sim"):
        r = _run([os.path.join(BIN, tool), "--version"], timeout=60)
        assert r.returncode == 0, (tool, r.stderr)
        assert re.fullmatch(rf"{tool} \d+\.\d+\S*\n", r.stdout), (tool, r.stdout)


def test_not_running_names_the_socket_and_how_to_set_it() -> None:
    for tool in (PERF, CTL):
        args = ["client", "hb"] if tool == PERF else ["qps"]
        # --socket before and after the subcommand, the same socket named.
        for argv in (["--socket", "/nonexistent/a.sock", *args],
                     [*args, "--socket", "/nonexistent/a.sock"]):
            r = _run([tool, *argv], timeout=30, env=_env())
            assert r.returncode == 1, (argv, r.stderr)
            assert "mrcd is not running at /nonexistent/a.sock (--socket)" in r.stderr
            assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
        # From the environment.
        r = _run([tool, *args], timeout=30, env=_env(MRCD_SOCKET="/nonexistent/env.sock"))
        assert "mrcd is not running at /nonexistent/env.sock ($MRCD_SOCKET)" in r.stderr
        # Neither: the default, and how to point the tool at an mrcd.
        r = _run([tool, *args], timeout=30, env=_env())
        assert "(the default)" in r.stderr and "MRCD_SOCKET=" in r.stderr, r.stderr
        assert "mrc-fabric exec" in r.stderr and "--socket" in r.stderr


def test_option_placement_parses_both_ways() -> None:
    from mrcnet.ctl import _parser
    from mrcnet.perf import build_parser

    for argv in (["--socket", "S", "--timeout", "7", "--service", "9", "client", "h"],
                 ["client", "h", "--socket", "S", "--timeout", "7", "--service", "9"]):
        a = build_parser().parse_args(argv)
        assert (a.socket, a.timeout, a.service) == ("S", 7.0, 9), argv
    a = build_parser().parse_args(["server"])
    assert (a.socket, a.timeout, a.service) == (None, 30.0, 18515)
    for argv in (["--socket", "S", "--json", "evs", "3"], ["evs", "3", "--socket", "S",
                                                            "--json"]):
        c = _parser().parse_args(argv)
        assert (c.socket, c.json, c.qpn) == ("S", True, 3), argv
    c = _parser().parse_args(["qps"])
    assert (c.socket, c.json) == (None, False)
    assert _parser().parse_args(["deny", "1", "0x80001000"]).ev == 0x80001000
    p = build_parser().parse_args(["client", "h", "--report_gbits", "--run_infinitely",
                                   "-b"])
    assert p.report_gbits and p.run_infinitely and p.bidirectional


@needs_root
def test_mrcd_socket_env_hex_evs_and_a_closed_pipe(mrcd_pair: MrcdPair) -> None:
    a, b = mrcd_pair.a, mrcd_pair.b
    with Context(b.socket) as cb, Context(a.socket) as ca:
        qp_b = cb.create_qp(cb.create_cq())
        cb.listen(3, qp_b, expose=[cb.alloc_mr(4096)])
        qp_a = ca.create_qp(ca.create_cq())
        qp_a.connect("hb", 3)
        env = _env(MRCD_SOCKET=a.socket)
        # No --socket: MRCD_SOCKET finds mrcd; --json before the command.
        r = _run([CTL, "--json", "evs", str(qp_a.qpn)], env=env)
        assert r.returncode == 0, r.stderr
        evs = [e["ev"] for e in json.loads(r.stdout)["evs"]]
        assert evs and all(isinstance(e, int) for e in evs)
        # The table shows EVs as captures do: 0x%08x.
        table = _run([CTL, "evs", str(qp_a.qpn)], env=env).stdout
        for ev in evs:
            assert f"0x{ev:08x}" in table, table
        assert str(evs[0]) not in table.replace(f"0x{evs[0]:08x}", "")
        r = _run([CTL, "deny", str(qp_a.qpn), f"0x{evs[0]:08x}"], env=env)
        assert r.returncode == 0 and f"EV 0x{evs[0]:08x}: DENIED" in r.stdout, r
        # A reader that went away: no traceback.
        rd, wr = os.pipe()
        os.close(rd)
        with os.fdopen(wr, "w") as out:
            p = subprocess.run([CTL, "evs", str(qp_a.qpn)], stdout=out,
                               stderr=subprocess.PIPE, text=True, timeout=60, env=env,
                               check=False)
        assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr
        assert p.returncode == 141
        sh = subprocess.run(f"{CTL} evs {qp_a.qpn} | head -1", shell=True, env=env,
                            capture_output=True, text=True, timeout=60, check=False)
        assert sh.stdout.startswith("EV") and sh.stderr == "", sh.stderr


@needs_root
def test_perf_env_socket_peak_gbits_and_plain_json_intervals(mrcd_pair: MrcdPair) -> None:
    with _server(mrcd_pair.b.socket) as server:
        r = _run([PERF, "client", "hb", "-s", "64K", "-D", "1.2", "-i", "0.2",
                  "--report_gbits", "--json"], env=_env(MRCD_SOCKET=mrcd_pair.a.socket))
        assert r.returncode == 0, r.stderr
        recs = _records(r.stdout)
        assert recs[0]["type"] == "start" and recs[0]["seconds"] == 1.2
        assert all("type" in x for x in recs)
        intervals = [x for x in recs if x["type"] == "interval"]
        (row,) = [x for x in recs if x["type"] == "result"]
        assert len(intervals) >= 3  # plain --json: intervals too
        assert row["gbps_peak"] >= row["gbps"] > 0 and row["verified"] is True
        assert server.wait(timeout=30) == 0
        assert "run over: ha ended it" in (server.stdout.read() if server.stdout else "")


@needs_root
def test_perf_qps_mismatch_said_by_both_sides(mrcd_pair: MrcdPair) -> None:
    for theirs, mine in ((2, 1), (1, 2)):
        with _server(mrcd_pair.b.socket, "-q", str(theirs)) as server:
            t0 = time.monotonic()
            r = _run([PERF, "client", "hb", "-q", str(mine), "--quiet", "--socket",
                      mrcd_pair.a.socket])
            assert r.returncode == 1, r.stderr
            assert f"--qps {theirs}" in r.stderr and f"--qps {mine}" in r.stderr, r.stderr
            out, err = server.communicate(timeout=20)
            assert time.monotonic() - t0 < 15  # no 30 s wait
            assert server.returncode == 1
            assert (f"the client on ha runs with --qps {mine}, this server with --qps "
                    f"{theirs}") in out + err, out + err


@needs_root
def test_perf_bidirectional(mrcd_pair: MrcdPair) -> None:
    with _server(mrcd_pair.b.socket, "-s", "1M") as server:
        r = _run([PERF, "client", "hb", "-b", "-a", "-n", "20", "--socket",
                  mrcd_pair.a.socket, "--json", "--quiet"])
        assert r.returncode == 0, r.stderr
        rows = [x for x in _records(r.stdout) if x["type"] == "result"]
        assert len(rows) == 8
        for row in rows:
            assert row["verified"] is True and row["errors"] == 0
            assert row["gbps_back"] > 0 and row["bytes_back"] > 0
        assert server.wait(timeout=30) == 0
    with _server(mrcd_pair.b.socket) as server:
        r = _run([PERF, "client", "hb", "-b", "-n", "20", "--socket", mrcd_pair.a.socket,
                  "--quiet"])
        assert r.returncode == 0, r.stderr
        assert "BW back[Gb/s]" in r.stdout and "both directions together" in r.stdout
        assert server.wait(timeout=30) == 0


@needs_root
def test_perf_run_infinitely_until_ctrl_c(mrcd_pair: MrcdPair) -> None:
    with _server(mrcd_pair.b.socket) as server:
        client = subprocess.Popen([PERF, "client", "hb", "--run_infinitely", "-D", "0.5",
                                   "--socket", mrcd_pair.a.socket, "--json", "--quiet"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert client.stdout is not None
            rows = 0
            while rows < 3:
                rec = json.loads(client.stdout.readline())
                rows += rec["type"] == "result"
            client.send_signal(signal.SIGINT)  # this PID: stop after the size
            out, err = client.communicate(timeout=30)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        assert client.returncode == 0, err
        assert "stopping after this size" in err and "Traceback" not in err
        assert all(x["verified"] for x in _records(out) if x["type"] == "result")
        assert server.wait(timeout=30) == 0


@needs_root
def test_perf_outlives_the_server_timeout(mrcd_pair: MrcdPair) -> None:
    """Plain writes complete nothing at the server: it must not give up on a run longer
    than its --timeout while the client makes progress."""
    with _server(mrcd_pair.b.socket, "--timeout", "2") as server:
        r = _run([PERF, "client", "hb", "-s", "256K", "-D", "6", "--socket",
                  mrcd_pair.a.socket, "--json", "--quiet"])
        assert r.returncode == 0, r.stderr
        (row,) = [x for x in _records(r.stdout) if x["type"] == "result"]
        assert row["seconds"] >= 5.9 and row["verified"] is True
        assert server.wait(timeout=30) == 0


@needs_root
def test_perf_failed_run_prints_partial_results_with_the_reason(mrcd_pair: MrcdPair) -> None:
    with _server(mrcd_pair.b.socket):
        client = subprocess.Popen([PERF, "client", "hb", "-s", "64K", "-D", "120",
                                   "--socket", mrcd_pair.a.socket, "--json", "-i", "0.5",
                                   "--timeout", "60"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert client.stdout is not None
            while json.loads(client.stdout.readline())["type"] != "interval":
                pass
            mrcd_pair.b.kill()  # the server's mrcd (a PID this test started) dies
            out, err = client.communicate(timeout=150)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
    assert client.returncode == 1
    recs = _records(out)
    (row,) = [x for x in recs if x["type"] == "result"]
    (bad,) = [x for x in recs if x["type"] == "error"]
    assert row["error"] and row["bytes"] > 0 and row["error"] == bad["error"]
    assert "the run failed: " in err and "Traceback" not in err, err


@needs_root
def test_perf_plot_writes_a_png(mrcd_pair: MrcdPair, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "run.png"
    with _server(mrcd_pair.b.socket) as server:
        r = _run([PERF, "client", "hb", "-D", "1.5", "-i", "0.25", "--plot", str(png),
                  "--quiet", "--socket", mrcd_pair.a.socket])
        assert r.returncode == 0, r.stderr
        assert server.wait(timeout=30) == 0
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
    assert f"plot written to {png}" in r.stderr


@needs_root
@pytest.mark.slow
def test_perf_60_s_on_the_tour_fabric_qp_never_in_error(tmp_path: Path) -> None:
    """The tour's long run: -D 60 of 1 MiB writes between two leaves of a 2-plane
    fabric (the server on its default --timeout of 30 s), verified, and neither QP ever
    in ERROR (polled through mrcd every 2 s)."""
    from mdfabric import fabric_with_mrcds

    spec = "leafspine:planes=2,spines=2,leaves=2,hosts=1,mtu=9000"
    with fabric_with_mrcds(tmp_path, spec, prefix=ns_prefix("pu")) as fm:
        ns = {h: fm.fab.netns(h) for h in ("h0", "h1")}
        server = subprocess.Popen(["ip", "netns", "exec", ns["h1"], PERF, "server"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=_env(MRCD_SOCKET=fm.sock("h1")))
        client = None
        try:
            assert server.stdout is not None
            assert "waiting on service" in server.stdout.readline()
            client = subprocess.Popen(["ip", "netns", "exec", ns["h0"], PERF, "client",
                                       "h1", "-s", "1M", "-D", "60", "--json", "--quiet"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=_env(MRCD_SOCKET=fm.sock("h0")))
            states: set[str] = set()
            deadline = time.monotonic() + 150
            while client.poll() is None and time.monotonic() < deadline:
                for h in ("h0", "h1"):
                    with Context(fm.sock(h)) as ctx:
                        states |= {q["state"] for q in ctx.admin("qps")["qps"]}
                time.sleep(2)
            out, err = client.communicate(timeout=30)
            assert client.returncode == 0, err
            assert "ERROR" not in states, states
            (row,) = [x for x in _records(out) if x["type"] == "result"]
            assert row["seconds"] >= 59.9 and row["verified"] is True and row["error"] is None
            sout, serr = server.communicate(timeout=30)
            assert server.returncode == 0, sout + serr
            assert "run over: h0 ended it" in sout and "verify: ok" in sout
        finally:
            for p in (client, server):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
