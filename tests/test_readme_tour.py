"""README.md's five-minute tour, run by bash as written, top to bottom.

The sh block under "A five-minute tour" runs verbatim but for one change: the fabric name
``lab`` becomes a name this run owns (``$MRC_E2E_PREFIX`` + hex, default prefix ``rt``),
so that the test never touches a fabric it did not make (and its ``/tmp/lab.png`` plot
becomes ``/tmp/<name>.png``). The block itself waits for its background jobs (``wait``
before ``mrc-fabric down``), as a human following it must.

Every command must exit 0 (``set -e``; background jobs are checked by the block's
``wait``, whose status is the last job's: so the test also counts the servers' ``verify:
ok`` and the clients' table rows). While the block runs, a poller asks both hosts'
mrcd for their QPs (``mrc-fabric exec NAME hX -- mrcctl qps --json``, every 2 s): no QP
may ever be in ERROR. The fabric is removed even on failure, by its own name; the
capture file the tour writes (``/tmp/h0.pcapng``) is removed unless it was there before.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, raw sockets)"),
    pytest.mark.skipif(not (BIN / "mrc-fabric").exists(), reason="mrc-fabric not installed"),
]


def tour_block(readme: str) -> str:
    """The first ``sh`` block after the "A five-minute tour" heading."""
    start = readme.index("## A five-minute tour")
    m = re.search(r"```sh\n(.*?)```", readme[start:], re.S)
    assert m is not None, "no sh block in the tour"
    return m.group(1)


def test_tour_block_shape() -> None:
    """What the tour promises: no --socket anywhere, the -D 60 run, a wait before down."""
    block = tour_block((ROOT / "README.md").read_text())
    assert "--socket" not in block
    assert re.search(r"mrc-perf client .*-D 60", block)
    lines = [ln.split("#")[0].strip() for ln in block.splitlines()]
    lines = [ln for ln in lines if ln]
    assert lines[-1].startswith("mrc-fabric down lab") and lines[-2] == "wait"


def _states(doc: Any) -> set[str]:
    if isinstance(doc, dict):
        out = {doc["state"]} if isinstance(doc.get("state"), str) else set()
        for v in doc.values():
            out |= _states(v)
        return out
    if isinstance(doc, list):
        return set().union(*(_states(v) for v in doc)) if doc else set()
    return set()


class QpPoller(threading.Thread):
    """Polls both hosts' QPs through ``mrc-fabric exec``; keeps every state seen."""

    def __init__(self, name: str, env: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.name_, self.env = name, env
        self.stop = threading.Event()
        self.states: dict[str, set[str]] = {"h0": set(), "h1": set()}
        self.polls = 0
        self.with_qps = 0

    def run(self) -> None:
        while not self.stop.wait(2.0):
            for h in ("h0", "h1"):
                r = subprocess.run(["mrc-fabric", "exec", self.name_, h, "--", "mrcctl", "qps",
                                    "--json"], capture_output=True, text=True, timeout=30,
                                   env=self.env, check=False)
                if r.returncode != 0:
                    continue  # the fabric is not up yet, or going
                try:
                    seen = _states(json.loads(r.stdout))
                except ValueError:
                    continue
                self.polls += 1
                self.with_qps += bool(seen)
                self.states[h] |= seen


def test_readme_tour_verbatim(tmp_path: Path) -> None:
    block = tour_block((ROOT / "README.md").read_text())
    name = os.environ.get("MRC_E2E_PREFIX", "rt") + secrets.token_hex(3)
    script = re.sub(r"\blab\b", name, block)
    assert script.count(name) == block.count("lab")
    (tmp_path / "tour.sh").write_text("set -e\n" + script)
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("MRCD_SOCKET", None)
    pcap = Path("/tmp/h0.pcapng")
    had_pcap = pcap.exists()
    poller = QpPoller(name, env)
    poller.start()
    t0 = time.monotonic()
    log = tmp_path / "tour.log"
    with log.open("w") as f:
        proc = subprocess.Popen(["bash", str(tmp_path / "tour.sh")], stdout=f,
                                stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
                                start_new_session=True)
    try:
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    finally:
        # Whatever the tour left running (a failed run's server): its own process
        # group, named by the PID of the bash this test started.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        poller.stop.set()
        poller.join(timeout=60)
        if subprocess.run(["mrc-fabric", "status", name], capture_output=True, env=env,
                          check=False).returncode == 0:
            subprocess.run(["mrc-fabric", "down", name], capture_output=True, env=env,
                           check=False, timeout=120)
        if not had_pcap:
            pcap.unlink(missing_ok=True)
        Path(f"/tmp/{name}.png").unlink(missing_ok=True)
    dt = time.monotonic() - t0
    out = log.read_text()
    print(out)
    print(f"tour: {dt:.0f} s, {poller.polls} polls ({poller.with_qps} with QPs): "
          f"{poller.states}")
    assert proc.returncode == 0, out
    assert out.count("verify: ok") == 2, out
    assert "differ" not in out, out
    # mrc-perf's table rows: #bytes #iterations peak average MsgRate errors verified ...
    row = re.compile(r"\s*(\d+)\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(\d+)\s+(yes|NO|-)\s")
    rows = [m.groups() for ln in out.splitlines() if (m := row.match(ln))]
    assert len(rows) >= 9 and all(r[1:] == ("0", "yes") for r in rows), rows
    assert rows[-1][0] == str(1 << 20), rows  # the -D 60 run's row
    assert poller.with_qps >= 10, "the poller saw the QPs too rarely"
    assert not any("ERROR" in s for s in poller.states.values()), poller.states
    assert dt >= 60
