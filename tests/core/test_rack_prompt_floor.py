"""``HostConfig.rack_prompt_floor`` (mrcnet/core/tailloss.py ``_prompt_losses``): the
floor of ``rack_prompt``'s reorder window as a fraction of the minimum RTT (0.5 by
default; the collective tuning's 0.25 is RFC 8985's min_RTT / 4). A message's last packet
lost to a dead peer is due for RACK at its send time + RACK's RTT + that window, on a QP
whose RTT samples show no queueing (so the floor is the window)."""

from __future__ import annotations

import pytest

from mrcnet.core import HostConfig
from mrcnet.core.txtable import E_SENT
from mrcnet.errors import InvalidAttribute

from .harness import Impairments, Net, connect

MIN_RTT = 12e-6


def _due_after_send(floor: float) -> float:
    """How long after its send + RACK's RTT a one-packet write's packet is due to be
    declared lost, on a QP whose peer went dead once its RTT was learnt (virtual time)."""
    imp = Impairments()
    net = Net(imp=imp, config=HostConfig(rack_prompt=True, rack_prompt_floor=floor))
    qa, _ = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    ms, md = ha.register_mr(bytearray(4096)), hb.register_mr(bytearray(4096))
    ha.post_write(qa, 0, ms, 0, 64, md.addr, md.rkey)  # (RTT samples first)
    net.run(until=lambda: len(ha.qp(qa).cq) >= 1, max_time=1.0)
    imp.dead_hosts.add("h1")
    ha.post_write(qa, 1, ms, 0, 64, md.addr, md.rkey)
    net.run(until=lambda: bool(ha.qp(qa).rec.txt.inflight()), max_time=1.0)
    rec = ha.qp(qa).rec
    (seq,) = rec.txt.inflight()
    sent = rec.txt.get(seq)[E_SENT]
    # A queue-free QP: the floor is the window (4 rttvar and srtt - min_RTT below it)
    rec.min_rtt, rec.srtt, rec.rttvar = MIN_RTT, MIN_RTT, 0.0
    rtt = rec.txt.rack_rtt  # (the last delivered packet's RTT: the first write's)
    # (RACK's bound: a packet sent after it was delivered, a nanosecond later)
    due = rec._prompt_losses(sent + 1e-9, rec._reorder_allowance() + rtt, sent,
                             declare=False)
    return due - sent - rtt


@pytest.mark.parametrize("floor", [0.5, 0.25])
def test_window_floor_is_the_fraction_of_min_rtt(floor: float) -> None:
    assert _due_after_send(floor) == pytest.approx(floor * MIN_RTT)


def test_floor_must_not_be_negative() -> None:
    with pytest.raises(InvalidAttribute, match="rack_prompt_floor"):
        HostConfig(rack_prompt_floor=-0.1)
