"""mrcd's acknowledgements on a bulk flow, with its ``ack_lone`` and without.

mrcd's core settings (DAEMON_CORE) on the virtual clock: a receive pass per frame or two,
as a receiving mrcd woken per few frames sees a bulk transfer. mrcd's ``ack_lone`` SACKs
every such pass; without it they cost a SACK per ``ack_every`` packets; either way an
AckReq is answered in its pass. Then a real fabric, mrcds without ``ack_lone``: a
verified bulk transfer, SACKs per data frame counted. (mrcd keeps ``ack_lone``: without
it measured no faster and no cheaper, docs/PERFORMANCE.md session 14.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from core.harness import Net, connect
from mdfabric import MIB, FabricMrcds, fabric_with_mrcds
from mdfabric import connect as connect_mrcds
from mdnsutil import needs_root

from mrcnet.constants import Opcode
from mrcnet.core import HostConfig, make_ev
from mrcnet.daemon.config import DAEMON_CORE
from mrcnet.wire import build_data, parse_frame

#: mrcd's core, without the link rate a fabric's description sets
MRCD = HostConfig(**{k: v for k, v in DAEMON_CORE.items() if k != "link_rate"})
PAYLOAD = 64
PACKETS = 96


def _acks(frames: list[tuple[int, bytes]]) -> int:
    return sum(parse_frame(f).opcode in (Opcode.ACK, Opcode.SACK) for _, f in frames)


def _data(net: Net, qb: int, md: Any, psn: int, opcode: Opcode, ack_req: bool) -> bytes:
    route = net.fabric.provider("h0").routes("h1", 0)[1]
    return build_data(route, ev=make_ev(0, 1, 0), dest_qp=qb, psn=psn,
                      va=md.addr + PAYLOAD * (psn - 1000), rkey=md.rkey,
                      payload=bytes([psn & 0xFF]) * PAYLOAD, opcode=opcode,
                      ack_req=ack_req, timestamp=psn)


def _bulk(cfg: HostConfig) -> tuple[int, int, Any, Any]:
    """A message of PACKETS packets reaches h1 one packet per receive pass (a
    frames_to_send after each, as mrcd's pass ends: a receiving mrcd woken by the first
    frame of its peer's batch reads it alone), 10 us apart; then a one-packet message
    asking for an ACK, alone in its pass. Returns (acknowledgements during the bulk
    message, acknowledgements in the small message's pass, h1, its region)."""
    net = Net(config=cfg)
    _qa, qb = connect(net, 0, 1, psn_a=1000)
    hb = net.h(1)
    md = hb.register_mr(bytearray(PAYLOAD * (PACKETS + 1)))
    acks = 0
    for i in range(PACKETS):
        t = i * 1e-5
        op = (Opcode.WRITE_FIRST if i == 0 else
              Opcode.WRITE_LAST if i == PACKETS - 1 else Opcode.WRITE_MIDDLE)
        hb.receive_batch([_data(net, qb, md, 1000 + i, op, ack_req=i == PACKETS - 1)], 0, t)
        acks += _acks(hb.frames_to_send(t))
        due = hb.next_timer()
        if due is not None and due <= t + 1e-5:  # (a delayed ACK due before the next pass)
            hb.handle_timer(due)
            acks += _acks(hb.frames_to_send(due))
    t = PACKETS * 1e-5
    hb.receive(_data(net, qb, md, 1000 + PACKETS, Opcode.WRITE_ONLY, ack_req=True), 0, t)
    return acks, _acks(hb.frames_to_send(t)), hb, md


def test_a_bulk_flow_read_a_frame_per_pass_is_sacked_per_ack_every() -> None:
    """Without ``ack_lone``: about a SACK per ``ack_every`` packets plus the message end's
    (its AckReq), not one per pass; every byte placed; the small message after it is
    acknowledged in its own pass. With it (mrcd's setting), every pass is acknowledged."""
    assert MRCD.ack_lone
    bulk, small, hb, md = _bulk(replace(MRCD, ack_lone=False))
    assert 1 <= bulk <= PACKETS // MRCD.ack_every + 2, bulk
    assert small == 1
    assert bytes(md.view) == b"".join(bytes([p & 0xFF]) * PAYLOAD
                                      for p in range(1000, 1001 + PACKETS))
    assert hb.counters().get("rx_data") == PACKETS + 1
    every, small, _hb, _md = _bulk(MRCD)
    assert every == PACKETS and small == 1


SPEC = "leafspine:planes=2,spines=2,leaves=2,hosts=1,rate=none,mtu=9000"


@pytest.fixture(scope="module")
def fm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FabricMrcds]:
    with fabric_with_mrcds(tmp_path_factory.mktemp("mfbulk"), SPEC,
                           extra="[core]\nack_lone = false\n",
                           prefix=os.environ.get("MRC_E2E_PREFIX", "mf")) as f:
        yield f


@needs_root
def test_without_ack_lone_a_bulk_transfer_is_verified_with_few_sacks(
        fm: FabricMrcds) -> None:
    """mrcds without ``ack_lone``, 64 MiB in 1 MiB writes, 8 outstanding, h0 -> h1 on an
    unshaped fabric: every byte arrives, and the receiving mrcd sends fewer
    acknowledgements than one per 8 data frames (with it, a SACK per receive pass of a
    few frames: 0.11-0.19 per data frame)."""
    conn = connect_mrcds(fm.sock("h0"), fm.sock("h1"), "h1", 300, 64 * MIB)
    try:
        assert conn.stream(64 * MIB, MIB, 8) == []
        assert bytes(conn.mr_b.buf) == bytes(conn.mr_a.buf)
        q = conn.cb.stats(conn.qp_b)["qp"]["counters"]
        acks = q.get("tx_sack", 0) + q.get("tx_ack", 0)
        assert q["rx_data"] >= 64 * MIB // 9000
        print(f"acknowledgements per data frame {acks / q['rx_data']:.3f}")
        assert acks / q["rx_data"] < 1 / 8, q
    finally:
        conn.close()
