"""mrcd's ``/metrics`` endpoint: a small HTTP/1.0 server on mrcd's own event loop.

Each scrape takes its snapshot inside the loop, between two callbacks, so the counters of
one scrape are consistent with each other (a thread reading the core's dicts while the
loop changes them could not promise that, and could fail with "dictionary changed size
during iteration"); only the text rendering runs in a worker thread. One request per
connection, 5 s to send it, at most :data:`MAX_CONNECTIONS` at once. ``GET /metrics``
(and ``HEAD``); ``/`` says where the metrics are; anything else 404.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Final

from mrcnet.daemon.config import parse_listen
from mrcnet.daemon.metrics import Snapshot, render

__all__ = ["MetricsServer"]

#: Seconds a client has to send its request line and headers.
REQUEST_TIMEOUT: Final = 5.0
#: Connections served at once; more are closed at once.
MAX_CONNECTIONS: Final = 16
MAX_HEADER_LINES: Final = 100
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


class MetricsServer:
    """Serves ``render(collect())`` at ``http://LISTEN/metrics``."""

    def __init__(self, listen: str, collect: Callable[[], Snapshot], log: Any) -> None:
        self.listen = listen
        self.host, self.port = parse_listen(listen)
        self._collect = collect
        self._log = log
        self._server: asyncio.Server | None = None
        self._open = 0
        #: Scrapes served (for tests and the log).
        self.scrapes = 0

    async def start(self) -> None:
        """Bind and listen (OSError if the address is taken or not local)."""
        self._server = await asyncio.start_server(self._handle, self.host or None,
                                                  self.port, reuse_address=True)
        self._log.info("metrics served", url=f"http://{self.listen}/metrics")

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        self._open += 1
        try:
            if self._open <= MAX_CONNECTIONS:
                await asyncio.wait_for(self._serve(reader, writer), REQUEST_TIMEOUT * 2)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            self._open -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        line = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT)
        for _ in range(MAX_HEADER_LINES):  # headers: read and ignored
            h = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT)
            if h in (b"\r\n", b"\n", b""):
                break
        parts = line.decode("latin-1").split()
        if len(parts) < 2:
            return self._reply(writer, 400, b"bad request\n")
        method, path = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return self._reply(writer, 405, b"GET /metrics\n")
        if path == "/":
            return self._reply(writer, 200, b"mrcd: metrics at /metrics\n", method == "HEAD")
        if path != "/metrics":
            return self._reply(writer, 404, b"not found: metrics at /metrics\n")
        try:
            snap = self._collect()  # in the loop: one consistent view
            body = await asyncio.get_running_loop().run_in_executor(None, render, snap)
        except Exception as e:  # mrcd stopping, or a bug: the scraper sees 500
            self._log.warning("metrics scrape failed", error=repr(e))
            return self._reply(writer, 500, f"mrcd: {e!r}\n".encode())
        self.scrapes += 1
        self._reply(writer, 200, body, method == "HEAD", CONTENT_TYPE)
        await writer.drain()

    @staticmethod
    def _reply(writer: asyncio.StreamWriter, status: int, body: bytes, head: bool = False,
               ctype: str = "text/plain; charset=utf-8") -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found",
                  405: "Method Not Allowed", 500: "Internal Server Error"}[status]
        writer.write(f"HTTP/1.0 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode())
        if not head:
            writer.write(body)
