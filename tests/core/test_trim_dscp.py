"""The NACK reason of a trim comes from the DSCP the switch marked (virtual clock).

TRIMMED_LASTHOP (the leaf's port to the receiver trimmed: incast) is NACKed with that
reason and moves no EV; TRIMMED (a trim elsewhere) is NACKed TRIMMED and SKIPs the EV."""

from __future__ import annotations

from typing import Any

import pytest

from mrcnet.constants import NackReason
from mrcnet.core import EVState, PathStateChanged
from mrcnet.wire import parse_frame

from .harness import Impairments, Net, connect


def _events(host: Any) -> list[Any]:
    out = []
    while (e := host.next_event()) is not None:
        out.append(e)
    return out


def _trim_one(lasthop: bool) -> tuple[Net, int, int, list[Any], list[Any]]:
    """Write 16 KiB; the switch trims the first data frame, marked per ``lasthop``."""
    imp = Impairments(trim_lasthop=lasthop)
    net = Net(n_hosts=2, planes=1, spines=4, imp=imp)
    qa, _ = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    _events(ha)
    trimmed: list[int] = []

    def trim_first(f: bytes) -> bool:
        p = parse_frame(f)
        if p.is_data and not trimmed:
            trimmed.append(p.ev)
            return True
        return False

    imp.trim_if = trim_first
    net.log_tx = True
    size = 16 * 1024
    src = bytearray(bytes(range(256)) * (size // 256))
    dst = bytearray(size)
    ms, md = ha.register_mr(src), hb.register_mr(dst)
    ha.post_write(qa, 1, ms, 0, size, md.addr, md.rkey)
    net.run(until=lambda: len(ha.qp(qa).cq) > 0, max_time=1.0)
    assert dst == src and trimmed
    nacks = [n for _, name, _, f in net.tx_log
             if name == "h1" and (n := parse_frame(f).neth) is not None]
    return net, qa, trimmed[0], nacks, _events(ha)



@pytest.mark.parametrize("lasthop", [True, False])
def test_trim_reason_follows_the_dscp(lasthop: bool) -> None:
    net, qa, ev, nacks, events = _trim_one(lasthop)
    want = NackReason.TRIMMED_LASTHOP if lasthop else NackReason.TRIMMED
    assert [(n.reason, n.entropy) for n in nacks] == [(want, ev)]
    c = net.h(1).counters()
    assert c["rx_trimmed"] == 1 and c["tx_nack"] == 1
    assert c.get("rx_trimmed_lasthop", 0) == c.get("tx_nack_lasthop", 0) == int(lasthop)
    moves = [e for e in events if isinstance(e, PathStateChanged)]
    if lasthop:
        assert moves == []  # no SKIP, no blame
        assert net.h(0).ev_stats(qa)[ev]["state"] == EVState.GOOD.value
    else:
        assert moves[0] == PathStateChanged(qa, ev, EVState.GOOD, EVState.SKIP, "trim")
    assert net.h(0).ev_stats(qa)[ev]["trimmed"] == 1


def test_trims_on_many_paths_are_not_guessed_last_hop() -> None:
    """Trims close together on every path of a plane, marked TRIMMED: the receiver
    believes the DSCP (no timing guess), so all are NACKed TRIMMED."""
    imp = Impairments()
    net = Net(n_hosts=2, planes=1, spines=4, imp=imp, seed=2)
    qa, _ = connect(net, 0, 1)
    n = [0]

    def every_third(f: bytes) -> bool:
        n[0] += 1
        return len(f) > 1000 and n[0] % 3 == 0

    imp.trim_if = every_third
    net.log_tx = True
    size = 256 * 1024
    ha, hb = net.h(0), net.h(1)
    src = bytearray(bytes(range(256)) * (size // 256))
    dst = bytearray(size)
    ms, md = ha.register_mr(src), hb.register_mr(dst)
    ha.post_write(qa, 1, ms, 0, size, md.addr, md.rkey)
    net.run(until=lambda: len(ha.qp(qa).cq) > 0, max_time=1.0)
    assert dst == src
    reasons = {n.reason for _, name, _, f in net.tx_log
               if name == "h1" and (n := parse_frame(f).neth) is not None}
    assert reasons == {NackReason.TRIMMED}
