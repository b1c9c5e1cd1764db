"""mrcd configuration checks and the command's exit codes (no root needed for most)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mdnsutil import MRCD, VethPair, needs_root, write_config

from mrcnet.core.config import TUNINGS, HostConfig
from mrcnet.daemon.config import ConfigError, load_config, parse_config

GOOD = {
    "host": "h0",
    "port": [{"ifname": "eth0", "plane": 0}],
    "peers": {"h1": {"control": "fd00::b", "addresses": ["fd00::b"]}},
}


def test_good_config_and_defaults() -> None:
    cfg = parse_config(GOOD)
    assert cfg.host == "h0" and cfg.ports[0].ifname == "eth0"
    assert cfg.socket == "/run/mrcd/h0.sock" and cfg.socket_mode == 0o660
    assert cfg.peers["h1"].addresses == ("fd00::b",)
    assert cfg.ev_profile == "spray" and cfg.kernel_drop
    assert not cfg.sched_batch and parse_config({**GOOD, "sched_batch": True}).sched_batch
    assert cfg.busy_poll_us == 0 and cfg.answer_poll_us == 100
    assert parse_config({**GOOD, "answer_poll_us": 0}).answer_poll_us == 0
    assert cfg.idle_poll_us == 500
    assert parse_config({**GOOD, "idle_poll_us": 0}).idle_poll_us == 0


@pytest.mark.parametrize(("change", "message"), [
    ({"host": None}, "missing key 'host'"),
    ({"bogus": 1}, "unknown key(s) bogus"),
    ({"port": []}, "at least one [[port]]"),
    ({"port": [{"ifname": "eth0", "plane": 1}]}, "port planes must be 0..0"),
    ({"port": [{"ifname": "eth0"}]}, "missing key 'plane'"),
    ({"control_port": True}, "control_port must be int"),
    ({"control_port": 70000}, "is not a TCP port"),
    ({"ev_profile": "random"}, "expected one of spray, ecmp"),
    ({"socket_mode": "rw"}, "is not octal"),
    ({"sched_batch": 1}, "sched_batch must be bool"),
    ({"answer_poll_us": 1001}, "answer_poll_us 1001: give 0..1000"),
    ({"answer_poll_us": "fast"}, "answer_poll_us must be int"),
    ({"idle_poll_us": -1}, "idle_poll_us -1: give 0..1000"),
    ({"peers": {"h1": {"control": "nope", "addresses": []}}}, "is not an IPv6 address"),
    ({"peers": None}, "give a fabric description"),
])
def test_bad_config_says_what(change: dict[str, object], message: str) -> None:
    data = {**GOOD, **change}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(ConfigError) as exc:
        parse_config(data, "x.toml")
    assert message in str(exc.value) and str(exc.value).startswith("x.toml")


def test_core_tuning_names_a_set_and_keys_override_it() -> None:
    plain = parse_config(GOOD).core
    assert "verdict_inflight" not in plain  # the host defaults: no tuning
    cfg = parse_config({**GOOD, "core": {"tuning": "collective", "verdict_uplink": 3}})
    for key, value in TUNINGS["collective"].items():
        if key != "verdict_uplink":
            assert cfg.core[key] == value, key
    assert cfg.core["verdict_uplink"] == 3  # the table's own key wins over the set
    assert cfg.core["timeout_floor"] == plain["timeout_floor"]  # mrcd's own defaults stay
    assert "tuning" not in cfg.core  # a name, not a HostConfig field
    HostConfig(**cfg.core)  # and what it leaves builds a host's configuration
    with pytest.raises(ConfigError, match=r"core\.tuning 'fast' unknown: use one of default"):
        parse_config({**GOOD, "core": {"tuning": "fast"}}, "x.toml")


def test_fabric_config_may_omit_ports() -> None:
    cfg = parse_config({"host": "h0", "fabric": "/x/description.json"})
    assert cfg.ports == () and cfg.fabric == "/x/description.json"


def test_unreadable_and_not_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read configuration"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("host = \n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_config(bad)


def _mrcd(*args: str, pre: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*(pre or []), MRCD, *args], capture_output=True, text=True,
                          timeout=30, check=False)


def test_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('host = "h0"\n')
    r = _mrcd("--config", str(bad))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"mrcd: {bad}: missing key 'port'"]


def test_check_only(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    write_config(str(good), "h0", "eth0", "fd00::a", str(tmp_path / "s"), {"h1": "fd00::b"})
    r = _mrcd("--config", str(good), "--check")
    assert r.returncode == 0 and "is valid" in r.stdout


@needs_root
def test_missing_interface_and_capability(veth: VethPair, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    write_config(str(cfg), "ha", "nosuch0", veth.ip_a, str(tmp_path / "s"), {"hb": veth.ip_b})
    r = _mrcd("--config", str(cfg), pre=["ip", "netns", "exec", veth.ns_a])
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "mrcd: no network interface 'nosuch0' in this namespace"]
    write_config(str(cfg), "ha", veth.if_a, veth.ip_a, str(tmp_path / "s"), {"hb": veth.ip_b})
    r = _mrcd("--config", str(cfg), pre=["ip", "netns", "exec", veth.ns_a, "setpriv",
                                         "--bounding-set=-net_raw", "--inh-caps=-net_raw"])
    assert r.returncode == 1
    assert "needs CAP_NET_RAW: run as root or grant the capability" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "s").exists()


def test_python_m_entry_point() -> None:
    r = subprocess.run([sys.executable, "-m", "mrcnet.daemon.main", "--help"],
                       capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 0 and "--config" in r.stdout


@needs_root
def test_second_mrcd_on_one_socket_fails_cleanly(veth: VethPair, tmp_path: Path) -> None:
    import socket as so

    from mdnsutil import run, start_mrcd

    sock = str(tmp_path / "ha.sock")
    # A stale socket file (its mrcd was SIGKILLed) does not stop a new mrcd.
    stale = so.socket(so.AF_UNIX, so.SOCK_SEQPACKET)
    stale.bind(sock)
    stale.close()
    cfg = str(tmp_path / "ha.toml")
    write_config(cfg, "ha", veth.if_a, veth.ip_a, sock, {"hb": veth.ip_b})
    first = start_mrcd("ha", veth.ns_a, cfg, sock, str(tmp_path))
    try:
        r = _mrcd("--config", cfg, pre=["ip", "netns", "exec", veth.ns_a])
        assert r.returncode == 1
        assert r.stderr.strip().splitlines() == [f"mrcd: another mrcd already serves {sock}"]
        # The failed one removed its own kernel rule and left the first one's alone.
        tables = run("nft", "list", "tables", ns=veth.ns_a)
        assert tables.count("mrcd_") == 1
        assert os.path.exists(sock)
    finally:
        assert first.stop() == 0
    assert "mrcd_" not in run("nft", "list", "tables", ns=veth.ns_a)


@needs_root
def test_sigint_is_a_clean_stop(veth: VethPair, tmp_path: Path) -> None:
    import signal

    from mdnsutil import run, start_mrcd

    sock = str(tmp_path / "ha.sock")
    cfg = str(tmp_path / "ha.toml")
    write_config(cfg, "ha", veth.if_a, veth.ip_a, sock, {"hb": veth.ip_b})
    m = start_mrcd("ha", veth.ns_a, cfg, sock, str(tmp_path))
    assert "mrcd_" in run("nft", "list", "tables", ns=veth.ns_a)
    m.proc.send_signal(signal.SIGINT)  # exactly this PID
    assert m.proc.wait(timeout=10) == 0, m.logs()
    assert not os.path.exists(sock)
    assert "mrcd_" not in run("nft", "list", "tables", ns=veth.ns_a)
    assert "Traceback" not in m.logs()


def test_timer_delay_never_early_and_at_most_a_millisecond_late() -> None:
    from mrcnet.daemon.deadline import timer_delay

    assert timer_delay(-0.5) == 0.0 and timer_delay(0.0) == 0.0
    for d in (1e-6, 0.0004, 0.0005, 0.000999, 0.001, 0.0011, 0.0199, 0.25):
        got = timer_delay(d)
        assert d <= got < d + 0.001 + 1e-12, (d, got)
        # uvloop rounds to whole milliseconds: what we give it must survive that.
        assert round(got * 1000) / 1000 >= d


def test_more_ports_than_mrcd_drives_fail_before_any_side_effect(tmp_path: Path) -> None:
    """33 ports (the engine's port sets are 32 bits): refused by open() before it opens
    a port (the interfaces named do not even exist)."""
    from mrcnet.daemon.engine import MAX_PORTS, Daemon
    from mrcnet.io import IOSetupError

    ports = [{"ifname": f"nosuch{i}", "plane": i} for i in range(MAX_PORTS + 1)]
    cfg = parse_config({**GOOD, "port": ports, "socket": str(tmp_path / "s")})
    d = Daemon(cfg)
    with pytest.raises(IOSetupError, match="33 ports: mrcd drives at most 32"):
        d.open()
    assert d.ports == [] and d.host is None and not (tmp_path / "s").exists()
    d.close()
