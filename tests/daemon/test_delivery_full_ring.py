"""Delivery into a client's completion ring that fills up: as many as it takes, the
rest back in the core's CQ first in line (each completion encoded once, the rest put
from its slots), all of them in order once the client made room."""

from __future__ import annotations

from typing import Any

import pytest

from mrcnet.api.shmclient import CompletionRing
from mrcnet.api.shmqueues import encode_completions
from mrcnet.api.shmring import PRECISE
from mrcnet.core.cq import CompletionQueue
from mrcnet.core.events import WCOpcode, WCStatus
from mrcnet.daemon.delivery import Delivery
from mrcnet.daemon.rings import CompletionWriter

pytestmark = pytest.mark.skipif(not PRECISE, reason="needs the C module's rings")


class Owner:
    """The session whose CQ it is: its queues' writer, and the doorbells it got."""

    def __init__(self, writer: CompletionWriter) -> None:
        self.queues: Any = type("Q", (), {"cqs": {5: writer}})()
        self.rang = 0

    def ring(self) -> None:
        self.rang += 1


def _rows(first: int, n: int) -> list[Any]:
    return [(WCStatus.SUCCESS, wr, WCOpcode.RDMA_WRITE, 8, None if wr % 3 else wr, 9)
            for wr in range(first, first + n)]


@pytest.mark.parametrize("room_meanwhile", [False, True])
def test_a_full_ring_keeps_the_rest_in_order(room_meanwhile: bool) -> None:
    client = CompletionRing(16)
    writer = CompletionWriter(client.fd, client.nslots)
    owner = Owner(writer)
    cq = CompletionQueue(5)
    d = Delivery(log=None)
    d.add(5, cq, owner)  # type: ignore[arg-type]
    rows = _rows(0, 40)
    cq.entries.extend(rows)
    got = b""
    if room_meanwhile:
        # The client makes room as mrcd finds the ring full (between its put and its
        # block): the rest goes in the same pass, as far as it fits.
        block = writer.block
        taken = []

        def block_after_a_take() -> bool:
            if not taken:
                data, _ = client.ring.take(6)
                taken.append(bytes(data))
            return block()

        writer.block = block_after_a_take  # type: ignore[method-assign]
        assert d.completions(None) == []  # type: ignore[arg-type]
        got += taken[0]
        assert len(cq.entries) == 40 - 16 - 6
    else:
        assert d.completions(None) == []  # type: ignore[arg-type]
        assert len(cq.entries) == 40 - 16
    assert list(cq.entries) == rows[40 - len(cq.entries):]  # the rest, first in line
    while cq.entries or client.ring.ready():
        data, _ = client.ring.take(client.nslots)
        got += bytes(data)
        d.completions(None)  # type: ignore[arg-type]
    assert got == encode_completions(rows)
    assert owner.rang >= 1
