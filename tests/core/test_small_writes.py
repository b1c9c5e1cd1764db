"""Many small writes queued together go out as one run (``Sender._emit_msgs``): the very
same frames, at the same moments, as one work request at a time, and the same
completions, through losses, duplicates, trims, jitter, immediates limited by
``max_imm_outstanding``, two remote regions and big writes mixed in."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mrcnet.core import HostConfig, WCStatus
from mrcnet.core.sender import Sender

from .harness import Impairments, Net, connect, write_regions


def _run(batch: bool, seed: int, loss: float, consecutive: bool = False
         ) -> tuple[list[Any], list[Any], bytes, int]:
    """A burst of posts on h0 -> h1; returns what h0 sent, its completions, what landed on
    h1 and how many packets went out in runs of several work requests. ``consecutive``:
    each write reads on where the one before it ended (as mrc-perf's do), so a run's
    payloads lie end to end in the region."""
    net = Net(seed=seed, config=HostConfig(mtu_payload=1024),
              imp=Impairments(loss=loss, dup=loss / 2, trim=loss, jitter=20e-6))
    net.log_tx = True
    qa, _qb = connect(net, 0, 1, recvs=400, attrs={"max_imm_outstanding": 3})
    ha = net.h(0)
    rng = random.Random(seed)
    dst1, dst2, ms, m1, m2 = write_regions(net, rng)
    snd = ha.qp(qa).snd
    snd.batch_msgs = batch
    in_runs = 0
    send_msgs = snd._send_msgs

    def counting(now: float, ts: int, evs: list[int], *rest: Any) -> None:
        nonlocal in_runs
        if len(evs) > 1:
            in_runs += len(evs)
        send_msgs(now, ts, evs, *rest)

    snd._send_msgs = counting  # type: ignore[method-assign]
    wr = nxt = 0
    for _burst in range(6):
        for _ in range(rng.randint(20, 120)):
            big = rng.random() < 0.05
            length = rng.randint(1025, 5000) if big else rng.choice([0, 1, 64, 1024])
            off = rng.randrange(0, (1 << 16) - length)
            if consecutive:
                off, nxt = nxt, nxt + length
                if nxt > 1 << 16:  # wrap to the region's start
                    off, nxt = 0, length
            md = m1 if rng.random() < 0.7 else m2
            imm = rng.randint(0, 1 << 31) if rng.random() < 0.1 else None
            ha.post_write(qa, wr, ms, off, length, md.addr + off, md.rkey, imm=imm)
            wr += 1
        net.run(until=lambda: False, max_time=net.now + rng.choice([0.0, 0.0005, 0.01]))
    total = wr
    cq = ha.qp(qa).cq
    got: list[Any] = []
    net.run(until=lambda: len(got) + len(cq) >= total, max_time=net.now + 10.0)
    got += ha.poll_cq(cq, 10_000)
    assert net.internal_errors() == 0
    frames = [(t, s, p, bytes(f)) for t, s, p, f in net.tx_log]
    return frames, got, bytes(dst1) + bytes(dst2), in_runs


@pytest.mark.parametrize(("seed", "loss", "consecutive"),
                         [(1, 0.0, False), (2, 0.0, False), (3, 0.02, False),
                          (4, 0.05, False), (5, 0.0, True), (6, 0.03, True)])
def test_small_writes_in_runs_send_what_one_at_a_time_sends(seed: int, loss: float,
                                                            consecutive: bool) -> None:
    frames, wcs, landed, in_runs = _run(True, seed, loss, consecutive)
    frames0, wcs0, landed0, in_runs0 = _run(False, seed, loss, consecutive)
    assert in_runs0 == 0 and in_runs > 50  # (the runs did happen)
    assert len(frames) == len(frames0)
    assert frames == frames0
    assert wcs == wcs0
    assert landed == landed0
    # every write completed once, in order, successfully
    assert [c.wr_id for c in wcs] == list(range(len(wcs)))
    assert all(c.status is WCStatus.SUCCESS for c in wcs)


def test_sender_batches_by_default() -> None:
    net = Net()
    qa, _ = connect(net, 0, 1)
    snd: Sender = net.h(0).qp(qa).snd
    assert snd.batch_msgs


def test_post_writes_is_post_write_each_all_or_none() -> None:
    """Host.post_writes queues what post_write of each would (same frames); one bad
    write among them: InvalidRequest naming it, and nothing is queued."""
    from mrcnet.errors import InvalidRequest

    sent = []
    for bulk in (False, True):
        net = Net(seed=9)
        net.log_tx = True
        qa, _ = connect(net, 0, 1, recvs=20)
        ha, hb = net.h(0), net.h(1)
        ms = ha.register_mr(bytearray(range(256)) * 16)
        md = hb.register_mr(bytearray(4096))
        writes = [(i, i * 16, 16, md.addr + i * 16, md.rkey, i if i % 5 == 0 else None)
                  for i in range(100)]
        if bulk:
            bad = [*writes[:50], (50, 4090, 16, md.addr, md.rkey, None), *writes[51:]]
            with pytest.raises(InvalidRequest, match="write 50 of 100: local range"):
                ha.post_writes(qa, ms, bad)
            assert not ha.qp(qa).sq
            ha.post_writes(qa, ms, writes)
        else:
            for w in writes:
                ha.post_write(qa, w[0], ms, *w[1:])
        cq = ha.qp(qa).cq
        net.run(until=lambda: len(cq) >= 100, max_time=2.0)  # noqa: B023
        assert [c.wr_id for c in ha.poll_cq(cq, 200)] == list(range(100))
        sent.append([bytes(f) for _, _, _, f in net.tx_log])
    assert sent[0] == sent[1]


def test_post_writes_to_a_qp_that_cannot_send_are_refused() -> None:
    """A QP still in RESET takes no writes, together or one by one (the same error)."""
    from mrcnet.errors import InvalidRequest

    net = Net()
    h = net.h(0)
    qpn = h.create_qp(h.create_cq())
    mr = h.register_mr(bytearray(64))
    with pytest.raises(InvalidRequest, match="post in INIT, RTR or RTS"):
        h.post_writes(qpn, mr, [(1, 0, 8, 0, 1, None)])
    with pytest.raises(InvalidRequest, match="post in INIT, RTR or RTS"):
        h.post_write(qpn, 1, mr, 0, 8, 0, 1)
    assert not h.qp(qpn).sq
