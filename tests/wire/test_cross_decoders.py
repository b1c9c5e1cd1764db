"""Three readers of MRC 1.0 agree field for field (issue 12, items 8 and "Done when"):

- the hand-written vectors (tests/wire/vectors, built from the public tables with struct,
  not by mrcnet's builders) decode through ``python -m mrcnet.wire decode --json
  --lenient`` to exactly the fields they were written with;
- mrcnet's sample pcap (one frame of every kind) reads the same through the Wireshark
  dissector (mrcnet/wireshark/mrc.lua, run by tshark) as through ``decode --json``.

The tshark test skips when tshark is absent (``make deps`` installs it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_dissector import TSHARK, needs_tshark, tshark
from vectors import mrc10

# Keys of decode --json that describe the capture record, not the frame.
_RECORD = {"index", "length"}


def _decode(pcap: Path, *flags: str) -> list[dict[str, Any]]:
    run = subprocess.run([sys.executable, "-m", "mrcnet.wire", "decode", str(pcap), "--json",
                          *flags], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    return [json.loads(line) for line in run.stdout.splitlines()]


def _frame_fields(obj: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in obj.items() if k not in _RECORD}
    out["trimmed"] = bool(out["trimmed"])
    return out


@pytest.fixture(scope="module")
def vectors_pcap(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    path = tmp_path_factory.mktemp("cross") / "mrc10-vectors.pcap"
    return path, mrc10.write_vectors_pcap(path)


def test_vectors_decode_field_for_field(vectors_pcap: tuple[Path, list[Any]]) -> None:
    """Every vector, lenient (the vectors' ICRC is RoCEv2-style or zero): the decoder's
    object is the vector's expected fields, no more, no less."""
    pcap, vectors = vectors_pcap
    got = _decode(pcap, "--lenient")
    assert len(got) == len(vectors)
    for v, obj in zip(vectors, got, strict=True):
        want = mrc10.decode_json_form(v.expected)
        have = _frame_fields(obj)
        if v.trimmed:  # a trimmed frame's payload length is what the headers promised
            want.pop("payload_len", None)
            have.pop("payload_len", None)
        assert have == want, v.name


@pytest.fixture(scope="module")
def sample_pcap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cross") / "sample.pcap"
    subprocess.run([sys.executable, "-m", "mrcnet.wire", "sample-pcap", str(path)],
                   check=True, capture_output=True, timeout=60)
    return path


def _header_fields(obj: dict[str, Any]) -> dict[str, int]:
    """decode --json's per-header objects, flattened the dissector's way (seth.psn ...)."""
    out: dict[str, int] = {}
    for key, val in obj.items():
        if isinstance(val, dict):
            out.update({f"{key}.{k}": int(v) for k, v in val.items()})
        elif key == "immdt":
            out["immdt"] = int(val)
    return out


@needs_tshark
def test_dissector_reads_the_sample_pcap_like_the_decoder(sample_pcap: Path) -> None:
    """Every header field decode --json prints for mrcnet's own frames, the dissector
    shows with the same value (and the same opcode, PSN, QP, EV and trim verdict)."""
    assert TSHARK is not None
    decoded = _decode(sample_pcap)
    keys = sorted({k for obj in decoded for k in _header_fields(obj)})
    fields = [f"mrc.{k}" for k in keys] + ["mrc.bth.opcode", "mrc.bth.psn", "mrc.bth.dqpn",
                                          "mrc.ev", "mrc.trimmed"]
    rows = tshark(sample_pcap, fields)
    assert len(rows) == len(decoded)
    for obj, row in zip(decoded, rows, strict=True):
        where = f"frame {obj['index']} (opcode {obj['opcode']:#x})"
        assert int(row["mrc.bth.opcode"], 0) == obj["opcode"], where
        assert int(row["mrc.bth.psn"], 0) == obj["psn"], where
        assert int(row["mrc.bth.dqpn"], 0) == obj["dqpn"], where
        assert int(row["mrc.ev"], 0) == obj["ev"], where
        assert (row["mrc.trimmed"] not in ("", "0", "False")) == bool(obj["trimmed"]), where
        mine = _header_fields(obj)
        for k in keys:
            shown = row[f"mrc.{k}"]
            if k in mine:
                assert shown != "", f"{where}: the dissector does not show {k}"
                value = int(shown, 0)
                if value != mine[k] and k.endswith("_offset"):  # signed on the wire
                    value -= 1 << 16
                assert value == mine[k], f"{where}: {k} = {shown}, decoder {mine[k]}"
            else:
                assert shown == "", f"{where}: the dissector shows {k} = {shown}"
