"""The mrcnet demo, run by ``make demo`` (``python -m mrcnet.demo``).

What MRC does, on a real (emulated) fabric, in five steps:

1. build a 2-plane leaf-spine fabric (2 spines and 2 leaves per plane, one host per
   leaf, shaped links) out of network namespaces, and start an mrcd on every host;
2. start ``mrc-perf server`` on h1 and ``mrc-perf client`` on h0 (through the mrcds):
   RDMA WRITEs sprayed over every (plane, spine) path, each byte range checked by the
   server against the client's pattern;
3. mid-transfer take the spine link ``p0l0-p0s1`` down, then restore it, printing the
   per-path picture (packets per path, EV states) before, during and after;
4. check the result: the server verified every byte, no error reached the
   application, and how many packets were retransmitted;
5. tear everything down (mrcds by PID, the fabric's namespaces, its state directory)
   and check that nothing is left.

Between steps 3 and 4 the transfer is drawn (goodput and each path's share of the data
packets over time, the failure shaded) into ``out/mrc-demo-failure.png`` (``--plot FILE``,
``--no-plot``) when matplotlib is installed (``pip install 'mrcnet[plot]'``).

``--keep`` leaves the fabric and its mrcds up to explore (``mrc-fabric status NAME``,
``mrc-fabric down NAME``); ``--json`` prints a machine-readable summary on stdout (the
progress lines then go to stderr); ``--pcap`` adds the wire-format part of the demo (one
MRC frame of every kind written to a pcap, decoded by mrcnet and, if installed, tshark).
SIGINT/SIGTERM stop the demo and still remove everything it made.

Each step is one ``step_*`` function taking the shared :class:`Demo`; :func:`run` calls
them in order and always runs :func:`step_teardown`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from mrcnet.wire.__main__ import Decoded, decode_pcap
from mrcnet.wire.pcap import write_pcap
from mrcnet.wire.samples import Sample, samples

PCAP_NAME = "mrc-samples.pcap"
DEFAULT_PLOT = "out/mrc-demo-failure.png"
TSHARK_TIMEOUT_S = 120

SPEC = "leafspine:planes=2,spines=2,leaves=2,hosts=1,rate={rate},mtu=9000"
SENDER, RECEIVER = "h0", "h1"
FAIL_LINK = ("p0l0", "p0s1")  #: h0's plane-0 leaf to spine 1: the path (plane 0, spine 1)
FAIL_PATH = (0, 1)
MIB = 1 << 20
REGION = 32 * MIB  #: what mrc-perf's server exposes; the writes cycle over it
CHUNK = 1 * MIB
DEPTH = 16
INTERVAL_S = 0.25  #: mrc-perf's interval records: the phase boundaries' resolution
STALL_TIMEOUT_S = 30.0


class DemoFailed(Exception):
    """A step found something wrong; the message says what."""


@dataclass
class Phase:
    """One window of the transfer: per-path packets sent in it, EV states at its end."""

    name: str
    seconds: float = 0.0
    sent: dict[str, int] = field(default_factory=dict)  #: "p0s1" -> data packets sent
    states: dict[str, dict[str, int]] = field(default_factory=dict)  #: "p0s1" -> state -> n
    bytes: int = 0
    retired: dict[str, int] = field(default_factory=dict)  #: "p0s1" -> EVs gone ASSUMED_BAD


@dataclass
class Demo:
    """What the steps share: options, output, and what earlier steps made."""

    workdir: Path
    out: TextIO = sys.stdout
    rate: str = "500mbit"
    before_s: float = 4.0
    during_s: float = 5.0
    after_s: float = 5.0
    keep: bool = False
    name: str = field(default_factory=lambda: "demo" + secrets.token_hex(3))
    samples: list[Sample] = field(default_factory=samples)
    pcap: Path | None = None
    decoded: list[Decoded] = field(default_factory=list)
    fab: Any = None  #: mrcnet.fabric.fabric.Fabric once built
    mrcd_pids: dict[str, int] = field(default_factory=dict)
    perf: Any = None  #: _Perf once mrc-perf runs
    phases: list[Phase] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  #: PathStateChanged + clock
    t_down: float = 0.0
    t_up: float = 0.0
    #: mrc-perf's interval records: {"t", "bytes", "sent": {path: packets so far}}
    series: list[dict[str, Any]] = field(default_factory=list)
    down_at: float | None = None  #: seconds into the transfer the link went down
    up_at: float | None = None
    plot: Path | None = None  #: where to write the PNG of the failure (None = no plot)
    result: dict[str, Any] = field(default_factory=dict)
    leftovers: dict[str, Any] = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)

    def say(self, text: str = "") -> None:
        """Print one line of demo output."""
        print(text, file=self.out, flush=True)


# --- 1. fabric + mrcds ---------------------------------------------------------------------
def step_fabric(demo: Demo) -> None:
    """Step 1: the fabric, and an mrcd on every host."""
    from mrcnet.fabric.errors import FabricError
    from mrcnet.fabric.fabric import Fabric
    from mrcnet.fabric.mrcd import start_mrcds

    spec = SPEC.format(rate=demo.rate)
    if os.geteuid() != 0:
        raise DemoFailed("the demo needs root (it builds network namespaces): sudo make demo")
    demo.say(f"== 1. fabric {demo.name}: {spec}")
    try:
        demo.fab = Fabric.up(spec, name=demo.name, progress=lambda m: demo.say(f"      {m}"))
        d = demo.fab.description
        demo.say(f"      {len(d.planes)} planes x {len(d.planes[0].spines)} spines, "
                 f"{len(d.hosts)} hosts, {len(d.links)} links at {demo.rate}; "
                 f"a path is (plane, spine): 4 paths from {SENDER} to {RECEIVER}")
        demo.mrcd_pids = start_mrcds(demo.fab)
    except FabricError as exc:
        raise DemoFailed(str(exc)) from exc
    demo.say("      mrcd running on " + ", ".join(f"{h} (pid {p})"
                                                 for h, p in demo.mrcd_pids.items()))


def _sock(demo: Demo, host: str) -> str:
    from mrcnet.fabric.mrcd import mrcd_dir
    return str(mrcd_dir(demo.name) / f"{host}.sock")


# --- 2. mrc-perf server and client -----------------------------------------------------------
@dataclass
class _Perf:
    """The two mrc-perf processes of the demo (started by it, ended by PID)."""

    server: subprocess.Popen[str]
    client: subprocess.Popen[str] | None = None

    def procs(self) -> list[subprocess.Popen[str]]:
        return [p for p in (self.client, self.server) if p is not None]

    def close(self) -> None:
        for p in self.procs():
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            for f in (p.stdout, p.stderr):
                if f is not None:
                    f.close()


def _perf_argv(demo: Demo, host: str) -> list[str]:
    return [sys.executable, "-m", "mrcnet.perf", "--socket", _sock(demo, host),
            "--timeout", str(STALL_TIMEOUT_S)]


def step_connect(demo: Demo) -> None:
    """Step 2: ``mrc-perf server`` on h1, waiting for the client's QP."""
    demo.say()
    demo.say(f"== 2. mrc-perf server on {RECEIVER} (through its mrcd; {REGION // MIB} MiB "
             f"exposed, every write checked)")
    server = demo.fab.popen(RECEIVER, [*_perf_argv(demo, RECEIVER), "server", "--size",
                                       str(REGION)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    demo.perf = _Perf(server)
    assert server.stdout is not None
    line = server.stdout.readline()
    if "waiting on service" not in line:
        err = server.stderr.read() if server.stderr else ""
        raise DemoFailed(f"mrc-perf server did not start: {(line + err).strip()}")
    demo.say(f"      {line.strip()}")


# --- 3. transfer with a failure ------------------------------------------------------------
def format_picture(phase: Phase, failed: str | None) -> str:
    """One line per (plane, spine) path: packets sent in the phase, share, EV states."""
    total = sum(phase.sent.values()) or 1
    lines = [f"      {'path':<10} {'packets':>8} {'share':>6} {'retired':>7}  "
             "EV states at the end"]
    for k in sorted(phase.sent):
        st = phase.states.get(k, {})
        states = ", ".join(f"{n} {s}" for s, n in sorted(st.items()))
        mark = "  <- link p0l0-p0s1 down" if k == failed else ""
        lines.append(f"      {'(' + k[1] + ',' + k[3:] + ')':<10} {phase.sent[k]:>8} "
                     f"{100 * phase.sent[k] / total:>5.1f}% {phase.retired.get(k, 0):>7}  "
                     f"{states}{mark}")
    return "\n".join(lines)


def _records(client: subprocess.Popen[str]) -> Iterator[dict[str, Any]]:
    """mrc-perf's JSON lines as they come."""
    assert client.stdout is not None
    for line in client.stdout:
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue


def step_transfer(demo: Demo) -> None:
    """Step 3: mrc-perf streams WRITEs; fail a spine link in the middle, restore it, and
    show each phase from mrc-perf's interval records."""
    fab = demo.fab
    failed = f"p{FAIL_PATH[0]}s{FAIL_PATH[1]}"
    total_s = demo.before_s + demo.during_s + demo.after_s
    demo.say()
    demo.say(f"== 3. mrc-perf client on {SENDER}: {CHUNK // MIB} MiB WRITEs, {DEPTH} "
             f"outstanding, for {total_s:.0f} s;")
    demo.say(f"      link {FAIL_LINK[0]}-{FAIL_LINK[1]} (path {FAIL_PATH}) down at "
             f"{demo.before_s:.0f} s, up again at {demo.before_s + demo.during_s:.0f} s")
    demo.say("      per path (plane, spine): data packets sent in the phase, their share, "
             "'retired' = EV changes")
    demo.say("      to ASSUMED_BAD in the phase (PathStateChanged), and the QP's EV states "
             "at the phase's end")
    argv = [*_perf_argv(demo, SENDER), "client", RECEIVER, "--size", str(CHUNK),
            "--tx-depth", str(DEPTH), "--seconds", str(total_s), "--interval",
            str(INTERVAL_S), "--json", "--paths", "--events", "--quiet"]
    client = fab.popen(SENDER, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    demo.perf.client = client
    marks = [demo.before_s, demo.before_s + demo.during_s, total_s]
    names = ["before", "during", "after"]
    start: float | None = None
    prev_sent: dict[str, int] = {}
    prev_t = prev_bytes = 0.0
    row: dict[str, Any] | None = None
    for rec in _records(client):
        kind = rec.get("type")
        if kind == "path_event":
            demo.events.append(rec)
            continue
        if kind != "interval":
            row = rec  # the size's result row: the run is over
            continue
        if start is None:
            start = rec["clock"] - rec["t"]
            demo.say(f"      QP from {SENDER} to {RECEIVER}: "
                     f"{sum(sum(p['states'].values()) for p in rec['paths'].values())} EVs "
                     f"over paths {', '.join(sorted(rec['paths']))}")
        demo.series.append({"t": rec["t"], "bytes": rec["bytes"],
                            "sent": {k: p["sent"] for k, p in rec["paths"].items()}})
        if len(demo.phases) < len(marks) and rec["t"] >= marks[len(demo.phases)] - 1e-3:
            paths = rec["paths"]
            sent = {k: p["sent"] for k, p in paths.items()}
            ph = Phase(names[len(demo.phases)], rec["t"] - prev_t,
                       {k: v - prev_sent.get(k, 0) for k, v in sent.items()},
                       {k: p["states"] for k, p in paths.items()},
                       int(rec["bytes"] - prev_bytes))
            ph.retired = _retired(demo, start + prev_t, start + rec["t"])
            demo.phases.append(ph)
            prev_sent, prev_t, prev_bytes = sent, rec["t"], rec["bytes"]
            rate = 8 * ph.bytes / ph.seconds / 1e9 if ph.seconds else 0.0
            demo.say()
            demo.say(f"   -- {ph.name}: {ph.seconds:.1f} s, {ph.bytes / MIB:.0f} MiB "
                     f"completed ({rate:.2f} Gb/s)")
            demo.say(format_picture(ph, failed if ph.name == "during" else None))
            if ph.name == "during":
                _say_refill(demo, demo.phases[0], ph)
            if ph.name == "before":
                demo.say(f"   >> link {FAIL_LINK[0]}-{FAIL_LINK[1]} down")
                demo.t_down = time.monotonic()
                demo.down_at = rec["t"]
                fab.link(*FAIL_LINK).down()
            elif ph.name == "during":
                demo.say(f"   >> link {FAIL_LINK[0]}-{FAIL_LINK[1]} up")
                demo.t_up = time.monotonic()
                demo.up_at = rec["t"]
                fab.link(*FAIL_LINK).up()
    status = client.wait(timeout=STALL_TIMEOUT_S)
    err = client.stderr.read().strip() if client.stderr else ""
    if row is None:
        raise DemoFailed(f"mrc-perf client failed (exit {status}): {err or 'no result'}")
    if len(demo.phases) < len(marks):
        raise DemoFailed(f"mrc-perf ran only {prev_t:.1f} s of the {total_s:.0f} s")
    server = demo.perf.server
    try:
        out, serr = server.communicate(timeout=STALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        out, serr = "", "no verdict"
    demo.result.update(writes=row["iters"], bytes=row["bytes"], seconds=row["seconds"],
                       perf=row, client_status=status, server_status=server.returncode,
                       server_says=(out + serr).strip().splitlines()[-1:])
    _summarise_events(demo, failed)


def _retired(demo: Demo, t0: float, t1: float) -> dict[str, int]:
    """Per path: PathStateChanged to ASSUMED_BAD between ``t0`` and ``t1`` (monotonic)."""
    from mrcnet.core.evs import ev_path as decode_ev

    out: dict[str, int] = {}
    for e in demo.events:
        if e["new"] == "ASSUMED_BAD" and t0 < e["clock"] <= t1:
            k = "p{}s{}".format(*decode_ev(e["ev"])[:2])
            out[k] = out.get(k, 0) + 1
    return out


def _say_refill(demo: Demo, before: Phase, during: Phase) -> None:
    """The EV manager replaces retired EVs with fresh ones on the plane's other paths."""
    for k in sorted(during.states):
        n_before = sum(before.states.get(k, {}).values())
        n_now = sum(during.states[k].values())
        if n_now > n_before:
            demo.say(f"      (path {k}: {n_now} EVs, was {n_before}: the plane was refilled "
                     "with fresh EVs on the paths that work)")


def _summarise_events(demo: Demo, failed: str) -> None:
    from mrcnet.core.evs import ev_path as decode_ev

    ev_path = [(e, "p{}s{}".format(*decode_ev(e["ev"])[:2])) for e in demo.events]
    changes: dict[str, dict[str, int]] = {}
    for e, k in ev_path:
        per = changes.setdefault(k, {})
        per[e["new"]] = per.get(e["new"], 0) + 1
    demo.result["path_state_changes"] = changes
    bad = [e["clock"] for e, k in ev_path if k == failed and e["new"] == "ASSUMED_BAD"
           and demo.t_down <= e["clock"] < demo.t_up]
    good = [e["clock"] for e, k in ev_path if k == failed and e["new"] == "GOOD"
            and e["clock"] >= demo.t_up]
    other_bad = [k for e, k in ev_path if k != failed and e["new"] == "ASSUMED_BAD"]
    demo.result["failure"] = {
        "link": "-".join(FAIL_LINK), "path": failed,
        "first_assumed_bad_ms": round(1000 * (min(bad) - demo.t_down)) if bad else None,
        "first_good_again_ms": round(1000 * (min(good) - demo.t_up)) if good else None,
        "evs_assumed_bad_events": len(bad), "other_paths_assumed_bad_events": len(other_bad),
    }
    f = demo.result["failure"]
    demo.say()
    if f["first_assumed_bad_ms"] is not None:
        demo.say(f"      first EV of {failed} ASSUMED_BAD {f['first_assumed_bad_ms']} ms after "
                 f"the link went down ({len(bad)} EV state changes)")
    if f["first_good_again_ms"] is not None:
        demo.say(f"      first EV of {failed} GOOD again {f['first_good_again_ms']} ms after "
                 "the link came back (probes)")


# --- 4. result ----------------------------------------------------------------------------
def step_result(demo: Demo) -> None:
    """Step 4: mrc-perf's verdict (the server checked every byte), errors,
    retransmissions, and the per-path verdict."""
    r = demo.result
    row = r["perf"]
    r.update(
        verified=row["verified"] is True and r["server_status"] == 0,
        goodput_gbps=round(row["gbps"], 3),
        app_errors=row["errors"],
        retransmissions=row["retransmissions"],
        trims=row["trims"],
        data_packets=row["packets"],
        phases=[vars(p) for p in demo.phases],
    )
    failed = f"p{FAIL_PATH[0]}s{FAIL_PATH[1]}"
    during = next(p for p in demo.phases if p.name == "during")
    after = next(p for p in demo.phases if p.name == "after")
    r["failed_path_bad_during"] = during.states.get(failed, {}).get("ASSUMED_BAD", 0) > 0
    # Back means: probes revived its EVs, and it carried at least half its fair share of
    # the packets after the link came up. Its EV states at the very end are shown but not
    # judged: a loss in the last instants can retire any path for a moment.
    fair = sum(after.sent.values()) / max(1, len(after.sent))
    r["failed_path_good_after"] = (
        r.get("failure", {}).get("first_good_again_ms") is not None
        and after.sent.get(failed, 0) >= fair / 2)
    demo.say()
    demo.say(f"== 4. result: {r['bytes'] / MIB:.0f} MiB in {r['seconds']:.1f} s "
             f"({r['goodput_gbps']:.2f} Gb/s); the server checked every byte against the "
             f"client's pattern: {'verified' if r['verified'] else 'NOT VERIFIED'}")
    demo.say(f"      errors seen by the application: {r['app_errors'] or 'none'}; "
             f"retransmitted {r['retransmissions']} of {r['data_packets']} data packets "
             f"({r['trims']} after trims)")
    demo.say(f"      path {failed}: EVs ASSUMED_BAD during the failure: "
             f"{'yes' if r['failed_path_bad_during'] else 'NO'}; revived by probes and carrying "
             f"its share after: {'yes' if r['failed_path_good_after'] else 'NO'}")
    others = r.get("failure", {}).get("other_paths_assumed_bad_events", 0)
    if others:
        still = sum(n for k, st in after.states.items() if k != failed
                    for s, n in st.items() if s == "ASSUMED_BAD")
        demo.say(f"      other paths: {others} EV(s) retired on the way (a loss under trimming "
                 f"or reordering looks like a bad path; probes revive them), {still} still "
                 "ASSUMED_BAD at the end")
    if r["app_errors"]:
        raise DemoFailed(f"the application saw {r['app_errors']} error completion(s)")
    if not r["verified"]:
        raise DemoFailed(f"the data did not verify: {r.get('server_says')}")
    if not (r["failed_path_bad_during"] and r["failed_path_good_after"]):
        raise DemoFailed("the failed path's EVs did not go ASSUMED_BAD and back as expected")


def step_plot(demo: Demo) -> None:
    """The failure as a PNG (goodput and per-path share over time), if matplotlib is
    installed; a missing matplotlib is said, not a failure of the demo."""
    if demo.plot is None or not demo.series:
        return
    from mrcnet.plots import PlotUnavailable, demo_plot

    try:
        path = demo_plot(demo.series, demo.plot, down_at=demo.down_at, up_at=demo.up_at,
                         failed=f"p{FAIL_PATH[0]}s{FAIL_PATH[1]}", link="-".join(FAIL_LINK))
    except PlotUnavailable as exc:
        demo.say(f"      no plot: {exc}")
        return
    demo.result["plot"] = str(path)
    demo.say(f"      plot of the failure (goodput, per-path share): {path}")


# --- 5. teardown ---------------------------------------------------------------------------
def _pid_running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _netns_of(name: str) -> list[str]:
    try:
        entries = os.listdir("/run/netns")
    except OSError:
        return []
    return sorted(n for n in entries if n.startswith(name + "-"))


def step_teardown(demo: Demo) -> None:
    """Step 5: stop our mrcds by PID, remove the fabric, check nothing is left."""
    from mrcnet.fabric.mrcd import stop_mrcds
    from mrcnet.fabric.state import fabric_dir

    perf_pids: list[int] = []
    if demo.perf is not None:
        perf_pids = [p.pid for p in demo.perf.procs()]
        demo.perf.close()  # our mrc-perf processes, by PID
        demo.perf = None
    demo.say()
    if demo.fab is None:
        return
    if demo.keep:
        demo.say(f"== 5. kept: fabric {demo.name} and its mrcds are still up. Try "
                 f"'mrc-fabric status {demo.name}'; remove with 'mrc-fabric down {demo.name}'")
        s0, s1 = _sock(demo, SENDER), _sock(demo, RECEIVER)
        demo.say(f"      mrcd sockets: {s0}, {s1}; for example:")
        demo.say(f"      mrc-fabric exec {demo.name} {RECEIVER} -- mrc-perf --socket {s1} server &")
        demo.say(f"      mrc-fabric exec {demo.name} {SENDER} -- mrc-perf --socket {s0} client "
                 f"{RECEIVER}")
        demo.leftovers = {"kept": True}
        return
    t = time.monotonic()
    stop_mrcds(demo.name)
    demo.fab.down()
    demo.fab = None
    left = {
        "netns": _netns_of(demo.name),
        "mrcd_pids": [p for p in demo.mrcd_pids.values() if _pid_running(p)],
        "perf_pids": [p for p in perf_pids if _pid_running(p)],
        "state_dir": [str(fabric_dir(demo.name))] if fabric_dir(demo.name).exists() else [],
    }
    demo.leftovers = left
    demo.say(f"== 5. torn down in {time.monotonic() - t:.1f} s: "
             f"{'nothing left' if not any(left.values()) else 'LEFT BEHIND: ' + str(left)}"
             f" (no netns {demo.name}-*, mrcd pids "
             f"{', '.join(str(p) for p in demo.mrcd_pids.values())} gone, no "
             f"{fabric_dir(demo.name)})")
    if any(left.values()):
        raise DemoFailed(f"left behind: {left}")


# --- optional: the wire format (--pcap) ----------------------------------------------------
def step_write_samples(demo: Demo) -> None:
    """The conformance frames, written as a classic pcap."""
    demo.pcap = demo.workdir / PCAP_NAME
    n = write_pcap(demo.pcap, [s.frame for s in demo.samples])
    demo.say()
    demo.say(f"== wire format: wrote {n} sample frames (one of every MRC kind) to {demo.pcap}")


def step_decode(demo: Demo) -> None:
    """Decode with mrcnet.wire.parse_frame and print a table."""
    assert demo.pcap is not None
    demo.decoded = list(decode_pcap(demo.pcap))
    demo.say(f"   decoded by mrcnet.wire.parse_frame ({len(demo.decoded)} frames)")
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
    """An independent decoder's opinion, when tshark is installed."""
    assert demo.pcap is not None
    v = tshark_verdict(demo.pcap, demo.samples)
    if v is None:
        demo.say("   tshark not installed, skipped (apt install tshark)")
        return
    summary = (
        f"{v.frames} frames, SRH recognised in {v.srh_seen} of {v.srh_expected}, UDP "
        f"checksum good in {v.checksum_good} of {v.checksum_checkable} checkable"
    )
    if not v.agrees:
        raise DemoFailed(f"{v.version} disagrees: {summary}; " + "; ".join(v.problems))
    demo.say(f"   {v.version} agrees: {summary}")


STEPS: list[Callable[[Demo], None]] = [step_fabric, step_connect, step_transfer, step_plot,
                                       step_result]
PCAP_STEPS: list[Callable[[Demo], None]] = [step_write_samples, step_decode, step_tshark]


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt, so the teardown in ``finally`` runs."""
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run(demo: Demo, steps: Sequence[Callable[[Demo], None]] = STEPS) -> int:
    """Run the steps in order, then always the teardown; a failing step gives status 1,
    an interruption 130."""
    status = 0
    with _signals_interrupt():
        try:
            for step in steps:
                step(demo)
        except DemoFailed as exc:
            print(f"demo failed: {exc}", file=sys.stderr)
            demo.result["error"] = str(exc)
            status = 1
        except KeyboardInterrupt:
            print("demo interrupted: removing what it made", file=sys.stderr)
            demo.result["error"] = "interrupted"
            status = 130
        finally:
            # A second Ctrl-C must not cut the cleanup short: ignore both while it runs.
            held = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                step_teardown(demo)
            except DemoFailed as exc:
                print(f"demo failed: {exc}", file=sys.stderr)
                status = status or 1
            finally:
                for s, h in held.items():
                    signal.signal(s, h)
    return status


def summary(demo: Demo, status: int) -> dict[str, Any]:
    """The machine-readable summary printed by ``--json``."""
    return {"ok": status == 0, "status": status, "fabric": demo.name,
            "spec": SPEC.format(rate=demo.rate), "mrcd_pids": demo.mrcd_pids,
            "result": demo.result, "leftovers": demo.leftovers,
            "seconds": round(time.monotonic() - demo.t0, 1)}


def build_parser() -> argparse.ArgumentParser:
    """The demo's command line."""
    p = argparse.ArgumentParser(
        prog="python -m mrcnet.demo",
        description="mrcnet demo: a 2-plane fabric with mrcd on its hosts, a verified "
        "transfer sprayed over every path, a spine link failed and restored mid-transfer, "
        "then everything removed. Needs root.",
    )
    p.add_argument("--keep", nargs="?", const="", default=None, metavar="DIR",
                   help="leave the fabric and its mrcds up to explore (remove them with "
                   "'mrc-fabric down NAME'). With DIR (the demo's earlier form): only the "
                   "wire-format part, its pcap kept in DIR (= --pcap DIR --no-fabric)")
    p.add_argument("--no-fabric", action="store_true",
                   help="skip the fabric part (with --pcap: only the wire format)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON summary on stdout (progress goes to stderr)")
    p.add_argument("--pcap", nargs="?", const="out", default=None, metavar="DIR",
                   help="also write one MRC frame of every kind to DIR/mrc-samples.pcap "
                   "(default out/) and decode it (mrcnet, and tshark if installed)")
    p.add_argument("--plot", default=DEFAULT_PLOT, metavar="FILE.png",
                   help=f"where to write the PNG of the failure: goodput and per-path share "
                   f"over time (default {DEFAULT_PLOT}; needs matplotlib)")
    p.add_argument("--no-plot", action="store_true", help="write no PNG")
    p.add_argument("--rate", default="500mbit", help="link rate (tc units; default 500mbit)")
    p.add_argument("--seconds", type=float, nargs=3, default=(4.0, 5.0, 5.0),
                   metavar=("BEFORE", "DURING", "AFTER"),
                   help="length of the three phases of the transfer (default 4 5 5)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.keep:  # `--keep DIR`: the earlier wire-format demo, its pcap kept in DIR
        args.pcap, args.no_fabric, args.keep = args.keep, True, None
    out = sys.stderr if args.json else sys.stdout
    before, during, after = args.seconds
    with tempfile.TemporaryDirectory(prefix="mrcnet-demo-") as tmp:
        demo = Demo(Path(tmp), out=out, rate=args.rate, before_s=before, during_s=during,
                    after_s=after, keep=args.keep is not None,
                    plot=None if args.no_plot else Path(args.plot).resolve())
        steps = [] if args.no_fabric else list(STEPS)
        if args.pcap is not None:
            workdir = Path(args.pcap)
            try:
                workdir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                print(f"error: cannot create {workdir}: {exc.strerror}", file=sys.stderr)
                return 1
            demo.workdir = workdir
            steps += PCAP_STEPS
        elif args.no_fabric:
            steps += PCAP_STEPS  # nothing else to show: the pcap, in a temporary directory
        status = run(demo, steps)
        if args.pcap is not None:
            pcap = workdir / PCAP_NAME
            demo.say(f"\npcap kept: {pcap} (open it with wireshark, or decode it with "
                     f"'python -m mrcnet.wire decode {pcap}')")
        demo.say(f"demo {'done' if status == 0 else 'FAILED'} in "
                 f"{time.monotonic() - demo.t0:.0f} s")
        if args.json:
            print(json.dumps(summary(demo, status), indent=1, default=str))
        return status


if __name__ == "__main__":
    sys.exit(main())
