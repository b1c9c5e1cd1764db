"""A client's doorbell in mrcd's API server (mrcnet/daemon/apiserver.py): it takes the
client's posts and ends the pass; a datagram behind it waits for the loop's next wake-up
(the socket stays readable), so a post's pass reads its socket once, not until EAGAIN."""

from __future__ import annotations

import socket

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
