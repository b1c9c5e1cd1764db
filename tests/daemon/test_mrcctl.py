"""mrcctl against a live mrcd: list QPs and EVs, deny an EV mid-transfer and see its
traffic stop while the other EVs carry on, allow it and see it carry traffic again."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from mdnsutil import MrcdPair, needs_root

from mrcnet.api import Context
from mrcnet.api.client import CompletionQueue, MemoryRegion, QueuePair, RemoteRegion

CHUNK = 256 * 1024
DEPTH = 8


class Transfer:
    """Keeps DEPTH writes of CHUNK bytes in flight on one QP for as long as it is pumped."""

    def __init__(self, qp: QueuePair, cq: CompletionQueue, mr: MemoryRegion,
                 remote: RemoteRegion) -> None:
        self.qp, self.cq, self.mr, self.remote = qp, cq, mr, remote
        self.outstanding = 0
        self.done = 0

    def pump(self) -> None:
        while self.outstanding < DEPTH:
            self.qp.post_write(self.mr, 0, CHUNK, self.remote, wr_id=self.done)
            self.outstanding += 1
        for w in self.cq.wait(timeout=0.05):
            assert w.ok, w
            self.outstanding -= 1
            self.done += 1

    def run_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.pump()


def mrcctl(t: Transfer, sock: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run mrcctl as a separate process, keeping the transfer going meanwhile."""
    proc = subprocess.Popen([sys.executable, "-m", "mrcnet.ctl", *args, "--socket", sock],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while proc.poll() is None:
        assert time.monotonic() < deadline, "mrcctl hung"
        t.pump()
    out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def ctl_json(t: Transfer, sock: str, *args: str) -> Any:
    r = mrcctl(t, sock, *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def sent(t: Transfer, sock: str, qpn: int) -> dict[int, int]:
    return {e["ev"]: e["sent"] for e in ctl_json(t, sock, "evs", str(qpn))["evs"]}


@needs_root
def test_mrcctl_deny_and_allow_an_ev_on_a_live_qp(mrcd_pair: MrcdPair) -> None:
    a, b = mrcd_pair.a, mrcd_pair.b
    with Context(b.socket) as cb, Context(a.socket) as ca:
        mr_b = cb.alloc_mr(CHUNK)
        qp_b = cb.create_qp(cb.create_cq())
        cb.listen(1, qp_b, expose=[mr_b])
        mr_a = ca.alloc_mr(CHUNK)
        cq_a = ca.create_cq()
        qp_a = ca.create_qp(cq_a)
        peer = qp_a.connect("hb", 1)
        t = Transfer(qp_a, cq_a, mr_a, peer.regions[0])
        t.run_for(0.5)

        # The QP list (JSON and table) shows the live QP, owned by this process.
        qps = ctl_json(t, a.socket, "qps")
        (mine,) = [q for q in qps["qps"] if q["qpn"] == qp_a.qpn]
        assert mine["state"] == "RTS" and mine["peer"] == "hb"
        assert mine["counters"]["tx_data"] > 0
        table = mrcctl(t, a.socket, "qps")
        assert table.returncode == 0 and str(qp_a.qpn) in table.stdout, table
        assert "STATE" in mrcctl(t, a.socket, "evs", str(qp_a.qpn)).stdout
        assert "tx_frames" in json.dumps(ctl_json(t, a.socket, "ports"))
        prof = ctl_json(t, a.socket, "profiles")
        assert "spray" in prof["ev_profiles"] and "nscc" in prof["cc_profiles"]
        assert "(default)" in mrcctl(t, a.socket, "profiles").stdout

        # Probes to a directly cabled peer ([peers]): one path, answered, by name or address.
        for host in ("hb", mrcd_pair.veth.ip_b):
            pr = ctl_json(t, a.socket, "probe", host, "--count", "3")
            assert pr["peer"] == "hb" and pr["hello"] == "ok", pr
            (path,) = pr["paths"]
            assert (path["plane"], path["sent"], path["answered"]) == (0, 3, 3), pr

        evs = ctl_json(t, a.socket, "evs", str(qp_a.qpn))["evs"]
        used = [e["ev"] for e in evs if e["state"] == "GOOD" and e["sent"] > 0]
        assert len(used) >= 2, evs
        victim = used[0]

        # Deny: its sent counter stops, the others keep growing.
        d = ctl_json(t, a.socket, "deny", str(qp_a.qpn), str(victim))
        assert d["state"] == "DENIED"
        t.run_for(0.3)  # let what was already queued on it go
        before = sent(t, a.socket, qp_a.qpn)
        t.run_for(1.0)
        after = sent(t, a.socket, qp_a.qpn)
        assert after[victim] == before[victim], (before, after)
        assert sum(after.values()) - sum(before.values()) > 100, (before, after)

        # Allow: it carries traffic again.
        r = ctl_json(t, a.socket, "allow", str(qp_a.qpn), str(victim))
        assert r["state"] != "DENIED"
        t.run_for(1.0)
        again = sent(t, a.socket, qp_a.qpn)
        assert again[victim] > after[victim], (after, again)

        # Errors: one clean line on stderr and a non-zero exit.
        bad = mrcctl(t, a.socket, "deny", "999999", "0")
        assert bad.returncode != 0 and bad.stdout == ""
        assert bad.stderr.count("\n") == 1 and "no QP 999999" in bad.stderr, bad.stderr
        assert t.done > 0
