#!/usr/bin/env python3
"""Long mrc-perf runs on a machine loaded on purpose: the QP must never go to ERROR.

Brings up a 2-plane fabric (``leafspine:planes=2,spines=2,leaves=2,hosts=1,mtu=9000``,
mrcd on both hosts) under a name of its own, starts ``--hogs`` CPU hogs (``python -c
'while True: pass'``, one process each, stopped by their PIDs), and runs ``mrc-perf
client h1 -s 1M -D SECONDS`` from h0 ``--runs`` times in a row, each against a fresh
``mrc-perf server`` on h1. While a run goes, both mrcds' QPs are polled every 2 s
(``mrc-fabric exec NAME hX -- mrcctl qps --json``) and a thread of this process measures
how late a 1 ms sleep wakes up (the scheduling stalls the load produces).

Per run it prints: verified or not, Gb/s, the QP states seen, the deepest retry round
reached (core counter ``retries_peak``), the longest silence the retry budget rode out
(``rto_silence_peak_ms``), timeout rounds, and this process's worst wake-up delay.
Exit status 0 iff every run verified with no QP ever in ERROR. The fabric and the hogs
are removed even on failure. Needs root, from the project's virtualenv.

``--tour-failures`` breaks the fabric as README.md's tour does, in its order, right after
each run's client starts (link L0.0-S0.1 down, node S1.0 blackholed, 1 % loss on
L0.1->S0.0, h0's plane-1 port down, then the tour's ``status``, ``mrcctl qps/evs`` and
a 5 s capture on h0), and heals it after the run. ``--keep DIR`` keeps per run, in
``DIR/runN/``, both mrcds' logs and what the poller saw (``mrcctl qps/planes/ports/evs
--json`` on both hosts, one JSON line per poll).

    sudo .venv/bin/python tools/soak_loaded.py --runs 5          # the 5 x 60 s soak
    sudo .venv/bin/python tools/soak_loaded.py --runs 1 --json   # what the slow test runs
    sudo .venv/bin/python tools/soak_loaded.py --tour-failures --hogs 0 --keep /tmp/tour
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

SPEC = "leafspine:planes=2,spines=2,leaves=2,hosts=1,mtu=9000"
BIN = Path(sys.executable).parent
# README.md's tour: its four failures in its order, then what it looks at meanwhile.
TOUR_BREAK = (("link", "L0.0", "S0.1", "down"), ("node", "S1.0", "blackhole"),
              ("link", "L0.1", "S0.0", "loss", "1"), ("port", "h0", "1", "down"))
TOUR_HEAL = (("link", "L0.0", "S0.1", "up"), ("node", "S1.0", "restore"),
             ("link", "L0.1", "S0.0", "clear"), ("port", "h0", "1", "up"))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MRCD_SOCKET"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _fabric(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mrc-fabric", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env(), check=False)


class WakeMeter(threading.Thread):
    """How late a 1 ms sleep wakes up: the worst and the 99th percentile, in ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.late: list[float] = []

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.monotonic()
            time.sleep(0.001)
            self.late.append((time.monotonic() - t - 0.001) * 1e3)

    def summary(self) -> dict[str, float]:
        xs = sorted(self.late) or [0.0]
        return {"wake_late_max_ms": round(xs[-1], 1),
                "wake_late_p99_ms": round(xs[int(0.99 * (len(xs) - 1))], 1)}


def _ctl(name: str, host: str, *what: str) -> Any:
    r = _fabric("exec", name, host, "--", "mrcctl", *what, "--json", timeout=30)
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def _qps(name: str, host: str) -> list[dict[str, Any]]:
    doc = _ctl(name, host, "qps")
    return list(doc.get("qps", [])) if isinstance(doc, dict) else []


class Breaker(threading.Thread):
    """Applies the tour's failures (and what the tour runs after them), in its order."""

    def __init__(self, name: str, capture: Path) -> None:
        super().__init__(daemon=True)
        self.name_, self.capture = name, capture
        self.done: list[tuple[float, str, int]] = []
        self.t0 = time.monotonic()

    def run(self) -> None:
        steps: list[tuple[str, ...]] = [(s[0], self.name_, *s[1:]) for s in TOUR_BREAK]
        steps += [("status", self.name_), ("exec", self.name_, "h0", "--", "mrcctl", "qps"),
                  ("exec", self.name_, "h0", "--", "mrcctl", "evs"),
                  ("capture", self.name_, "h0", "-w", str(self.capture), "--seconds", "5")]
        for step in steps:
            r = _fabric(*step)
            self.done.append((round(time.monotonic() - self.t0, 2), " ".join(step[:4]),
                              r.returncode))


def one_run(name: str, seconds: int, size: str, tour: bool = False,
            keep: Path | None = None) -> dict[str, Any]:
    env = _env()
    polls = (keep / "polls.jsonl").open("w") if keep is not None else None
    breaker = None
    server = subprocess.Popen(["mrc-fabric", "exec", name, "h1", "--", "mrc-perf", "server"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env)
    client = None
    meter = WakeMeter()
    states: set[str] = set()
    peak: dict[str, int] = {}
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if "waiting on service" not in line:
            raise RuntimeError(f"mrc-perf server did not start: {line}")
        meter.start()
        client = subprocess.Popen(["mrc-fabric", "exec", name, "h0", "--", "mrc-perf",
                                   "client", "h1", "-s", size, "-D", str(seconds), "--json",
                                   "--quiet"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
        t_start = time.monotonic()
        if tour:
            breaker = Breaker(name, (keep or Path("/tmp")) / f"{name}-h0.pcapng")
            breaker.start()
        deadline = time.monotonic() + seconds + 120
        while client.poll() is None and time.monotonic() < deadline:
            for h in ("h0", "h1"):
                if polls is not None:
                    rec = {"t": round(time.monotonic() - t_start, 2), "host": h}
                    for what in ("qps", "planes", "ports", "evs"):
                        rec[what] = _ctl(name, h, what)
                    polls.write(json.dumps(rec) + "\n")
                    polls.flush()
                for q in _qps(name, h):
                    states.add(str(q.get("state")))
                    for k in ("retries_peak", "rto_silence_peak_ms", "rto_rounds"):
                        v = int(q.get("counters", {}).get(k, 0))
                        peak[k] = max(peak.get(k, 0), v)
            time.sleep(2)
        if client.poll() is None:
            client.kill()
        out, err = client.communicate(timeout=60)
        sout, serr = server.communicate(timeout=60)
    finally:
        meter.stop.set()
        if polls is not None:
            polls.close()
        if breaker is not None:
            breaker.join(timeout=60)
            if keep is None:
                breaker.capture.unlink(missing_ok=True)
        for p in (client, server):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    res = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    rows = [x for x in res if x.get("type") == "result"]
    row = rows[-1] if rows else {}
    ok = (client.returncode == 0 and server.returncode == 0 and "ERROR" not in states
          and row.get("verified") is True and row.get("error") is None
          and "verify: ok" in sout)
    return {"ok": ok, "verified": row.get("verified"), "seconds": row.get("seconds"),
            "gbps": row.get("gbps"), "error": row.get("error"),
            "states": sorted(states), **peak, **meter.summary(),
            "client_rc": client.returncode, "server_rc": server.returncode,
            "tour_steps": breaker.done if breaker is not None else None,
            "stderr": (err + serr).strip()[-2000:] if not ok else ""}


def _keep_logs(name: str, keep: Path) -> None:
    """Copies both mrcds' logs (mrc-fabric removes them with the fabric)."""
    from mrcnet.fabric.mrcd import mrcd_dir

    for h in ("h0", "h1"):
        log = mrcd_dir(name) / f"{h}.log"
        if log.exists():
            (keep / f"{h}.log").write_bytes(log.read_bytes())


def soak(runs: int, seconds: int, hogs: int, size: str, prefix: str,
         report: Any = None, tour: bool = False, keep: Path | None = None,
         keep_going: bool = False) -> list[dict[str, Any]]:
    name = prefix + secrets.token_hex(3)
    r = _fabric("up", SPEC, "--name", name, "--mrcd", timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"mrc-fabric up failed: {r.stdout}{r.stderr}")
    procs: list[subprocess.Popen[bytes]] = []
    results: list[dict[str, Any]] = []
    try:
        for _ in range(hogs):
            procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        for i in range(runs):
            t0 = time.monotonic()
            run_dir = None
            if keep is not None:
                run_dir = keep / f"run{i + 1}"
                run_dir.mkdir(parents=True, exist_ok=True)
            res = one_run(name, seconds, size, tour, run_dir)
            if tour:
                for step in TOUR_HEAL:
                    _fabric(step[0], name, *step[1:])
            if run_dir is not None:
                _keep_logs(name, run_dir)
                (run_dir / "result.json").write_text(json.dumps(res, indent=1))
            res["run"], res["wall_s"], res["hogs"] = i + 1, round(time.monotonic() - t0), hogs
            results.append(res)
            if report is not None:
                report(res)
            if not res["ok"] and not keep_going:
                break
    finally:
        for p in procs:  # by PID: only the hogs this process started
            p.kill()
            p.wait()
        _fabric("down", name, timeout=300)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs in a row (default 5)")
    ap.add_argument("--seconds", type=int, default=60, help="mrc-perf -D (default 60)")
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2,
                    help="CPU hog processes (default: one per CPU)")
    ap.add_argument("--size", default="1M", help="mrc-perf -s (default 1M)")
    ap.add_argument("--prefix", default=os.environ.get("MRC_E2E_PREFIX", "sk"),
                    help="fabric name prefix (a hex suffix is added)")
    ap.add_argument("--json", action="store_true", help="one JSON line per run")
    ap.add_argument("--tour-failures", action="store_true",
                    help="break the fabric as README.md's tour does during each run")
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="keep mrcd logs and mrcctl polls per run under DIR/runN/")
    ap.add_argument("--keep-going", action="store_true",
                    help="go on after a failed run (default: stop at the first)")
    a = ap.parse_args(argv)

    def report(res: dict[str, Any]) -> None:
        if a.json:
            print(json.dumps(res), flush=True)
            return
        print(f"run {res['run']}: {'ok' if res['ok'] else 'FAILED'} "
              f"verified={res['verified']} {res['gbps'] or 0:.3f} Gb/s "
              f"states={','.join(res['states'])} retries_peak={res.get('retries_peak', 0)} "
              f"silence_peak={res.get('rto_silence_peak_ms', 0)} ms "
              f"rto_rounds={res.get('rto_rounds', 0)} wake_late max/p99="
              f"{res['wake_late_max_ms']}/{res['wake_late_p99_ms']} ms ({res['wall_s']} s)",
              flush=True)
        if not res["ok"]:
            print(res["error"] or res["stderr"], flush=True)

    results = soak(a.runs, a.seconds, a.hogs, a.size, a.prefix, report, a.tour_failures,
                   a.keep, a.keep_going)
    return 0 if len(results) == a.runs and all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
