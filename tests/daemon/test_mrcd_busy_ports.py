"""``busy_ports`` through two real mrcds on a veth pair: a transfer takes the ports out
of the event loop (the looks run their passes), every byte arrives, and afterwards,
with the ports back in the loop, a ping-pong finds each frame; a ping-pong alone never
takes them out; ``busy_ports = 0`` never does."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from mdnsutil import MrcdPair, VethPair, connect_qps, mrcd_pair_on, needs_root

from mrcnet.api import Context
from mrcnet.api.shmring import PRECISE

pytestmark = [needs_root, pytest.mark.skipif(not PRECISE, reason="the rings need C")]

WRITE = 1 << 20
WRITES = 64
RECV = "RECV_RDMA_WITH_IMM"


def _transfer_then_ping_pong(pair: MrcdPair, rounds: int = 20) -> tuple[int, int]:
    """WRITES verified 1 MiB writes ha -> hb, one at a time, a pause, then ``rounds``
    verified ping-pongs of 64-byte writes with immediates; each mrcd's ``busy_ports``
    count after the transfer."""
    with Context(pair.a.socket, busy_poll_us=0) as ca, \
            Context(pair.b.socket, busy_poll_us=0) as cb:
        c = connect_qps(ca, cb, 43, WRITE)
        qp_a, mr_a, cq_a, qp_b, mr_b, cq_b = c.qp_a, c.mr_a, c.cq_a, c.qp_b, c.mr_b, c.cq_b
        assert qp_a.peer is not None and qp_b.peer is not None
        for i in range(WRITES):
            mr_a.buf[:WRITE] = bytes([i]) * WRITE
            qp_a.post_write(mr_a, 0, WRITE, qp_a.peer.regions[0], wr_id=i)
            wcs = cq_a.wait(timeout=10)
            assert [(w.wr_id, w.ok) for w in wcs] == [(i, True)]
            assert bytes(mr_b.buf[:WRITE]) == bytes([i]) * WRITE, i
        busy = (ca.stats()["loop_passes"]["busy_ports"],
                cb.stats()["loop_passes"]["busy_ports"])
        time.sleep(0.05)  # the looks find nothing: the ports go back into the loops
        for i in range(rounds):
            qp_b.post_recv(wr_id=i)
            qp_a.post_recv(wr_id=i)
            for qp, src, cq, dst in ((qp_a, mr_a, cq_b, mr_b), (qp_b, mr_b, cq_a, mr_a)):
                assert qp.peer is not None
                src.buf[:64] = bytes([i]) * 64
                qp.post_write(src, 0, 64, qp.peer.regions[0], imm=i, wr_id=1000 + i)
                got = []
                while not got:
                    got = [w for w in cq.wait(timeout=5) if w.opcode == RECV]
                assert [(w.imm, w.ok) for w in got] == [(i, True)]
                assert bytes(dst.buf[:64]) == bytes([i]) * 64
        return busy


def test_a_transfer_takes_the_ports_out_and_the_loop_gets_them_back(
        veth: VethPair, tmp_path: Path) -> None:
    with mrcd_pair_on(veth, tmp_path, extra="busy_ports = 2") as pair:
        busy_a, busy_b = _transfer_then_ping_pong(pair)
    # the receiver reads batches of the writes' frames, its looks keep finding more
    assert busy_b >= 1, (busy_a, busy_b)


def test_never_at_zero(veth: VethPair, tmp_path: Path) -> None:
    with mrcd_pair_on(veth, tmp_path, extra="busy_ports = 0") as pair:
        busy = _transfer_then_ping_pong(pair, rounds=5)
    assert busy == (0, 0)
