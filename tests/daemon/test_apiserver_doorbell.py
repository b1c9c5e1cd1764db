"""A client's doorbell in mrcd's API server (mrcnet/daemon/apiserver.py): it takes the
client's posts and ends the pass; a datagram behind it waits for the loop's next wake-up
(the socket stays readable), so a post's pass reads its socket once, not until EAGAIN."""

from __future__ import annotations

import socket
from pathlib import Path

from mrcnet.api.shmclient import DOORBELL
from mrcnet.daemon.apiserver import ApiServer, Session


def test_a_doorbell_takes_the_posts_and_ends_the_pass() -> None:
    taken: list[int] = []
    pumps: list[int] = []  # how many takes each pump (after_burst) came after
    server = ApiServer("unused.sock", 0o600, lambda s, m, f: {}, lambda s: None, "h", 1,
                       after_burst=lambda: pumps.append(len(taken)),
                       take_posts=lambda s: taken.append(s.sid))
    mrcd_end, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with mrcd_end, client:
        mrcd_end.setblocking(False)
        s = Session(server, mrcd_end, 7)
        s.queues = object()  # (a client with shared queues: its doorbell means posts)
        client.send(DOORBELL)
        client.send(DOORBELL)  # (rung again before mrcd looked)
        server._readable(s)
        assert taken == [7] and pumps == [1]  # one take, then one pump
        assert mrcd_end.recv(8, socket.MSG_PEEK) == DOORBELL  # left for the next pass
        server._readable(s)
        assert taken == [7, 7] and pumps == [1, 2]
        server._readable(s)  # nothing queued: no take, still a pump (as before)
        assert taken == [7, 7] and pumps == [1, 2, 2]


def test_a_burst_that_starts_a_task_skips_the_look_before_sleeping(tmp_path: Path) -> None:
    """mrcd's look before it sleeps (idle_poll_us) watches fds, not the loop's ready
    callbacks: a request answered by a task (a connect) must not wait behind it."""
    import asyncio

    from mrcnet.api.protocol import encode

    looks: list[bool] = []  # (each call: did the burst start a task?)

    async def slow(s: Session, msg: dict[str, object], fds: list[int]) -> dict[str, object]:
        return {}

    def dispatch(s: Session, msg: dict[str, object], fds: list[int]) -> object:
        return slow(s, msg, fds) if msg.get("op") == "connect" else {}

    server = ApiServer(str(tmp_path / "mrcd.sock"), 0o600, dispatch, lambda s: None, "h",
                       1, after_burst=lambda: None, idle=looks.append)
    loop = asyncio.new_event_loop()
    server.start(loop)
    mrcd_end, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with mrcd_end, client:
        mrcd_end.setblocking(False)
        s = Session(server, mrcd_end, 7)
        s.hello = True
        client.send(encode({"id": 1, "op": "stats"}))
        server._readable(s)
        assert looks == [False]  # answered in the pass: then the look
        client.send(encode({"id": 2, "op": "connect"}))
        server._readable(s)
        assert looks == [False, True] and server.tasks == 1  # a task: told, no look
        loop.run_until_complete(asyncio.sleep(0))
    server.close()
    loop.close()
