"""``mrc-fabric capture``: record a node's frames to a pcap or pcapng file.

The capturing program (dumpcap, from the tshark/wireshark-common package; tcpdump when
dumpcap is missing and the file is a classic pcap) runs inside the node's netns, in a
session of its own so a Ctrl-C in the terminal reaches only ``mrc-fabric``, which then
stops it by PID with SIGINT (both programs finish and close the file on it), SIGKILL
after a timeout. The frames written are counted by reading the file back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from mrcnet.fabric.errors import FabricError, ToolMissing

__all__ = ["Capture", "capture", "capture_format", "node_interfaces"]

READY_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0


def capture_format(path: str | Path, forced: str | None = None) -> str:
    """``pcap`` or ``pcapng``: ``forced`` (``-F``), else from the file's suffix."""
    if forced:
        if forced not in ("pcap", "pcapng"):
            raise FabricError(f"format {forced!r}: use pcap or pcapng")
        return forced
    suffix = Path(path).suffix.lower()
    if suffix == ".pcapng":
        return "pcapng"
    if suffix in (".pcap", ".cap"):
        return "pcap"
    raise FabricError(f"{path}: say the format with -F pcap|pcapng, or name the file "
                      ".pcap or .pcapng")


def node_interfaces(fab: Any, node: str) -> list[str]:
    """The interfaces of a node that carry fabric links (hosts: p0, p1, ...)."""
    desc = fab.description
    name = desc.node_name(node)
    desc.node_netns(name)  # a clear error for an unknown node
    return [ln.end(name).ifname for ln in desc.links_of(name)]


@dataclass
class Capture:
    """What one capture did."""

    path: Path
    fmt: str
    tool: str
    interfaces: list[str]
    frames: int = 0
    seconds: float = 0.0


def _command(tool: str, fmt: str, ifaces: list[str], path: Path, count: int | None,
             snaplen: int | None, bpf: str | None) -> list[str]:
    if Path(tool).name == "tcpdump":
        argv = [tool, "-i", ifaces[0], "-w", str(path), "-U", "-n", "--immediate-mode"]
        if count:
            argv += ["-c", str(count)]
        if snaplen:
            argv += ["-s", str(snaplen)]
        return argv + ([bpf] if bpf else [])
    argv = [tool, "-q", "-w", str(path)]
    for i in ifaces:
        argv += ["-i", i]
    if fmt == "pcap":
        argv.append("-P")
    if count:
        argv += ["-c", str(count)]
    if snaplen:
        argv += ["-s", str(snaplen)]
    return argv + (["-f", bpf] if bpf else [])


def _pick_tool(fmt: str, n_ifaces: int) -> str:
    dumpcap = shutil.which("dumpcap")
    if dumpcap:
        return dumpcap
    tcpdump = shutil.which("tcpdump")
    if tcpdump and fmt == "pcap" and n_ifaces == 1:
        return tcpdump
    if tcpdump:
        raise ToolMissing("tcpdump writes one interface to a classic pcap only: name one "
                          "interface (NODE:IFACE) and a .pcap file, or install dumpcap "
                          "(Debian package wireshark-common or tshark)")
    raise ToolMissing("no capture program: install dumpcap (Debian package tshark) or "
                      "tcpdump")


def capture(fab: Any, target: str, path: str | Path, *, fmt: str | None = None,
            count: int | None = None, seconds: float | None = None,
            snaplen: int | None = None, bpf: str | None = None,
            say: Callable[[str], None] | None = None) -> Capture:
    """Capture on ``target`` (``NODE`` = every fabric interface of the node, or
    ``NODE:IFACE``) into ``path`` until ``count`` frames, ``seconds``, Ctrl-C or SIGTERM.

    Returns what was written (frames counted by reading the file back).
    """
    from mrcnet.wire.pcap import PcapError, read_pcap

    node, _, iface = target.partition(":")
    all_ifaces = node_interfaces(fab, node)
    if iface:
        if iface not in all_ifaces:
            raise FabricError(f"{node} has no interface {iface!r} (it has "
                              f"{', '.join(all_ifaces)})")
        ifaces = [iface]
    else:
        ifaces = all_ifaces
    kind = capture_format(path, fmt)
    if kind == "pcap" and len(ifaces) > 1:
        raise FabricError(f"a classic pcap holds one interface and {node} has "
                          f"{len(ifaces)} ({', '.join(ifaces)}): capture {node}:{ifaces[0]}, "
                          "or write a .pcapng")
    if count is not None and count <= 0:
        raise FabricError("-c COUNT must be at least 1")
    if seconds is not None and seconds <= 0:
        raise FabricError("--seconds must be more than 0")
    tool = _pick_tool(kind, len(ifaces))
    out = Path(path).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        out.unlink()  # dumpcap refuses nothing, but a stale file would be counted
    argv = ["ip", "netns", "exec", fab.netns(node),
            *_command(tool, kind, ifaces, out, count, snaplen, bpf)]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    # `ip netns exec` execs the capture program: this PID is the one to stop.
    err_lines: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err_lines.append(line.rstrip())
            if "Capturing on" in line or "listening on" in line:
                ready.set()
        ready.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stop = threading.Event()
    old = _on_signals(stop)
    t0 = time.monotonic()
    try:
        ready.wait(READY_TIMEOUT)  # the program says when it listens (or exits)
        if proc.poll() is not None and proc.returncode != 0:
            reader.join(1)
            raise FabricError(f"{Path(tool).name} failed: "
                              f"{' '.join(err_lines[-3:]) or 'exit ' + str(proc.returncode)}")
        if say:
            until = []
            if count:
                until.append(f"{count} frames")
            if seconds:
                until.append(f"{seconds:g} s")
            until.append("Ctrl-C")
            say(f"capturing on {node}:{','.join(ifaces)} into {out} ({kind}, "
                f"{Path(tool).name}) until {' or '.join(until)}")
        deadline = t0 + seconds if seconds else None
        while proc.poll() is None and not stop.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                break
            stop.wait(0.05)
    finally:
        _stop(proc)
        _restore_signals(old)
        reader.join(2)
    elapsed = time.monotonic() - t0
    if proc.returncode not in (0, -signal.SIGINT, 128 + signal.SIGINT) and not out.exists():
        raise FabricError(f"{Path(tool).name} failed: "
                          f"{' '.join(err_lines[-3:]) or 'exit ' + str(proc.returncode)}")
    frames = 0
    if out.exists():
        try:
            frames = sum(1 for _ in read_pcap(out))
        except PcapError:
            # A capture stopped hard can end in a partial block: count what is whole.
            frames = _count_whole(out)
    return Capture(out, kind, Path(tool).name, ifaces, frames, elapsed)


def _count_whole(path: Path) -> int:
    from mrcnet.wire.pcap import PcapError, read_pcap

    n = 0
    with contextlib.suppress(PcapError):
        for _ in read_pcap(path):
            n += 1
    return n


def _stop(proc: subprocess.Popen[str]) -> None:
    """SIGINT the capture program by PID (it closes the file), SIGKILL after a timeout."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGINT)
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


_Handlers = dict[int, Any]


def _on_signals(stop: threading.Event) -> _Handlers:
    """SIGINT and SIGTERM end the capture cleanly instead of killing ``mrc-fabric``."""
    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    old: _Handlers = {}
    for s in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            old[s] = signal.signal(s, handler)
    return old


def _restore_signals(old: _Handlers) -> None:
    for s, h in old.items():
        signal.signal(s, h)
