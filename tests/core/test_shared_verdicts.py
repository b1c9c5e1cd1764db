"""Shared path verdicts on the virtual clock (mrcnet/core/verdicts.py): a second QP of
the same host, to another peer behind the same leaf, avoids a path the first QP found
dead, without a loss of its own; and revives it when the first QP's probes do."""

from __future__ import annotations

from mrcnet.core import EVState, HostConfig
from mrcnet.wire import parse_frame

from .harness import Net, connect, ip

DEAD = (0, 1)  # plane 0, spine 1
LOSSES = ("lost_loss", "lost_timeout", "lost_tlp")


def _write(net: Net, a: int, b: int, qpn: int, npkts: int) -> None:
    ha, hb = net.h(a), net.h(b)
    src = bytearray(b"\x5a" * npkts * ha.config.mtu_payload)
    dst = bytearray(len(src))
    ms, md = ha.register_mr(src), hb.register_mr(dst)
    done = len(ha.qp(qpn).cq) + 1
    ha.post_write(qpn, 1, ms, 0, len(src), md.addr, md.rkey)
    net.run(until=lambda: len(ha.qp(qpn).cq) >= done, max_time=net.now + 1.0)
    assert dst == src


def _on_dead(net: Net, since: int, peer: int) -> int:
    """Data frames h0 sent to ``peer`` over the dead path since tx_log index ``since``."""
    n = 0
    for _, s, port, f in net.tx_log[since:]:
        if (s == "h0" and (port, net._spine(f)) == DEAD and parse_frame(f).is_data
                and ip(peer, port) in bytes(f)):
            n += 1
    return n


def _run(share: bool) -> tuple[Net, int, int]:
    net = Net(n_hosts=3, planes=2, spines=4, config=HostConfig(share_verdicts=share))
    net.log_tx = True
    q1, _ = connect(net, 0, 1)
    q2, _ = connect(net, 0, 2)
    net.imp.dead_paths.add(DEAD)
    _write(net, 0, 1, q1, 64)  # QP 1 meets the dead path and retires it
    assert any(i.state is EVState.ASSUMED_BAD for i in net.h(0).qp(q1).evm.evs.values()
               if (i.plane, i.path) == DEAD)
    return net, q1, q2


def test_second_qp_avoids_a_path_the_first_found_dead() -> None:
    net, _q1, q2 = _run(True)
    evm = net.h(0).qp(q2).evm
    dead = [i for i in evm.evs.values() if (i.plane, i.path) == DEAD]
    assert dead and all(i.state is EVState.ASSUMED_BAD for i in dead)
    mark = len(net.tx_log)
    _write(net, 0, 2, q2, 64)
    assert _on_dead(net, mark, 2) == 0
    stats = net.h(0).qp(q2).stats
    assert not any(stats.get(k) for k in LOSSES), stats
    assert net.h(0).verdicts.shared >= 1


def test_without_sharing_the_second_qp_pays_its_own_loss() -> None:
    """The control: the same run with per-QP verdicts only."""
    net, _q1, q2 = _run(False)
    mark = len(net.tx_log)
    _write(net, 0, 2, q2, 64)
    assert _on_dead(net, mark, 2) > 0
    stats = net.h(0).qp(q2).stats
    assert any(stats.get(k) for k in LOSSES), stats


def test_revival_is_shared() -> None:
    """The path comes back: the first QP's probes revive it, and the second QP with it
    (cause ``shared``), though the second never sent on it again."""
    net, q1, q2 = _run(True)
    net.imp.dead_paths.clear()
    h0 = net.h(0)
    net.run(until=lambda: not h0.verdicts.bad, max_time=net.now + 0.1)
    assert not h0.verdicts.bad
    for q in (q1, q2):
        assert all(i.state is EVState.GOOD for i in h0.qp(q).evm.evs.values()
                   if (i.plane, i.path) == DEAD)
    assert h0.verdicts.revived_shared >= 1
