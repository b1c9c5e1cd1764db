"""The socket API over a real mrc-fabric (2 planes x 2 spines, sprayed, trimming)."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import TYPE_CHECKING

from sockutil import MIB, echo_concurrently

from mrcnet.api.socket import (
    MrcStreamReader,
    MrcStreamWriter,
    create_connection,
    create_server,
    open_connection,
    start_server,
)

if TYPE_CHECKING:  # annotations only: which `conftest` module a run imports varies
    from conftest import FabricPair


def test_blocking_and_asyncio_over_fabric(fabric_pair: FabricPair) -> None:
    a, b = fabric_pair.a, fabric_pair.b
    data = os.urandom(8 * MIB)
    errors: list[BaseException] = []
    with create_server(5, mrcd=b.socket) as srv:
        def serve() -> None:
            try:
                conn, _ = srv.accept(timeout=60)
                with conn:
                    conn.settimeout(120)
                    while msg := conn.recv(1 << 20):
                        conn.sendall(msg)
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=serve)
        t.start()
        with create_connection((b.name, 5), timeout=120, mrcd=a.socket) as s:
            dt = echo_concurrently(s, data, join=180)
            print(f"fabric: 8 MiB echoed in {dt:.2f} s")
        t.join(60)
        assert not t.is_alive() and not errors, errors
        # Both planes carried data.
        from mrcnet.api import Context
        with Context(a.socket) as ctx:
            ports = ctx.stats()["ports"]
        assert len(ports) == 2 and all(p["tx_frames"] > 50 for p in ports.values()), ports

    async def main() -> None:
        async def msg_echo(reader: MrcStreamReader, writer: MrcStreamWriter) -> None:
            for _ in range(3):
                writer.write_message(await reader.read_message())
            await writer.drain()
            writer.close()
            await writer.wait_closed()

        async with await start_server(msg_echo, 6, mrcd=b.socket):
            reader, writer = await open_connection(b.name, 6, mrcd=a.socket, timeout=120)
            msgs = [b"x", os.urandom(3 * MIB), b""]
            for m in msgs:
                writer.write_message(m)
            await writer.drain()
            assert [await reader.read_message() for _ in msgs] == msgs
            writer.close()
            await writer.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 180))


def test_connect_burst_up_to_the_backlog(fabric_pair: FabricPair) -> None:
    """64 simultaneous connects to a listener with backlog 64 all succeed at once, with
    no retry (``refused_retry=0``): mrcd queues a connect that arrives while the
    listener re-arms its service, instead of refusing it."""
    import time

    a, b = fabric_pair.a, fabric_pair.b
    n = 64
    ring = 64 << 10
    clients: list[object] = []
    errors: list[BaseException] = []
    accepted: list[object] = []
    go = threading.Barrier(n)
    lock = threading.Lock()
    with create_server(9, mrcd=b.socket, backlog=n, ring_size=ring) as srv:
        def accept_all() -> None:
            try:
                while len(accepted) < n:
                    conn, _ = srv.accept(timeout=60)
                    accepted.append(conn)
            except BaseException as e:
                errors.append(e)

        def connect(i: int) -> None:
            try:
                go.wait(30)
                s = create_connection((b.name, 9), timeout=60, mrcd=a.socket,
                                      ring_size=ring, refused_retry=0)
                s.send_message(f"hello {i}".encode())
                with lock:
                    clients.append(s)
            except BaseException as e:
                with lock:
                    errors.append(e)

        server = threading.Thread(target=accept_all)
        server.start()
        t0 = time.monotonic()
        threads = [threading.Thread(target=connect, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        dt = time.monotonic() - t0
        server.join(60)
        refused = [e for e in errors if "refused" in str(e)]
        print(f"burst of {n}: {len(clients)} connected, {len(refused)} refused, "
              f"{len(errors)} errors in {dt:.2f} s")
        try:
            assert not errors, errors[:3]
            assert len(clients) == n and len(accepted) == n
            got = sorted(c.recv_message() for c in accepted)  # type: ignore[attr-defined]
            assert got == sorted(f"hello {i}".encode() for i in range(n))
        finally:
            for c in clients + accepted:
                c.close()  # type: ignore[attr-defined]
