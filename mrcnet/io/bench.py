"""The raw-socket ceiling: MRC-shaped frames through PacketPort, no protocol, no mrcd.

``mrc-perf raw-sink`` and ``mrc-perf raw-send`` use these to measure, on the same hosts
and paths as an mrcd run, how many frames per second the packet sockets and the network
carry at all; an mrcd result is then reported as a fraction of this ceiling.

The sender builds one frame per path once (one data frame to ``WRITE_ONLY`` QP 1 per
(plane, spine) route of the fabric, or one direct route) and sends them round-robin in
batches for a fixed time. The sink counts what arrives until the sender goes quiet.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from mrcnet.constants import DSCP_TRIMMED, Opcode
from mrcnet.io.packet_port import PacketPort
from mrcnet.wire import Route, build_data

__all__ = ["RawResult", "raw_send", "raw_sink", "routes_frames"]

#: Frames handed to the kernel per send call (the batch size measured best here).
BATCH = 64


@dataclass(frozen=True)
class RawResult:
    """Frames and bytes moved in ``seconds``."""

    frames: int
    nbytes: int
    seconds: float
    trimmed: int = 0  #: frames a switch trimmed (outer DSCP = DSCP_TRIMMED)

    @property
    def kpps(self) -> float:
        """Thousands of frames per second."""
        return self.frames / self.seconds / 1e3 if self.seconds > 0 else 0.0

    @property
    def gbps(self) -> float:
        """Gbit/s of whole frames (Ethernet header included, no preamble)."""
        return self.nbytes * 8 / self.seconds / 1e9 if self.seconds > 0 else 0.0


def routes_frames(routes: Sequence[Route], payload: int) -> list[bytes]:
    """One WRITE_ONLY data frame of ``payload`` bytes per route (a distinct EV each)."""
    data = bytes(payload)
    return [build_data(r, ev=0x80000000 | i, opcode=Opcode.WRITE_ONLY, dest_qp=1, psn=i,
                       va=0, rkey=1, payload=data) for i, r in enumerate(routes)]


def raw_send(ports: Sequence[PacketPort], frames: Sequence[Sequence[bytes]],
             seconds: float) -> RawResult:
    """Send ``frames[i]`` round-robin on ``ports[i]`` for ``seconds``, batch after batch.

    A full socket queue is not waited for: the frames that did not fit are dropped
    (here the offered load is the point).
    """
    batches: list[list[bytes | bytearray | memoryview]] = []
    for fs in frames:
        reps = -(-BATCH // len(fs))
        batch: list[bytes | bytearray | memoryview] = list(fs)
        batches.append(batch * reps)
    sent = nbytes = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        for port, batch in zip(ports, batches, strict=True):
            n = port.send_or_drop(batch)  # offered load: never resend what did not fit
            sent += n
            nbytes += n * len(batch[0])
    return RawResult(sent, nbytes, time.perf_counter() - t0)


def raw_sink(ports: Sequence[PacketPort], idle: float = 1.0, first_wait: float = 30.0,
             max_seconds: float = 60.0) -> RawResult:
    """Count MRC frames arriving on ``ports`` from the first one until ``idle`` seconds
    pass without any (or ``max_seconds``). Raises TimeoutError if nothing comes within
    ``first_wait``."""
    frames = nbytes = trimmed = 0
    start = last = 0.0
    deadline = time.monotonic() + first_wait
    while True:
        got = 0
        for port in ports:
            for f in port.recv():
                got += 1
                nbytes += len(f)
                # Outer IPv6 traffic class = bytes 14-15 (after the version nibble).
                if ((f[14] & 0x0F) << 4 | f[15] >> 4) >> 2 == DSCP_TRIMMED:
                    trimmed += 1
        now = time.monotonic()
        if got:
            if not frames:
                start = now
            frames += got
            last = now
            if now - start > max_seconds:
                break
        elif frames and now - last > idle:
            break
        elif not frames and now > deadline:
            raise TimeoutError(f"no MRC frame arrived in {first_wait} s")
        else:
            time.sleep(0.0005)
    return RawResult(frames, nbytes, max(last - start, 1e-9), trimmed)
