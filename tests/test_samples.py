"""Conformance samples, the stdlib pcap codec, the wire CLI and (if installed) tshark."""

from __future__ import annotations

import io
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from mrcnet.constants import (
    DSCP_TRIMMED,
    DSCP_TRIMMED_LASTHOP,
    ENDPOINT_QPN,
    ETH_HEADER_LEN,
    IPV6_HEADER_LEN,
    EndpointOp,
    NackReason,
    Opcode,
)
from mrcnet.wire import ip6_str, parse_frame, usid_final
from mrcnet.wire.__main__ import main as wire_main
from mrcnet.wire.pcap import (
    LINKTYPE_ETHERNET,
    PCAP_MAGIC_NS,
    PCAP_MAGIC_US,
    PcapError,
    PcapRecord,
    read_pcap,
    write_pcap,
)
from mrcnet.wire.samples import (
    RECEIVER_IP,
    SRH_PATH,
    TRIM_SIZE,
    USID_PATH,
    Sample,
    sample,
    samples,
    switch_trim,
)

ALL = samples()
BY_NAME = {s.name: s for s in ALL}


@pytest.fixture(scope="module")
def sample_pcap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample pcap, written once by the CLI as a user would."""
    path = tmp_path_factory.mktemp("samples") / "mrc-samples.pcap"
    assert wire_main(["sample-pcap", str(path)], out=io.StringIO()) == 0
    return path


# --- the samples themselves -----------------------------------------------------------------


def test_sample_names_are_unique_and_lookup_works() -> None:
    assert len(BY_NAME) == len(ALL)
    assert sample("sack").frame == BY_NAME["sack"].frame
    with pytest.raises(KeyError, match="write-only"):
        sample("no-such-sample")


def test_samples_are_deterministic() -> None:
    assert [s.frame for s in samples()] == [s.frame for s in ALL]


def test_every_frame_kind_is_present() -> None:
    """Every opcode, NACK reason, endpoint op, route mode, encap choice and a trim."""
    parsed = [(s, parse_frame(s.frame)) for s in ALL]
    assert {f.opcode for _, f in parsed} == set(Opcode)
    assert {f.neth.reason for _, f in parsed if f.neth} == {int(r) for r in NackReason}
    eps = {(f.opcode, (f.erth or f.eeth).op) for _, f in parsed  # type: ignore[union-attr]
           if f.erth or f.eeth}
    assert eps == {
        (Opcode.ENDPOINT_REQ, EndpointOp.EV_PROBE),
        (Opcode.ENDPOINT_RESP, EndpointOp.EV_PROBE),
        (Opcode.ENDPOINT_REQ, EndpointOp.PORT_STATUS),
        (Opcode.ENDPOINT_RESP, EndpointOp.PORT_STATUS),
    }
    assert all(f.bth.dest_qp == ENDPOINT_QPN for _, f in parsed if f.erth or f.eeth)
    assert any(f.seth and f.seth.pr for _, f in parsed), "a probe response"
    assert any(f.tseth and f.immdt for _, f in parsed), "timestamp after an immediate"
    assert any(f.tseth and not f.immdt for _, f in parsed), "timestamp without immediate"
    assert any(f.bth.rtx for _, f in parsed)
    modes = {(s.mode, s.encap) for s, _ in parsed}
    assert {("usid", True), ("usid", False), ("srh", True), ("srh", False), ("plain", False)} <= (
        modes
    )
    assert [s.name for s, f in parsed if f.trimmed] == ["write-middle-trimmed",
                                                         "write-middle-trimmed-lasthop"]
    assert [s.name for s, f in parsed if f.trim_lasthop] == ["write-middle-trimmed-lasthop"]
    assert [s.name for s, f in parsed if f.ce] == ["write-only-ce"]


@pytest.mark.parametrize("s", ALL, ids=[s.name for s in ALL])
def test_each_sample_parses_as_described(s: Sample) -> None:
    """The name's promises hold: mode, encap, opcode; checksums verify unless trimmed."""
    f = parse_frame(s.frame)
    assert (f.inner is not None) == s.encap
    assert (f.srh is not None) == (s.mode in ("srh", "usid-srh"))
    if s.mode == "usid-srh":  # MRC's form: a reduced SRH holding the next container
        assert f.srh is not None and f.srh.segments_left == 1 and f.srh.last_entry == 0
        assert f.outer.dst[:4] == f.srh.final_segment[:4] == USID_PATH[:4]
    if s.mode == "srh":
        assert f.srh is not None
        assert f.srh.segments_left == len(SRH_PATH) - 1
        assert f.outer.dst == f.srh.active_segment
    if s.mode == "usid":
        assert f.outer.dst[:4] == USID_PATH[:4]
    if s.name.startswith("write-"):
        assert f.is_data and f.reth is not None
        assert (f.immdt is not None) == ("-imm" in s.name)
        assert (f.tseth is not None) == s.name.endswith("-ts")
    if s.name.startswith("nack-"):
        assert f.neth is not None
        assert NackReason(f.neth.reason).name.lower().replace("_", "-") == s.name[5:]
    assert f.trimmed == s.trimmed


@pytest.mark.parametrize(("name", "dscp"), [("write-middle-trimmed", DSCP_TRIMMED),
                                           ("write-middle-trimmed-lasthop",
                                            DSCP_TRIMMED_LASTHOP)])
def test_trimmed_sample_is_what_a_switch_forwards(name: str, dscp: int) -> None:
    """Cut to 256 bytes, outer DSCP re-marked, IP length left as it was (too big)."""
    s = BY_NAME[name]
    f = parse_frame(s.frame)
    assert len(s.frame) == TRIM_SIZE
    assert f.outer.dscp == dscp
    assert f.trim_lasthop == (dscp == DSCP_TRIMMED_LASTHOP)
    assert f.inner is not None and f.inner.dscp != dscp  # switches mark the outer
    assert ETH_HEADER_LEN + IPV6_HEADER_LEN + f.outer.payload_length > len(s.frame)
    assert f.reth is not None and f.reth.length == 1024
    assert 0 < len(f.payload) < f.reth.length
    assert f.trimmed


def test_switch_trim_keeps_ecn_and_refuses_short_frames() -> None:
    frame = BY_NAME["write-only"].frame
    cut = switch_trim(frame, 140)  # headers end at 130 (uSID + inner IPv6 + RETH)
    assert len(cut) == 140
    assert parse_frame(cut).outer.ecn == parse_frame(frame).outer.ecn
    with pytest.raises(ValueError, match="trim size"):
        switch_trim(frame, len(frame))


def test_usid_noencap_checksum_uses_the_shifted_container() -> None:
    """A uSID frame without an inner header verifies as it arrives (and as sent, by
    parse_frame's fallback); it is the one sample a tool reading it as sent rejects."""
    s = BY_NAME["write-only-usid-noencap"]
    assert not s.checksum_as_sent
    arrived = bytearray(s.frame)
    arrived[38:54] = usid_final(USID_PATH)
    assert not parse_frame(bytes(arrived)).trimmed
    assert [x.name for x in ALL if not x.checksum_as_sent] == [
        "write-only-usid-noencap", "write-middle-trimmed", "write-middle-trimmed-lasthop"
    ]


# --- pcap ---------------------------------------------------------------------------------


def test_pcap_round_trip_through_parse_frame(sample_pcap: Path) -> None:
    recs = list(read_pcap(sample_pcap))
    assert [r.data for r in recs] == [s.frame for s in ALL]
    assert all(r.orig_len == len(r.data) and not r.truncated_by_capture for r in recs)
    assert [r.timestamp for r in recs] == pytest.approx([i * 1e-6 for i in range(len(ALL))])
    for r, s in zip(recs, ALL, strict=True):
        assert parse_frame(r.data) == parse_frame(s.frame)


def test_pcap_global_header_is_classic_ethernet(sample_pcap: Path) -> None:
    head = sample_pcap.read_bytes()[:24]
    magic, major, minor, _, _, snaplen, linktype = struct.unpack("<IHHiIII", head)
    assert (magic, major, minor, linktype) == (PCAP_MAGIC_US, 2, 4, LINKTYPE_ETHERNET)
    assert snaplen >= 9216


def test_pcap_keeps_record_times_and_original_length(tmp_path: Path) -> None:
    path = tmp_path / "r.pcap"
    recs = [PcapRecord(1700000000.25, b"\x01" * 60, 60), PcapRecord(1.999999, b"ab", 1500)]
    assert write_pcap(path, recs) == 2
    back = list(read_pcap(path))
    assert [(r.data, r.orig_len) for r in back] == [(b"\x01" * 60, 60), (b"ab", 1500)]
    assert back[0].timestamp == pytest.approx(1700000000.25)
    assert back[1].timestamp == pytest.approx(1.999999)
    assert back[1].truncated_by_capture


@pytest.mark.parametrize("endian", ["<", ">"])
@pytest.mark.parametrize("magic", [PCAP_MAGIC_US, PCAP_MAGIC_NS])
def test_pcap_reads_either_byte_order_and_nanoseconds(endian: str, magic: int) -> None:
    frame = BY_NAME["sack"].frame
    head = struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, 65535, 1)
    rec = struct.pack(endian + "IIII", 10, 500, len(frame), len(frame)) + frame
    (r,) = read_pcap(io.BytesIO(head + rec))
    assert r.data == frame
    assert r.timestamp == pytest.approx(10 + 500 * (1e-9 if magic == PCAP_MAGIC_NS else 1e-6))


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "too short"),
        (b"root:x:0:0:root:/root:/bin/bash\n" * 2, "not a pcap"),
        (struct.pack("<I", 0x0A0D0D0A) + bytes(40), "pcapng"),
        (struct.pack("<IHHiIII", PCAP_MAGIC_US, 2, 4, 0, 0, 65535, 101), "link type 101"),
        (struct.pack("<IHHiIII", PCAP_MAGIC_US, 2, 4, 0, 0, 65535, 1) + bytes(8), "cut short"),
        (
            struct.pack("<IHHiIII", PCAP_MAGIC_US, 2, 4, 0, 0, 65535, 1)
            + struct.pack("<IIII", 0, 0, 100, 100) + bytes(10),
            "needs 100 bytes",
        ),
    ],
)
def test_pcap_reader_rejects_bad_files(content: bytes, match: str) -> None:
    with pytest.raises(PcapError, match=match):
        list(read_pcap(io.BytesIO(content)))


# --- the CLI --------------------------------------------------------------------------------


def test_cli_decode_prints_one_line_per_frame(sample_pcap: Path) -> None:
    out = io.StringIO()
    assert wire_main(["decode", str(sample_pcap), "--strict"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == len(ALL)
    for line, s in zip(lines, ALL, strict=True):
        f = parse_frame(s.frame)
        assert f.opcode.name in line
        assert f"ev={f.ev:#010x}" in line and f"psn={f.bth.psn}" in line
        assert f"qpn={f.bth.dest_qp:#08x}" in line
        assert bool(re.search(r"payload=\d+B \[trimmed\]", line)) == s.trimmed
        if s.mode == "srh":
            assert "srh [fc00:" in line
        if s.mode == "usid" and s.encap:
            assert "usid fc00:0:" in line
    assert "fc00:0:1001:: > fc00:0:2001:: > fc00:0:1002:: > fc00:2::1" in out.getvalue()
    assert "NO_PKT_BUFFER" in out.getvalue()
    assert [i for i, line in enumerate(lines) if "[CE]" in line] == [
        [s.name for s in ALL].index("write-only-ce")
    ]


def test_cli_decode_json_has_every_header(sample_pcap: Path) -> None:
    """decode --json: the keys the issue names, raw integers as on the wire."""
    out = io.StringIO()
    assert wire_main(["decode", str(sample_pcap), "--json", "--lenient"], out=out) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    names = [s.name for s in ALL]
    assert [r["opcode"] for r in rows] == [int(parse_frame(s.frame).opcode) for s in ALL]
    for r, s in zip(rows, ALL, strict=True):
        f = parse_frame(s.frame)
        assert (r["psn"], r["dqpn"], r["ev"], r["trimmed"], r["payload_len"]) == (
            f.bth.psn, f.bth.dest_qp, f.ev, int(f.trimmed), len(f.payload)), s.name
    trimmed = rows[names.index("write-middle-trimmed")]
    assert trimmed["trimmed"] == 1 and trimmed["reth"]["dma_len"] == 1024
    imm = rows[names.index("write-last-imm-ts")]
    assert imm["immdt"] == 0xC0FFEE00 and imm["tseth"] == {"timestamp": 0x1235, "tsr": 0,
                                                            "ftype": 1}
    assert imm["meth"] == {"rqmsn": 7, "msn": 107 - 90}
    sack = rows[names.index("sack")]
    assert sack["seth"] == {
        "m": 1, "pr": 0, "ack_psn_offset": 4, "entropy": 0x0001_1001, "spdcid": 0x456,
        "dpdcid": 0x123, "cack_psn": 100, "cc_type": 0, "cc_flags": 0, "mpr": 8,
        "sack_offset": 2, "sack_bitmap": 0b1101}
    assert sack["cc_state"] == {"timestamp": 0x1234, "ooo_count": 3, "restore_cwnd": 0,
                                "rcv_cwnd_pen": 5, "rcvd_bytes": 25}
    assert rows[names.index("ack")]["aeth"] == {"syndrome": 0x1F, "msn": 3}
    assert set(rows[names.index("nack-trimmed")]["neth"]) == {
        "reason", "vendor", "entropy", "spdcid", "dpdcid", "nack_psn", "cc_type", "cc_flags",
        "timestamp"}
    assert set(rows[names.index("probe")]["peth"]) == {
        "vendor", "probe_id", "spdcid", "dpdcid", "timestamp", "tsr", "ftype"}
    assert rows[names.index("ep-port-status")]["erth"] == {
        "op": 0, "vendor": 0, "port_status_mask": 0b1011, "timestamp": 0x1238, "tsr": 0,
        "ftype": 1}
    assert rows[names.index("ep-ev-probe-resp")]["eeth"] == {"op": 1, "timestamp": 0x1237}


def test_cli_decode_reports_malformed_frames(tmp_path: Path) -> None:
    bad = bytearray(BY_NAME["write-only"].frame)
    bad[-1] ^= 0xFF  # break the ICRC
    path = tmp_path / "bad.pcap"
    write_pcap(path, [BY_NAME["sack"].frame, bytes(bad)])
    out = io.StringIO()
    assert wire_main(["decode", str(path)], out=out) == 0
    assert "MALFORMED bad_icrc" in out.getvalue().splitlines()[1]
    assert wire_main(["decode", str(path), "--strict"], out=io.StringIO()) == 1
    assert wire_main(["decode", str(path), "--no-verify", "--strict"], out=io.StringIO()) == 0


def test_cli_errors_are_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert wire_main(["decode", str(tmp_path / "missing.pcap")]) == 1
    assert "no such file" in capsys.readouterr().err
    text = tmp_path / "notes.txt"
    text.write_text("hello, not a capture\n")
    assert wire_main(["decode", str(text)]) == 1
    assert "not a pcap" in capsys.readouterr().err
    assert wire_main(["decode", str(tmp_path)]) == 1
    assert "directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        wire_main([])
    assert exc.value.code == 2


def test_cli_runs_as_a_module(tmp_path: Path) -> None:
    """``python -m mrcnet.wire`` end to end, including --help."""
    import sys

    path = tmp_path / "s.pcap"
    py = sys.executable
    run = subprocess.run([py, "-m", "mrcnet.wire", "sample-pcap", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and f"{len(ALL)} sample frames" in run.stdout
    helped = subprocess.run([py, "-m", "mrcnet.wire", "decode", "--help"],
                            capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "--json" in helped.stdout
    piped = subprocess.run([py, "-m", "mrcnet.wire", "decode", "-", "--strict"],
                           input=path.read_bytes(), capture_output=True, timeout=60)
    assert piped.returncode == 0 and len(piped.stdout.splitlines()) == len(ALL)
    missing = subprocess.run([py, "-m", "mrcnet.wire", "decode", str(tmp_path / "x")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr


# --- tshark, an independent decoder ---------------------------------------------------------


def _tshark_fields(path: Path, *fields: str) -> list[list[str]]:
    cmd = ["tshark", "-n", "-r", str(path), "-o", "udp.check_checksum:TRUE", "-T", "fields"]
    for f in fields:
        cmd += ["-e", f]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return [line.split("\t") for line in run.stdout.splitlines()]


@pytest.mark.skipif(
    shutil.which("tshark") is None, reason="tshark not installed (apt install tshark)"
)
def test_tshark_agrees(sample_pcap: Path, tmp_path: Path) -> None:
    """tshark decodes every frame, sees the SRH, and finds every UDP checksum good.

    udp.checksum.status: 1 = good, 0 = bad, 2 = not verified (the trimmed frame). The uSID
    frame without an inner header is checked as it arrives, container fully shifted.
    """
    rows = _tshark_fields(
        sample_pcap, "frame.number", "ipv6.routing.type", "ipv6.routing.segleft",
        "ipv6.routing.srh.addr", "udp.dstport", "udp.checksum.status", "ipv6.dst",
        "frame.protocols", "_ws.malformed",
    )
    assert len(rows) == len(ALL)
    for row, s in zip(rows, ALL, strict=True):
        _, rtype, segleft, addrs, dport, status, dsts, protocols, malformed = row
        assert dport == "4791", s.name
        # tshark hands UDP 4791 to its RoCEv2 (InfiniBand BTH) dissector; only the
        # trimmed frame, shorter than its IP length says, is malformed to it.
        assert protocols.endswith(":udp:infiniband"), (s.name, protocols)
        assert bool(malformed) == s.trimmed, s.name
        if s.mode == "srh":
            assert rtype == "4" and segleft == str(len(SRH_PATH) - 1), s.name
            assert len(addrs.split(",")) == len(SRH_PATH), s.name
        elif s.mode == "usid-srh":
            assert rtype == "4" and segleft == "1" and len(addrs.split(",")) == 1, s.name
        else:
            assert rtype == "", s.name
        if s.checksum_as_sent:
            assert status == "1", f"{s.name}: tshark UDP checksum status {status}"
        if s.encap:
            assert dsts.split(",")[-1] in ("fc00:2::1", "fc00:1::1"), s.name
    # The segment list as on the wire: the final segment (the receiver) first.
    srh_addrs = rows[[s.name for s in ALL].index("write-only-srh")][3].split(",")
    assert srh_addrs[0] == ip6_str(RECEIVER_IP)

    arrived = bytearray(BY_NAME["write-only-usid-noencap"].frame)
    arrived[38:54] = usid_final(USID_PATH)
    one = tmp_path / "arrived.pcap"
    write_pcap(one, [bytes(arrived)])
    ((status,),) = _tshark_fields(one, "udp.checksum.status")
    assert status == "1"


# --- the demo (make demo) ---------------------------------------------------------------------


def test_demo_keeps_the_pcap_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mrcnet import demo

    keep = tmp_path / "kept"
    assert demo.main(["--keep", str(keep)]) == 0
    out = capsys.readouterr().out
    assert [r.data for r in read_pcap(keep / demo.PCAP_NAME)] == [s.frame for s in ALL]
    for s in ALL:
        assert f" {s.name} " in out
    assert "pcap kept" in out

    made: list[Path] = []
    real_run = demo.run

    def spy(d: demo.Demo, steps: object = None) -> int:
        made.append(d.workdir)
        return real_run(d, [demo.step_write_samples, demo.step_decode])  # no tshark again

    monkeypatch.setattr(demo, "run", spy)
    assert demo.main([]) == 0
    assert made and not made[0].exists()  # the temporary directory is gone


def test_demo_fails_loudly_when_a_frame_does_not_parse(tmp_path: Path) -> None:
    from mrcnet import demo

    broken = [Sample("broken", "bad ICRC", BY_NAME["sack"].frame[:-1] + b"\x00", "usid", True)]
    d = demo.Demo(tmp_path, out=io.StringIO(), samples=broken)
    assert demo.run(d, [demo.step_write_samples, demo.step_decode]) == 1
