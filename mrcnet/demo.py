"""The mrcnet demo, run by ``make demo`` (``python -m mrcnet.demo``).

Today it shows the wire format, in three steps:

1. write one MRC frame of every kind (:mod:`mrcnet.wire.samples`) to a pcap;
2. decode the pcap with mrcnet's own parser and print a table of every frame;
3. if tshark is installed, have it decode the same file and say whether it agrees
   (every frame is UDP 4791, SRH recognised, UDP checksums good).

The pcap goes to a temporary directory removed at the end, unless ``--keep [DIR]`` (then
``DIR/mrc-samples.pcap``, default ``out/``), to open in Wireshark or scapy afterwards.

Later issues grow this into the full fabric demo: each step is one ``step_*`` function
taking the shared :class:`Demo` context and :func:`run` calls them in order, so a new step
(fabric up, mrcd, a transfer, a failure) is one function and one line in ``STEPS``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from mrcnet.wire.__main__ import Decoded, decode_pcap
from mrcnet.wire.pcap import write_pcap
from mrcnet.wire.samples import Sample, samples

PCAP_NAME = "mrc-samples.pcap"
TSHARK_TIMEOUT_S = 120


class DemoFailed(Exception):
    """A step found something wrong; the message says what."""


@dataclass
class Demo:
    """What the steps share: where files go, where output goes, what earlier steps made."""

    workdir: Path
    out: TextIO = sys.stdout
    samples: list[Sample] = field(default_factory=samples)
    pcap: Path | None = None
    decoded: list[Decoded] = field(default_factory=list)

    def say(self, text: str = "") -> None:
        """Print one line of demo output."""
        print(text, file=self.out)


def step_write_samples(demo: Demo) -> None:
    """Step 1: the conformance frames, written as a classic pcap."""
    demo.pcap = demo.workdir / PCAP_NAME
    n = write_pcap(demo.pcap, [s.frame for s in demo.samples])
    demo.say(f"== 1. wrote {n} sample frames (one of every MRC kind) to {demo.pcap}")


def step_decode(demo: Demo) -> None:
    """Step 2: decode with mrcnet.wire.parse_frame and print a table."""
    assert demo.pcap is not None
    demo.decoded = list(decode_pcap(demo.pcap))
    demo.say()
    demo.say(f"== 2. decoded by mrcnet.wire.parse_frame ({len(demo.decoded)} frames)")
    demo.say(format_table(demo.samples, demo.decoded))
    bad = [d for d in demo.decoded if d.error is not None]
    if bad:
        raise DemoFailed(f"{len(bad)} sample frames did not parse: {bad[0].line()}")


def format_table(sample_list: Sequence[Sample], decoded: Sequence[Decoded]) -> str:
    """A fixed-width table: one row per frame, the sample's name first."""
    header = ("#", "sample", "opcode", "EV", "PSN", "QPN", "bytes", "payload", "flags",
              "SRv6 path")
    rows = [header]
    for s, d in zip(sample_list, decoded, strict=True):
        if d.error is not None:
            rows.append((str(d.index), s.name, "MALFORMED", d.error, "", "", str(d.length),
                         "", "", d.detail or ""))
            continue
        flags = " ".join(f for f, on in (("trimmed", d.trimmed), ("CE", d.ecn == "CE")) if on)
        rows.append((
            str(d.index), s.name, d.opcode or "", f"{d.ev:#010x}", str(d.psn),
            f"{d.qpn:#08x}", str(d.length), str(d.payload_len), flags, d.path or "",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    lines = []
    for r in rows:
        cells = [c.ljust(w) if i in (1, 2, 8) else c.rjust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=False))]
        lines.append("  ".join([*cells, r[-1]]).rstrip())
    return "\n".join(lines)


@dataclass
class TsharkVerdict:
    """What tshark made of the sample pcap."""

    version: str
    frames: int
    srh_seen: int
    srh_expected: int
    checksum_good: int
    checksum_checkable: int
    problems: list[str]

    @property
    def agrees(self) -> bool:
        """True when tshark saw every frame as we meant it."""
        return not self.problems


def tshark_verdict(pcap: Path, sample_list: Sequence[Sample]) -> TsharkVerdict | None:
    """Run tshark on ``pcap``; ``None`` when tshark is not installed."""
    exe = shutil.which("tshark")
    if exe is None:
        return None
    version = subprocess.run(
        [exe, "--version"], capture_output=True, text=True, timeout=TSHARK_TIMEOUT_S
    ).stdout.splitlines()[0:1] or ["tshark"]
    version = [version[0].split(" (Git")[0]]  # "TShark (Wireshark) 4.0.17"
    run = subprocess.run(
        [exe, "-n", "-r", str(pcap), "-o", "udp.check_checksum:TRUE", "-T", "fields",
         "-e", "udp.dstport", "-e", "ipv6.routing.type", "-e", "udp.checksum.status"],
        capture_output=True, text=True, timeout=TSHARK_TIMEOUT_S,
    )
    if run.returncode != 0:
        return TsharkVerdict(version[0], 0, 0, 0, 0, 0, [f"tshark failed: {run.stderr.strip()}"])
    rows = [line.split("\t") for line in run.stdout.splitlines()]
    v = TsharkVerdict(version[0], len(rows), 0, 0, 0, 0, [])
    if len(rows) != len(sample_list):
        v.problems.append(f"tshark read {len(rows)} frames, the pcap has {len(sample_list)}")
    for s, (dport, rtype, status) in zip(sample_list, rows, strict=False):
        if dport != "4791":
            v.problems.append(f"{s.name}: tshark found no UDP 4791")
        if s.mode == "srh":
            v.srh_expected += 1
            v.srh_seen += rtype == "4"
        if s.checksum_as_sent:
            v.checksum_checkable += 1
            if status == "1":  # 1 = good, 0 = bad, 2 = not verified
                v.checksum_good += 1
            else:
                v.problems.append(f"{s.name}: tshark UDP checksum status {status}")
    if v.srh_seen != v.srh_expected:
        v.problems.append(f"tshark recognised {v.srh_seen} of {v.srh_expected} SRHs")
    return v


def step_tshark(demo: Demo) -> None:
    """Step 3: an independent decoder's opinion, when tshark is installed."""
    assert demo.pcap is not None
    demo.say()
    v = tshark_verdict(demo.pcap, demo.samples)
    if v is None:
        demo.say("== 3. tshark not installed, skipped (apt install tshark)")
        return
    summary = (
        f"{v.frames} frames, SRH recognised in {v.srh_seen} of {v.srh_expected}, UDP "
        f"checksum good in {v.checksum_good} of {v.checksum_checkable} checkable"
    )
    if not v.agrees:
        raise DemoFailed(f"{v.version} disagrees: {summary}; " + "; ".join(v.problems))
    demo.say(f"== 3. {v.version} agrees: {summary}")
    demo.say("      (not checkable as sent: the trimmed frame, and the uSID frame without inner")
    demo.say("      header, whose pseudo-header destination is the fully shifted container)")


STEPS: list[Callable[[Demo], None]] = [step_write_samples, step_decode, step_tshark]


def run(demo: Demo, steps: Sequence[Callable[[Demo], None]] = STEPS) -> int:
    """Run the steps in order; a failing step stops the demo with exit status 1."""
    try:
        for step in steps:
            step(demo)
    except DemoFailed as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The demo's command line."""
    p = argparse.ArgumentParser(
        prog="python -m mrcnet.demo",
        description="mrcnet demo: one MRC frame of every kind, written to a pcap, decoded "
        "by mrcnet and (if installed) checked by tshark.",
    )
    p.add_argument(
        "--keep", nargs="?", const="out", default=None, metavar="DIR",
        help="keep the pcap in DIR (default: out/) instead of a temporary directory",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.keep is not None:
        workdir = Path(args.keep)
        try:
            workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            print(f"error: cannot create {workdir}: {exc.strerror}", file=sys.stderr)
            return 1
        status = run(Demo(workdir))
        print(f"\npcap kept: {workdir / PCAP_NAME} (open it with wireshark, or decode it with "
              f"'python -m mrcnet.wire decode {workdir / PCAP_NAME}')")
        return status
    with tempfile.TemporaryDirectory(prefix="mrcnet-demo-") as tmp:
        return run(Demo(Path(tmp)))


if __name__ == "__main__":
    sys.exit(main())
