"""mrcd's ports out of the event loop while they are busy: once its looks before sleeping
(:mod:`mrcnet.daemon.idlepoll`) keep finding frames on the ports, mrcd takes the ports'
sockets out of the loop's ``epoll`` set and runs their passes from the looks, until a
look finds nothing; then the sockets go back into the set and the loop sleeps on them.

Why: a socket in an ``epoll`` set has the set's callback on its wait queue, and the
kernel runs it for every frame that arrives and every frame sent that leaves the host
(the socket's write space), on the CPU that delivers or frees the frame: on a netns
fabric, the *sending* host's CPU, which runs the fabric's forwarding inline. In a
transfer that is two lock round trips per frame: `perf record` of a sending mrcd on
an unshaped fabric put the receiving mrcd's readable callbacks and its own write-space
callbacks at 2-3 % of its CPU, against none for the raw-socket baseline, whose sockets
no ``epoll`` watches (docs/PERFORMANCE.md, "Session 20"). Between two looks that keep
finding work nothing sleeps, so nothing needs the callback. With the ports out during a
transfer, the sending mrcd's system time per GB went down 2-3 %.

The rule: :data:`ENTER_AFTER` looks in a row that found a port readable, each after a
pass that read a batch of frames (:data:`BULK_FRAMES` or more: a transfer's, not a
round trip's), take the ports out. In that state every look that finds a port readable
schedules its pass (``call_soon``: the loop still polls everything else in between),
one that finds only a client's socket schedules another look after the loop has served
the client, and one that finds nothing (its length ran out, or the loop's next timer is
due) puts the ports back. So while the ports are out there is always a look or a pass
to come (and the engine puts them back if a pass fails). Without the batch rule a
ping-pong took its ports out too: a pass per look hit, 2.2 -> 10 passes per round trip
and P50 266 -> 382 us (8 B verbs, tools/bench_latency.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final

__all__ = ["BULK_FRAMES", "ENTER_AFTER", "BusyPorts"]

#: Looks in a row that found a port readable, each after a batch, before the ports
#: leave the loop; and the frames a port pass reads to count as a batch (a transfer's
#: receiving mrcd reads ~12 per pass, its sender ~10-20 SACKs; a round trip's, 1-2).
ENTER_AFTER: Final = 8
BULK_FRAMES: Final = 8


class BusyPorts:
    """The ports' registration with the loop: :meth:`watch` (the loop's readers call
    ``on_readable(index)``) or out of the loop while busy, driven by
    :meth:`after_look`. ``look`` runs mrcd's look (and then :meth:`after_look`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fds: Sequence[int],
                 on_readable: Callable[[int], None], look: Callable[[], None],
                 enter_after: int = ENTER_AFTER) -> None:
        self._loop = loop
        self.fds = list(fds)
        self._index = {fd: i for i, fd in enumerate(self.fds)}
        self._on_readable = on_readable
        self._look = look
        self.enter_after = enter_after
        #: True while the ports are out of the loop's epoll set.
        self.out = False
        #: Port hits in a row; times the ports left the loop.
        self.streak = 0
        self.left = 0

    def watch(self) -> None:
        """The loop watches every port (at start, and when the ports were out)."""
        loop, on_readable = self._loop, self._on_readable
        for i, fd in enumerate(self.fds):
            if fd >= 0:
                loop.add_reader(fd, on_readable, i)
        self.out = False

    def unwatch(self) -> None:
        """The loop stops watching the ports (the looks run their passes)."""
        loop = self._loop
        for fd in self.fds:
            if fd >= 0:
                loop.remove_reader(fd)
        self.out = True
        self.left += 1

    def after_look(self, ready: Sequence[tuple[int, int]] | None, bulk: bool) -> None:
        """A look ended: ``ready`` the ``poll(2)`` result that ended it (fd, events), or
        None if it found nothing; ``bulk``: the last port pass read a batch."""
        if not ready:
            self.streak = 0
            if self.out:
                self.watch()
            return
        index = self._index
        port = next((index[fd] for fd, _ in ready if fd in index), None)
        if port is None:  # a client's socket: the loop serves it, then look again
            if self.out:
                self._loop.call_soon(self._look)
            return
        self.streak = self.streak + 1 if bulk else 0
        if not self.out:
            if self.streak < self.enter_after:
                return  # the loop's epoll reports the port
            self.unwatch()
        self._loop.call_soon(self._on_readable, port)
