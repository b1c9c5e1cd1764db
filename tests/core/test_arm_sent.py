"""New packets arm the requester's timers in one call (``TailLoss.arm_sent``): the
retransmission timer unless one is armed (the EV's RTO, backed off in a retry round),
then the tail-loss probe, the same values as ``rto``, ``backoff`` and ``arm_tlp`` one
after the other give, with one Python frame of the recovery's per run besides ``rto``."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from mrcnet.core import HostConfig

from .harness import Net, connect, write_regions
from .pycalls import python_calls

_INF = float("inf")
_MTU = 1024


def _qp(**cfg: Any) -> tuple[Net, Any, Any]:
    """A connected QP of host 0 and a region to write from/to (the C fast path's
    recovery, ``rto`` in C, when the module is built)."""
    net = Net(seed=1, config=HostConfig(mtu_payload=_MTU, **cfg))
    qa, _ = connect(net, 0, 1)
    _, _, ms, m1, _ = write_regions(net, random.Random(1))
    return net, net.h(0).qp(qa), (qa, ms, m1)


def _post(net: Net, qwr: Any, lengths: list[int]) -> None:
    qa, ms, m1 = qwr
    off = 0
    for j, n in enumerate(lengths):
        net.h(0).post_write(qa, j, ms, off, n, m1.addr + off, m1.rkey)
        off += n


@pytest.mark.parametrize("lengths", [[3 * _MTU], [8, 8, 8, 8]])
def test_one_recovery_call_per_run(lengths: list[int]) -> None:
    """A run of one write and a run of small writes (``_emit_msgs``): ``arm_sent`` once,
    ``rto`` once (the timer was not armed), no ``backoff`` (no retry round), no
    ``arm_tlp``."""
    net, qp, qwr = _qp()
    _post(net, qwr, lengths)
    assert qp.rec.rto_at == _INF
    frames: list[tuple[int, bytes]] = []
    seen = Counter(name.rpartition(".")[2]
                   for name in python_calls(lambda: qp.snd.emit(net.now, frames)))
    assert len(frames) == sum(-(-n // _MTU) for n in lengths)
    assert seen["arm_sent"] == 1
    assert seen["rto"] == 1
    assert seen["backoff"] == 0 and seen["arm_tlp"] == 0
    assert qp.rec.rto_at < _INF


def _old_way(rec: Any, ev: int, now: float) -> None:
    """What emit did before: the three calls."""
    if rec.rto_at == _INF:
        rec.rto_at = now + rec.rto(ev) * rec.backoff()
        rec.qp.tv += 1
    rec.arm_tlp(now)


@pytest.mark.parametrize("retries", [0, 1, 3, 7])
@pytest.mark.parametrize("armed", [False, True])
@pytest.mark.parametrize("tlp_fail_rtt", [False, True])
def test_same_timers_as_the_three_calls(retries: int, armed: bool,
                                        tlp_fail_rtt: bool) -> None:
    """With packets in flight, an RTT learnt, in and out of a retry round (backed off
    past ``retry_linear``), an RTO armed or not: ``arm_sent`` sets ``rto_at``,
    ``tlp_at`` and the QP's timer version exactly as ``rto * backoff`` then
    ``arm_tlp`` do; ``ev`` -1 arms the probe only (``arm_tlp``)."""
    net, qp, qwr = _qp(tlp_fail_rtt=tlp_fail_rtt)
    _post(net, qwr, [4 * _MTU])
    frames: list[tuple[int, bytes]] = []
    qp.snd.emit(net.now, frames)
    rec = qp.rec
    rec.srtt, rec.rttvar = 7e-6, 2e-6
    rec.retries = retries
    ev = rec.txt.get(rec.txt.inflight()[0])[0]
    now = net.now + 3e-6
    got = []
    for way in (lambda: rec.arm_sent(now, ev), lambda: _old_way(rec, ev, now),
                lambda: rec.arm_sent(now), lambda: rec.arm_tlp(now)):
        rec.rto_at = now + 1.0 if armed else _INF
        rec.tlp_at, rec.tlp_sent = _INF, False
        tv = qp.tv
        way()
        got.append((rec.rto_at, rec.tlp_at, qp.tv - tv))
    assert got[0] == got[1]
    assert got[2] == got[3]
    assert got[0][1] < _INF  # (the probe was armed)
    if not armed:
        assert got[0][0] != got[2][0]  # (only the first armed the RTO)
        # in a retry round past retry_linear the timeout is backed off
        k = retries - qp.retry_linear
        assert got[0][0] == now + rec.rto(ev) * (float(1 << k) if k > 0 else 1.0)
