"""The socket API's selective signalling (mrcnet/api/ring.py): a connection's data writes
complete on its CQ only now and then, so a round trip's own write wakes nobody; flow
control, flush and close still see every write retire. Two real mrcds on a veth pair."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

from mrcnet.api.client import WorkCompletion
from mrcnet.api.ring import _DATA_BIT, SIGNAL_EVERY, Channel
from mrcnet.api.socket import MrcListener, MrcSocket, create_connection, create_server

if TYPE_CHECKING:  # annotations only: which `conftest` module a run imports varies
    from conftest import MrcdPair


class WriteCompletions:
    """Counts, per channel, the data-write completions its hub routes to it."""

    def __init__(self) -> None:
        self.data: dict[int, int] = {}
        self.lock = threading.Lock()

    def seen(self, ch: Channel) -> int:
        with self.lock:
            return self.data.get(id(ch), 0)


@contextmanager
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[WriteCompletions]:
    counts = WriteCompletions()
    on_wc = Channel.on_wc

    def counted(self: Channel, wc: WorkCompletion) -> None:
        if wc.opcode != "RECV_RDMA_WITH_IMM" and wc.wr_id & _DATA_BIT:
            with counts.lock:
                counts.data[id(self)] = counts.data.get(id(self), 0) + 1
        on_wc(self, wc)

    monkeypatch.setattr(Channel, "on_wc", counted)
    yield counts


def pair_of(mrcd_pair: MrcdPair, service: int,
            **kw: int) -> tuple[MrcSocket, MrcSocket, MrcListener]:
    srv = create_server(service, mrcd=mrcd_pair.b.socket, **kw)
    cli = create_connection(("hb", service), timeout=30, mrcd=mrcd_pair.a.socket, **kw)
    conn, _ = srv.accept(timeout=30)
    conn.settimeout(30)
    return cli, conn, srv


def test_ping_pong_writes_complete_only_when_signalled(
        mrcd_pair: MrcdPair, monkeypatch: pytest.MonkeyPatch) -> None:
    with counting(monkeypatch) as counts:
        cli, conn, srv = pair_of(mrcd_pair, 31)
        try:
            n = SIGNAL_EVERY - 1  # (a shorter run than the one that must be signalled)
            for i in range(n):
                cli.send_message(b"ping %d" % i)
                assert conn.recv_message() == b"ping %d" % i
                conn.send_message(b"pong %d" % i)
                assert cli.recv_message() == b"pong %d" % i
            # No write of either side completed: nothing woke either for its own write.
            assert counts.seen(cli._ch) == counts.seen(conn._ch) == 0
            assert cli._ch.completed < cli._ch.tail
            # flush() makes them complete (the probe behind them), and says so.
            assert cli.flush(timeout=10)
            assert cli._ch.completed == cli._ch.tail and counts.seen(cli._ch) == 1
            assert conn.flush(timeout=10) and conn._ch.completed == conn._ch.tail
            # Nothing left to probe: a second flush posts nothing.
            assert cli.flush(timeout=10) and counts.seen(cli._ch) == 1
        finally:
            cli.close()
            conn.close()
            srv.close()


def test_long_run_signalled_every_so_often(
        mrcd_pair: MrcdPair, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small messages: one write in SIGNAL_EVERY completes; none waits on a completion
    that does not come (flow control by credits and completions both)."""
    with counting(monkeypatch) as counts:
        cli, conn, srv = pair_of(mrcd_pair, 32)
        try:
            n = 5 * SIGNAL_EVERY
            got: list[bytes] = []
            t = threading.Thread(target=lambda: got.extend(conn.recv_message()
                                                           for _ in range(n)))
            t.start()
            for i in range(n):
                cli.send_message(b"m%d" % i)
            t.join(30)
            assert got == [b"m%d" % i for i in range(n)]
            assert cli.flush(timeout=10)
            # (the signalled ones, and the flush's probe for the last run, if any)
            assert n // SIGNAL_EVERY <= counts.seen(cli._ch) <= n // SIGNAL_EVERY + 1
        finally:
            cli.close()
            conn.close()
            srv.close()


def test_small_ring_stream_both_ways(mrcd_pair: MrcdPair) -> None:
    """The smallest ring, both ends sending at once: the staging bytes are reused only
    after a signalled write (one every quarter ring) completed, and nothing stalls."""
    cli, conn, srv = pair_of(mrcd_pair, 33, ring_size=4096)
    try:
        data = bytes(range(256)) * 400  # 100 KiB: 25 rings
        got: dict[str, bytes] = {}

        def reader(name: str, s: MrcSocket) -> None:
            buf = bytearray()
            while len(buf) < len(data):
                buf += s.recv(65536)
            got[name] = bytes(buf)

        threads = [threading.Thread(target=reader, args=("cli", cli)),
                   threading.Thread(target=reader, args=("conn", conn)),
                   threading.Thread(target=conn.sendall, args=(data,))]
        for t in threads:
            t.start()
        cli.sendall(data)
        for t in threads:
            t.join(60)
        assert got == {"cli": data, "conn": data}
        for s in (cli, conn):
            assert s.flush(timeout=10) and s._ch.completed == s._ch.tail
    finally:
        cli.close()
        conn.close()
        srv.close()


def test_close_after_unsignalled_writes_lingers_only_for_the_ack(
        mrcd_pair: MrcdPair) -> None:
    """close(): the CLOSE control write is signalled and carries the send position, so
    its completion settles the unsignalled writes before it (no wait for the linger)."""
    cli, conn, srv = pair_of(mrcd_pair, 34)
    try:
        cli.linger = 20.0
        for i in range(3):
            cli.send_message(b"x%d" % i)
        assert cli._ch.completed < cli._ch.tail
        t0 = time.monotonic()
        cli.close()
        assert time.monotonic() - t0 < 5
        assert [conn.recv_message() for _ in range(3)] == [b"x0", b"x1", b"x2"]
    finally:
        cli.close()
        conn.close()
        srv.close()
