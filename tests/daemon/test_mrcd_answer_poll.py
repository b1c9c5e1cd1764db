"""mrcd's looks through two real mrcds on a veth pair. ``answer_poll_us``: after a port
pass woke a client for its completions, mrcd looks at that client's send queue for its
answer, and takes the answer's post there (no doorbell, no wake-up of mrcd); with
``answer_poll_us = 0`` it never looks. ``idle_poll_us``: before its loop sleeps, mrcd
looks at its ports and clients' sockets, and the round trip's next frame or post is
found there. Every byte of the ping-pong checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from mdnsutil import MrcdPair, VethPair, connect_qps, mrcd_pair_on, needs_root

from mrcnet.api import Context
from mrcnet.api.client import CompletionQueue, MemoryRegion, QueuePair, WorkCompletion
from mrcnet.api.shmring import PRECISE

pytestmark = [needs_root, pytest.mark.skipif(not PRECISE, reason="the rings need C")]

ROUNDS = 200
SIZE = 64
RECV = "RECV_RDMA_WITH_IMM"  # (the writes' own completions come too: not these)


def _write(i: int, qp: QueuePair, src: MemoryRegion, cq: CompletionQueue,
           dst: MemoryRegion) -> None:
    """Round ``i``'s write from ``qp`` (region ``src``) with immediate ``i``, seen
    received in ``cq`` with the bytes in ``dst``."""
    assert qp.peer is not None
    src.buf[:SIZE] = bytes([i & 0xFF]) * SIZE
    qp.post_write(src, 0, SIZE, qp.peer.regions[0], imm=i, wr_id=1000 + i)
    got: list[WorkCompletion] = []
    while not got:
        got = [w for w in cq.wait(timeout=5) if w.opcode == RECV]
    assert [(w.wr_id, w.imm, w.ok) for w in got] == [(i, i, True)]
    assert bytes(dst.buf[:SIZE]) == bytes([i & 0xFF]) * SIZE


def _ping_pong(pair: MrcdPair) -> tuple[dict[str, int], dict[str, int]]:
    """ROUNDS verified round trips of SIZE-byte writes with an immediate (a pinger on
    ha, an echo on hb, both waiting through the library); each mrcd's loop passes."""
    # (the clients do not busy-poll: a client that found its completion spinning was
    # never woken, and mrcd looks for the answers of clients it woke)
    with Context(pair.a.socket, busy_poll_us=0) as ca, \
            Context(pair.b.socket, busy_poll_us=0) as cb:
        c = connect_qps(ca, cb, 41, SIZE)
        qp_a, mr_a, cq_a, qp_b, mr_b, cq_b = c.qp_a, c.mr_a, c.cq_a, c.qp_b, c.mr_b, c.cq_b
        for i in range(ROUNDS):
            qp_a.post_recv(wr_id=i)
            qp_b.post_recv(wr_id=i)
            _write(i, qp_a, mr_a, cq_b, mr_b)  # the ping ...
            _write(i, qp_b, mr_b, cq_a, mr_a)  # ... and its answer
        return ca.stats()["loop_passes"], cb.stats()["loop_passes"]


def test_the_answer_is_taken_by_the_look(veth: VethPair, tmp_path: Path) -> None:
    # (the longest look: on a loaded machine the answer may take that long to come)
    with mrcd_pair_on(veth, tmp_path, extra="answer_poll_us = 1000") as pair:
        passes_a, passes_b = _ping_pong(pair)
    # hb woke the echo for each ping and took most of its pongs in its look; ha woke
    # the pinger for each pong and took many of the next pings (how many depends on
    # where the scheduler runs the pinger meanwhile: 25-95 % on a 2-CPU machine)
    assert passes_b["answer_hit"] > ROUNDS // 2, (passes_a, passes_b)
    assert passes_a["answer_hit"] > ROUNDS // 10, (passes_a, passes_b)
    for passes in (passes_a, passes_b):
        assert passes["answer_hit"] + passes["answer_miss"] <= passes["port"]


def test_no_look_at_zero(veth: VethPair, tmp_path: Path) -> None:
    with mrcd_pair_on(veth, tmp_path, extra="answer_poll_us = 0") as pair:
        passes_a, passes_b = _ping_pong(pair)
    for passes in (passes_a, passes_b):
        assert passes["answer_hit"] == passes["answer_miss"] == 0, passes


def test_the_look_before_sleeping_finds_the_next_frame(veth: VethPair,
                                                       tmp_path: Path) -> None:
    with mrcd_pair_on(veth, tmp_path, extra="idle_poll_us = 1000") as pair:
        passes_a, passes_b = _ping_pong(pair)
    # Each side waits out the other's turn in its look (1 ms: a round trip on a veth
    # pair, with the Python on both ends, takes less), so most looks end on something
    # readable: the loop then did not sleep
    for passes in (passes_a, passes_b):
        assert passes["idle_looks"] >= ROUNDS, passes
        assert passes["idle_hits"] > passes["idle_looks"] // 2, passes


def test_no_look_before_sleeping_at_zero(veth: VethPair, tmp_path: Path) -> None:
    with mrcd_pair_on(veth, tmp_path, extra="idle_poll_us = 0") as pair:
        passes_a, passes_b = _ping_pong(pair)
    for passes in (passes_a, passes_b):
        assert passes["idle_looks"] == passes["idle_hits"] == 0, passes
