"""The transport interface the collective algorithms are written against.

A transport connects one rank to every other rank of the run and gives it two buffers:

- ``data``: this rank's working buffer (inputs, results, what it sends from);
- ``inbox``: where the peers' messages land, at the offset the sender chooses.

:meth:`Transport.send` copies ``data[src:src+length]`` into a peer's inbox at ``dst`` and
tags the message (over MRC: an RDMA WRITE with immediate, the tag being the immediate);
:meth:`Transport.wait_tag` blocks until the message with that tag from that peer has
landed in this rank's inbox. :meth:`Transport.wait_sent` blocks until every send posted
so far has completed, so ``data`` may be overwritten. Every wait has a deadline and
raises :class:`~mrcnet.coll.errors.StepTimeout` (no progress) or
:class:`~mrcnet.coll.errors.PeerFailed` (a peer's connection failed or it aborted).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["ABORT_TAG", "BARRIER_TAG", "TAG_MASK", "Transport"]

#: Tags are 24 bits of the 32-bit immediate; the top byte says what the message is.
TAG_MASK = (1 << 24) - 1
#: A peer tells the run it stops (its reason is in its own output).
ABORT_TAG = 0xA1 << 24
#: One hop of the barrier (the low bits carry its round).
BARRIER_TAG = 0xB0 << 24


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

    def send(self, peer: int, src: int, length: int, dst: int, tag: int) -> None:
        """Copy ``data[src:src+length]`` to ``peer``'s inbox at ``dst``, tagged ``tag``."""
        ...

    def wait_tag(self, peer: int, tag: int) -> None:
        """Block until ``peer``'s message tagged ``tag`` is in the inbox."""
        ...

    def wait_sent(self) -> None:
        """Block until every send posted so far completed."""
        ...

    def abort(self, reason: str) -> None:
        """Tell every peer this rank stops (best effort, never raises)."""
        ...

    def close(self) -> None:
        """Release the connections and buffers."""
        ...
