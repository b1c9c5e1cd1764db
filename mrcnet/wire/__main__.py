"""Command line for the wire format: write the conformance pcap, decode captures.

    python -m mrcnet.wire sample-pcap FILE        # one frame of every kind (see samples.py)
    python -m mrcnet.wire samples                 # list the sample names
    python -m mrcnet.wire decode FILE [--json] [--lenient]   # one line (object) per frame
    tcpdump -U -w - -i IF udp port 4791 | python -m mrcnet.wire decode -   # live

Exit status: 0 on success; 1 when the file cannot be read or is not a classic pcap of
Ethernet frames (or, with ``decode --strict``, when a frame is not valid MRC); 2 for usage
errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from mrcnet.constants import ECN, EndpointOp, NackReason, SackMode
from mrcnet.errors import MalformedFrame
from mrcnet.wire.frame import Frame, parse_frame
from mrcnet.wire.ipv6 import ip6_str
from mrcnet.wire.pcap import PcapError, read_pcap, write_pcap
from mrcnet.wire.samples import samples
from mrcnet.wire.usid import usid_list

# JSON key of each extension header (the public header names; CC_STATE is "cc_state"), and
# the JSON names of fields whose codec attribute is spelled otherwise.
_EXT_HEADERS = (("meth", "meth"), ("tseth", "tseth"), ("reth", "reth"), ("aeth", "aeth"),
                ("seth", "seth"), ("cc", "cc_state"), ("neth", "neth"), ("peth", "peth"),
                ("erth", "erth"), ("eeth", "eeth"))
_RENAME = {("reth", "length"): "dma_len"}


@dataclass(slots=True)
class Decoded:
    """The summary of one captured frame: either the fields below or ``error``."""

    index: int
    timestamp: float
    length: int
    error: str | None = None
    detail: str | None = None
    opcode: str | None = None
    ev: int | None = None
    psn: int | None = None
    qpn: int | None = None
    payload_len: int | None = None
    trimmed: bool = False
    ecn: str | None = None
    path: str | None = None
    info: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """One human-readable line."""
        head = f"{self.index:>4} {self.length:>5}B"
        if self.error is not None:
            return f"{head} MALFORMED {self.error}: {self.detail}"
        assert self.ev is not None and self.psn is not None and self.qpn is not None
        trim = " [trimmed]" if self.trimmed else ""
        ce = " [CE]" if self.ecn == ECN.CE.name else ""
        return (
            f"{head} {self.opcode:<17} ev={self.ev:#010x} psn={self.psn:<8} "
            f"qpn={self.qpn:#08x} payload={self.payload_len}B{trim}{ce}"
            + (f" {self.info}" if self.info else "")
            + f"  {self.path}"
        )

    def as_json(self) -> dict[str, Any]:
        """One JSON object: ``index`` and ``length``, then either ``error`` and ``detail``
        or, with raw integer values as on the wire, ``opcode``, ``psn``, ``dqpn``, ``ev``,
        ``trimmed``, ``payload_len`` and one object per extension header present
        (``immdt``: the integer itself)."""
        out: dict[str, Any] = {"index": self.index, "length": self.length}
        if self.error is not None:
            out.update(error=self.error, detail=self.detail)
            return out
        out.update(self.fields)
        return out


def describe_path(f: Frame) -> str:
    """The SRv6 path as a reader wants it: travel order, inner header if any."""
    if f.srh is not None and f.srh.active_segment is None:  # MRC's form: reduced SRH
        first = " ".join(f"{u:x}" for u in usid_list(f.outer.dst))
        nxt = " > ".join(ip6_str(s) for s in reversed(f.srh.segments))
        path = (f"usid {ip6_str(f.outer.dst)} [{first}] then srh [{nxt}] "
                f"left={f.srh.segments_left}")
    elif f.srh is not None:
        hops = " > ".join(ip6_str(s) for s in reversed(f.srh.segments))
        path = f"srh [{hops}] left={f.srh.segments_left}"
    else:
        dst = ip6_str(f.outer.dst)
        ids = usid_list(f.outer.dst)
        # Only an encapsulated frame is sure to be uSID: its real destination is inside.
        if f.inner is not None and f.inner.dst != f.outer.dst and ids:
            path = f"usid {dst} [{' '.join(f'{u:x}' for u in ids)}]"
        else:
            path = f"to {dst}"
    if f.inner is not None:
        path += f" inner {ip6_str(f.inner.src)} > {ip6_str(f.inner.dst)}"
    else:
        path += f" from {ip6_str(f.outer.src)}"
    return path


def describe_control(f: Frame) -> str | None:
    """The few fields that tell control frames apart (reason, reflected EV, op)."""
    if f.seth is not None:
        pr = " PR" if f.seth.pr else ""
        return (f"cack={f.seth.cack_psn} reflects ev={f.seth.entropy:#010x} "
                f"{SackMode(f.seth.m).name}{pr}")
    if f.aeth is not None:
        return f"cack={f.bth.psn} msn={f.aeth.msn}"
    if f.neth is not None:
        return (f"reason={NackReason(f.neth.reason).name} psn={f.neth.nack_psn} "
                f"ev={f.neth.entropy:#010x}")
    if f.peth is not None:
        return f"probe id={f.peth.probe_id}"
    if f.erth is not None:
        # The token as the Wireshark dissector shows it: only when one was sent.
        token = f" token={f.endpoint_token:#010x}" if f.endpoint_token else ""
        if f.erth.op == EndpointOp.PORT_STATUS:
            return (f"PORT_STATUS id={f.bth.psn} ports={f.erth.port_status_mask:#06b}"
                    f"{token}")
        return f"EV_PROBE id={f.bth.psn}{token}"
    if f.eeth is not None:
        return f"{EndpointOp(f.eeth.op).name} response id={f.bth.psn}"
    if f.immdt is not None:
        return f"imm={f.immdt.imm:#010x}"
    return None


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return ip6_str(value) if len(value) == 16 else value.hex()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def decode_frame(index: int, timestamp: float, data: bytes, *, verify: bool = True,
                 lenient: bool = False) -> Decoded:
    """Summarise one frame; a frame that is not valid MRC gives ``error`` and ``detail``.
    ``lenient``: also read RETH's DMA length as a message's (other implementations')."""
    d = Decoded(index, timestamp, len(data))
    try:
        f = parse_frame(data, verify_checksum=verify, verify_icrc=verify,
                        reth_per_packet=not lenient)
    except MalformedFrame as exc:
        d.error, d.detail = exc.reason.value, exc.detail
        return d
    d.opcode = f.opcode.name
    d.ev, d.psn, d.qpn = f.ev, f.bth.psn, f.bth.dest_qp
    d.payload_len = len(f.payload)
    d.trimmed = f.trimmed
    d.ecn = ECN(f.outer.ecn).name
    d.path = describe_path(f)
    d.info = describe_control(f)
    fields: dict[str, Any] = {
        "opcode": f.bth.opcode, "psn": f.bth.psn, "dqpn": f.bth.dest_qp, "ev": f.ev,
        "trimmed": int(f.trimmed), "payload_len": len(f.payload),
    }
    for attr, key in _EXT_HEADERS:
        hdr = getattr(f, attr)
        if hdr is not None:
            fields[key] = {_RENAME.get((attr, k), k): int(v) for k, v in asdict(hdr).items()}
    if f.endpoint_token:
        # mrcnet's own word, outside ERTH's public fields (which the spec readings share).
        fields["endpoint_token"] = f.endpoint_token
    if f.immdt is not None:
        fields["immdt"] = f.immdt.imm
    d.fields = fields
    return d


def decode_pcap(path: str | Path | BinaryIO, *, verify: bool = True,
                lenient: bool = False) -> Iterator[Decoded]:
    """Decode every frame of a pcap or pcapng (raises ``PcapError`` / ``OSError`` on a bad
    file)."""
    for i, rec in enumerate(read_pcap(path), start=1):
        yield decode_frame(i, rec.timestamp, rec.data, verify=verify, lenient=lenient)


def _cmd_sample_pcap(args: argparse.Namespace, out: TextIO) -> int:
    frames = [s.frame for s in samples()]
    n = write_pcap(args.file, frames)
    print(f"wrote {n} sample frames to {args.file}", file=out)
    return 0


def _cmd_samples(args: argparse.Namespace, out: TextIO) -> int:
    for i, s in enumerate(samples(), start=1):
        print(f"{i:>4} {s.name:<24} {s.description}", file=out)
    return 0


def _cmd_decode(args: argparse.Namespace, out: TextIO) -> int:
    bad = 0
    # "-" reads a live capture from a pipe: tcpdump -U -w - ... | python -m mrcnet.wire decode -
    src = sys.stdin.buffer if args.file == "-" else args.file
    for d in decode_pcap(src, verify=not (args.no_verify or args.lenient),
                         lenient=args.lenient):
        bad += d.error is not None
        if args.json:
            print(json.dumps(d.as_json(), sort_keys=True), file=out)
        else:
            print(d.line(), file=out)
        if src is sys.stdin.buffer:
            out.flush()  # live capture: show each frame as it comes
    return 1 if bad and args.strict else 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and documentation)."""
    p = argparse.ArgumentParser(
        prog="python -m mrcnet.wire",
        description="MRC wire format tools: conformance samples and capture decoding.",
        epilog="Example: python -m mrcnet.wire sample-pcap /tmp/mrc.pcap && "
        "python -m mrcnet.wire decode /tmp/mrc.pcap",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sp = sub.add_parser(
        "sample-pcap",
        help="write one frame of every MRC kind to a pcap",
        description="Write the conformance frames of mrcnet.wire.samples to FILE "
        "(classic pcap, Ethernet), in the order 'samples' lists them.",
    )
    sp.add_argument("file", metavar="FILE", help="pcap file to write (overwritten)")
    sp.set_defaults(func=_cmd_sample_pcap)
    sl = sub.add_parser("samples", help="list the sample frames by name")
    sl.set_defaults(func=_cmd_samples)
    dp = sub.add_parser(
        "decode",
        help="print a one-line summary of every frame of a pcap",
        description="Decode a classic pcap of Ethernet frames with mrcnet's parser: per "
        "frame the opcode, EV, PSN, QPN, sizes, trimmed flag and SRv6 path; frames "
        "that are not valid MRC are shown as MALFORMED with the reason.",
    )
    dp.add_argument("file", metavar="FILE", help="pcap or pcapng file to read, '-' for "
                    "standard input")
    dp.add_argument("--json", action="store_true",
                    help="one JSON object per line: opcode, psn, dqpn, ev, trimmed, "
                    "payload_len and one object per MRC header, raw integer values")
    dp.add_argument("--lenient", action="store_true",
                    help="for captures from other implementations: skip the UDP checksum "
                    "and ICRC checks, and read RETH's DMA length as a message's")
    dp.add_argument("--no-verify", action="store_true",
                    help="skip UDP checksum and ICRC checks (captures with NIC offloads)")
    dp.add_argument("--strict", action="store_true",
                    help="exit 1 if any frame is not valid MRC")
    dp.set_defaults(func=_cmd_decode)
    return p


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    out = out or sys.stdout
    try:
        return int(args.func(args, out))
    except FileNotFoundError as exc:
        print(f"error: no such file: {exc.filename}", file=sys.stderr)
    except IsADirectoryError as exc:
        print(f"error: {exc.filename} is a directory, not a pcap file", file=sys.stderr)
    except PermissionError as exc:
        print(f"error: permission denied: {exc.filename}", file=sys.stderr)
    except PcapError as exc:
        print(f"error: {exc}", file=sys.stderr)
    except BrokenPipeError:  # `... | head` closed the pipe: not an error
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
