"""The collective transport over MRC: the public verbs API of :mod:`mrcnet.api`.

One QP per peer (every pair connected, so an abort reaches every rank in one hop); the
inbox is a memory region exposed to every peer, ``data`` another one the writes read
from. A send is an RDMA WRITE with immediate: the tag is the immediate, and its receive
completion on the peer's CQ says the bytes are in place. With ``ev_profile="ecmp"``
every QP uses one path (the single-path baseline: ``--ev ecmp``).

Meeting: for each pair a < b, rank a listens on ``service + b`` and rank b connects to
a's host on it (retrying while a has not listened yet), both sides checking the run
token in the private data, so two runs on the same hosts never mix.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence

from mrcnet.api import ApiError, ConnectError, Context, PeerInfo, QPError, QueuePair
from mrcnet.api.client import WorkCompletion
from mrcnet.coll.errors import CollError, PeerFailed, StepTimeout
from mrcnet.coll.transport import ABORT_TAG, HEARTBEAT_TAG, SendLedger

__all__ = ["MrcTransport"]

#: Receives kept posted per QP (a ring neighbour is at most a few messages ahead).
RECV_DEPTH = 64
#: How long each CQ wait lasts before the deadline and mrcd's events are looked at.
LOOK_EVERY = 0.25
#: A peer waited for that long is sent a heartbeat: a rank whose process died leaves
#: no QP behind to answer, so the heartbeat fails within the retry budget and the run
#: stops with "connection failed" instead of waiting out the step deadline.
HEARTBEAT_AFTER = 1.0


class MrcTransport:
    """A rank's connections to the other ranks over mrcd (see the module docstring)."""

    def __init__(self, rank: int, names: Sequence[str], data_bytes: int, inbox_bytes: int,
                 *, token: int, service: int = 24000, socket: str | None = None,
                 ev_profile: str | None = None, step_timeout: float = 30.0,
                 connect_timeout: float = 60.0) -> None:
        self.rank, self.world, self.names = rank, len(names), list(names)
        self.step_timeout = step_timeout
        self.token = token
        try:
            self.ctx = Context(socket)
        except ApiError as e:
            raise CollError(f"rank {rank}: {e}") from None
        self._data = self.ctx.alloc_mr(max(data_bytes, 4))
        self._inbox = self.ctx.alloc_mr(max(inbox_bytes, 4))
        self.cq = self.ctx.create_cq(depth=4096)
        self.qps: dict[int, QueuePair] = {}
        self.remote: dict[int, PeerInfo] = {}
        self._by_qpn: dict[int, int] = {}
        self._arrived: set[tuple[int, int]] = set()
        self.sends = SendLedger()
        self._aborting = False
        self._connect(service, ev_profile, connect_timeout)

    @property
    def data(self) -> memoryview:
        """This rank's working buffer (a registered region)."""
        return self._data.buf

    @property
    def inbox(self) -> memoryview:
        """Where peers' writes land."""
        return self._inbox.buf

    def _connect(self, service: int, ev: str | None, timeout: float) -> None:
        private = {"token": self.token, "rank": self.rank}
        for peer in range(self.world):
            if peer == self.rank:
                continue
            qp = self.ctx.create_qp(self.cq, ev_profile=ev)
            self.qps[peer] = qp
            self._by_qpn[qp.qpn] = peer
            if peer > self.rank:  # the lower rank listens, the higher one connects
                self.ctx.listen(service + peer, qp, expose=[self._inbox], private=private)
        end = time.monotonic() + timeout
        for peer in range(self.rank):
            self.remote[peer] = self._connect_one(peer, service + self.rank, private, end)
        for peer in range(self.rank + 1, self.world):
            left = max(0.1, end - time.monotonic())
            try:
                info = self.qps[peer].accept(timeout=left)
            except TimeoutError:
                raise CollError(f"rank {self.rank}: rank {peer} ({self.names[peer]}) did not "
                                f"connect in {timeout:.0f} s (is it running?)") from None
            self._check_peer(peer, info)
            self.remote[peer] = info
        for qp in self.qps.values():
            for i in range(RECV_DEPTH):
                qp.post_recv(wr_id=i)

    def _connect_one(self, peer: int, service: int, private: dict[str, int],
                     end: float) -> PeerInfo:
        qp = self.qps[peer]
        while True:
            try:
                info = qp.connect(self.names[peer], service, expose=[self._inbox],
                                  private=private)
                break
            except ConnectError as e:
                if "no QP listens" not in str(e) or time.monotonic() >= end:
                    raise CollError(f"rank {self.rank}: cannot connect to rank {peer} "
                                    f"({self.names[peer]}): {e}") from None
                time.sleep(0.1)
            except ApiError as e:
                raise CollError(f"rank {self.rank}: cannot connect to rank {peer} "
                                f"({self.names[peer]}): {e}") from None
        self._check_peer(peer, info)
        return info

    def _check_peer(self, peer: int, info: PeerInfo) -> None:
        p = info.private if isinstance(info.private, dict) else {}
        if p.get("token") != self.token or p.get("rank") != peer:
            raise CollError(f"rank {self.rank}: {self.names[peer]} answered for another run "
                            f"(rank {p.get('rank')}, token {p.get('token')}): is an older "
                            "mrc-coll still running there?")
        if not info.regions:
            raise CollError(f"rank {self.rank}: rank {peer} exposed no inbox")

    # --- the transport interface ------------------------------------------------------
    def send(self, peer: int, src: int, length: int, dst: int, tag: int) -> int:
        """RDMA WRITE with immediate ``tag`` into ``peer``'s inbox at ``dst``; its
        number (the work request id)."""
        seq = self.sends.post()
        try:
            self.qps[peer].post_write(self._data, src, length, self.remote[peer].regions[0],
                                      dst, imm=tag, wr_id=seq)
        except ApiError as e:
            raise PeerFailed(f"send to rank {peer} ({self.names[peer]}): {e}") from None
        return seq

    def wait_tag(self, peer: int, tag: int) -> None:
        """Block until ``peer``'s write tagged ``tag`` completed here."""
        key = (peer, tag)
        self._pump_until(lambda: key in self._arrived,
                         f"rank {peer} ({self.names[peer]})'s message {tag:#x}", peer)
        self._arrived.discard(key)

    def wait_sent(self, upto: int | None = None) -> None:
        """Block until writes 1..``upto`` (default: all) completed."""
        self._pump_until(lambda: self.sends.complete(upto), "the completion of our writes")

    def _pump_until(self, done: Callable[[], bool], what: str,
                    peer: int | None = None) -> None:
        last = beat = time.monotonic()
        while not done():
            try:
                wcs = self.cq.wait(timeout=LOOK_EVERY, max_entries=256)
            except ApiError as e:
                raise PeerFailed(f"mrcd: {e}") from None
            if wcs:
                last = time.monotonic()
                self._take(wcs)
                continue
            self._look()
            now = time.monotonic()
            if peer is not None and now - beat > HEARTBEAT_AFTER:
                beat = now
                self._heartbeat(peer)
            if now - last > self.step_timeout:
                raise StepTimeout(f"rank {self.rank} ({self.names[self.rank]}): no progress "
                                  f"for {self.step_timeout:g} s waiting for {what}")

    def _take(self, wcs: list[WorkCompletion]) -> None:
        for wc in wcs:
            peer = self._by_qpn.get(wc.qpn, -1)
            if wc.opcode == "RECV_RDMA_WITH_IMM":
                if not wc.ok:
                    raise PeerFailed(f"receive from rank {peer} failed: {wc.status}")
                self.qps[peer].post_recv(wr_id=wc.wr_id)
                imm = wc.imm or 0
                if imm == HEARTBEAT_TAG:
                    continue
                if imm == ABORT_TAG:
                    raise PeerFailed(f"rank {peer} ({self.names[peer]}) aborted the run")
                self._arrived.add((peer, imm))
                continue
            if not wc.ok:
                raise PeerFailed(f"write to rank {peer} ({self.names[peer]}) failed: "
                                 f"{wc.status}")
            if wc.wr_id:  # 0: an abort or a heartbeat
                self.sends.done(wc.wr_id)

    def _look(self) -> None:
        while (ev := self.ctx.get_async_event(timeout=0)) is not None:
            if isinstance(ev, QPError):
                peer = self._by_qpn.get(ev.qpn)
                who = f"rank {peer} ({self.names[peer]})" if peer is not None else "a peer"
                raise PeerFailed(f"the connection to {who} failed: {ev.reason}")

    def _heartbeat(self, peer: int) -> None:
        try:
            self.qps[peer].post_write(self._data, 0, 0, self.remote[peer].regions[0], 0,
                                      imm=HEARTBEAT_TAG, wr_id=0)
        except ApiError as e:
            raise PeerFailed(f"rank {peer} ({self.names[peer]}): {e}") from None

    def abort(self, reason: str) -> None:
        """Zero-byte write with the abort tag to every peer (errors ignored)."""
        if self._aborting:
            return
        self._aborting = True
        for peer, qp in self.qps.items():
            with contextlib.suppress(ApiError, KeyError, OSError):
                qp.post_write(self._data, 0, 0, self.remote[peer].regions[0], 0,
                              imm=ABORT_TAG, wr_id=0)
        # Give mrcd a moment to put them on the wire before the QPs go.
        with contextlib.suppress(ApiError, OSError):
            self.cq.wait(timeout=0.2)

    def close(self) -> None:
        """Disconnect from mrcd (it destroys this rank's QPs and regions)."""
        with contextlib.suppress(OSError):
            self.ctx.close()
