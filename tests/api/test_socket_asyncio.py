"""The asyncio socket API end to end (streams, messages) on two mrcds."""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING

import pytest
from sockutil import MIB

from mrcnet.api.socket import (
    ConnectionRefused,
    ConnectionReset,
    EndOfStream,
    MrcdNotRunning,
    MrcStreamReader,
    MrcStreamWriter,
    SocketTimeout,
    connect_async,
    open_connection,
    start_server,
)

if TYPE_CHECKING:  # annotations only: which `conftest` module a run imports varies
    from conftest import MrcdPair


async def echo(reader: MrcStreamReader, writer: MrcStreamWriter) -> None:
    while data := await reader.read(1 << 20):
        writer.write(data)
        await writer.drain()
    writer.close()
    await writer.wait_closed()


def test_streams_echo_and_large_transfer(mrcd_pair: MrcdPair) -> None:
    async def main() -> None:
        async with await start_server(echo, 21, mrcd=mrcd_pair.b.socket):
            reader, writer = await open_connection("hb", 21, mrcd=mrcd_pair.a.socket,
                                                   timeout=60)
            assert writer.get_extra_info("peername")[0] == "hb"
            writer.write(b"hello\n")
            await writer.drain()
            assert await reader.readline() == b"hello\n"
            writer.write_message(b"")  # an empty message is nothing in a byte stream
            writer.write(b"x")
            assert await reader.readexactly(1) == b"x"
            data = os.urandom(16 * MIB)
            t0 = time.monotonic()
            writer.write(data)  # queued; sent by the writer's task while we read
            got = await reader.readexactly(len(data))
            dt = time.monotonic() - t0
            assert got == data
            print(f"asyncio: 16 MiB echoed in {dt:.2f} s")
            writer.write_eof()
            assert await reader.read() == b""  # the echo saw EOF and closed
            assert reader.at_eof()
            writer.close()
            await writer.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 120))


def test_messages_keep_boundaries_and_many_clients(mrcd_pair: MrcdPair) -> None:
    async def msg_echo(reader: MrcStreamReader, writer: MrcStreamWriter) -> None:
        try:
            while True:
                writer.write_message(await reader.read_message())
                await writer.drain()
        except EndOfStream:
            writer.close()

    async def client(i: int) -> list[bytes]:
        sock = await connect_async("hb", 22, mrcd=mrcd_pair.a.socket, timeout=60,
                                   ring_size=32 << 10)
        async with sock:
            msgs = [b"", os.urandom(1), os.urandom(100_000), bytes([i]) * 7, b""]
            for m in msgs:
                await sock.send_message(m)
            got = [await sock.recv_message() for _ in msgs]
            assert got == msgs
            return got

    async def main() -> None:
        async with await start_server(msg_echo, 22, mrcd=mrcd_pair.b.socket,
                                      ring_size=32 << 10):
            results = await asyncio.gather(*(client(i) for i in range(3)))
            assert len(results) == 3

    asyncio.run(asyncio.wait_for(main(), 120))


def test_many_small_messages_async(mrcd_pair: MrcdPair) -> None:
    count = 2000

    async def main() -> None:
        received: list[int] = []
        finished = asyncio.Event()

        async def sink(reader: MrcStreamReader, writer: MrcStreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            async for msg in sock:
                received.append(int.from_bytes(msg, "big"))
            finished.set()
            await sock.close()

        async with await start_server(sink, 23, mrcd=mrcd_pair.b.socket):
            sock = await connect_async("hb", 23, mrcd=mrcd_pair.a.socket, timeout=60)
            t0 = time.monotonic()
            for i in range(count):
                await sock.send_message(i.to_bytes(4, "big"))
            await sock.flush()
            dt = time.monotonic() - t0
            print(f"asyncio: {count} small messages in {dt:.2f} s: {count / dt:.0f} msg/s")
            await sock.close()
            await asyncio.wait_for(finished.wait(), 30)
        assert received == list(range(count))

    asyncio.run(asyncio.wait_for(main(), 120))


def test_close_timeout_and_errors_async(mrcd_pair: MrcdPair) -> None:
    async def main() -> None:
        closed_by_server = asyncio.Event()

        async def hang_up(reader: MrcStreamReader, writer: MrcStreamWriter) -> None:
            writer.write(b"goodbye")
            writer.close()
            await writer.wait_closed()
            closed_by_server.set()

        async with await start_server(hang_up, 24, mrcd=mrcd_pair.b.socket):
            reader, writer = await open_connection("hb", 24, mrcd=mrcd_pair.a.socket,
                                                   timeout=30)
            assert await reader.read() == b"goodbye"  # then the end of the stream
            await asyncio.wait_for(closed_by_server.wait(), 30)
            writer.close()
            await writer.wait_closed()

        with pytest.raises(ConnectionRefused):
            await connect_async("hb", 24, mrcd=mrcd_pair.a.socket, refused_retry=0.2)
        with pytest.raises(MrcdNotRunning, match=r"/nonexistent/x\.sock"):
            await open_connection("hb", 24, mrcd="/nonexistent/x.sock")

        async def silent(reader: MrcStreamReader, writer: MrcStreamWriter) -> None:
            await asyncio.sleep(3)

        async with await start_server(silent, 25, mrcd=mrcd_pair.b.socket):
            sock = await connect_async("hb", 25, mrcd=mrcd_pair.a.socket, timeout=0.3)
            t0 = time.monotonic()
            with pytest.raises(SocketTimeout):
                await sock.recv(10)
            assert 0.25 < time.monotonic() - t0 < 10
            await sock.close()

    asyncio.run(asyncio.wait_for(main(), 120))


def test_peer_mrcd_killed_async(mrcd_pair: MrcdPair) -> None:
    async def main() -> None:
        ready = asyncio.Event()

        async def hold(reader: MrcStreamReader, writer: MrcStreamWriter) -> None:
            ready.set()
            await asyncio.sleep(60)

        srv = await start_server(hold, 26, mrcd=mrcd_pair.b.socket)
        reader, writer = await open_connection("hb", 26, mrcd=mrcd_pair.a.socket)
        await asyncio.wait_for(ready.wait(), 30)
        mrcd_pair.b.kill()
        t0 = time.monotonic()
        with pytest.raises(ConnectionReset, match="peer unreachable"):
            await reader.read(10)
        assert time.monotonic() - t0 < 30
        writer.close()
        await asyncio.wait_for(writer.wait_closed(), 30)
        srv.close()

    asyncio.run(asyncio.wait_for(main(), 120))
