"""Helpers of the tests/api modules (a distinct name: importable from any test module
there, since pytest puts tests/api on ``sys.path``). Nothing here is a test."""

from __future__ import annotations

import threading
import time

from mrcnet.api.socket import MrcSocket

MIB = 1 << 20


def recv_exactly(s: MrcSocket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``s`` (fails the test at an early end of the stream)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = s.recv_into(view[got:])
        assert k, f"end of stream after {got} of {n} bytes"
        got += k
    return bytes(buf)


def echo_concurrently(s: MrcSocket, data: bytes, join: float) -> float:
    """Send ``data`` to an echo server while a thread reads it back (so neither side's
    ring stalls the other); assert it came back byte-exact within ``join`` s of the
    send's end, and return the seconds it took."""
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(recv_exactly(s, len(data))))
    t0 = time.monotonic()
    reader.start()
    s.sendall(data)
    reader.join(join)
    dt = time.monotonic() - t0
    assert got and got[0] == data
    return dt
