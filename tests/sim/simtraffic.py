"""A test-only traffic source and sink: raw MRC data frames, no reliability.

It proves the simulated network on its own, before (and independently of) the protocol
core: frames come from :mod:`mrcnet.wire` builders, so switches see exactly the bytes the
core will send.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mrcnet.constants import DATA_OPCODES, ECN, IPPROTO_IPV6, Opcode
from mrcnet.sim.topology import Fabric
from mrcnet.wire import Frame, Route, build_data, ev_from_headers, parse_frame


def data_frame(route: Route, *, psn: int, payload_len: int, ev: int = 1,
               ecn: int = ECN.ECT0) -> bytes:
    """One WRITE_ONLY frame of ``payload_len`` payload bytes."""
    return build_data(
        route, ev=ev, opcode=Opcode.WRITE_ONLY, dest_qp=7, psn=psn, va=0x1000 * psn,
        rkey=0x55, payload=bytes(payload_len), ecn=ecn,
    )


@dataclass
class Blaster:
    """Sends ``count`` frames to ``dst`` at ``start``, spine by spine round robin.

    All frames are handed to the NIC at once (the NIC queue serialises them), or paced
    one per ``gap`` seconds when ``gap`` is set.
    """

    fabric: Fabric
    src: int
    dst: int
    count: int
    payload_len: int = 1000
    plane: int = 0
    spines: tuple[int, ...] = (0,)
    start: float = 0.0
    gap: float = 0.0
    ecn: int = ECN.ECT0
    sent: int = 0
    _frames: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        routes = [self.fabric.route(self.src, self.dst, self.plane, s) for s in self.spines]
        # Build one frame per route and reuse it: only the network's handling matters.
        proto = [data_frame(r, psn=i, payload_len=self.payload_len, ev=i + 1, ecn=self.ecn)
                 for i, r in enumerate(routes)]
        self._frames = [proto[i % len(proto)] for i in range(self.count)]

    def receive(self, frame: bytearray, port: int, now: float) -> None:
        """Blasters ignore what they receive."""

    def frames_to_send(self, now: float) -> list[tuple[int, bytes]]:
        """Everything due by ``now``."""
        if now < self.start or self.sent >= self.count:
            return []
        if self.gap <= 0:
            n = self.count - self.sent
        else:
            due = int((now - self.start) / self.gap + 1e-9) + 1
            n = min(due, self.count) - self.sent
        out = [(self.plane, f) for f in self._frames[self.sent : self.sent + n]]
        self.sent += n
        return out

    def next_timer(self) -> float | None:
        """The next send time, if any."""
        if self.sent >= self.count:
            return None
        if self.sent == 0:
            return self.start
        return self.start + self.sent * self.gap if self.gap > 0 else None

    def handle_timer(self, now: float) -> None:
        """Sending happens in frames_to_send."""


@dataclass
class Sink:
    """Parses (strictly) and records every frame it receives."""

    frames: list[tuple[float, int, Frame]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)

    def receive(self, frame: bytearray, port: int, now: float) -> None:
        """Keep the frame and its parse (raises if a switch corrupted it)."""
        data = bytes(frame)
        self.raw.append(data)
        self.frames.append((now, port, parse_frame(data)))

    def frames_to_send(self, now: float) -> list[tuple[int, bytes]]:
        """Sinks send nothing."""
        return []

    def next_timer(self) -> float | None:
        """No timers."""
        return None

    def handle_timer(self, now: float) -> None:
        """No timers."""

    @property
    def trimmed(self) -> int:
        """Frames that arrived trimmed."""
        return sum(1 for _, _, f in self.frames if f.trimmed)

    @property
    def full(self) -> int:
        """Frames that arrived whole."""
        return sum(1 for _, _, f in self.frames if not f.trimmed)

    @property
    def ce(self) -> int:
        """Frames that arrived marked CE."""
        return sum(1 for _, _, f in self.frames if f.ce)


# Offsets of a uSID-mode data frame with an inner IPv6 header (what the core sends).
_NEXT_HEADER = 20
_UDP_SPORT = 14 + 40 + 40
_BTH_OPCODE = _UDP_SPORT + 8
_FLOW_LABEL_LO = 16


@dataclass
class SentFrame:
    """One data frame a tapped host handed to its NIC."""

    time: float
    port: int
    ev: int
    opcode: int


class SendTap:
    """Wraps a host's stack and records every data frame it sends (EV, time, port)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent: list[SentFrame] = []

    def receive(self, frame: bytearray, port: int, now: float) -> None:
        """Pass through."""
        self.inner.receive(frame, port, now)

    def frames_to_send(self, now: float) -> list[tuple[int, bytes]]:
        """Pass through, recording data frames."""
        out: list[tuple[int, bytes]] = self.inner.frames_to_send(now)
        for port, f in out:
            assert f[_NEXT_HEADER] == IPPROTO_IPV6, "tap expects uSID mode with inner IPv6"
            op = f[_BTH_OPCODE]
            if op in DATA_OPCODES:
                sport = int.from_bytes(f[_UDP_SPORT : _UDP_SPORT + 2], "big")
                lo = int.from_bytes(f[_FLOW_LABEL_LO : _FLOW_LABEL_LO + 2], "big")
                self.sent.append(SentFrame(now, port, ev_from_headers(sport, lo), op))
        return out

    def next_timer(self) -> float | None:
        """Pass through."""
        t: float | None = self.inner.next_timer()
        return t

    def handle_timer(self, now: float) -> None:
        """Pass through."""
        self.inner.handle_timer(now)
