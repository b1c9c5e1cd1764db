"""The Wireshark dissector (mrcnet/wireshark/mrc.lua) reads the hand-written MRC 1.0
vectors field for field, marks trims, survives frames cut inside their headers, and leaves
RoCEv2 frames to Wireshark's own dissector; ``python -m mrcnet.wireshark`` finds and
installs it.

The tshark tests skip when tshark is not installed (``make deps`` installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from vectors import mrc10

from mrcnet.constants import DSCP_TRIMMED, EndpointOp
from mrcnet.wire import build_endpoint
from mrcnet.wire.erth import ERTH, TokenERTH
from mrcnet.wire.samples import USID, sample
from mrcnet.wireshark import plugin_path

TSHARK = shutil.which("tshark")
needs_tshark = pytest.mark.skipif(TSHARK is None,
                                  reason="tshark not installed (apt install tshark)")

VECTORS = mrc10.all_vectors()
BY_NAME = {v.name: v for v in VECTORS}
# Every key any vector carries, plus the dissector's generated helpers, the BTH's
# reserved byte and ERTH's reserved word, mrcnet's endpoint token (0 in every vector).
KEYS = sorted({k for v in VECTORS for k in mrc10.flatten(v.expected)})
EXTRA_KEYS = ["bth.reserved", "seth.ack_psn", "seth.sack_base", "erth.token"]
MISC = ["frame.protocols", "_ws.expert.message", "_ws.col.Info"]


def tshark(pcap: Path, fields: list[str], *prefs: str,
           env: dict[str, str] | None = None, lua: bool = True,
           display_filter: str | None = None) -> list[dict[str, str]]:
    """Run tshark over ``pcap`` with the plugin; one {field: text} per frame (that
    ``display_filter`` keeps)."""
    assert TSHARK is not None
    cmd = [TSHARK, "-n", "-r", str(pcap), "-T", "fields", "-E", "occurrence=a",
           "-E", "aggregator=|", "-E", "separator=\t"]
    if lua:
        cmd += ["-X", f"lua_script:{plugin_path()}"]
    for p in prefs:
        cmd += ["-o", p]
    if display_filter is not None:
        cmd += ["-Y", display_filter]
    for f in fields:
        cmd += ["-e", f]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    assert "Lua" not in run.stderr, run.stderr
    rows = [line.split("\t") for line in run.stdout.splitlines()]
    return [dict(zip(fields, row, strict=True)) for row in rows]


def mrc_fields(keys: list[str]) -> list[str]:
    return [f"mrc.{k}" for k in keys]


@pytest.fixture(scope="module")
def vectors_pcap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dissector") / "mrc10-vectors.pcap"
    mrc10.write_vectors_pcap(path)
    return path


@needs_tshark
def test_every_field_of_every_vector(vectors_pcap: Path) -> None:
    """Each frame shows exactly the fields its vector expects, with the same raw values,
    and no field of a header it does not carry."""
    fields = mrc_fields(KEYS + EXTRA_KEYS) + MISC
    rows = tshark(vectors_pcap, fields)
    assert len(rows) == len(VECTORS)
    for v, row in zip(VECTORS, rows, strict=True):
        assert row["frame.protocols"].endswith(":udp:mrc"), (v.name, row["frame.protocols"])
        want = mrc10.flatten(v.expected)
        for key in KEYS:
            got = row[f"mrc.{key}"]
            if key in want:
                assert got != "", f"{v.name}: mrc.{key} missing"
                assert int(got, 0) == want[key], f"{v.name}: mrc.{key} = {got}, want " \
                                                  f"{want[key]}"
            else:
                assert got == "", f"{v.name}: mrc.{key} = {got}, should be absent"
        assert int(row["mrc.bth.reserved"], 0) == 0, v.name
        if "erth" in v.expected:
            assert int(row["mrc.erth.token"], 0) == 0, v.name
        else:
            assert row["mrc.erth.token"] == "", v.name
        if "seth" in v.expected:
            s = v.expected["seth"]
            assert int(row["mrc.seth.ack_psn"]) == (s["cack_psn"] + s["ack_psn_offset"]) \
                % (1 << 24), v.name
            assert int(row["mrc.seth.sack_base"]) == (s["cack_psn"] + s["sack_offset"]) \
                % (1 << 24), v.name
        experts = row["_ws.expert.message"]
        if v.trimmed:
            assert "Trimmed" in experts and "[TRIMMED]" in row["_ws.col.Info"], v.name
        else:
            assert experts == "", f"{v.name}: {experts}"


@needs_tshark
def test_json_has_one_object_per_header(vectors_pcap: Path) -> None:
    """``-T json -J mrc``: each header is an object mrc.<header> holding its fields."""
    assert TSHARK is not None
    run = subprocess.run([TSHARK, "-n", "-r", str(vectors_pcap), "-X",
                          f"lua_script:{plugin_path()}", "-T", "json", "-J", "mrc"],
                         capture_output=True, text=True, timeout=60, check=True)
    packets = json.loads(run.stdout)
    assert len(packets) == len(VECTORS)
    for v, pkt in zip(VECTORS, packets, strict=True):
        layer = pkt["_source"]["layers"]["mrc"]
        for key, want in v.expected.items():
            if isinstance(want, dict):
                obj = layer[f"mrc.{key}"]
                got = {k.removeprefix(f"mrc.{key}."): int(x, 0) for k, x in obj.items()}
                assert {k: got[k] for k in want} == want, (v.name, key)
            else:
                assert int(layer[f"mrc.{key}"], 0) == want, (v.name, key)
        headers = {k for k in layer if k.count(".") == 1 and isinstance(layer[k], dict)
                   and not k.endswith("_tree")}
        assert headers == {f"mrc.{k}" for k, x in v.expected.items()
                           if isinstance(x, dict)}, v.name


@needs_tshark
def test_names_in_the_tree(vectors_pcap: Path) -> None:
    """Opcode, NACK reason, SACK mode and endpoint op names show in the decoded tree."""
    assert TSHARK is not None
    run = subprocess.run([TSHARK, "-n", "-r", str(vectors_pcap), "-X",
                          f"lua_script:{plugin_path()}", "-O", "mrc"],
                         capture_output=True, text=True, timeout=60, check=True)
    for name in ("RDMA_WRITE_FIRST", "RDMA_WRITE_ONLY_IMM", "ACK", "SACK", "NACK",
                 "RELIABILITY_PROBE", "ENDPOINT_REQUEST", "ENDPOINT_RESPONSE",
                 *mrc10.NACK_REASONS, "SKIP_ONCE", "ALWAYS_SKIP", "PORT_STATUS_UPDATE",
                 "EV_PROBE"):
        assert f"{name} (0x" in run.stdout or f": {name}" in run.stdout or \
            f" {name} " in run.stdout, name


@needs_tshark
def test_endpoint_token(tmp_path: Path) -> None:
    """mrcnet's endpoint requests carry the endpoint token in ERTH's reserved word @8:
    ``mrc.erth.token``, and ``token=`` in the Info column when there is one."""
    frames = [
        build_endpoint(USID, ev=0x0001_1005, request_id=10, erth=TokenERTH(
            EndpointOp.PORT_STATUS, port_status_mask=0, timestamp=0x1238, token=0xDEADBEEF)),
        build_endpoint(USID, ev=0x0001_1004, request_id=9, erth=TokenERTH(
            EndpointOp.EV_PROBE, timestamp=0x1237, token=0x00000001)),
        build_endpoint(USID, ev=0x0001_1004, request_id=8, erth=ERTH(  # mrcd's hello
            EndpointOp.EV_PROBE, timestamp=0x1236)),
    ]
    path = tmp_path / "tokens.pcap"
    mrc10.write_pcap(path, frames)
    rows = tshark(path, ["mrc.erth.token", "mrc.erth.op", "mrc.erth.port_status_mask",
                         "mrc.erth.timestamp", "mrc.bth.psn", "_ws.col.Info",
                         "_ws.expert.message"])
    got = [(int(r["mrc.erth.token"], 0), int(r["mrc.erth.op"], 0),
            int(r["mrc.erth.port_status_mask"], 0), int(r["mrc.erth.timestamp"], 0),
            int(r["mrc.bth.psn"], 0)) for r in rows]
    assert got == [(0xDEADBEEF, EndpointOp.PORT_STATUS, 0, 0x1238, 10),
                   (1, EndpointOp.EV_PROBE, 0, 0x1237, 9),
                   (0, EndpointOp.EV_PROBE, 0, 0x1236, 8)]
    infos = [r["_ws.col.Info"] for r in rows]
    assert "token=0xdeadbeef" in infos[0] and "token=0x00000001" in infos[1], infos
    assert "token=" not in infos[2], infos
    assert all(r["_ws.expert.message"] == "" for r in rows), rows
    # ... and it filters like any field.
    (only,) = tshark(path, ["mrc.bth.psn"], display_filter="mrc.erth.token == 0xdeadbeef")
    assert only["mrc.bth.psn"] == "10"


@needs_tshark
def test_a_data_frame_cut_after_its_reth_is_trimmed(tmp_path: Path) -> None:
    """Cut by hand right after the RETH (lengths as sent): trimmed, no payload, no ICRC."""
    cut = []
    for name in ("write-only-ipv6", "write-first-ts-usid", "write-middle-ts-usid-srh"):
        v = BY_NAME[name]
        end = len(v.frame) - 4 - v.expected["payload_len"]  # headers end: before payload
        cut.append(v.frame[:end])
    path = tmp_path / "cut.pcap"
    mrc10.write_pcap(path, cut)
    rows = tshark(path, ["mrc.trimmed", "mrc.payload_len", "mrc.icrc", "mrc.reth.dma_len",
                         "_ws.expert.message"])
    assert len(rows) == 3
    for row in rows:
        assert row["mrc.trimmed"] == "1" and row["mrc.payload_len"] == "0"
        assert row["mrc.icrc"] == "" and row["mrc.reth.dma_len"] != ""
        assert "Trimmed" in row["_ws.expert.message"]


@needs_tshark
def test_last_hop_trim_by_the_outer_dscp(tmp_path: Path) -> None:
    """The conformance samples' two trims: a path trim and a last-hop trim, told apart
    by the outer DSCP; the code point is a preference (a fabric's dscp= key moves it)."""
    trims = [sample("write-middle-trimmed"), sample("write-middle-trimmed-lasthop")]
    path = tmp_path / "trims.pcap"
    mrc10.write_pcap(path, [t.frame for t in trims])
    fields = ["mrc.trimmed", "mrc.trimmed_lasthop", "_ws.col.Info"]
    rows = tshark(path, fields)
    assert [(r["mrc.trimmed"], r["mrc.trimmed_lasthop"]) for r in rows] == [("1", "0"),
                                                                           ("1", "1")]
    assert "[TRIMMED]" in rows[0]["_ws.col.Info"]
    assert "[TRIMMED at the last hop]" in rows[1]["_ws.col.Info"]
    moved = tshark(path, fields, f"mrc.dscp_trimmed_lasthop:{DSCP_TRIMMED}")
    assert [r["mrc.trimmed_lasthop"] for r in moved] == ["1", "0"]
    # Only a trim has the field.
    plain = tmp_path / "plain.pcap"
    mrc10.write_pcap(plain, [sample("write-middle").frame])
    assert tshark(plain, fields)[0]["mrc.trimmed_lasthop"] == ""


@needs_tshark
def test_frames_cut_inside_their_headers_are_malformed_not_a_crash(tmp_path: Path) -> None:
    frames = mrc10.malformed_frames()
    path = tmp_path / "malformed.pcap"
    mrc10.write_pcap(path, [f for _, f in frames])
    rows = tshark(path, ["frame.protocols", "_ws.expert.message", "_ws.expert.group"])
    assert len(rows) == len(frames)
    for (name, _), row in zip(frames, rows, strict=True):
        assert row["frame.protocols"].endswith(":mrc"), name
        assert "Frame ends inside the" in row["_ws.expert.message"], (name, row)
    # the whole tree, printed: no Lua error anywhere
    assert TSHARK is not None
    run = subprocess.run([TSHARK, "-n", "-r", str(path), "-X",
                          f"lua_script:{plugin_path()}", "-V"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0
    assert "Lua Error" not in run.stdout + run.stderr
    assert run.stdout.count("[cut short]") == len(frames)


@needs_tshark
def test_rocev2_frames_stay_rocev2(tmp_path: Path) -> None:
    """An opcode that is not MRC's (RC RDMA WRITE ONLY 0x0A) goes back to Wireshark's
    RoCEv2 dissector, which the plugin displaced from UDP 4791."""
    frame = bytearray(BY_NAME["write-only-ipv6"].frame)
    frame[62] = 0x0A
    path = tmp_path / "roce.pcap"
    mrc10.write_pcap(path, [bytes(frame), BY_NAME["ack-ipv6"].frame])
    rows = tshark(path, ["frame.protocols", "mrc.bth.opcode", "infiniband.bth.opcode"])
    # (Wireshark lists the handle it called through, mrc, before infiniband; no MRC field)
    assert ":udp:mrc:infiniband" in rows[0]["frame.protocols"], rows[0]
    assert rows[0]["mrc.bth.opcode"] == "" and rows[0]["infiniband.bth.opcode"] == "10"
    assert rows[1]["frame.protocols"].endswith(":udp:mrc"), rows[1]
    # and without the plugin, Wireshark's own RoCEv2 dissector has the port
    (plain, _) = tshark(path, ["frame.protocols"], lua=False)
    assert ":udp:infiniband" in plain["frame.protocols"]


@needs_tshark
def test_low_source_ports_with_heuristics_first(tmp_path: Path) -> None:
    """An EV whose low half is a well-known port below 4791 (53, 123): the heuristic
    claims the frame when udp.try_heuristic_first is on."""
    frames = [mrc10.data_vector("dns", mrc10.WRITE_ONLY, psn=5, ev=0x80000035,
                                wrapping="ipv6", with_ts=False).frame,
              mrc10.data_vector("ntp", mrc10.WRITE_ONLY, psn=6, ev=0x8000007B,
                                wrapping="usid-srh", with_ts=True).frame]
    path = tmp_path / "low.pcap"
    mrc10.write_pcap(path, frames)
    rows = tshark(path, ["frame.protocols", "mrc.bth.psn", "mrc.ev"],
                  "udp.try_heuristic_first:TRUE")
    assert [r["mrc.bth.psn"] for r in rows] == ["5", "6"]
    assert [int(r["mrc.ev"], 0) for r in rows] == [0x80000035, 0x8000007B]


@needs_tshark
def test_ev_split_preference(vectors_pcap: Path) -> None:
    rows = tshark(vectors_pcap, ["mrc.ev"], "mrc.ev_sport_high:TRUE")
    for v, row in zip(VECTORS, rows, strict=True):
        ev = v.expected["ev"]
        assert int(row["mrc.ev"], 0) == (ev & 0xFFFF) << 16 | ev >> 16, v.name


# --- python -m mrcnet.wireshark -------------------------------------------------------------


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[Any]:
    return subprocess.run([sys.executable, "-m", "mrcnet.wireshark", *args],
                          capture_output=True, text=True, timeout=60, env=env)


def test_cli_path_and_help() -> None:
    run = _cli("path")
    assert run.returncode == 0
    path = Path(run.stdout.strip())
    assert path == plugin_path() and path.name == "mrc.lua" and path.is_file()
    assert 'Proto("mrc"' in path.read_text()
    helped = _cli("--help")
    assert helped.returncode == 0 and "lua_script" in helped.stdout
    assert "install" in helped.stdout and "path" in helped.stdout
    assert _cli().returncode == 2


def test_cli_install_into_a_directory(tmp_path: Path) -> None:
    run = _cli("install", "--dir", str(tmp_path / "plugins"))
    assert run.returncode == 0, run.stderr
    target = tmp_path / "plugins" / "mrc.lua"
    assert str(target) in run.stdout
    assert target.read_bytes() == plugin_path().read_bytes()
    blocked = tmp_path / "file"
    blocked.write_text("")
    bad = _cli("install", "--dir", str(blocked / "sub"))
    assert bad.returncode == 1 and "cannot install" in bad.stderr
    assert "Traceback" not in bad.stderr


@needs_tshark
def test_cli_install_to_the_personal_plugin_dir_is_loaded(tmp_path: Path,
                                                          vectors_pcap: Path) -> None:
    """With HOME elsewhere, install goes where that tshark looks, and tshark then decodes
    MRC without -X."""
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("XDG_CONFIG_HOME", None)
    run = _cli("install", env=env)
    assert run.returncode == 0, run.stderr
    installed = Path(run.stdout.split(": ", 1)[1].splitlines()[0])
    assert installed.is_file() and installed.is_relative_to(tmp_path)
    rows = tshark(vectors_pcap, ["mrc.bth.psn"], env=env, lua=False)
    assert [int(r["mrc.bth.psn"]) for r in rows] == [v.expected["bth"]["psn"]
                                                     for v in VECTORS]
