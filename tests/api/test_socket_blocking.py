"""The blocking socket API end to end: two mrcds on two namespaces joined by a veth."""

from __future__ import annotations

import os
import threading
import time

from conftest import MrcdPair

from mrcnet.api.socket import create_connection, create_server


def test_echo(mrcd_pair: MrcdPair) -> None:
    with create_server(7, mrcd=mrcd_pair.b.socket) as srv:
        def serve() -> None:
            conn, _ = srv.accept(timeout=30)
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

        t = threading.Thread(target=serve)
        t.start()
        with create_connection(("hb", 7), timeout=30, mrcd=mrcd_pair.a.socket) as s:
            s.sendall(b"hello")
            got = b""
            while len(got) < 5:
                got += s.recv(100)
            assert got == b"hello"
            data = os.urandom(300_000)
            s.sendall(data)
            got = b""
            while len(got) < len(data):
                got += s.recv(1 << 20)
            assert got == data
        t.join(30)
        assert not t.is_alive()
