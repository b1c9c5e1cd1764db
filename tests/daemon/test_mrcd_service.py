"""mrcd as a systemd service: the unit file (systemd-analyze verify, and mrcd running with
exactly the unit's capabilities), sd_notify messages on a test datagram socket, and a
SIGHUP reload of a live mrcd (what applies, what needs a restart, a bad file kept out)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mdnsutil import (
    MRCD,
    Mrcd,
    NsRegistry,
    VethPair,
    make_veth_pair,
    needs_root,
    run,
    write_config,
)

import mrcnet.daemon
from mrcnet.api import Context
from mrcnet.api.errors import LimitExceeded
from mrcnet.daemon import notify
from mrcnet.daemon.config import load_config

SYSTEMD_DIR = Path(mrcnet.daemon.__file__).parent / "systemd"
UNIT = SYSTEMD_DIR / "mrcd@.service"


def unit_values(key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in UNIT.read_text().splitlines()
            if line.startswith(f"{key}=")]


def unit_caps() -> list[str]:
    return unit_values("CapabilityBoundingSet")[0].split()


# --- the unit file ---------------------------------------------------------------------

def test_unit_file_verifies(tmp_path: Path) -> None:
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed (tools/install-deps.sh installs it)")
    # The unit runs /usr/local/bin/mrcd; verify checks that it exists, so point it at ours.
    text = UNIT.read_text().replace("/usr/local/bin/mrcd", MRCD)
    for name in ("mrcd@.service", "mrcd@h0.service"):
        (tmp_path / name).write_text(text)
        r = subprocess.run([exe, "verify", str(tmp_path / name)], capture_output=True,
                           text=True, timeout=60, check=False)
        out = r.stdout + r.stderr
        if r.returncode != 0 and "Failed to" in out and "mrcd@" not in out:
            pytest.skip(f"systemd-analyze cannot run here: {out.strip()[:200]}")
        # It warns (exit 0) about keys it cannot parse: no line may mention the unit.
        assert r.returncode == 0 and "mrcd@" not in out, out
    assert unit_values("Type") == ["notify"]
    assert unit_values("ExecStart") == ["/usr/local/bin/mrcd --config /etc/mrcd/%i.toml"]
    assert unit_values("ExecReload") == ["/bin/kill -HUP $MAINPID"]
    assert unit_values("RuntimeDirectory") == ["mrcd"]
    assert sorted(unit_caps()) == ["CAP_CHOWN", "CAP_NET_ADMIN", "CAP_NET_RAW"]
    # The example configuration is valid.
    cfg = load_config(SYSTEMD_DIR / "example.toml")
    assert cfg.socket.startswith("/run/mrcd/") and cfg.metrics_listen


# --- sd_notify -------------------------------------------------------------------------

@pytest.fixture
def notify_sock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    s.bind(path)
    s.settimeout(20)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    try:
        yield s
    finally:
        s.close()


def fields(s: socket.socket) -> dict[str, str]:
    return dict(line.split("=", 1) for line in s.recv(4096).decode().split("\n"))


def test_sd_notify_messages(notify_sock: socket.socket,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert notify.ready("serving /run/mrcd/h0.sock")
    assert fields(notify_sock) == {"READY": "1", "STATUS": "serving /run/mrcd/h0.sock"}
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert notify.reloading()
    got = fields(notify_sock)
    assert got["RELOADING"] == "1" and before <= int(got["MONOTONIC_USEC"]) <= \
        time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert notify.stopping()
    assert fields(notify_sock)["STOPPING"] == "1"
    # An abstract socket ("@name"), no socket, and one nobody listens on.
    name = f"mrcd-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as abstract:
        abstract.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify.notify("READY=1")
        assert abstract.recv(100) == b"READY=1"
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert not notify.ready()
    monkeypatch.setenv("NOTIFY_SOCKET", "/nonexistent/notify")
    assert not notify.ready()


# --- live mrcd: capabilities, notify, reload --------------------------------------------

def start(ns: str, config: str, sock: str, logdir: Path, prefix: list[str]) -> Mrcd:
    log = str(logdir / f"{Path(config).stem}.log")
    with open(log, "wb") as lf:
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *prefix, MRCD, "--config",
                                 config], stdout=lf, stderr=subprocess.STDOUT)
    m = Mrcd(Path(config).stem, ns, config, sock, proc, log)
    deadline = time.monotonic() + 15
    while "mrcd ready" not in m.logs():
        if proc.poll() is not None or time.monotonic() > deadline:
            m.stop()
            raise AssertionError(f"mrcd did not start: {m.logs()}")
        time.sleep(0.05)
    return m


@pytest.fixture
def pair_ns() -> Iterator[VethPair]:
    reg = NsRegistry()
    try:
        yield make_veth_pair(reg)
    finally:
        reg.cleanup()


@needs_root
def test_mrcd_runs_with_the_units_capabilities_only(pair_ns: VethPair,
                                                     tmp_path: Path) -> None:
    """mrcd under the unit's bounding set and no-new-privs (as systemd starts it): ready,
    its kernel drop table installed, a QP between two such mrcds writes."""
    veth = pair_ns
    caps = ",".join(["-all"] + ["+" + c.removeprefix("CAP_").lower() for c in unit_caps()])
    prefix = ["setpriv", f"--bounding-set={caps}", "--inh-caps=-all", "--no-new-privs"]
    cfg_a, cfg_b = str(tmp_path / "ha.toml"), str(tmp_path / "hb.toml")
    sock_a, sock_b = str(tmp_path / "ha.sock"), str(tmp_path / "hb.sock")
    write_config(cfg_a, "ha", veth.if_a, veth.ip_a, sock_a, {"hb": veth.ip_b},
                 extra='socket_group = "root"', log_level="info")
    write_config(cfg_b, "hb", veth.if_b, veth.ip_b, sock_b, {"ha": veth.ip_a},
                 log_level="info")
    started: list[Mrcd] = []
    try:
        started.append(start(veth.ns_a, cfg_a, sock_a, tmp_path, prefix))
        started.append(start(veth.ns_b, cfg_b, sock_b, tmp_path, prefix))
        a = started[0]
        with open(f"/proc/{a.proc.pid}/status") as f:
            eff = int(re.search(r"CapEff:\s*([0-9a-f]+)", f.read())[1], 16)  # type: ignore[index]
        # CAP_CHOWN 0, CAP_NET_ADMIN 12, CAP_NET_RAW 13: nothing else.
        assert eff == (1 << 0) | (1 << 12) | (1 << 13), hex(eff)
        assert f"mrcd_{a.proc.pid}_" in run("nft", "list", "tables", ns=veth.ns_a)
        with Context(sock_b) as cb, Context(sock_a) as ca:
            mr_b = cb.alloc_mr(1 << 20)
            qp_b = cb.create_qp(cb.create_cq())
            cb.listen(1, qp_b, expose=[mr_b])
            mr_a = ca.alloc_mr(1 << 20)
            cq_a = ca.create_cq()
            qp_a = ca.create_qp(cq_a)
            peer = qp_a.connect("hb", 1)
            mr_a.buf[:] = os.urandom(1 << 20)
            qp_a.post_write(mr_a, 0, 1 << 20, peer.regions[0], wr_id=1)
            wcs = cq_a.wait(timeout=15)
            assert wcs and wcs[0].ok, wcs
            assert bytes(mr_b.buf) == bytes(mr_a.buf)
    finally:
        for m in started:
            assert m.stop() == 0, m.logs()


def wait_log(m: Mrcd, text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in m.logs():
        assert time.monotonic() < deadline, f"{text!r} not in the log: {m.logs()}"
        time.sleep(0.05)


@needs_root
def test_sighup_reload_on_a_live_mrcd(pair_ns: VethPair, tmp_path: Path,
                                      notify_sock: socket.socket) -> None:
    veth = pair_ns
    cfg, sock = str(tmp_path / "ha.toml"), str(tmp_path / "ha.sock")
    write_config(cfg, "ha", veth.if_a, veth.ip_a, sock, {"hb": veth.ip_b}, log_level="info")
    m = start(veth.ns_a, cfg, sock, tmp_path, [])
    try:
        assert fields(notify_sock)["READY"] == "1"  # sent after "mrcd ready"
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o660
        # Change reloadable keys and one that needs a restart.
        write_config(cfg, "ha", veth.if_a, veth.ip_a, sock, {"hb": veth.ip_b},
                     log_level="debug", extra='socket_mode = "0600"\ncontrol_port = 47999\n'
                     'metrics_listen = "127.0.0.1:9465"\n[limits]\nmax_qps = 1\n')
        m.proc.send_signal(signal.SIGHUP)
        got = fields(notify_sock)
        assert got["RELOADING"] == "1" and "MONOTONIC_USEC" in got
        assert fields(notify_sock)["READY"] == "1"
        wait_log(m, "configuration reloaded")
        log = m.logs()
        assert "needs a restart" in log and "control_port" in log
        for key in ("limits", "log_level", "metrics_listen", "socket_mode"):
            assert key in log.split("configuration reloaded", 1)[1].split("\n")[0], log
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        with Context(sock) as ctx:
            ctx.create_qp(ctx.create_cq())
            with pytest.raises(LimitExceeded, match=r"limits\.max_qps"):
                ctx.create_qp(ctx.create_cq())
            out = run("python3", "-c", "import urllib.request as u; print(u.urlopen("
                      "'http://127.0.0.1:9465/metrics', timeout=10).read().decode())",
                      ns=veth.ns_a)
            assert 'mrc_qps{host="ha",state="INIT"} 1.0' in out
        # A file that does not load changes nothing; mrcd keeps serving.
        Path(cfg).write_text("host = \n")
        m.proc.send_signal(signal.SIGHUP)
        assert fields(notify_sock)["RELOADING"] == "1"
        assert fields(notify_sock)["READY"] == "1"
        wait_log(m, "reload failed: configuration kept")
        with Context(sock) as ctx:
            assert ctx.admin("profiles")["default_ev_profile"] == "spray"
        m.proc.send_signal(signal.SIGTERM)
        assert fields(notify_sock)["STOPPING"] == "1"
        assert m.proc.wait(15) == 0
    finally:
        m.stop()
