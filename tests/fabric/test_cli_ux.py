"""mrc-fabric's user path: exec's environment, privileges, confirmations, the status table,
``down --all`` confirmation, capture.

One small fabric with an mrcd on every host is built by the CLI for the module, in a
state directory of this module only, named ``fbt<hex>`` and removed at the end by its
record (mrcds by recorded PID). Commands run without privileges use ``setpriv`` to drop
every capability (root without capabilities) or to become nobody.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mrcnet.fabric.fabric import down
from mrcnet.fabric.nsutil import netns_exists
from mrcnet.fabric.state import StateRecord, proc_start_time

from .conftest import fabric_name

pytestmark = pytest.mark.root

CLI = [sys.executable, "-m", "mrcnet.fabric.cli"]
SPEC = "leafspine:planes=2,spines=1,leaves=1,hosts=2,rate=200mbit,mtu=9000"
NO_CAPS = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
          "--"]


def _finish(p: subprocess.Popen[str], before: Callable[[], None],
            timeout: float = 30) -> tuple[str, str]:
    """Run ``before`` while ``p`` (started by the test) runs, then collect its output;
    ``p`` is killed by PID if anything goes wrong."""
    try:
        before()
        return p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")


def run_cli(*args: str, state: Path, prefix: list[str] | None = None, stdin: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MRC_FABRIC_STATE_DIR": str(state)}
    return subprocess.run([*(prefix or []), *CLI, *args], env=env, capture_output=True,
                          text=True, timeout=timeout, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(name, state dir) of a fabric built by ``mrc-fabric up --mrcd``."""
    _needs_root()
    state = tmp_path_factory.mktemp("ux-state")
    state.chmod(0o755)
    name = fabric_name()
    old = os.environ.get("MRC_FABRIC_STATE_DIR")
    os.environ["MRC_FABRIC_STATE_DIR"] = str(state)
    try:
        r = run_cli("up", SPEC, "--name", name, "--mrcd", "-q", state=state)
        assert r.returncode == 0, r.stderr
        yield name, state
    finally:
        if (state / name / "state.json").exists():
            r = run_cli("down", name, "--force", state=state)
            if (state / name / "state.json").exists():
                down(name, force=True)
        if old is None:
            os.environ.pop("MRC_FABRIC_STATE_DIR", None)
        else:
            os.environ["MRC_FABRIC_STATE_DIR"] = old


# --- 2. exec's environment ----------------------------------------------------------------
def test_exec_sets_mrcd_socket_host_and_hostname(lab: tuple[str, Path]) -> None:
    name, state = lab
    r = run_cli("exec", name, "h1", "--", "sh", "-c", "hostname; env", state=state)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"{name}-h1"
    env = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    assert env["MRCD_SOCKET"] == str(state / name / "mrcd" / "h1.sock")
    assert Path(env["MRCD_SOCKET"]).is_socket()
    assert env["MRC_HOST"] == "h1" and env["MRC_FABRIC"] == name and env["MRC_NODE"] == "h1"
    # A switch: its own hostname, no host and no mrcd.
    r = run_cli("exec", name, "p1l0", "--", "sh", "-c", "hostname; env", state=state)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"{name}-p1l0"
    assert "MRC_NODE=L1.0" in r.stdout and "MRC_HOST=" not in r.stdout
    assert "MRCD_SOCKET=" not in r.stdout or "MRCD_SOCKET" in os.environ
    # The machine's own hostname is untouched.
    assert subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip() != (
        f"{name}-h1")


# --- 3. privileges -----------------------------------------------------------------------
def _mrcd_pids(name: str) -> dict[str, int]:
    return {p.what.split()[1]: p.pid for p in StateRecord.load(name).processes
            if p.what.startswith("mrcd ")}


@pytest.mark.parametrize("prefix", [NO_CAPS, NOBODY], ids=["root-without-caps", "nobody"])
@pytest.mark.parametrize("args", [["down", "{n}"], ["down", "--all", "--yes"], ["status", "{n}"],
                                  ["exec", "{n}", "h0", "--", "true"],
                                  ["link", "{n}", "L0.0", "S0.0", "down"]],
                         ids=["down", "down-all", "status", "exec", "link"])
def test_without_privileges_one_line_and_nothing_touched(
        lab: tuple[str, Path], prefix: list[str], args: list[str]) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv")
    name, state = lab
    pids = _mrcd_pids(name)
    starts = {h: proc_start_time(p) for h, p in pids.items()}
    r = run_cli(*(x.format(n=name) for x in args), state=state, prefix=prefix)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "run as root" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "RTNETLINK" not in r.stderr
    assert r.stdout == ""
    # Nothing was stopped, removed or marked.
    rec = StateRecord.load(name)
    assert rec.status == "up" and not rec.failures
    assert {h: proc_start_time(p) for h, p in pids.items()} == starts
    assert all(netns_exists(n) for n in rec.netns)


# --- 3. confirmations and the status table ---------------------------------------------------
def test_link_node_port_confirm_in_one_line(lab: tuple[str, Path]) -> None:
    name, state = lab
    cases = [
        (["link", name, "p0l0", "p0s0", "loss", "1.5", "--both"],
         "link L0.0-S0.0: 1.5% random loss L0.0->S0.0 and S0.0->L0.0"),
        (["link", name, "L0.0", "S0.0", "blackhole"], "link L0.0-S0.0: blackhole L0.0->S0.0"),
        (["link", name, "L0.0", "S0.0", "down"], "link L0.0-S0.0: down"),
        (["link", name, "L0.0", "S0.0", "up"], "link L0.0-S0.0: up"),
        (["link", name, "L0.0", "S0.0", "clear"], "link L0.0-S0.0: cleared"),
        (["node", name, "S1.0", "blackhole"], "switch S1.0: blackholed"),
        (["node", name, "S1.0", "restore"], "switch S1.0: forwarding again"),
        (["port", name, "h1", "1", "down"], "port h1 plane 1 (p1): down"),
        (["port", name, "h1", "1", "up"], "port h1 plane 1 (p1): up"),
    ]
    try:
        for args, want in cases:
            r = run_cli(*args, state=state)
            assert r.returncode == 0, r.stderr
            assert r.stdout.count("\n") == 1 and r.stdout.startswith(want), (args, r.stdout)
        r = run_cli("link", name, "h0", "L1.0", "flap", "--period", "200", state=state)
        assert r.returncode == 0 and r.stdout.startswith("link h0-L1.0: flapping"), r.stderr
    finally:
        run_cli("link", name, "h0", "L1.0", "clear", state=state)
    assert not StateRecord.load(name).failures


def test_status_table_words_rates_watch_and_closed_pipe(lab: tuple[str, Path]) -> None:
    name, state = lab
    try:
        assert run_cli("link", name, "L0.0", "S0.0", "loss", "2", state=state).returncode == 0
        assert run_cli("node", name, "S1.0", "blackhole", state=state).returncode == 0
        # Traffic to measure: UDP from h0 to h1 in plane 0 while status measures the rates.
        h1 = json.loads((state / name / "description.json").read_text())["hosts"][1]
        addr = h1["ports"][0]["address"]
        sender = ("import socket, time\n"
                  "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
                  "end = time.monotonic() + 3\n"
                  "while time.monotonic() < end:\n"
                  f"    s.sendto(b'x' * 1000, ('{addr}', 9)); time.sleep(0.005)\n")
        ping = subprocess.Popen(["ip", "netns", "exec", f"{name}-h0", sys.executable, "-c",
                                 sender], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            r = run_cli("status", name, "--interval", "1", state=state)
        finally:
            ping.kill()
            ping.wait()
        assert r.returncode == 0, r.stderr
        text = r.stdout
        assert "{" not in text and "'" not in text  # no Python reprs
        assert "rates over the last 1.0 s" in text
        rows = {ln.split()[0]: ln for ln in text.splitlines() if "->" in ln.split(" ", 1)[0]}
        assert "loss 2%" in rows["L0.0->S0.0"]
        assert "switch blackholed" in rows["S1.0->L1.0"]
        # h0's plane-0 port carried the ping: a packet rate and a bit rate beside the counters.
        cols = rows["h0->L0.0"].split()
        assert int(cols[-6]) > 0 and cols[-4] not in ("0", "-"), rows["h0->L0.0"]
        assert "link L0.0-S0.0: loss 2% L0.0->S0.0" in text
        assert "switch S1.0: blackholed" in text
        assert "mrcd" in text and "running" in text
        # --json is kept.
        st = json.loads(run_cli("status", name, "--json", state=state).stdout)
        assert st["name"] == name and set(st["mrcd"]) == {"h0", "h1"}
    finally:
        run_cli("link", name, "L0.0", "S0.0", "clear", state=state)
        run_cli("node", name, "S1.0", "restore", state=state)
    # A closed pipe: no traceback, no complaint.
    env = {**os.environ, "MRC_FABRIC_STATE_DIR": str(state)}
    p = subprocess.run(f"{' '.join(CLI)} status {name} --interval 0 | head -1", shell=True,
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.stdout.startswith(f"fabric {name} (up)") and p.stderr == "", p.stderr
    # --watch refreshes until Ctrl-C, then exits 0.
    w = subprocess.Popen([*CLI, "status", name, "--watch", "0.5"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def then_ctrl_c() -> None:
        time.sleep(2.5)
        w.send_signal(2)

    out, err = _finish(w, then_ctrl_c)
    assert w.returncode == 0, err
    assert out.count(f"fabric {name} (up)") >= 2 and "Traceback" not in err


def test_down_all_lists_and_asks(tmp_path: Path) -> None:
    _needs_root()
    state = tmp_path / "state"
    # Two recorded fabrics whose namespaces were never made: down removes only records.
    names = [fabric_name(), fabric_name()]
    old = os.environ.get("MRC_FABRIC_STATE_DIR")
    os.environ["MRC_FABRIC_STATE_DIR"] = str(state)
    try:
        for i, n in enumerate(names):
            StateRecord(name=n, fabric_id=0xFF00 + i, status="up", netns=[f"{n}-h0"]).save()
    finally:
        if old is None:
            os.environ.pop("MRC_FABRIC_STATE_DIR", None)
        else:
            os.environ["MRC_FABRIC_STATE_DIR"] = old
    r = run_cli("down", "--all", state=state)  # stdin is /dev/null: no terminal to ask on
    assert r.returncode == 2, r.stderr
    assert all(n in r.stderr for n in names) and "--yes" in r.stderr
    assert "nothing removed" in r.stderr and "Traceback" not in r.stderr
    assert all((state / n / "state.json").exists() for n in names)
    r = run_cli("down", "--all", "--yes", state=state)
    assert r.returncode == 0, r.stderr
    assert all(f"removed {n}" in r.stdout for n in names)
    assert not any((state / n / "state.json").exists() for n in names)
    r = run_cli("down", "--all", state=state)
    assert r.returncode == 0 and "nothing to remove" in r.stdout


# --- 4. capture ----------------------------------------------------------------------------
SEND_SAMPLES = """
import socket, sys
from mrcnet.wire.samples import samples
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
for x in samples():
    s.send(x.frame)
"""


def _send_samples(name: str, host: str, ifname: str) -> None:
    subprocess.run(["ip", "netns", "exec", f"{name}-{host}", sys.executable, "-c",
                    SEND_SAMPLES, ifname], check=True, timeout=60)


def _start_capture(name: str, state: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "MRC_FABRIC_STATE_DIR": str(state)}
    p = subprocess.Popen([*CLI, "capture", name, *args], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    line = p.stderr.readline()
    assert "capturing on" in line, line + p.stderr.read()
    return p


@pytest.mark.parametrize("sig", [15, 2], ids=["sigterm", "ctrl-c"])
def test_capture_pcapng_of_every_port_then_decode(lab: tuple[str, Path], tmp_path: Path,
                                                  sig: int) -> None:
    from mrcnet.wire.pcap import read_pcap
    from mrcnet.wire.samples import samples

    name, state = lab
    out = tmp_path / "h0.pcapng"
    cap = _start_capture(name, state, "h0", "-w", str(out))

    def send_then_stop() -> None:
        _send_samples(name, "h0", "p1")
        time.sleep(0.5)
        cap.send_signal(sig)

    stdout, stderr = _finish(cap, send_then_stop)
    assert cap.returncode == 0, stderr
    frames = [r.data for r in read_pcap(out)]
    assert out.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"  # pcapng
    assert stdout.startswith(f"wrote {len(frames)} frames to {out} (pcapng")
    assert "p0,p1" in stdout and "Traceback" not in stderr
    want = [s.frame for s in samples()]
    assert all(f in frames for f in want)
    r = subprocess.run([sys.executable, "-m", "mrcnet.wire", "decode", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == len(frames) >= len(want)


def test_capture_pcap_stops_after_count(lab: tuple[str, Path], tmp_path: Path) -> None:
    from mrcnet.wire.pcap import PCAP_MAGIC_US, read_pcap

    name, state = lab
    out = tmp_path / "p1.cap"
    cap = _start_capture(name, state, "h0:p1", "-w", str(out), "-F", "pcap", "-c", "3",
                         "--seconds", "60")
    stdout, stderr = _finish(cap, lambda: _send_samples(name, "h0", "p1"))
    assert cap.returncode == 0, stderr
    assert int.from_bytes(out.read_bytes()[:4], "little") == PCAP_MAGIC_US
    assert len(list(read_pcap(out))) == 3
    assert stdout.startswith(f"wrote 3 frames to {out} (pcap")
    # Errors are one line, before anything runs.
    for args, msg in [(["h0", "-w", str(tmp_path / "x.pcap")], "a classic pcap holds one"),
                      (["h0:p9", "-w", str(tmp_path / "x.pcapng")], "no interface 'p9'"),
                      (["h0", "-w", str(tmp_path / "x.txt")], "-F pcap|pcapng")]:
        r = run_cli("capture", name, *args, state=state)
        assert r.returncode == 1 and msg in r.stderr and r.stderr.count("\n") == 1, r.stderr
