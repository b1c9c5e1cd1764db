"""In-memory test network for mrcnet.core: Hosts wired through a lossy pipe, virtual clock.

The fabric is a two-tier leaf-spine per plane: every host has one port per plane, every
path is (plane, spine), the route's uSID container is ``fc00:0:<leaf>:<spine>:<leaf>:<host>``
(one leaf for everyone: the core only cares about the path index). The pipe can drop,
duplicate, delay (reorder) and trim frames at random, black-hole a (plane, spine) or a host,
and records what it did. The clock steps to the earliest of pending deliveries and host
timers, as aioquic's tests do.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mrcnet.constants import DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP, ETH_HEADER_LEN
from mrcnet.core import Host, HostConfig, Port
from mrcnet.wire import Frame, Route, parse_frame, usid_container

BLOCK = b"\xfc\x00\x00\x00"
SPINE_USID = 0x100
TRIM_TO = 256  # bytes a "switch" keeps of a trimmed frame (all MRC headers fit)
_INNER_DST = ETH_HEADER_LEN + 40 + 24  # inner IPv6 destination (uSID mode, encap)
_OUTER_DA = ETH_HEADER_LEN + 24
_SPINE_OFF = _OUTER_DA + 4 + 2  # second uSID of the container


def mac(host: int, plane: int) -> bytes:
    return bytes([2, 0, 0, 0, plane, host])


def ip(host: int, plane: int) -> bytes:
    return b"\xfd\x00" + bytes(12) + bytes([plane, host + 1])


class Fabric:
    """PathProvider for ``n_hosts`` hosts, ``planes`` planes, ``spines`` spines each."""

    def __init__(self, names: Sequence[str], planes: int, spines: int) -> None:
        self.names = list(names)
        self.planes_n = planes
        self.spines = spines
        self.index = {n: i for i, n in enumerate(self.names)}

    def ports(self, name: str) -> list[Port]:
        h = self.index[name]
        return [Port(p, p, mac(h, p), ip(h, p)) for p in range(self.planes_n)]

    def provider(self, name: str) -> HostPaths:
        return HostPaths(self, self.index[name])


@dataclass
class HostPaths:
    fabric: Fabric
    me: int

    def planes(self, peer: str) -> Sequence[int]:
        return range(self.fabric.planes_n)

    def routes(self, peer: str, plane: int) -> Sequence[Route]:
        dst = self.fabric.index[peer]
        return [
            Route(mac(self.me, plane), b"\x02\xff\x00\x00\x00" + bytes([plane]),
                  ip(self.me, plane), ip(dst, plane),
                  usid=usid_container(BLOCK, [0x10, SPINE_USID + s, 0x10, 0x200 + dst]))
            for s in range(self.fabric.spines)
        ]


@dataclass
class Impairments:
    loss: float = 0.0
    dup: float = 0.0
    trim: float = 0.0
    delay: float = 5e-6
    jitter: float = 0.0
    dead_paths: set[tuple[int, int]] = field(default_factory=set)  # (plane, spine)
    dead_hosts: set[str] = field(default_factory=set)
    drop_if: Callable[[bytes], bool] | None = None
    trim_if: Callable[[bytes], bool] | None = None
    #: a trim happens at the receiver's leaf port: marked TRIMMED_LASTHOP, not TRIMMED
    trim_lasthop: bool = False


class Net:
    """Hosts plus the pipe and the virtual clock."""

    def __init__(
        self,
        n_hosts: int = 2,
        planes: int = 2,
        spines: int = 4,
        config: HostConfig | None = None,
        imp: Impairments | None = None,
        seed: int = 1,
    ) -> None:
        names = [f"h{i}" for i in range(n_hosts)]
        self.fabric = Fabric(names, planes, spines)
        self.hosts = {
            n: Host(n, self.fabric.ports(n), self.fabric.provider(n), config or HostConfig())
            for n in names
        }
        self.ip_host = {ip(i, p): (n, p) for i, n in enumerate(names) for p in range(planes)}
        self.imp = imp or Impairments()
        self.rng = random.Random(seed)
        self.now = 0.0
        self._q: list[tuple[float, int, str, int, bytes]] = []
        self._n = 0
        self.delivered = 0
        self.dropped = 0
        self.trimmed = 0
        self.tx_log: list[tuple[float, str, int, bytes]] = []
        self.log_tx = False

    def data_frames(self, since: float = 0.0, src: str | None = None) -> list[Frame]:
        """Parsed data frames sent (needs ``log_tx``), optionally from one host."""
        out = []
        for t, s, _port, f in self.tx_log:
            if t >= since and (src is None or s == src):
                fr = parse_frame(f)
                if fr.is_data:
                    out.append(fr)
        return out

    def h(self, i: int) -> Host:
        return self.hosts[f"h{i}"]

    def _spine(self, frame: bytes) -> int:
        return int.from_bytes(frame[_SPINE_OFF : _SPINE_OFF + 2], "big") - SPINE_USID

    def _send(self, src: str, port: int, frame: bytes) -> None:
        imp, rng = self.imp, self.rng
        if self.log_tx:
            self.tx_log.append((self.now, src, port, frame))
        dst = self.ip_host.get(bytes(frame[_INNER_DST : _INNER_DST + 16]))
        if dst is None:
            self.dropped += 1
            return
        dname, plane = dst
        if (plane, self._spine(frame)) in imp.dead_paths or dname in imp.dead_hosts \
                or src in imp.dead_hosts:
            self.dropped += 1
            return
        if imp.drop_if is not None and imp.drop_if(frame):
            self.dropped += 1
            return
        if imp.loss and rng.random() < imp.loss:
            self.dropped += 1
            return
        copies = 2 if imp.dup and rng.random() < imp.dup else 1
        for _ in range(copies):
            f = frame
            if len(f) > TRIM_TO + 64 and (
                    (imp.trim and rng.random() < imp.trim)
                    or (imp.trim_if is not None and imp.trim_if(f))):
                f = trim(f, DSCP_TRIMMED_LASTHOP if imp.trim_lasthop else DSCP_TRIMMED)
                self.trimmed += 1
            t = self.now + imp.delay + (rng.random() * imp.jitter if imp.jitter else 0.0)
            self._n += 1
            heapq.heappush(self._q, (t, self._n, dname, plane, f))

    def flush(self) -> None:
        for name, host in self.hosts.items():
            for port, frame in host.frames_to_send(self.now):
                self._send(name, port, frame)

    def step(self) -> bool:
        """Advance to the next event; False when nothing is left to happen."""
        self.flush()
        t = self._q[0][0] if self._q else float("inf")
        for host in self.hosts.values():
            nt = host.next_timer()
            if nt is not None and nt < t:
                t = nt
        if t == float("inf"):
            return False
        self.now = max(self.now, t)
        while self._q and self._q[0][0] <= self.now:
            _, _, dname, plane, f = heapq.heappop(self._q)
            self.delivered += 1
            self.hosts[dname].receive(f, plane, self.now)
        for host in self.hosts.values():
            nt = host.next_timer()
            if nt is not None and nt <= self.now:
                host.handle_timer(self.now)
                after = host.next_timer()
                # a timer that stays due after handle_timer would be a busy loop
                assert after is None or after > self.now, (host.name, after, self.now)
        self.flush()
        return True

    def run(self, until: Callable[[], bool] | None = None, max_time: float = 10.0,
            max_steps: int = 2_000_000) -> None:
        steps = 0
        while self.now < max_time and steps < max_steps:
            if until is not None and until():
                return
            if not self.step():
                return
            steps += 1
        assert steps < max_steps, "event loop did not settle (timer busy loop?)"

    def internal_errors(self) -> int:
        return sum(h.counters().get(k, 0) for h in self.hosts.values()
                   for k in ("rx_internal_error", "tx_internal_error"))


def trim(frame: bytes, dscp: int = DSCP_TRIMMED) -> bytes:
    """What a trimming switch does: cut to TRIM_TO bytes, re-mark DSCP (``dscp``: TRIMMED,
    or TRIMMED_LASTHOP at the leaf's port to the receiver), leave lengths."""
    b = bytearray(frame[:TRIM_TO])
    o = ETH_HEADER_LEN
    tc = ((b[o] & 0x0F) << 4) | (b[o + 1] >> 4)
    tc = (dscp << 2) | (tc & 0x3)
    b[o] = (b[o] & 0xF0) | (tc >> 4)
    b[o + 1] = ((tc & 0x0F) << 4) | (b[o + 1] & 0x0F)
    return bytes(b)


def connect(net: Net, a: int, b: int, *, psn_a: int = 0, psn_b: int = 0,
            attrs: dict[str, Any] | None = None, recvs: int = 0, token: int | None = None
            ) -> tuple[int, int]:
    """Create and connect a QP pair between hosts a and b; returns (qpn_a, qpn_b).
    ``token``: the pair's endpoint token (as mrcd agrees it at connect; None: unbound)."""
    from mrcnet.core import QPState

    ha, hb = net.h(a), net.h(b)
    qa = ha.create_qp(ha.create_cq())
    qb = hb.create_qp(hb.create_cq())
    extra = attrs or {}
    for host, q in ((ha, qa), (hb, qb)):
        host.modify_qp(q, QPState.INIT, **{k: v for k, v in extra.items()
                                           if k in ("ev_profile", "cc_profile",
                                                    "max_imm_outstanding", "evs_per_qp")})
        for i in range(recvs):
            host.post_recv(q, 10_000 + i)
    ha.modify_qp(qa, QPState.RTR, peer=hb.name, dest_qp_num=qb, rq_psn=psn_b, ep_token=token)
    hb.modify_qp(qb, QPState.RTR, peer=ha.name, dest_qp_num=qa, rq_psn=psn_a, ep_token=token)
    rts = {k: v for k, v in extra.items() if k in ("timeout", "retry_cnt")}
    ha.modify_qp(qa, QPState.RTS, sq_psn=psn_a, **rts)
    hb.modify_qp(qb, QPState.RTS, sq_psn=psn_b, **rts)
    return qa, qb


def write_regions(net: Net, rng: random.Random, size: int = 1 << 16) -> tuple[
        bytearray, bytearray, Any, Any, Any]:
    """A random source region on host 0 and two empty destinations on host 1, registered
    (the MRs hold their buffers): (dst1, dst2, the source's MR, the destinations' MRs),
    for tests that post writes between them."""
    src = bytearray(rng.randbytes(size))
    dst1, dst2 = bytearray(size), bytearray(size)
    return (dst1, dst2, net.h(0).register_mr(src), net.h(1).register_mr(dst1),
            net.h(1).register_mr(dst2))
