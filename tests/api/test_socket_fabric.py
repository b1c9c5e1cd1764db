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
