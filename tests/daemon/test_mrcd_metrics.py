"""mrcd's Prometheus metrics: /metrics scraped over HTTP inside the host's namespace from
a live mrcd, counters moving with traffic, and `mrcctl metrics` giving the same
families in a text the official parser reads."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from mdnsutil import (
    Mrcd,
    NsRegistry,
    VethPair,
    in_netns,
    make_veth_pair,
    needs_root,
    start_mrcd,
    write_config,
)

from mrcnet.api import Context
from mrcnet.daemon.config import ConfigError, parse_config, parse_listen

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

LISTEN = "127.0.0.1:9464"
CHUNK = 256 * 1024


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Metric family name -> its samples (labels, value)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def total(m: dict[str, list[tuple[dict[str, str], float]]], name: str,
          **match: str) -> float:
    return sum(v for labels, v in m.get(name, [])
               if all(labels.get(k) == w for k, w in match.items()))


def scrape(ns: str, path: str = "/metrics") -> tuple[int, str, str]:
    with in_netns(ns):
        try:
            with urllib.request.urlopen(f"http://{LISTEN}{path}", timeout=10) as r:
                return r.status, r.headers["Content-Type"], r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, "", e.read().decode()


@pytest.fixture
def metered(tmp_path: Path) -> Iterator[tuple[VethPair, Mrcd, Mrcd]]:
    """Two directly cabled mrcds, ha serving metrics on LISTEN in its namespace."""
    reg = NsRegistry()
    started: list[Mrcd] = []
    try:
        veth = make_veth_pair(reg)
        cfg_a, cfg_b = str(tmp_path / "ha.toml"), str(tmp_path / "hb.toml")
        sock_a, sock_b = str(tmp_path / "ha.sock"), str(tmp_path / "hb.sock")
        write_config(cfg_a, "ha", veth.if_a, veth.ip_a, sock_a, {"hb": veth.ip_b},
                     extra=f'metrics_listen = "{LISTEN}"', log_level="info")
        write_config(cfg_b, "hb", veth.if_b, veth.ip_b, sock_b, {"ha": veth.ip_a},
                     log_level="info")
        started.append(start_mrcd("ha", veth.ns_a, cfg_a, sock_a, str(tmp_path)))
        started.append(start_mrcd("hb", veth.ns_b, cfg_b, sock_b, str(tmp_path)))
        yield veth, started[0], started[1]
    finally:
        for m in started:
            m.stop()
        reg.cleanup()


def write(ca: Context, qp: object, cq: object, mr: object, remote: object,
          n: int) -> None:
    for i in range(n):
        qp.post_write(mr, 0, CHUNK, remote, wr_id=i)  # type: ignore[attr-defined]
    done = 0
    deadline = time.monotonic() + 30
    while done < n:
        assert time.monotonic() < deadline, "writes did not complete"
        for w in cq.wait(timeout=0.5):  # type: ignore[attr-defined]
            assert w.ok, w
            done += 1


@needs_root
def test_metrics_scraped_over_http_move_with_traffic(
        metered: tuple[VethPair, Mrcd, Mrcd]) -> None:
    veth, a, b = metered
    status, ctype, text = scrape(veth.ns_a)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), (status, ctype)
    before = parse(text)
    assert total(before, "mrc_port_up", port="eth0", plane="0", host="ha") == 1
    assert "mrc_qps" in {f.name for f in text_string_to_metric_families(text)}
    assert scrape(veth.ns_a, "/nothing")[0] == 404
    with Context(b.socket) as cb, Context(a.socket) as ca:
        mr_b = cb.alloc_mr(CHUNK)
        qp_b = cb.create_qp(cb.create_cq())
        cb.listen(1, qp_b, expose=[mr_b])
        mr_a = ca.alloc_mr(CHUNK)
        cq_a = ca.create_cq()
        qp_a = ca.create_qp(cq_a)
        peer = qp_a.connect("hb", 1)
        write(ca, qp_a, cq_a, mr_a, peer.regions[0], 16)
        mid = parse(scrape(veth.ns_a)[2])
        qpn = str(qp_a.qpn)
        port_tx = total(mid, "mrc_port_tx_frames_total", port="eth0")
        assert port_tx > total(before, "mrc_port_tx_frames_total", port="eth0") + 100
        assert total(mid, "mrc_port_rx_frames_total", port="eth0") > 0
        sent = total(mid, "mrc_qp_tx_packets_total", qp=qpn)
        assert sent >= 16 * CHUNK // 8192
        assert total(mid, "mrc_qp_info", qp=qpn, state="RTS", peer="hb") == 1
        assert total(mid, "mrc_qps", state="RTS") == 1
        assert total(mid, "mrc_evs", qp=qpn, plane="0", state="GOOD") > 0
        assert total(mid, "mrc_qp_ev_sent_total", qp=qpn) >= sent
        assert total(mid, "mrc_host_counter_total", counter="tx_frames") > 0
        write(ca, qp_a, cq_a, mr_a, peer.regions[0], 32)
        after = parse(scrape(veth.ns_a)[2])
        # Retransmissions: the QP's own counter, as the verbs API reports it.
        retx = ca.stats(qp_a)["qp"]["counters"].get("tx_retransmit", 0)
        assert ("mrc_qp_retransmissions_total", qpn) in {
            (n, labels["qp"]) for n, rows in after.items() for labels, _ in rows
            if "qp" in labels}
        assert total(after, "mrc_qp_retransmissions_total", qp=qpn) <= retx
        assert total(after, "mrc_qp_tx_packets_total", qp=qpn) > sent
        assert total(after, "mrc_port_tx_frames_total", port="eth0") > port_tx
        # mrcctl metrics: the same families, parsed by prometheus_client's parser.
        r = subprocess.run([sys.executable, "-m", "mrcnet.ctl", "metrics", "--socket",
                            a.socket], capture_output=True, text=True, timeout=30,
                           check=False)
        assert r.returncode == 0, r.stderr
        ctl = parse(r.stdout)
        assert set(ctl) == set(after)
        assert total(ctl, "mrc_qp_tx_packets_total", qp=qpn) >= \
            total(after, "mrc_qp_tx_packets_total", qp=qpn)
    assert "metrics served" in a.logs()


def test_metrics_listen_is_checked() -> None:
    base = {"host": "h", "port": [{"ifname": "e", "plane": 0}],
            "peers": {"p": {"control": "fd00::1", "addresses": ["fd00::1"]}}}
    assert parse_config(base).metrics_listen is None
    assert parse_config({**base, "metrics_listen": "[::1]:9464"}).metrics_listen == \
        "[::1]:9464"
    assert parse_listen("[::1]:9464") == ("::1", 9464)
    assert parse_listen(":9464") == ("", 9464)
    for bad in ("9464", "localhost", "::1:9464", "h:0", "h:70000", "[zz]:1"):
        with pytest.raises(ConfigError, match="metrics_listen"):
            parse_config({**base, "metrics_listen": bad})


def test_missing_package_is_one_clear_line(tmp_path: Path) -> None:
    """With prometheus-client hidden, mrcd with metrics_listen exits 1 saying what to
    install, before it opens anything."""
    cfg = tmp_path / "m.toml"
    cfg.write_text('host = "h"\nmetrics_listen = "127.0.0.1:1"\n[[port]]\nifname = "nope0"\n'
                   'plane = 0\n[peers.p]\ncontrol = "fd00::1"\naddresses = ["fd00::1"]\n')
    code = ("import sys; sys.modules['prometheus_client'] = None; "
            "from mrcnet.daemon.main import main; sys.exit(main(['--config', sys.argv[1]]))")
    r = subprocess.run([sys.executable, "-c", code, str(cfg)], capture_output=True,
                       text=True, timeout=30, check=False)
    assert r.returncode == 1
    assert "pip install 'mrcnet[metrics]'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
