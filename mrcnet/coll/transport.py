"""The transport interface the collective algorithms are written against.

A transport connects one rank to every other rank of the run and gives it two buffers:

- ``data``: this rank's working buffer (inputs, results, what it sends from);
- ``inbox``: where the peers' messages land, at the offset the sender chooses.

:meth:`Transport.send` copies ``data[src:src+length]`` into a peer's inbox at ``dst`` and
tags the message (over MRC: an RDMA WRITE with immediate, the tag being the immediate);
:meth:`Transport.wait_tag` blocks until the message with that tag from that peer has
landed in this rank's inbox. :meth:`Transport.wait_sent` blocks until the
sends up to a number have completed, so the part of ``data`` they read may be
overwritten. Every wait has a deadline and
raises :class:`~mrcnet.coll.errors.StepTimeout` (no progress) or
:class:`~mrcnet.coll.errors.PeerFailed` (a peer's connection failed or it aborted).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["ABORT_TAG", "BARRIER_TAG", "HEARTBEAT_TAG", "TAG_MASK", "SendLedger",
           "Transport"]

#: Tags are 24 bits of the 32-bit immediate; the top byte says what the message is.
TAG_MASK = (1 << 24) - 1
#: A peer tells the run it stops (its reason is in its own output).
ABORT_TAG = 0xA1 << 24
#: One hop of the barrier (the low bits carry its round).
BARRIER_TAG = 0xB0 << 24
#: "Are you there?": a zero-byte write to a peer that has been silent for a while; the
#: peer ignores it, but if the peer is gone the write fails within MRC's retry budget.
HEARTBEAT_TAG = 0xBE << 24


class Transport(Protocol):
    """What an algorithm needs from the network (see the module docstring)."""

    rank: int
    world: int
    #: The name of each rank's host, in rank order (for messages).
    names: list[str]

    @property
    def data(self) -> memoryview:
        """This rank's working buffer."""
        ...

    @property
    def inbox(self) -> memoryview:
        """Where peers' messages land."""
        ...

    def send(self, peer: int, src: int, length: int, dst: int, tag: int) -> int:
        """Copy ``data[src:src+length]`` to ``peer``'s inbox at ``dst``, tagged ``tag``;
        returns the send's number (1, 2, ... in posting order) for :meth:`wait_sent`."""
        ...

    def wait_tag(self, peer: int, tag: int) -> None:
        """Block until ``peer``'s message tagged ``tag`` is in the inbox."""
        ...

    def wait_sent(self, upto: int | None = None) -> None:
        """Block until sends number 1..``upto`` (default: every send so far) completed."""
        ...

    def abort(self, reason: str) -> None:
        """Tell every peer this rank stops (best effort, never raises)."""
        ...

    def close(self) -> None:
        """Release the connections and buffers."""
        ...


class SendLedger:
    """Numbers sends 1, 2, ... and knows up to which number every one completed
    (completions may come out of order across peers)."""

    def __init__(self) -> None:
        self.posted = 0
        self.low = 0  #: every send numbered <= low completed
        self._done: set[int] = set()

    def post(self) -> int:
        """The next send's number."""
        self.posted += 1
        return self.posted

    def done(self, seq: int) -> None:
        """Send ``seq`` completed."""
        if seq <= self.low:
            return
        self._done.add(seq)
        while self.low + 1 in self._done:
            self.low += 1
            self._done.discard(self.low)

    def complete(self, upto: int | None = None) -> bool:
        """Did sends 1..``upto`` (default: all posted) complete?"""
        return self.low >= (self.posted if upto is None else upto)
