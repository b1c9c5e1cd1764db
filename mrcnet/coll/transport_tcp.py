"""The collective transport over kernel TCP: the baseline of ``--transport tcp``.

One connection per pair of ranks between their plane-0 addresses, so each pair's bytes
take one static path, as ECMP would pin a flow. A message is a 16-byte header (tag,
destination offset, length) and its bytes, which the receiver reads straight into its
inbox. Sockets are non-blocking and one loop both sends and receives, so a ring where
everyone sends at once cannot deadlock on full socket buffers. A send "completes" when
the kernel took its last byte.

Meeting: rank r listens on ``port + r``; for each pair a < b, b connects to a and says
who it is (run token, rank).
"""

from __future__ import annotations

import collections
import contextlib
import selectors
import socket
import struct
import time
from collections.abc import Callable, Sequence

from mrcnet.coll.errors import CollError, PeerFailed, StepTimeout
from mrcnet.coll.transport import ABORT_TAG, SendLedger

__all__ = ["TcpTransport"]

_HEAD = struct.Struct("!IQI")  # tag, destination offset, length
_HELLO = struct.Struct("!QI")  # run token, rank
LOOK_EVERY = 0.25


class _Conn:
    """One peer's socket: what is left to send, and the message being received."""

    def __init__(self, peer: int, sock: socket.socket) -> None:
        self.peer, self.sock = peer, sock
        #: What is left to send: (bytes, the send's number on its last piece, else 0).
        self.out: collections.deque[tuple[memoryview, int]] = collections.deque()
        self.head = bytearray()
        self.tag = self.dst = self.left = 0
        self.body = False
        self.closed = False  #: the peer closed between messages (it finished)


class TcpTransport:
    """A rank's TCP connections to the other ranks (see the module docstring)."""

    def __init__(self, rank: int, names: Sequence[str], addresses: Sequence[str],
                 data_bytes: int, inbox_bytes: int, *, token: int, port: int = 24000,
                 step_timeout: float = 30.0, connect_timeout: float = 60.0) -> None:
        self.rank, self.world, self.names = rank, len(names), list(names)
        if len(addresses) != self.world:
            raise CollError("--transport tcp needs one address per rank")
        self.step_timeout = step_timeout
        self._data = memoryview(bytearray(max(data_bytes, 4)))
        self._inbox = memoryview(bytearray(max(inbox_bytes, 4)))
        self.conns: dict[int, _Conn] = {}
        self.sel = selectors.DefaultSelector()
        self._arrived: set[tuple[int, int]] = set()
        self._aborting = False
        self.sends = SendLedger()
        self._meet(list(addresses), token, port, connect_timeout)

    @property
    def data(self) -> memoryview:
        """This rank's working buffer."""
        return self._data

    @property
    def inbox(self) -> memoryview:
        """Where peers' messages land."""
        return self._inbox

    def _meet(self, addresses: list[str], token: int, port: int, timeout: float) -> None:
        end = time.monotonic() + timeout
        lsock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            lsock.bind(("::", port + self.rank))
            lsock.listen(self.world)
            for peer in range(self.rank):
                s = self._dial(addresses[peer], port + peer, peer, end)
                s.sendall(_HELLO.pack(token, self.rank))
                self._add(peer, s)
            lsock.settimeout(max(0.1, end - time.monotonic()))
            while len(self.conns) < self.world - 1:
                s, _ = lsock.accept()
                s.settimeout(10)
                got = s.recv(_HELLO.size, socket.MSG_WAITALL)
                if len(got) != _HELLO.size:
                    s.close()
                    continue
                tok, peer = _HELLO.unpack(got)
                if tok != token or not self.rank < peer < self.world or peer in self.conns:
                    s.close()  # another run's rank: not ours
                    continue
                self._add(peer, s)
        except TimeoutError:
            missing = [p for p in range(self.world) if p != self.rank and p not in self.conns]
            raise CollError(f"rank {self.rank}: ranks {missing} did not connect over TCP "
                            f"in {timeout:.0f} s") from None
        except OSError as e:
            raise CollError(f"rank {self.rank}: TCP: {e.strerror or e}") from None
        finally:
            lsock.close()

    def _dial(self, address: str, port: int, peer: int, end: float) -> socket.socket:
        while True:
            try:
                return socket.create_connection((address, port), timeout=5)
            except OSError as e:
                if time.monotonic() >= end:
                    raise CollError(f"rank {self.rank}: cannot reach rank {peer} at "
                                    f"[{address}]:{port}: {e.strerror or e}") from None
                time.sleep(0.1)

    def _add(self, peer: int, s: socket.socket) -> None:
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = self.conns[peer] = _Conn(peer, s)
        self.sel.register(s, selectors.EVENT_READ, c)

    # --- the transport interface ------------------------------------------------------
    def send(self, peer: int, src: int, length: int, dst: int, tag: int) -> int:
        """Queue a message (sent as far as the socket takes it now, the rest by the
        next waits); its number. It completes when the kernel took its last byte."""
        c = self.conns[peer]
        seq = self.sends.post()
        head = memoryview(_HEAD.pack(tag, dst, length))
        if length:
            c.out.append((head, 0))
            c.out.append((self._data[src:src + length], seq))
        else:
            c.out.append((head, seq))
        self._watch(c)
        self._flush(c)
        return seq

    def _watch(self, c: _Conn) -> None:
        if c.closed:
            if c.out:
                raise PeerFailed(f"rank {c.peer} ({self.names[c.peer]}) closed its TCP "
                                 "connection")
            return
        ev = selectors.EVENT_READ | (selectors.EVENT_WRITE if c.out else 0)
        self.sel.modify(c.sock, ev, c)

    def wait_tag(self, peer: int, tag: int) -> None:
        """Block until ``peer``'s message tagged ``tag`` is in the inbox."""
        key = (peer, tag)
        c = self.conns[peer]

        def done() -> bool:
            if key in self._arrived:
                return True
            if c.closed:
                raise PeerFailed(f"rank {peer} ({self.names[peer]}) closed its TCP "
                                 "connection")
            return False
        self._loop(done, f"rank {peer} ({self.names[peer]})'s message {tag:#x}")
        self._arrived.discard(key)

    def wait_sent(self, upto: int | None = None) -> None:
        """Block until the kernel took every byte of sends 1..``upto`` (default: all)."""
        self._loop(lambda: self.sends.complete(upto), "our sends to drain")

    def _loop(self, done: Callable[[], bool], what: str) -> None:
        last = time.monotonic()
        while not done():
            moved = False
            for key, mask in self.sel.select(LOOK_EVERY):
                c = key.data
                if mask & selectors.EVENT_WRITE:
                    moved |= self._flush(c)
                if mask & selectors.EVENT_READ:
                    moved |= self._read(c)
            now = time.monotonic()
            if moved:
                last = now
            elif now - last > self.step_timeout:
                raise StepTimeout(f"rank {self.rank} ({self.names[self.rank]}): no progress "
                                  f"for {self.step_timeout:g} s waiting for {what}")

    def _flush(self, c: _Conn) -> bool:
        moved = False
        try:
            while c.out:
                buf, seq = c.out[0]
                n = c.sock.send(buf)
                moved = moved or n > 0
                if n == len(buf):
                    c.out.popleft()
                    if seq:
                        self.sends.done(seq)
                else:
                    c.out[0] = (buf[n:], seq)
                    break
        except BlockingIOError:
            pass
        except OSError as e:
            raise PeerFailed(f"TCP to rank {c.peer} ({self.names[c.peer]}): "
                             f"{e.strerror or e}") from None
        self._watch(c)
        return moved

    def _read(self, c: _Conn) -> bool:
        moved = False
        try:
            while True:
                if not c.body:
                    got = c.sock.recv(_HEAD.size - len(c.head))
                    if not got and not c.head:  # between messages: the peer is done
                        c.closed = True
                        self.sel.unregister(c.sock)
                        return True
                    if not got:
                        raise PeerFailed(f"rank {c.peer} ({self.names[c.peer]}) closed "
                                         "its TCP connection mid-message")
                    moved = True
                    c.head += got
                    if len(c.head) < _HEAD.size:
                        continue
                    c.tag, c.dst, c.left = _HEAD.unpack(c.head)
                    c.head.clear()
                    if c.tag == ABORT_TAG:
                        raise PeerFailed(f"rank {c.peer} ({self.names[c.peer]}) aborted "
                                         "the run")
                    if c.dst + c.left > len(self._inbox):
                        raise PeerFailed(f"rank {c.peer} sent past the inbox")
                    c.body = True
                if c.left:
                    n = c.sock.recv_into(self._inbox[c.dst:c.dst + c.left])
                    if not n:
                        raise PeerFailed(f"rank {c.peer} ({self.names[c.peer]}) closed "
                                         "its TCP connection")
                    moved = True
                    c.dst += n
                    c.left -= n
                if not c.left:
                    c.body = False
                    self._arrived.add((c.peer, c.tag))
        except BlockingIOError:
            pass
        except (ConnectionError, TimeoutError) as e:
            raise PeerFailed(f"TCP from rank {c.peer} ({self.names[c.peer]}): "
                             f"{e.strerror or e}") from None
        return moved

    def abort(self, reason: str) -> None:
        """Send the abort header to every peer (errors ignored)."""
        if self._aborting:
            return
        self._aborting = True
        for c in self.conns.values():
            try:
                c.sock.setblocking(True)
                c.sock.settimeout(0.2)
                c.sock.sendall(_HEAD.pack(ABORT_TAG, 0, 0))
            except OSError:
                pass

    def close(self) -> None:
        """Close every connection."""
        for c in self.conns.values():
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(c.sock)
            c.sock.close()
        self.sel.close()
