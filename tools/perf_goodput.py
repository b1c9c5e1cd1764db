#!/usr/bin/env python3
"""Where every process on goodput's path spends its CPU: one ``perf record -a -g`` in
the middle of an MRC transfer, its samples classified per process.

    .venv/bin/python tools/perf_goodput.py [--mib 3000] [--delay 2] [--seconds 4]

tools/bench_goodput.py's fabric, mrcds and mrc-perf (h0 -> h1, 1 MiB writes,
``--tx-depth 16``); ``--delay`` seconds into the transfer, ``perf record -a -g`` for
``--seconds``. Each sample of the sending mrcd, the receiving mrcd and mrc-perf's client
and server is put in one class by its call chain: the fabric's forwarding run inline in
a ``sendmmsg`` (softirq under it), the rest of a ``sendmmsg``, ``recvmmsg``,
``epoll_pwait``, another syscall, or user time in Python (libpython, cffi, uvloop),
mrcnet's C (``_native``), libc or elsewhere. Prints the share of each class per process
and the process's share of all samples (the rest: the machine's other users). Needs
root and ``perf``; the fabric and everything started are removed and stopped by PID.

``--senders``: the two senders side by side instead, what bounds the goodput ratio
(docs/PERFORMANCE.md, "Session 20"): raw-send (``mrc-perf raw-send``, as
tools/bench_goodput.py runs it) and then the sending mrcd, each recorded alone
(``perf record -g -p``) for ``--seconds`` once h0's ports send steadily, each class in
CPU milliseconds per GB that h0's ports sent meanwhile.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_goodput as bg  # (the fabric, the mrcds and mrc-perf, as that bench runs them)

#: The classes, in the order they are printed.
CLASSES = ("sendmmsg: forwarding (softirq)", "sendmmsg: the rest", "recvmmsg", "epoll_pwait",
           "other syscalls", "user: Python", "user: C (_native)", "user: libc",
           "user: other")
_FRAME = re.compile(r"\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def classify(chain: list[tuple[str, str]]) -> str:
    """The class of one sample from its call chain, leaf first: (symbol, dso) pairs."""
    syms = [s.split("+")[0] for s, _ in chain]
    if any("sendmmsg" in s for s in syms if s.startswith(("__x64_sys", "__sys"))):
        if "net_rx_action" in syms or "process_backlog" in syms:
            return CLASSES[0]
        return CLASSES[1]
    if "__x64_sys_recvmmsg" in syms or "do_recvmmsg" in syms:
        return CLASSES[2]
    if "__x64_sys_epoll_pwait" in syms or "do_epoll_wait" in syms:
        return CLASSES[3]
    dso = chain[0][1] if chain else ""
    if "kernel" in dso or any(s.startswith("entry_SYSCALL") for s in syms):
        return CLASSES[4]
    if "python" in dso or "cffi" in dso or "uvloop" in dso or "loop.cpython" in dso:
        return CLASSES[5]
    if "_native" in dso:
        return CLASSES[6]
    if "libc" in dso:
        return CLASSES[7]
    return CLASSES[8]


def samples(script: str) -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """(pid, call chain) per sample of ``perf script -F pid,ip,sym,dso`` output."""
    pid: int | None = None
    chain: list[tuple[str, str]] = []
    for line in script.splitlines():
        if not line.strip():
            if pid is not None:
                yield pid, chain
            pid, chain = None, []
        elif pid is None:
            pid = int(line.split()[0])
        else:
            m = _FRAME.match(line)
            if m:
                chain.append((m.group(1), m.group(2)))
    if pid is not None:
        yield pid, chain


def breakdown(script: str, who: dict[int, str]) -> dict[str, dict[str, float]]:
    """Per process name of ``who`` (pid -> name): the share of each class of its samples,
    its ``samples`` and its ``share`` of all samples."""
    counts: dict[str, collections.Counter[str]] = {n: collections.Counter() for n in who.values()}
    total = 0
    for pid, chain in samples(script):
        total += 1
        name = who.get(pid)
        if name is not None:
            counts[name][classify(chain)] += 1
    out: dict[str, dict[str, float]] = {}
    for name, c in counts.items():
        n = sum(c.values())
        out[name] = {k: c[k] / n if n else 0.0 for k in CLASSES}
        out[name]["samples"] = n
        out[name]["share"] = n / total if total else 0.0
    return out


@contextlib.contextmanager
def _transfer(fab: object, tmp: Path, mib: int) -> Iterator[dict[str, int]]:
    """mrcds and mrc-perf moving ``mib`` MiB h0 -> h1; yields their PIDs by role."""
    with bg._mrcds(fab, tmp, None, []) as socks:
        server = subprocess.Popen([*bg._ns(fab, "h1"), bg.PERF, "--socket", socks["h1"][1],
                                   "--timeout", "60", "server", "--size", str(1 << 20)],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        client = None
        try:
            assert server.stdout is not None
            server.stdout.readline()
            client = subprocess.Popen([*bg._ns(fab, "h0"), bg.PERF, "--socket",
                                       socks["h0"][1], "--timeout", "60", "client", "h1",
                                       "--size", str(1 << 20), "--iters", str(mib),
                                       "--tx-depth", "16", "--json"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True)
            yield {"mrcd h0 (sender)": socks["h0"][0], "mrcd h1 (receiver)": socks["h1"][0],
                   "mrc-perf client": client.pid, "mrc-perf server": server.pid}
            client.communicate(timeout=600)
            server.communicate(timeout=60)
        finally:
            for p in (client, server):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait(5)


#: --senders: perf's sampling rate (Hz), so that a sample is 1000 / FREQ ms of CPU
FREQ = 4000


def _steady_record(fab: object, pid: int, seconds: float, data: str) -> float:
    """``perf record -g -p pid`` for ``seconds`` once h0's ports send steadily; the GB
    they sent meanwhile (0.0 if the transfer never got steady in 60 s)."""
    deadline = time.monotonic() + 60
    while not bg.h0_steady(fab):
        if time.monotonic() > deadline:
            return 0.0
    b0 = bg.h0_sent(fab)
    subprocess.run(["perf", "record", "-g", "-q", "-F", str(FREQ), "-p", str(pid), "-o", data,
                    "--", "sleep", str(seconds)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return (bg.h0_sent(fab) - b0) / 1e9


def _ms_per_gb(data: str, gb: float) -> dict[str, float]:
    """Each class's CPU milliseconds per GB in ``data`` (one process's samples), and
    ``all``."""
    script = subprocess.run(["perf", "script", "-i", data, "-F", "pid,ip,sym,dso"],
                            capture_output=True, text=True, check=True).stdout
    counts = collections.Counter(classify(chain) for _, chain in samples(script))
    ms = 1000 / FREQ / gb if gb > 0 else 0.0
    out = {k: counts[k] * ms for k in CLASSES}
    out["all"] = sum(counts.values()) * ms
    return out


def senders(fab: object, tmp: Path, mib: int, seconds: float) -> dict[str, dict[str, float]]:
    """raw-send, then the sending mrcd, each recorded in its steady state: their
    classes in CPU ms per GB (:func:`_ms_per_gb`)."""
    desc = str(fab.description_path)  # type: ignore[attr-defined]
    out: dict[str, dict[str, float]] = {}
    sink = subprocess.Popen([*bg._ns(fab, "h1"), bg.PERF, "raw-sink", "--fabric", desc,
                             "--host", "h1", "--json"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    send = None
    try:
        assert sink.stderr is not None
        sink.stderr.readline()  # "listening on ..."
        send = subprocess.Popen([*bg._ns(fab, "h0"), bg.PERF, "raw-send", "--fabric", desc,
                                 "--host", "h0", "h1", "--seconds", str(seconds + 4),
                                 "--json"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        data = str(tmp / "raw.data")
        out["raw-send"] = _ms_per_gb(data, _steady_record(fab, send.pid, seconds, data))
        send.wait(seconds + 60)
        sink.wait(60)
    finally:
        for p in (send, sink):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(5)
    with _transfer(fab, tmp, mib) as pids:
        data = str(tmp / "mrcd.data")
        pid = pids["mrcd h0 (sender)"]
        out["mrcd h0"] = _ms_per_gb(data, _steady_record(fab, pid, seconds, data))
    return out


def _print_senders(table: dict[str, dict[str, float]]) -> None:
    raw, mrc = table["raw-send"], table["mrcd h0"]
    print(f"{'CPU ms per GB sent':32}{'raw-send':>12}{'mrcd h0':>12}{'mrcd - raw':>12}")
    for k in (*CLASSES, "all"):
        print(f"{k:32}{raw[k]:12.1f}{mrc[k]:12.1f}{mrc[k] - raw[k]:+12.1f}")
    if raw["all"] > 0 and mrc["all"] > 0:
        print(f"raw / mrc (what bounds goodput's mrc / raw): {raw['all'] / mrc['all']:.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=3000, help="MiB the transfer writes")
    ap.add_argument("--delay", type=float, default=2.0, help="seconds before perf starts")
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds perf records")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--prefix", default="mf", help="fabric name prefix (as bench_goodput)")
    ap.add_argument("--senders", action="store_true",
                    help="raw-send and the sending mrcd side by side, each in its steady "
                         "state, in CPU ms per GB sent (use --mib 4096 or more)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0 or shutil.which("perf") is None:
        print("perf_goodput: needs root and perf", file=sys.stderr)
        return 1
    from mrcnet.fabric.fabric import Fabric

    with tempfile.TemporaryDirectory(prefix="mfbench") as td:
        tmp = Path(td)
        os.environ["MRC_FABRIC_STATE_DIR"] = str(tmp / "fabrics")
        data = str(tmp / "perf.data")
        if args.senders:
            with Fabric.up(bg.DEFAULT_SPEC, name=args.prefix + secrets.token_hex(3)) as fab:
                both = senders(fab, tmp, args.mib, args.seconds)
            if args.json:
                print(json.dumps(both))
            else:
                _print_senders(both)
            return 0
        with Fabric.up(bg.DEFAULT_SPEC, name=args.prefix + secrets.token_hex(3)) as fab, \
                _transfer(fab, tmp, args.mib) as pids:
            time.sleep(args.delay)
            subprocess.run(["perf", "record", "-a", "-g", "-q", "-o", data, "--", "sleep",
                            str(args.seconds)], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        script = subprocess.run(["perf", "script", "-i", data, "-F", "pid,ip,sym,dso"],
                                capture_output=True, text=True, check=True).stdout
    table = breakdown(script, {pid: name for name, pid in pids.items()})
    if args.json:
        print(json.dumps(table))
        return 0
    names = list(table)
    print(f"{'share of the process samples':32}" + "".join(f"{n:>20}" for n in names))
    for k in CLASSES:
        print(f"{k:32}" + "".join(f"{table[n][k] * 100:19.1f}%" for n in names))
    print(f"{'samples':32}" + "".join(f"{table[n]['samples']:20.0f}" for n in names))
    print(f"{'share of all samples':32}" + "".join(f"{table[n]['share'] * 100:19.1f}%"
                                                   for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
