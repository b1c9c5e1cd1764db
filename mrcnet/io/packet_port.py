"""One NIC port as a raw AF_PACKET socket: what mrcd reads MRC frames from and writes to.

Setup order matters: the socket is created with protocol 0 (it receives nothing), the MRC
BPF filter is attached, and only then is it bound to (ifname, ETH_P_ALL); so no
unfiltered frame is ever queued.

Why ETH_P_ALL and not ETH_P_IPV6: only ETH_P_ALL sockets are *taps* (ptype_all), which
the kernel serves before tc ingress and the netfilter ingress hook. A socket bound to
ETH_P_IPV6 is served with the protocol handlers, after those hooks, so it would never see
a frame that the kernel drop rule (:mod:`mrcnet.io.kernel_drop`) or mrc-fabric's host
ingress program drops (measured: tests/daemon/test_packet_io.py). The BPF filter checks the
EtherType, so nothing but IPv6 MRC frames is queued either way.

The socket is non-blocking, ignores this host's own transmissions (PACKET_IGNORE_OUTGOING;
the batch receiver drops PACKET_OUTGOING too, for kernels without the option), and has
large buffers (SO_RCVBUFFORCE when allowed).

Frames go in and out in batches through :mod:`mrcnet.io.batch` (sendmmsg/recvmmsg in C,
or the pure-Python twin). A full send queue does not block or drop: the rest of a batch
waits in a small backlog that :meth:`PacketPort.flush` retries (mrcd calls it when the
socket becomes writable; :attr:`PacketPort.backlog` says when to watch for that).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from mrcnet.constants import ETH_HEADER_LEN
from mrcnet.io import batch as batch_io
from mrcnet.io.bpf import attach_filter
from mrcnet.io.errors import CapabilityError, IOSetupError

__all__ = ["PacketPort", "PortStats", "interface_mac", "interface_mtu", "interface_running"]

# <linux/if_packet.h>
SOL_PACKET: Final = 263
ETH_P_ALL: Final = 0x0003
PACKET_QDISC_BYPASS: Final = 20
PACKET_IGNORE_OUTGOING: Final = 23
PACKET_STATISTICS: Final = 6  # struct tpacket_stats {u32 tp_packets; u32 tp_drops;}
# <asm-generic/socket.h>: the *FORCE variants exceed net.core.[rw]mem_max (CAP_NET_ADMIN).
SO_SNDBUFFORCE: Final = 32
SO_RCVBUFFORCE: Final = 33
# <linux/sockios.h>
SIOCGIFFLAGS: Final = 0x8913
IFF_UP: Final = 0x1
IFF_RUNNING: Final = 0x40  # operationally up (carrier)
SIOCGIFMTU: Final = 0x8921
SIOCGIFHWADDR: Final = 0x8927

#: Default socket buffers: several ms of frames at the ~150 kpps this class of machine
#: reaches, so a scheduling hiccup of mrcd does not drop a burst.
DEFAULT_BUFFER: Final = 8 << 20
#: Frames per sendmmsg/recvmmsg (32-64 measured 1.5-2x faster than one per syscall).
DEFAULT_BATCH: Final = 64
#: Frames a port keeps when its send queue is full before it starts dropping.
MAX_BACKLOG: Final = 4096

#: Send errors: the socket is full (the rest waits), the link is down (the frames can go
#: nowhere: dropped), a frame larger than the MTU (a caller bug: that frame dropped).
_SEND_FULL: Final = (errno.EAGAIN, errno.ENOBUFS)
_SEND_LINK_DOWN: Final = (errno.ENETDOWN, errno.ENXIO)

_CAP_HINT: Final = "run as root or grant the capability (setcap cap_net_raw,cap_net_admin+ep)"


def _ifreq(ifname: str, request: int) -> bytes:
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        try:
            return fcntl.ioctl(s.fileno(), request, struct.pack("16s16x", ifname.encode()))
        except OSError as e:
            if e.errno == errno.ENODEV:
                raise IOSetupError(f"no network interface {ifname!r} in this namespace") from e
            raise


def interface_mtu(ifname: str) -> int:
    """The interface's MTU (bytes of IP packet, without the Ethernet header)."""
    return int(struct.unpack_from("i", _ifreq(ifname, SIOCGIFMTU), 16)[0])


def interface_running(ifname: str) -> bool:
    """Whether the interface is up and has carrier (IFF_UP and IFF_RUNNING)."""
    flags = struct.unpack_from("H", _ifreq(ifname, SIOCGIFFLAGS), 16)[0]
    return bool(flags & IFF_UP) and bool(flags & IFF_RUNNING)


def interface_mac(ifname: str) -> bytes:
    """The interface's 6-byte hardware address."""
    return _ifreq(ifname, SIOCGIFHWADDR)[18:24]


@dataclass
class PortStats:
    """Counters of one port (monotonic; diff two snapshots for rates)."""

    rx_frames: int = 0  #: frames handed to the caller
    tx_frames: int = 0  #: frames the kernel accepted
    tx_backlogged: int = 0  #: frames that had to wait for socket space
    tx_dropped: int = 0  #: frames dropped because the backlog was full
    rx_batches: int = 0  #: receive calls that returned at least one frame
    tx_batches: int = 0  #: send calls
    rx_link_down: int = 0  #: receive calls that found the link down (ENETDOWN)
    #: frames the kernel dropped because the socket's receive buffer was full (the
    #: reader fell behind), from PACKET_STATISTICS; brought up to date by
    #: :meth:`PacketPort.snapshot`
    rx_kernel_dropped: int = 0


class PacketPort:
    """A raw packet socket on one NIC port, filtered to MRC frames.

    Needs CAP_NET_RAW (:class:`~mrcnet.io.errors.CapabilityError` otherwise). Use as a
    context manager or call :meth:`close`.
    """

    def __init__(
        self,
        ifname: str,
        *,
        buffer_bytes: int = DEFAULT_BUFFER,
        max_batch: int = DEFAULT_BATCH,
        qdisc_bypass: bool = False,
        bpf: bool = True,
    ) -> None:
        self.ifname = ifname
        self.ifindex = _ifindex(ifname)
        self.mac = interface_mac(ifname)
        self.mtu = interface_mtu(ifname)
        self.stats = PortStats()
        # Receive slots hold a whole frame; anything longer is not ours and is cut.
        self.frame_max = self.mtu + ETH_HEADER_LEN
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        except PermissionError as e:
            raise CapabilityError(
                f"opening a packet socket on {ifname} needs CAP_NET_RAW: {_CAP_HINT}"
            ) from e
        try:
            if bpf:
                attach_filter(sock, lock=False)
            self._set_buffers(sock, buffer_bytes)
            # Kernels before 4.20 lack it: the batch receiver drops them instead.
            with contextlib.suppress(OSError):
                sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            if qdisc_bypass:
                sock.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
            sock.setblocking(False)
            sock.bind((ifname, ETH_P_ALL))  # a tap: see the module docstring
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._io = batch_io.BatchIO(sock.fileno(), max_batch, max(self.frame_max, 2048))
        self._backlog: deque[bytes | bytearray | memoryview] = deque()
        #: True after :meth:`close` (an attribute: mrcd's passes test it per port).
        self.closed = False

    @staticmethod
    def _set_buffers(sock: socket.socket, size: int) -> None:
        for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF),
                             (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, size)
            except PermissionError:  # no CAP_NET_ADMIN: capped at net.core.*mem_max
                sock.setsockopt(socket.SOL_SOCKET, plain, size)

    # --- lifecycle ---------------------------------------------------------------------
    def fileno(self) -> int:
        """The socket's fd (for event loops: readable = frames queued)."""
        return self._sock.fileno()

    def close(self) -> None:
        """Close the socket; frames still in the backlog are dropped."""
        if not self.closed:
            self.closed = True
            self._io.close()
            self._sock.close()
        self._backlog.clear()

    def __enter__(self) -> PacketPort:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PacketPort({self.ifname!r}, ifindex={self.ifindex})"

    def snapshot(self) -> dict[str, int]:
        """The counters as a dict, with the kernel's receive drops brought up to date
        (reading PACKET_STATISTICS resets the kernel's count, so it is added up here)."""
        if not self.closed:
            with contextlib.suppress(OSError):
                raw = self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
                self.stats.rx_kernel_dropped += struct.unpack("=II", raw)[1]
        return dict(vars(self.stats))

    @property
    def buffer_sizes(self) -> tuple[int, int]:
        """(SO_RCVBUF, SO_SNDBUF) as the kernel set them (it doubles what was asked)."""
        return (self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
                self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))

    @property
    def max_batch(self) -> int:
        """Frames one :meth:`recv` or send syscall takes at most."""
        return self._io.max_batch

    # --- receive -----------------------------------------------------------------------
    @property
    def rx_batch(self) -> batch_io.CBatchIO | None:
        """The C batch whose buffers the last :meth:`recv`'s views point into (None
        without the C fast path): ``Host.receive_batch(..., slots=)`` reads them there."""
        io = self._io
        return io if isinstance(io, batch_io.CBatchIO) else None

    def recv_slots(self) -> int:
        """:meth:`recv` without making the views (C batch I/O only: see
        :attr:`rx_batch`): how many frames the batch holds now, until the next receive
        (:class:`mrcnet.buffers.SlotFrames` views them)."""
        io = self._io
        assert isinstance(io, batch_io.CBatchIO)
        try:
            got = batch_io.recv_slots(io)
        except OSError as e:
            if e.errno not in (errno.ENETDOWN, errno.ENXIO):
                raise
            return self.recv_failed(e.errno)  # (the carrier dropped: see recv)
        if got:
            self.stats.rx_frames += got
            self.stats.rx_batches += 1
        return got

    def recv_failed(self, err: int) -> int:
        """A C read of the port (:attr:`rx_batch`'s) failed with errno ``err``: 0 when
        the carrier dropped (counted ``rx_link_down``, as :meth:`recv_slots` does), else
        OSError."""
        if err not in (errno.ENETDOWN, errno.ENXIO):
            raise OSError(err, os.strerror(err))
        self.stats.rx_link_down += 1
        return 0

    def recv(self, max_frames: int | None = None, *, wait: bool = False) -> list[memoryview]:
        """Frames queued on the port (up to one batch), without blocking unless ``wait``.

        The views point into the port's reusable buffer: they are valid until the next
        :meth:`recv`; copy what must outlive that.
        """
        try:
            got = self._io.recv_views(max_frames, wait=wait)
        except OSError as e:
            if e.errno not in (errno.ENETDOWN, errno.ENXIO):
                raise
            # The carrier dropped: the kernel reports it once on the socket (the socket
            # stays usable once the link is back). Link state itself comes from rtnetlink.
            self.stats.rx_link_down += 1
            return []
        if got:
            self.stats.rx_frames += len(got)
            self.stats.rx_batches += 1
        return got

    # --- send --------------------------------------------------------------------------
    @property
    def backlog(self) -> int:
        """Frames waiting for socket space (watch the fd for writability while > 0)."""
        return len(self._backlog)

    def send(self, frames: Iterable[bytes | bytearray | memoryview]) -> int:
        """Queue ``frames`` for transmission and send as many as the socket takes now.

        Returns how many were done with in this call (sent, or dropped as unsendable),
        older backlog first. Frames that do not fit wait in the backlog; past
        :data:`MAX_BACKLOG` the newest are dropped (and counted): MRC recovers losses, and
        an unbounded queue would only add delay.
        """
        if self._backlog:
            before = len(self._backlog)
            self._backlog.extend(frames)
            self._trim_backlog()
            self.stats.tx_backlogged += len(self._backlog) - before
            return self.flush()
        batch = frames if isinstance(frames, list) else list(frames)
        done = self._send_list(batch)
        if done < len(batch):
            self._backlog.extend(batch[done:])
            self.stats.tx_backlogged += len(batch) - done
            self._trim_backlog()
        return done

    def send_or_drop(self, frames: list[bytes | bytearray | memoryview]) -> int:
        """Send what the socket takes now and drop the rest (counted): for offered-load
        benchmarks. Returns how many were sent. The backlog is not involved."""
        done = self._send_list(frames)
        self.stats.tx_dropped += len(frames) - done
        return done

    def flush(self) -> int:
        """Retry the backlog; returns how many frames are done with (sent or dropped)."""
        total = 0
        while self._backlog:
            chunk = [self._backlog[i] for i in range(min(len(self._backlog),
                                                         self._io.max_batch))]
            done = self._send_list(chunk)
            for _ in range(done):
                self._backlog.popleft()
            total += done
            if done < len(chunk):
                break
        return total

    def send_queue(self, q: batch_io.SendQueue, index: int) -> int:
        """Send what waits for this port (its ``index``) on ``q`` (mrcd's data frames,
        :class:`mrcnet.io.batch.SendQueue`): as much as the socket takes now, the rest
        stays queued. Errors as :meth:`send`: a link that is down drops the queue, a
        frame too large for the MTU is dropped; all counted. Returns frames sent."""
        assert isinstance(self._io, batch_io.CBatchIO)
        total = 0
        while True:
            n, calls, err = q.send(index, self._io)
            self.stats.tx_frames += n
            self.stats.tx_batches += calls
            total += n
            if not self.queue_failed(q, index, err):
                return total

    def queue_failed(self, q: batch_io.SendQueue, index: int, err: int) -> bool:
        """The error policy for what sending this port's queue on ``q`` ended with
        (``err``: 0, EAGAIN or an errno, as :meth:`SendQueue.send` and ``flush`` give):
        a link that is down drops the queue, a frame too large for the MTU is dropped
        (True: send the rest now), a full socket keeps it; anything else raises."""
        if not err or err in _SEND_FULL:
            return False
        if err in _SEND_LINK_DOWN:
            self.stats.tx_dropped += q.drop(index, q.pending(index))
            return False
        if err == errno.EMSGSIZE:
            self.stats.tx_dropped += q.drop(index, 1)
            return True
        raise OSError(err, os.strerror(err))

    def _trim_backlog(self) -> None:
        while len(self._backlog) > MAX_BACKLOG:
            self._backlog.pop()
            self.stats.tx_dropped += 1

    def _send_list(self, frames: list[bytes | bytearray | memoryview]) -> int:
        """Send from the front of ``frames``; returns how many leading frames are done
        with (sent, or dropped because they can never go). Stops when the socket is full."""
        done = 0
        step = self._io.max_batch
        while done < len(frames):
            chunk = frames[done : done + step]
            try:
                n = self._io.send(chunk)
            except OSError as e:
                if e.errno in _SEND_FULL:
                    n = 0
                elif e.errno in _SEND_LINK_DOWN:
                    # The link is down: these frames cannot go anywhere. MRC resends what
                    # matters on other planes once mrcd marks the port down.
                    self.stats.tx_dropped += len(chunk)
                    done += len(chunk)
                    continue
                elif e.errno == errno.EMSGSIZE:
                    # The first frame is larger than the MTU: a caller bug; drop it.
                    self.stats.tx_dropped += 1
                    done += 1
                    continue
                else:
                    raise
            self.stats.tx_batches += 1
            self.stats.tx_frames += n
            done += n
            if n < len(chunk):
                break
        return done


def _ifindex(ifname: str) -> int:
    try:
        return socket.if_nametoindex(ifname)
    except OSError as e:
        raise IOSetupError(f"no network interface {ifname!r} in this namespace") from e
