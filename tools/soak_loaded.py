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

    sudo .venv/bin/python tools/soak_loaded.py --runs 5          # the 5 x 60 s soak
    sudo .venv/bin/python tools/soak_loaded.py --runs 1 --json   # what the slow test runs
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


def _qps(name: str, host: str) -> list[dict[str, Any]]:
    r = _fabric("exec", name, host, "--", "mrcctl", "qps", "--json", timeout=30)
    if r.returncode != 0:
        return []
    try:
        return list(json.loads(r.stdout).get("qps", []))
    except ValueError:
        return []


def one_run(name: str, seconds: int, size: str) -> dict[str, Any]:
    env = _env()
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
        deadline = time.monotonic() + seconds + 120
        while client.poll() is None and time.monotonic() < deadline:
            for h in ("h0", "h1"):
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
            "stderr": (err + serr).strip()[-2000:] if not ok else ""}


def soak(runs: int, seconds: int, hogs: int, size: str, prefix: str,
         report: Any = None) -> list[dict[str, Any]]:
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
            res = one_run(name, seconds, size)
            res["run"], res["wall_s"], res["hogs"] = i + 1, round(time.monotonic() - t0), hogs
            results.append(res)
            if report is not None:
                report(res)
            if not res["ok"]:
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

    results = soak(a.runs, a.seconds, a.hogs, a.size, a.prefix, report)
    return 0 if len(results) == a.runs and all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
