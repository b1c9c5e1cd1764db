"""A host's counters never go back when a QP goes: the per-packet counters each QP keeps
as plain attributes (``rx_data``, ``tx_data``, ``tx_sack``, ``ack_held``) are folded
into the host's when the QP is destroyed (``Host.counters`` adds up only the live
ones). A metrics scraper takes a counter that decreases for a restart."""

from __future__ import annotations

import random

from mrcnet.core import HostConfig

from .harness import Net, connect, write_regions

SIZE = 64 << 10


def test_counters_keep_a_destroyed_qps_packets() -> None:
    net = Net(config=HostConfig())
    qa, qb = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    _dst1, _dst2, ms, md, _md2 = write_regions(net, random.Random(3), SIZE)
    ha.post_write(qa, 1, ms, 0, SIZE, md.addr, md.rkey)
    net.run(until=lambda: bool(ha.poll_cq(ha.qp(qa).cq, 1)))
    before = {h.name: h.counters() for h in (ha, hb)}
    assert before["h0"]["tx_data"] > 0 and before["h1"]["rx_data"] > 0
    assert before["h1"]["tx_sack"] > 0
    ha.destroy_qp(qa)
    hb.destroy_qp(qb)
    for h in (ha, hb):
        after = h.counters()
        for name in ("rx_data", "tx_data", "tx_sack"):
            assert after.get(name, 0) >= before[h.name].get(name, 0), (h.name, name)
    assert ha.counters()["tx_data"] == before["h0"]["tx_data"]
    assert hb.counters()["rx_data"] == before["h1"]["rx_data"]
