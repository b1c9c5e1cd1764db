"""The socket API's hub (mrcnet/api/hub.py): how often a round trip looks at the context,
and that a listener is looked at only when it can have something, without missing a
connection whose push another call read. Two real mrcds on a veth pair."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from mrcnet.api import client
from mrcnet.api.acceptor import Acceptor
from mrcnet.api.client import Context
from mrcnet.api.protocol import recv_raw
from mrcnet.api.socket import create_connection, create_server

if TYPE_CHECKING:  # annotations only: which `conftest` module a run imports varies
    from conftest import MrcdPair

ROUND_TRIPS = 200


def test_round_trip_looks_and_listener_checks(mrcd_pair: MrcdPair,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    looks: dict[int, int] = {}
    checks = [0]
    reads = [0]  # the socket's reads (both contexts: one process)
    look, check = Context._look, Acceptor.check

    def counted_look(self: Context, *args: bool) -> None:
        looks[id(self)] = looks.get(id(self), 0) + 1
        look(self, *args)

    def counted_read(*args: Any) -> Any:
        reads[0] += 1
        return recv_raw(*args)

    def counted_check(self: Acceptor) -> None:
        checks[0] += 1
        check(self)

    monkeypatch.setattr(Context, "_look", counted_look)
    monkeypatch.setattr(Acceptor, "check", counted_check)
    monkeypatch.setattr(client, "recv_raw", counted_read)
    with create_server(41, mrcd=mrcd_pair.b.socket) as srv:
        cli = create_connection(("hb", 41), timeout=30, mrcd=mrcd_pair.a.socket)
        conn, _ = srv.accept(timeout=30)
        conn.settimeout(30)
        try:
            cli.send_message(b"warm")
            assert conn.recv_message() == b"warm"
            conn.send_message(b"up")
            assert cli.recv_message() == b"up"
            looks.clear()
            checks[0] = reads[0] = 0
            for i in range(ROUND_TRIPS):
                msg = b"%d" % i
                cli.send_message(msg)
                assert conn.recv_message() == msg
                conn.send_message(msg)
                assert cli.recv_message() == msg
            # One look before the send, one before the sleep, one after it; none more
            # when the look after the sleep brought the message (the former hub: 4-5).
            per_rt = looks[id(cli._hub.ctx)] / ROUND_TRIPS
            assert per_rt <= 3.5, per_rt
            # The listener stays open, nobody connects: never looked at.
            assert checks[0] == 0
            # A wake-up reads its doorbell, not the socket's EAGAIN behind it as well
            # (one sleep per side per round trip: the former hub read 2 a sleep).
            reads_rt = reads[0] / ROUND_TRIPS
            assert reads_rt <= 3.0, reads_rt
        finally:
            cli.close()
            conn.close()


def test_connection_whose_push_another_call_read_is_accepted(mrcd_pair: MrcdPair) -> None:
    """The listener's check runs whenever a "connected" push waits in the context, also
    one read by a call outside the hub's pump (here ``stats``): the accept, whose wait
    then finds nothing on the socket, still returns it at once."""
    with create_server(42, mrcd=mrcd_pair.b.socket) as srv:
        cli = create_connection(("hb", 42), timeout=30, mrcd=mrcd_pair.a.socket)
        try:
            hub = srv._hub
            deadline = time.monotonic() + 10
            with hub.cond:
                while not hub.ctx._connected:
                    assert time.monotonic() < deadline, "no connected push"
                    hub.call(hub.ctx.stats)  # (reads the socket up to its answer)
                    time.sleep(0.01)
            t0 = time.monotonic()
            conn, _ = srv.accept(timeout=5)
            assert time.monotonic() - t0 < 1.0
            with conn:
                cli.send_message(b"hello")
                conn.settimeout(30)
                assert conn.recv_message() == b"hello"
        finally:
            cli.close()
