"""RACK's tie pass asks for each tied packet's path RTT (mrcnet/core/tailloss.py
``_path_srtt``); with a dict kept for the pass, one walk over the EVs answers for every
path. The answers must be the ones the per-packet scan gives, on a real QP's EVs after
a transfer (some EVs measured, some not)."""

from __future__ import annotations

from mrcnet.constants import EV_PATH_SHIFT
from mrcnet.core import HostConfig
from mrcnet.core.tailloss import TailLoss

from .harness import Impairments, Net, connect


def test_one_walk_answers_as_the_scan_per_packet() -> None:
    # (ack_gap_fill off: with it, this transfer's SACKs leave no path whose measured
    # EVs disagree, the case the last check needs; the acknowledgement policy is not
    # what this test is about)
    net = Net(planes=2, spines=4, imp=Impairments(delay=5e-6, jitter=2e-6),
              config=HostConfig(ack_every=4, evs_per_qp=32, ack_gap_fill=False))
    qa, _ = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    mtu = ha.config.mtu_payload
    src = bytes(range(256)) * (24 * mtu // 256)
    ms, md = ha.register_mr(bytearray(src)), hb.register_mr(bytearray(len(src)))
    ha.post_write(qa, 0, ms, 0, len(src), md.addr, md.rkey)
    net.run(until=lambda: len(ha.qp(qa).cq) >= 1, max_time=1.0)
    rec = ha.qp(qa).rec
    evm = rec.evm
    assert evm is not None
    evs = list(evm.evs)
    scan = [rec._path_srtt(ev) for ev in evs]
    shared: dict[int, float] = {}  # (one dict for every question, as the tie pass keeps)
    assert [rec._path_srtt(ev, shared) for ev in evs] == scan
    assert [rec._path_srtt(ev, {}) for ev in evs] == scan
    # the Python walk (the reference) gives the C one's answers (mrcnet/core/sackrec.py)
    py: dict[int, float] = {}
    assert [TailLoss._path_srtt(rec, ev) for ev in evs] == scan
    assert [TailLoss._path_srtt(rec, ev, py) for ev in evs] == scan
    if shared:  # (filled by the C answers when a path had no measured EV)
        assert shared == py
    # Not vacuous: EVs answered by their own estimate, by another EV of their path, and
    # by nothing measured at all.
    own = {ev for ev in evs if evm.evs[ev].srtt}
    by_path = {ev for ev, r in zip(evs, scan, strict=True) if r and ev not in own}
    assert own and by_path and 0.0 in scan
    # ... and a path whose measured EVs disagree (the largest is its answer)
    assert any(len({evm.evs[o].srtt for o in own if o >> EV_PATH_SHIFT == ev >> EV_PATH_SHIFT})
               > 1 for ev in by_path)
    for ev in by_path:
        key = ev >> EV_PATH_SHIFT
        assert scan[evs.index(ev)] == max(evm.evs[o].srtt for o in own
                                          if o >> EV_PATH_SHIFT == key)
