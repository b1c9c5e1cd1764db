"""Topology specs, traffic matrices and the mrc-sim command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mrcnet.sim.cli import main
from mrcnet.sim.errors import SpecError
from mrcnet.sim.matrix import format_matrix, parse_matrix, permutation
from mrcnet.sim.topology import LeafSpineSpec, parse_topology
from mrcnet.topology.units import parse_bytes, parse_rate, parse_time


def test_topology_spec_keys_and_units() -> None:
    s = parse_topology("leafspine:planes=2,spines=8,leaves=4,hosts=2,rate=100gbit,delay=1us,"
                       "queue=16pkt,ecn=off,trim=off,host_rate=200gbit,mtu=4500,srv6=srh")
    assert (s.planes, s.spines, s.leaves, s.hosts, s.n_hosts) == (2, 8, 4, 2, 8)
    assert s.rate_bps == 100e9 and s.host_rate_bps == 200e9 and s.delay == 1e-6
    assert s.queue_bytes == 16 * 4500 and s.ecn_bytes == 0 and not s.trim
    assert s.srv6 == "srh" and s.host_bandwidth_bps == 400e9
    assert parse_topology(s.to_line()) == s
    assert parse_topology("leafspine:") == LeafSpineSpec()


@pytest.mark.parametrize(("spec", "needle"), [
    ("fattree:k=4", "expected leafspine"),
    ("leafspine:planes=0", "planes must be"),
    ("leafspine:spines=x", "bad integer"),
    ("leafspine:rate=fast", "bad rate"),
    ("leafspine:colour=red", "unknown key 'colour'"),
    ("leafspine:planes=2,planes=3", "given twice"),
    ("leafspine:queue=100", "at least one MTU"),
    ("leafspine:delay=1 lightyear", "bad time"),
    ("leafspine:planes", "expected key=value"),
    ("leafspine:srv6=srh,trim_size=200", "trim_size must be 214..mtu in srh mode"),
    ("leafspine:trim_size=100", "trim_size must be 142..mtu in usid mode"),
])
def test_bad_topology_specs(spec: str, needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        parse_topology(spec)


def test_units() -> None:
    assert parse_time("0.5ms") == pytest.approx(5e-4)
    assert parse_time("3", default_unit="us") == pytest.approx(3e-6)
    assert parse_rate("2.5gbit") == 2.5e9
    assert parse_bytes("64k") == 65536 and parse_bytes("8pkt", packet=9000) == 72000
    with pytest.raises(SpecError):
        parse_bytes("8pkt")


def test_matrix_htsim_format() -> None:
    text = """
    # a comment
    Nodes 4
    Connections 3
    1->0 start 0 size 1m
    h2->h0 id 7 start 10us size 4096   # trailing comment
    3->0 size 100 start 2.5
    """
    flows = parse_matrix(text.splitlines(), n_hosts=4)
    assert [(f.id, f.src, f.dst, f.size) for f in flows] == [
        (0, 1, 0, 1 << 20), (7, 2, 0, 4096), (2, 3, 0, 100)]
    assert [f.start for f in flows] == pytest.approx([0.0, 10e-6, 2.5e-6])
    again = parse_matrix(format_matrix(flows, n_hosts=4).splitlines(), n_hosts=4)
    assert [(f.id, f.src, f.dst, f.size) for f in again] == [(f.id, f.src, f.dst, f.size)
                                                             for f in flows]


@pytest.mark.parametrize(("text", "needle"), [
    ("0->1 start 0", "needs a size"),
    ("0->1 size 10 colour red", "unknown key 'colour'"),
    ("0->0 size 10", "to itself"),
    ("0->9 size 10", "no host h9"),
    ("0 to 1 size 10", "expected 'src->dst"),
    ("Connections 2\n0->1 size 10", "header says 2"),
    ("0->1 id 1 size 10\n1->0 id 1 size 10", "used twice"),
    ("# nothing", "no flows"),
])
def test_bad_matrices(text: str, needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        parse_matrix(text.splitlines(), n_hosts=4)


def test_permutation_is_a_derangement() -> None:
    flows = permutation(64, 1000, seed=5)
    assert sorted(f.dst for f in flows) == list(range(64))
    assert all(f.src != f.dst for f in flows)


def test_cli_run_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = tmp_path / "m.cm"
    m.write_text("0->3 start 0 size 256k\n1->2 start 5us size 128k\n")
    rc = main(["run", "--topology", "leafspine:planes=2,spines=2,leaves=2,hosts=2",
               "--matrix", str(m), "--fail", "link:L0.0-S0.1@20us:down", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["transport"] == "mrc" and len(out["flows"]) == 2
    assert all(f["fct"] > 0 and f["error"] is None for f in out["flows"])
    assert out["failures"] == ["link L0.0-S0.1 down at 20.000us"]
    assert out["ports"]["L0.0>S0.1"]["tx_frames"] > 0
    assert out["summary"]["events"] > 0 and out["summary"]["events_per_second"] > 0


def test_cli_run_table_and_ecmp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = tmp_path / "m.cm"
    m.write_text("0->3 start 0 size 64k\n")
    rc = main(["run", "-t", "leafspine:planes=1,spines=2,leaves=2,hosts=2", "-m", str(m),
               "--transport", "ecmp", "--trim", "off"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "transport ecmp" in out and "trim=off" in out
    assert "fct/ideal" in out and "events/CPU-s" in out


@pytest.mark.parametrize(("args", "needle"), [
    (["--topology", "leafspine:planes=x"], "bad integer"),
    (["--fail", "link:nowhere"], "bad failure"),
    (["--fail", "link:L9.0-S0.0@0:down"], "no link"),
    (["--set", "warp_drive=1"], "unknown host config option 'warp_drive'"),
])
def test_cli_bad_input_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        args: list[str], needle: str) -> None:
    m = tmp_path / "m.cm"
    m.write_text("0->1 size 1k\n")
    base = {"--topology": "leafspine:planes=1,spines=1,leaves=2,hosts=1", "--matrix": str(m)}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    argv = ["run"] + [x for kv in base.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mrc-sim: error: ") and needle in err and "Traceback" not in err


def test_cli_missing_matrix_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "-t", "leafspine:", "-m", "/nonexistent/m.cm"]) == 2
    assert "cannot read traffic matrix" in capsys.readouterr().err


def test_cli_matrix_and_specs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "incast", "--senders", "1-3", "--receiver", "0", "--size", "1m"]) == 0
    flows = parse_matrix(capsys.readouterr().out.splitlines())
    assert [(f.src, f.dst, f.size) for f in flows] == [(s, 0, 1 << 20) for s in (1, 2, 3)]
    assert main(["specs"]) == 0
    out = capsys.readouterr().out
    assert "leafspine:" in out and "flap=DOWN/UP" in out and "src->dst" in out


def test_cli_goodput_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = tmp_path / "m.cm"
    m.write_text("0->1 start 0 size 4m\n")
    assert main(["run", "-t", "leafspine:planes=2,spines=2,leaves=2,hosts=1", "-m", str(m),
                 "--sample", "20us", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    series = out["goodput"]
    fct = out["flows"][0]["fct"]
    assert len(series) == int(fct / 20e-6) + 1  # every 20 us, plus the tail at the finish
    assert series[-1]["t"] == pytest.approx(fct)
    # At most line rate (2 x 100G), give or take a packet per plane at the interval edges.
    assert all(0 <= g["bps"] <= 200e9 + 2 * 8192 * 8 / 20e-6 for g in series)
    delivered = sum(g["bps"] * (b["t"] - a["t"]) / 8
                    for a, g, b in zip([{"t": 0.0}, *series], series, series, strict=False))
    assert delivered == pytest.approx(4 << 20)
