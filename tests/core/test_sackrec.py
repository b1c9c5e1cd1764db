"""The sender's SACK decisions in C (mrcnet/_csrc/sackrec.c, mrcnet/core/sackrec.py
``CRecovery``) against their pure-Python reference (``Recovery._sack_news``, the EVs'
numbers in ``EVInfo``), record by record: the same simulated runs with both, the
requester's whole state compared after every batch of the receive lane's SACK records
(RTT estimates, RACK's tie, burst counters, reorder allowance, every EV's numbers and
state, NSCC's window and state, the QP's counters). The runs are chosen to reach the
records C leaves to Python (ASSUMED_BAD EVs, "declared lost" records, retry rounds) as
well as ECN echoes, window penalties and stale cumulative points."""

from __future__ import annotations

from typing import Any

import pytest

from mrcnet.constants import SackMode
from mrcnet.core import evs
from mrcnet.core.recovery import Recovery
from mrcnet.core.rxlane import RX_ACK_INTS
from mrcnet.core.sackrec import CRecovery
from mrcnet.native import HAVE_C
from mrcnet.sim.failures import parse_failure
from mrcnet.sim.matrix import incast, permutation
from mrcnet.sim.runner import SimRun
from mrcnet.sim.topology import parse_topology

from .harness import Net, connect

pytestmark = pytest.mark.skipif(not HAVE_C, reason="C fast path not built")

_NSCC = ("cwnd", "base_rtt", "delay", "delay_prev", "srtt", "last_md", "last_qa",
         "qa_pending", "quadrant")


def _state(rec: Recovery) -> tuple[Any, ...]:
    """Everything a SACK record's decisions may write, as plain values."""
    evm, cc = rec.evm, rec.cc
    assert evm is not None and cc is not None
    return (
        rec.snd_una, rec.srtt, rec.rttvar, rec.min_rtt, rec.rack_tie, rec.sack_acked,
        rec.sack_pending, rec.tlp_sent, rec.retries, rec.reo_scale, rec.reo_clean,
        rec.reo_learned, rec.reo_last, sorted(rec.lost_log), sorted(rec.suspects),
        [(i.ev, i.state, i.srtt, i.rttvar, i.min_rtt, i.acked, i.ecn, i.lost, i.trimmed)
         for i in evm.evs.values()], sorted(rec.rtx_q), rec.txt.ninfl,
        [getattr(cc, k) for k in _NSCC], sorted(rec.qp.stats.items()),
    )


def _run(monkeypatch: pytest.MonkeyPatch, native: bool, spec: str, flows: list[Any],
         fails: list[str], seed: int,
         host_config: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    """One run; the state of each QP after each batch of records, in order."""
    log: list[tuple[Any, ...]] = []
    lane_batches: list[int] = []  # the lane's arrays handed over (the receive loop's way)
    cls = CRecovery if native else Recovery
    orig, orig_after, orig_nack = cls.on_sack_records, cls.after_sacks, cls.on_nack
    orig_lane = cls.on_lane_records
    inside: list[int] = []  # (Recovery.on_lane_records calls on_sack_records: log once)

    def logged(self: Recovery, ints: list[int], sents: list[float], now: float) -> None:
        orig(self, ints, sents, now)
        if not inside:
            log.append((now, self.qp.qpn, len(sents), _state(self)))

    def logged_lane(self: Recovery, recs: Any, sents: Any, n: int, now: float) -> None:
        inside.append(n)
        try:
            orig_lane(self, recs, sents, n, now)
        finally:
            inside.pop()
        lane_batches.append(n)
        log.append((now, self.qp.qpn, n, _state(self)))

    def logged_after(self: Recovery, now: float) -> None:
        orig_after(self, now)  # (RACK, its tie pass included)
        log.append((now, self.qp.qpn, 0, _state(self), self.rack_at, self.rto_at,
                    self.tlp_at, sorted(self.rtx_q)))

    def logged_nack(self: Recovery, n: Any, now: float) -> None:
        orig_nack(self, n, now)
        log.append((now, self.qp.qpn, 0, _state(self) if self.evm else None, n.nack_psn))

    with monkeypatch.context() as m:
        m.setattr(evs, "NATIVE", native)
        m.setattr(cls, "on_sack_records", logged)
        m.setattr(cls, "on_lane_records", logged_lane)
        m.setattr(cls, "on_nack", logged_nack)
        m.setattr(cls, "after_sacks", logged_after)
        run = SimRun(parse_topology(spec), flows, seed=seed,
                     failures=[parse_failure(f) for f in fails], host_config=host_config)
        res = run.run()
        assert res.summary()["completed"] == len(flows)
        made = [q.rec for h in run.hosts for q in h._qps.values()]
        assert all(isinstance(r, CRecovery) is native for r in made)
        if native:
            _run.c_records = sum(r.c_records for r in made)  # type: ignore[attr-defined]
        _run.lane_records = sum(lane_batches)  # type: ignore[attr-defined]
    return log


@pytest.mark.parametrize(("spec", "flows", "fails", "seed"), [
    # incast with trimming: ECN echoes, window penalties, trims' skips
    ("leafspine:planes=2,spines=4,leaves=2,hosts=4", incast(range(1, 8), 0, 4 << 20), [], 1),
    # a dead link and 1 % loss: losses declared, paths suspected and retired, late
    # arrivals, retry rounds (the records C leaves to Python)
    ("leafspine:planes=2,spines=4,leaves=4,hosts=4", permutation(16, 1 << 20, seed=3),
     ["link:L0.1-S0.2@50us:down", "loss:*=1%"], 7),
])
def test_c_records_decide_as_python(monkeypatch: pytest.MonkeyPatch, spec: str,
                                    flows: list[Any], fails: list[str], seed: int) -> None:
    py = _run(monkeypatch, False, spec, flows, fails, seed)
    c = _run(monkeypatch, True, spec, flows, fails, seed)
    assert len(c) == len(py)
    for k, (a, b) in enumerate(zip(c, py, strict=True)):
        assert a == b, f"batch {k} of {len(py)} (time {b[0]}, QP {b[1]}) differs"
    records = sum(entry[2] for entry in py)
    made_in_c = _run.c_records  # type: ignore[attr-defined]
    # Not vacuous: the lane took hundreds of SACKs and C made their decisions (the
    # lane takes none while a loss is being dealt with: the uncommon records are rare
    # in whole runs, hence the next test)
    assert records > 300 and made_in_c == records
    # ... every one of them handed over as the lane's own arrays (take_ack_n)
    assert _run.lane_records == records  # type: ignore[attr-defined]


def test_prompt_rack_decides_as_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """``HostConfig.rack_prompt`` (RACK's and the probe's shorter wait for a packet the
    peer reports at once: Python's ``_prompt_losses`` before C's pass, the probe's hold
    in ``mrc_sack_after``) decides as the pure-Python path, batch by batch, through a
    dead link and 1 % loss; and it moves decisions (its losses come sooner)."""
    spec = "leafspine:planes=2,spines=4,leaves=4,hosts=4"
    flows = permutation(16, 1 << 20, seed=3)
    fails = ["link:L0.1-S0.2@50us:down", "loss:*=1%"]
    cfg = {"rack_prompt": True}
    py = _run(monkeypatch, False, spec, flows, fails, 7, cfg)
    c = _run(monkeypatch, True, spec, flows, fails, 7, cfg)
    assert len(c) == len(py)
    for k, (a, b) in enumerate(zip(c, py, strict=True)):
        assert a == b, f"batch {k} of {len(py)} (time {b[0]}, QP {b[1]}) differs"
    assert py != _run(monkeypatch, False, spec, flows, fails, 7, {"rack_prompt": False})


def _sending(monkeypatch: pytest.MonkeyPatch, native: bool) -> tuple[Net, Recovery]:
    """A QP part-way through a write (packets in flight, RTTs measured), C or Python."""
    with monkeypatch.context() as m:
        m.setattr(evs, "NATIVE", native)
        net = Net(planes=2, spines=4, seed=5)
        qa, _ = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    mr, md = ha.register_mr(bytearray(4 << 20)), hb.register_mr(bytearray(4 << 20))
    ha.post_write(qa, 0, mr, 0, 4 << 20, md.addr, md.rkey)
    rec = ha.qp(qa).rec
    net.run(until=lambda: rec.srtt > 0 and rec.txt.ninfl > 20, max_time=1.0)
    assert isinstance(rec, CRecovery) is native
    return net, rec


def test_every_kind_of_record_decides_as_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random batches of records on a QP in flight, the same to both: the common case
    (RTT samples or none, ECN echoes, penalties, stale points, unknown EVs) and the
    records C leaves to Python (an ASSUMED_BAD EV, ALWAYS_SKIP, retry rounds, a
    "declared lost" record), mixed in one batch; the state compared after each."""
    import random

    (net_py, py), (net_c, c) = (_sending(monkeypatch, False), _sending(monkeypatch, True))
    assert _state(py) == _state(c) and net_py.now == net_c.now
    rng = random.Random(11)
    now = net_c.now
    assert py.evm is not None and c.evm is not None
    evlist = list(py.evm.evs)
    fed, made0 = 0, c.c_records
    for batch in range(300):
        now += rng.uniform(0, 20e-6)
        r = rng.random()
        for rec in (py, c):  # (the same change to both, between batches)
            assert rec.evm is not None
            if r < 0.05:
                rec.evm.assume_bad(evlist[batch % len(evlist)], now, "loss")
            elif r < 0.08:
                rec.retries = 1 - min(rec.retries, 1)
            elif r < 0.1:
                rec.lost_log[rec.snd_una + 1] = (evlist[0], 7, now, True, 40e-6)
            elif r < 0.3:
                rec.lost_log.clear()
            elif r < 0.35:
                rec.after_sacks(now)
        ints: list[int] = []
        sents: list[float] = []
        una = py.snd_una
        for _ in range(rng.randint(1, 12)):
            cack = una + rng.randint(-3, 6)
            mode = rng.choice([SackMode.NONE] * 10 + [SackMode.SKIP_ONCE] * 3
                              + [SackMode.ALWAYS_SKIP])
            tx = rng.choice([0, 1, 1, 1, 2])
            ev = rng.choice(evlist) if rng.random() < 0.95 else 0x8FFFF001
            ints += [cack, rng.choice([0, 4096, 4096, 8192]), tx, ev, rng.getrandbits(16),
                     cack + rng.randint(-2, 2), int(mode == SackMode.SKIP_ONCE), mode,
                     rng.randrange(128) if rng.random() < 0.05 else 0, 0]
            sents.append(now - rng.uniform(5e-6, 40e-6) if tx else 0.0)
            una = max(una, cack)
        assert len(ints) == RX_ACK_INTS * len(sents)
        py.on_sack_records(ints, sents, now)
        c.on_sack_records(ints, sents, now)
        assert _state(c) == _state(py), f"batch {batch}"
        fed += len(sents)
    assert isinstance(c, CRecovery)
    made = c.c_records - made0
    # both kinds were made: C's, and the ones it left to Python
    assert fed // 2 < made < fed


@pytest.mark.parametrize("ack_every", [1, 4])
def test_tie_pass_decides_as_python(monkeypatch: pytest.MonkeyPatch, ack_every: int) -> None:
    """RACK's tie pass in C (``mrc_rack_tied``) finds a burst's lost packet as the Python
    pass does, at the same moment, on a measured path and (SACKs every fourth packet) on
    a path never sampled (test_tail_loss.py's cases)."""
    from .test_tail_loss import _write_losing

    out = []
    for native in (False, True):
        with monkeypatch.context() as m:
            m.setattr(evs, "NATIVE", native)
            out.append(_write_losing(0, 4, ack_every=ack_every))
    assert out[0] == out[1]
    assert out[1][1].get("loss_rack_tie") == 1


def test_after_config_decides_as_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """``mrc_sack_after``'s config inputs, filled once per QP (``struct mrc_sack_cfg``,
    ``CRecovery._after_config``) with values other than the defaults, decide as the
    pure-Python path batch by batch through a dead link and 1 % loss; the struct holds
    the config's values, and a new ack timeout (modify_qp's) is taken at the next call."""
    spec = "leafspine:planes=2,spines=4,leaves=4,hosts=4"
    flows = permutation(16, 1 << 20, seed=3)
    fails = ["link:L0.1-S0.2@50us:down", "loss:*=1%"]
    cfg = {"rack_floor": 7e-6, "rack_hold": 3e-6, "tlp_hold": 2e-6, "tlp_srtts": 3.0,
           "tlp_prompt": True, "rack_tie_break": False}
    py = _run(monkeypatch, False, spec, flows, fails, 7, cfg)
    c = _run(monkeypatch, True, spec, flows, fails, 7, cfg)
    assert len(c) == len(py)
    for k, (a, b) in enumerate(zip(c, py, strict=True)):
        assert a == b, f"batch {k} of {len(py)} (time {b[0]}, QP {b[1]}) differs"
    assert py != _run(monkeypatch, False, spec, flows, fails, 7)  # (the values matter)

    monkeypatch.setattr(evs, "NATIVE", True)
    run = SimRun(parse_topology(spec), flows, seed=7, host_config=cfg)
    run.run()
    recs = [q.rec for h in run.hosts for q in h._qps.values()
            if isinstance(q.rec, CRecovery) and q.rec._acfg_of is not None]
    assert recs
    r = recs[0]
    k = r._acfg
    assert (k.rack_floor, k.hold, k.tlp_hold, k.tlp_srtts, k.prompt, k.tie_break,
            k.tail_probe) == (7e-6, 3e-6, 2e-6, 3.0, 2, 0, 1)
    assert k.ack_timeout == r.attrs.ack_timeout_s
    r.attrs.timeout += 1  # (as modify_qp sets it)
    r.after_sacks(run.sim.now)
    assert k.ack_timeout == r.attrs.ack_timeout_s
