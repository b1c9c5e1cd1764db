"""Run a collective on the hosts of a fabric: one ``mrc-coll rank`` per host, started
inside the host's netns next to its mrcd, their JSON lines gathered, failures applied
while they run, and every rank this process started stopped by its PID at the end
(normal end, error, SIGINT or SIGTERM). Failures are always undone.
"""

from __future__ import annotations

import json
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from mrcnet.coll.errors import CollError
from mrcnet.coll.failures import FailureRunner
from mrcnet.coll.options import CollOptions
from mrcnet.coll.rank import buffer_sizes
from mrcnet.coll.report import Row, row_from_ranks
from mrcnet.fabric.errors import FabricError
from mrcnet.fabric.fabric import Fabric
from mrcnet.fabric.mrcd import exec_env

__all__ = ["LaunchResult", "launch"]

#: After the first rank failed, how long the others get to stop on their own.
GRACE = 10.0


@dataclass
class LaunchResult:
    """What a run on a fabric gave."""

    rows: list[Row]
    hosts: list[str]
    errors: dict[int, str] = field(default_factory=dict)  #: rank -> why it stopped
    exit_codes: dict[int, int | None] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)  #: events applied
    failure_errors: list[str] = field(default_factory=list)
    undo_left: list[str] = field(default_factory=list)
    t0: float | None = None  #: monotonic time zero of --fail (first timed step)
    elapsed_s: float = 0.0  #: from launch to the last rank's end
    first_error_s: float | None = None  #: from launch to the first rank's error
    last_exit_s: float | None = None  #: from the first error to the last rank's exit


class _Interrupted(Exception):
    pass


def _rank_argv(rank: int, hosts: list[str], opts: CollOptions, *, token: int,
               service: int, transport: str, ev: str | None, step_timeout: float,
               addresses: list[str]) -> list[str]:
    peers = hosts if transport == "mrc" else [f"{h}={a}" for h, a in zip(hosts, addresses,
                                                                          strict=True)]
    argv = [sys.executable, "-m", "mrcnet.coll.cli", "rank", "--rank", str(rank),
            "--peers", ",".join(peers), "--token", str(token), "--service", str(service),
            "--transport", transport, "--step-timeout", f"{step_timeout:g}",
            "--op", opts.op, "--iters", str(opts.iters), "--warmup", str(opts.warmup),
            "--sizes", ",".join(str(s) for s in opts.sizes)]
    if ev:
        argv += ["--ev", ev]
    return argv


def launch(name: str, opts: CollOptions, *, hosts: list[str] | None = None,
           transport: str = "mrc", ev: str | None = None, step_timeout: float = 30.0,
           say: Callable[[str], None] | None = None) -> LaunchResult:
    """Run ``opts`` on fabric ``name`` (every host, or ``hosts`` in rank order)."""
    try:
        fab = Fabric.load(name)
        desc = fab.description
        names = hosts or [h.name for h in desc.hosts]
        names = [desc.node_name(h) for h in names]
        addresses = [desc.host(h).port(0).address for h in names]
    except FabricError as e:
        raise CollError(str(e)) from None
    if len(set(names)) != len(names) or len(names) < 2:
        raise CollError(f"need at least 2 distinct hosts, got {names}")
    buffer_sizes(opts, len(names))  # a size the collective cannot split: say so here
    failures = FailureRunner(fab, list(opts.fail))
    token = secrets.randbits(31)
    # A fresh range per run, below the ephemeral ports (the TCP baseline listens there).
    service = 20000 + secrets.randbelow(12000)
    lines: queue.Queue[tuple[int, dict[str, Any] | None]] = queue.Queue()
    procs: dict[int, subprocess.Popen[str]] = {}
    stderr: dict[int, list[str]] = {}
    res = LaunchResult([], names)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise _Interrupted()

    old = signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    try:
        for r, h in enumerate(names):
            argv = _rank_argv(r, names, opts, token=token, service=service,
                              transport=transport, ev=ev, step_timeout=step_timeout,
                              addresses=addresses)
            p = fab.popen(h, argv, env=exec_env(fab, h), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
            procs[r] = p
            stderr[r] = []
            threading.Thread(target=_read, args=(r, p, lines, stderr[r]), daemon=True).start()
        _gather(res, opts, procs, lines, failures, say, started)
    except (_Interrupted, KeyboardInterrupt):
        res.errors.setdefault(-1, "interrupted")
        raise KeyboardInterrupt from None
    finally:
        signal.signal(signal.SIGTERM, old)
        _stop(procs)
        res.undo_left = failures.undo()
        res.failures = failures.events
        res.failure_errors = failures.errors
        res.exit_codes = {r: p.returncode for r, p in procs.items()}
        res.elapsed_s = time.monotonic() - started
        for r, err in stderr.items():
            if r not in res.errors and res.exit_codes.get(r) not in (0, None):
                res.errors[r] = (err[-1] if err else f"exit status {res.exit_codes[r]}")
    return res


def _read(rank: int, p: subprocess.Popen[str], out: queue.Queue[tuple[int, Any]],
          err: list[str]) -> None:
    def errs() -> None:
        assert p.stderr is not None
        for line in p.stderr:
            if line.strip():
                err.append(line.rstrip())
    t = threading.Thread(target=errs, daemon=True)
    t.start()
    assert p.stdout is not None
    for line in p.stdout:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.put((rank, rec))
    p.wait()
    t.join(timeout=5)
    out.put((rank, None))


def _gather(res: LaunchResult, opts: CollOptions, procs: dict[int, subprocess.Popen[str]],
            lines: queue.Queue[tuple[int, dict[str, Any] | None]], failures: FailureRunner,
            say: Callable[[str], None] | None, started: float) -> None:
    world = len(procs)
    running = set(procs)
    starts: set[int] = set()
    per_size: dict[int, dict[int, list[list[float]]]] = {}
    verified: dict[int, bool] = {}
    first_error: float | None = None
    while running:
        # Short waits: a signal (SIGINT, SIGTERM) is handled between them.
        try:
            rank, rec = lines.get(timeout=0.25)
        except queue.Empty:
            if first_error is not None and time.monotonic() > first_error + GRACE:
                break  # the rest are stopped by PID in launch()'s finally
            continue
        if rec is None:
            running.discard(rank)
            if procs[rank].returncode not in (0, None) and first_error is None:
                first_error = time.monotonic()
                res.first_error_s = first_error - started
            continue
        kind = rec.get("type")
        if kind == "start" and res.t0 is None:
            starts.add(rank)
            if len(starts) == world:  # every rank began its first timed step
                res.t0 = time.monotonic()
                failures.start(res.t0)
        elif kind == "size":
            per_size.setdefault(int(rec["size"]), {})[rank] = rec["steps"]
            got = per_size[int(rec["size"])]
            verified[rank] = verified.get(rank, True) and rec.get("verified") is True
            if len(got) == world:
                row = row_from_ranks(opts.op, int(rec["size"]), got,
                                     all(verified.get(r, False) for r in got))
                res.rows.append(row)
                if say is not None:
                    say(f"size {row.size}: done")
        elif kind == "error":
            res.errors[rank] = str(rec.get("error"))
            if first_error is None:
                first_error = time.monotonic()
                res.first_error_s = first_error - started
    if first_error is not None:
        res.last_exit_s = time.monotonic() - first_error


def _stop(procs: dict[int, subprocess.Popen[str]]) -> None:
    """Stop every rank still running, by the PID this process started."""
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    end = time.monotonic() + 3
    for p in procs.values():
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
