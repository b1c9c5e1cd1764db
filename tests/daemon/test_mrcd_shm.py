"""Posts and completions in the queues shared with mrcd (issue 15), through two real
mrcds on a veth pair: rings that wrap, full rings on both sides (the client waits, mrcd
keeps the rest: nothing lost), a client killed with posts in flight, two clients on one
mrcd, busy-poll on and off, a client that scribbles on its send queue, and many posts
taken in one pass (refused ones among them)."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mdnsutil import Mrcd, MrcdPair, VethPair, needs_root, start_mrcd, write_config

from mrcnet.api import ApiError, Context, InvalidArgument, InvalidQP, QueueFull
from mrcnet.api import client as api_client
from mrcnet.api.client import (
    CompletionQueue,
    MemoryRegion,
    QueuePair,
    RemoteRegion,
    WorkCompletion,
)
from mrcnet.api.protocol import PROTOCOL_VERSION
from mrcnet.api.shmqueues import OP_WRITE, SQ_SLOT, WORK_REQUEST, queue_bytes, sealed_memfd
from mrcnet.api.shmring import HEADER, OFF_TAIL, PRECISE

pytestmark = needs_root


def _drain(cq: CompletionQueue, want: int, timeout: float = 20.0) -> list[WorkCompletion]:
    got: list[WorkCompletion] = []
    deadline = time.monotonic() + timeout
    while len(got) < want:
        assert time.monotonic() < deadline, f"{len(got)} of {want} completions"
        got += cq.wait(timeout=1.0, max_entries=1 << 16)
    return got


def _connect(ca: Context, cb: Context, service: int, size: int = 1 << 16, *,
             depth: int = 1024, sq_sig_all: bool = True
             ) -> tuple[MemoryRegion, CompletionQueue, QueuePair,
                        MemoryRegion, CompletionQueue, QueuePair]:
    """A QP of ``ca`` (on ha) connected to one of ``cb`` (on hb) that exposes a region
    (both QPs made with ``sq_sig_all``)."""
    mr_b, cq_b = cb.alloc_mr(size), cb.create_cq(depth)
    qp_b = cb.create_qp(cq_b, sq_sig_all=sq_sig_all)
    cb.listen(service, qp_b, expose=[mr_b])
    mr_a, cq_a = ca.alloc_mr(size), ca.create_cq(depth)
    qp_a = ca.create_qp(cq_a, sq_sig_all=sq_sig_all)
    qp_a.connect("hb", service, expose=[mr_a])
    qp_b.accept(timeout=10)
    return mr_a, cq_a, qp_a, mr_b, cq_b, qp_b


def test_full_rings_wrap_and_lose_nothing(mrcd_pair: MrcdPair) -> None:
    """16-slot completion rings and a 16-slot send queue, 400 writes-with-immediate
    posted at once: the posts wait for room, mrcd keeps what the rings cannot take,
    and every completion arrives once, in order, with the bytes in place."""
    n = 400
    with Context(mrcd_pair.a.socket, sq_depth=16) as ca, \
            Context(mrcd_pair.b.socket, sq_depth=16) as cb:
        mr_a, cq_a, qp_a, mr_b, cq_b, qp_b = _connect(ca, cb, 7, depth=16)
        assert qp_a.peer is not None
        for i in range(n):
            qp_b.post_recv(wr_id=1000 + i)
        mr_a.buf[: n * 64] = bytes(range(256)) * (n // 4)
        for i in range(n):
            qp_a.post_write(mr_a, i * 64, 64, qp_a.peer.regions[0], i * 64, imm=i, wr_id=i)
        time.sleep(0.5)  # both completion rings fill up while nobody polls
        sent = _drain(cq_a, n)
        recv = _drain(cq_b, n)
        assert [w.wr_id for w in sent] == list(range(n))
        assert [(w.wr_id, w.imm) for w in recv] == [(1000 + i, i) for i in range(n)]
        assert all(w.ok for w in sent + recv)
        assert bytes(mr_b.buf[: n * 64]) == bytes(mr_a.buf[: n * 64])


@pytest.mark.parametrize("busy_poll_us", [0, 200])
def test_round_trips_with_and_without_busy_poll(mrcd_pair: MrcdPair,
                                                busy_poll_us: int) -> None:
    with Context(mrcd_pair.a.socket, busy_poll_us=busy_poll_us) as ca, \
            Context(mrcd_pair.b.socket, busy_poll_us=busy_poll_us) as cb:
        mr_a, cq_a, qp_a, mr_b, cq_b, qp_b = _connect(ca, cb, 8)
        assert qp_a.peer is not None and qp_b.peer is not None
        for i in range(4):
            qp_a.post_recv(wr_id=i)
            qp_b.post_recv(wr_id=i)
        for i in range(50):
            payload = struct.pack("<Q", i) * 4
            mr_a.buf[:32] = payload
            qp_a.post_write(mr_a, 0, 32, qp_a.peer.regions[0], imm=i)
            w = next(w for w in _drain_until_recv(cq_b))
            qp_b.post_recv(wr_id=w.wr_id)
            assert w.imm == i and bytes(mr_b.buf[:32]) == payload
            qp_b.post_write(mr_b, 0, 32, qp_b.peer.regions[0], imm=i)
            w = next(w for w in _drain_until_recv(cq_a))
            qp_a.post_recv(wr_id=w.wr_id)
            assert w.imm == i and bytes(mr_a.buf[:32]) == payload


def test_acks_ride_the_answers_and_a_lone_write_still_completes(
        mrcd_pair: MrcdPair) -> None:
    """mrcd holds the AckReq of a write-with-immediate for the answer (ack_with_data):
    in a ping-pong every write still completes at its sender, nothing is resent, and
    each mrcd counts its loop passes; a last write that nothing answers completes too,
    its ACK leaving at ack_delay (long before any retransmission timer)."""
    with Context(mrcd_pair.a.socket) as ca, Context(mrcd_pair.b.socket) as cb:
        mr_a, cq_a, qp_a, mr_b, cq_b, qp_b = _connect(ca, cb, 10)
        assert qp_a.peer is not None and qp_b.peer is not None
        for i in range(4):
            qp_a.post_recv(wr_id=i)
            qp_b.post_recv(wr_id=i)
        st = ca.stats()
        before = {**st["loop_passes"], "doorbells": st["doorbells"]}
        sent: list[WorkCompletion] = []
        n = 40
        for i in range(n):
            qp_a.post_write(mr_a, 0, 8, qp_a.peer.regions[0], imm=i, wr_id=1000 + i)
            w = next(w for w in _drain_until_recv(cq_b))
            qp_b.post_write(mr_b, 0, 8, qp_b.peer.regions[0], imm=i, wr_id=2000 + i)
            qp_b.post_recv(wr_id=w.wr_id)
            got = _drain_until_recv_keeping(cq_a, sent)
            qp_a.post_recv(wr_id=got.wr_id)
        t0 = time.monotonic()
        qp_a.post_write(mr_a, 0, 8, qp_a.peer.regions[0], imm=n, wr_id=1000 + n)
        deadline = t0 + 10
        while not any(w.wr_id == 1000 + n for w in sent):
            assert time.monotonic() < deadline, "the lone write never completed"
            sent += cq_a.wait(timeout=1.0)
        assert sorted(w.wr_id for w in sent if w.opcode == "RDMA_WRITE") == \
            list(range(1000, 1001 + n))
        assert all(w.status == "SUCCESS" for w in sent)
        after = ca.stats()
        # (the held ACK left at ack_delay, 1 ms: the retransmission timer is 20 ms)
        assert after["host"].get("tx_retransmit", 0) == 0
        assert cb.stats()["host"].get("tx_retransmit", 0) == 0
        now_ = {**after["loop_passes"], "doorbells": after["doorbells"]}
        passes = {k: now_[k] - before[k] for k in before}
        assert passes["client"] >= n and passes["port"] >= n  # a post and an answer each
        # A pass rings the client once, with the answer's completion and the one its ACK
        # brought together (settled before delivery, not in the send that follows); a
        # port pass whose look took the client's answer (answer_poll_us) ran that
        # answer's pass too, which may ring once more.
        assert passes["doorbells"] <= (passes["port"] + passes["timer"]
                                       + passes["answer_hit"]), passes
        # After the first ping-pong each side held its AckReqs for the answers.
        for ctx, qp in ((ca, qp_a), (cb, qp_b)):
            held = ctx.stats(qp)["qp"]["counters"].get("ack_held", 0)
            assert held >= n // 2, held


def test_a_writer_waiting_for_each_completion_is_acknowledged_at_once(
        mrcd_pair: MrcdPair) -> None:
    """ack_with_data holds an AckReq only while the QP answers: a writer that waits for
    each write-with-immediate's own completion, and is never answered, gets every ACK at
    once (no AckReq held: a held one would cost it ack_delay plus mrcd's loop timer)."""
    with Context(mrcd_pair.a.socket) as ca, Context(mrcd_pair.b.socket) as cb:
        mr_a, cq_a, qp_a, _mr_b, cq_b, qp_b = _connect(ca, cb, 11)
        assert qp_a.peer is not None
        n = 30
        for i in range(n):
            qp_b.post_recv(wr_id=i)
        for i in range(n):
            qp_a.post_write(mr_a, 0, 8, qp_a.peer.regions[0], imm=i, wr_id=i)
            assert [(w.wr_id, w.status) for w in cq_a.wait(timeout=10)] == [(i, "SUCCESS")]
        got: list[WorkCompletion] = []
        while len(got) < n:
            more = cq_b.wait(timeout=10)
            assert more, f"{len(got)} of {n} writes arrived"
            got += more
        assert [w.imm for w in got] == list(range(n))
        counters = cb.stats(qp_b)["qp"]["counters"]
        assert counters.get("ack_held", 0) == 0, counters


def _drain_until_recv_keeping(cq: CompletionQueue, other: list[WorkCompletion]
                              ) -> WorkCompletion:
    """The next write-with-immediate's completion; the rest go to ``other``."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = cq.wait(timeout=1.0)
        other += [w for w in got if w.opcode != "RECV_RDMA_WITH_IMM"]
        recv = [w for w in got if w.opcode == "RECV_RDMA_WITH_IMM"]
        if recv:
            assert len(recv) == 1  # one ping at a time
            return recv[0]
    raise AssertionError("no write-with-immediate arrived")


@contextmanager
def _two_mrcds(veth: VethPair, tmp_path: Path, extra_a: str, extra_b: str
               ) -> Iterator[tuple[dict[str, str], list[Mrcd]]]:
    """mrcd "ha" and "hb" on ``veth``, each with its extra configuration lines: their
    sockets by name, and the mrcds (stopped by PID afterwards)."""
    socks = {}
    started: list[Mrcd] = []
    try:
        for name, ns, ifname, ip, other, oip, extra in (
                ("ha", veth.ns_a, veth.if_a, veth.ip_a, "hb", veth.ip_b, extra_a),
                ("hb", veth.ns_b, veth.if_b, veth.ip_b, "ha", veth.ip_a, extra_b)):
            cfg, sock = str(tmp_path / f"{name}.toml"), str(tmp_path / f"{name}.sock")
            write_config(cfg, name, ifname, ip, sock, {other: oip}, extra=extra)
            started.append(start_mrcd(name, ns, cfg, sock, str(tmp_path)))
            socks[name] = sock
        yield socks, started
    finally:
        for m in started:
            m.stop()


def _ping_pong(socks: dict[str, str], trips: int) -> None:
    """``trips`` write-with-immediate round trips ha -> hb -> ha, each answer checked."""
    with Context(socks["ha"], busy_poll_us=0) as ca, \
            Context(socks["hb"], busy_poll_us=0) as cb:
        mr_a, cq_a, qp_a, mr_b, cq_b, qp_b = _connect(ca, cb, 13)
        assert qp_a.peer is not None and qp_b.peer is not None
        qp_b.post_recv(wr_id=0)
        qp_a.post_recv(wr_id=0)
        for i in range(trips):
            qp_a.post_write(mr_a, 0, 16, qp_a.peer.regions[0], imm=i)
            (w,) = _drain_until_recv(cq_b)
            qp_b.post_recv(wr_id=0)
            qp_b.post_write(mr_b, 0, 16, qp_b.peer.regions[0], imm=w.imm)
            (w,) = _drain_until_recv(cq_a)
            qp_a.post_recv(wr_id=0)
            assert w.imm == i


def test_round_trips_with_mrcd_busy_polling(veth: VethPair, tmp_path: Path) -> None:
    """mrcd's own busy-poll (busy_poll_us) on both sides: after each pass it looks at the
    client's send queue a while (without a doorbell), then arms it again; nothing is lost
    or late either way."""
    with _two_mrcds(veth, tmp_path, "busy_poll_us = 300", "busy_poll_us = 300") as (socks, _):
        _ping_pong(socks, 30)


def test_mrcd_runs_under_sched_batch_when_told_to(veth: VethPair,
                                                  tmp_path: Path) -> None:
    """``sched_batch = true``: the mrcd process runs under SCHED_BATCH; by default
    under the policy it was started with; round trips between the two work the same."""
    with _two_mrcds(veth, tmp_path, "sched_batch = true", "") as (socks, (ma, mb)):
        assert os.sched_getscheduler(ma.proc.pid) == os.SCHED_BATCH
        assert os.sched_getscheduler(mb.proc.pid) == os.sched_getscheduler(0)
        assert os.sched_getscheduler(0) != os.SCHED_BATCH
        _ping_pong(socks, 20)


def _drain_until_recv(cq: CompletionQueue) -> list[WorkCompletion]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = [w for w in cq.wait(timeout=1.0) if w.opcode == "RECV_RDMA_WITH_IMM"]
        if got:
            return got
    raise AssertionError("no write-with-immediate arrived")


def test_region_deregistered_with_writes_in_flight(mrcd_pair: MrcdPair) -> None:
    """Writes of 1 MiB posted from a region that is deregistered right after (mrcd
    takes a context's posts before its next request): their payloads go to the ports
    straight from the region (mrc_sendq_add_gather), so mrcd keeps its mapping until
    their frames have gone. mrcd stays up, every write completes and lands whole, the
    QP's next write lands, and mrcd unmaps each region once its writes are done."""

    def mapped() -> int:  # mrcd's mappings of 4 MiB regions
        with open(f"/proc/{mrcd_pair.a.proc.pid}/maps") as f:
            return sum(1 for line in f if "mrc-mr" in line and
                       int(line.split("-")[1].split()[0], 16)
                       - int(line.split("-")[0], 16) == 4 << 20)

    with Context(mrcd_pair.a.socket) as ca, Context(mrcd_pair.b.socket) as cb:
        mr_a, cq_a, qp_a, mr_b, _cq_b, _qp_b = _connect(ca, cb, 14, size=1 << 20)
        assert qp_a.peer is not None
        dst = qp_a.peer.regions[0]
        pattern = bytes((i * 7 + 3) & 0xFF for i in range(1 << 20))
        for rnd in range(3):
            big = ca.alloc_mr(4 << 20)
            for k in range(4):
                big.buf[k << 20:(k + 1) << 20] = pattern
            for k in range(4):
                qp_a.post_write(big, k << 20, 1 << 20, dst, wr_id=100 * rnd + k)
            big.deregister()
            wcs = _drain(cq_a, 4)
            assert sorted(w.wr_id for w in wcs) == [100 * rnd + k for k in range(4)]
            assert all(w.ok for w in wcs) and mrcd_pair.a.proc.poll() is None
            assert bytes(mr_b.buf) == pattern
            deadline = time.monotonic() + 10
            while mapped():  # (gone with the last of the writes' frames)
                assert time.monotonic() < deadline, "mrcd kept a deregistered region"
                time.sleep(0.05)
        mr_a.buf[:8] = b"after it"
        qp_a.post_write(mr_a, 0, 8, dst, wr_id=7)
        assert [w.wr_id for w in _drain(cq_a, 1)] == [7]
        assert bytes(mr_b.buf[:8]) == b"after it"
        assert ca.stats()["mrcd_internal_errors"] == 0


def test_two_clients_on_one_mrcd_see_only_their_own(mrcd_pair: MrcdPair) -> None:
    with Context(mrcd_pair.a.socket) as c1, Context(mrcd_pair.a.socket) as c2, \
            Context(mrcd_pair.b.socket) as cb:
        one = _connect(c1, cb, 9)
        two = _connect(c2, cb, 10)
        for k, (mr_a, _cq_a, qp_a, _mr_b, _cq_b, qp_b) in enumerate((one, two)):
            assert qp_a.peer is not None
            mr_a.buf[:4096] = bytes([k + 1]) * 4096
            for i in range(100):
                qp_b.post_recv(wr_id=i)
        for i in range(100):  # interleaved posts of both clients
            for k, (mr_a, _cq_a, qp_a, _mr_b, _cq_b, _qp_b) in enumerate((one, two)):
                assert qp_a.peer is not None
                qp_a.post_write(mr_a, 0, 4096, qp_a.peer.regions[0], imm=i,
                                wr_id=k * 1000 + i)
        for k, (_mr_a, cq_a, qp_a, mr_b, cq_b, qp_b) in enumerate((one, two)):
            sent = _drain(cq_a, 100)
            assert [w.wr_id for w in sent] == [k * 1000 + i for i in range(100)]
            assert {w.qpn for w in sent} == {qp_a.qpn}
            recv = [w for w in _drain(cq_b, 100) if w.qpn == qp_b.qpn]
            assert [w.imm for w in recv] == list(range(100))
            assert bytes(mr_b.buf[:4096]) == bytes([k + 1]) * 4096


VICTIM = r"""
import sys, time
from mrcnet.api import Context
ctx = Context(sys.argv[1])
mr = ctx.alloc_mr(1 << 20)
cq = ctx.create_cq()
qp = ctx.create_qp(cq)
peer = qp.connect("hb", int(sys.argv[2]))
for i in range(200):
    qp.post_write(mr, 0, 1 << 20, peer.regions[0], wr_id=i)
print("posted", qp.qpn, flush=True)
time.sleep(60)
"""


def test_client_killed_with_posts_in_flight(mrcd_pair: MrcdPair) -> None:
    """A client killed with 200 MiB of writes posted: mrcd drops its QP and queues, and
    a client that was running beside it keeps working."""
    with Context(mrcd_pair.a.socket) as other, Context(mrcd_pair.b.socket) as cb:
        mr_a, cq_a, qp_a, mr_b, cq_b, qp_b = _connect(other, cb, 11)
        sink, sink_cq = cb.alloc_mr(1 << 20), cb.create_cq()
        sink_qp = cb.create_qp(sink_cq)
        cb.listen(12, sink_qp, expose=[sink])
        p = subprocess.Popen([sys.executable, "-c", VICTIM, mrcd_pair.a.socket, "12"],
                             stdout=subprocess.PIPE, text=True)
        try:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line.startswith("posted"), line
            victim_qpn = int(line.split()[1])
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        deadline = time.monotonic() + 10
        while victim_qpn in [q["qpn"] for q in other.admin("qps")["qps"]]:
            assert time.monotonic() < deadline, "mrcd kept the killed client's QP"
            time.sleep(0.05)
        assert mrcd_pair.a.proc.poll() is None
        assert qp_a.peer is not None
        qp_b.post_recv(wr_id=5)
        mr_a.buf[:8] = b"survivor"
        qp_a.post_write(mr_a, 0, 8, qp_a.peer.regions[0], imm=1, wr_id=77)
        assert [w.wr_id for w in _drain(cq_a, 1)] == [77]
        assert [w.imm for w in _drain(cq_b, 1)] == [1]
        assert bytes(mr_b.buf[:8]) == b"survivor"


class RawRings:
    """A client speaking the protocol by hand, with a send queue it scribbles on."""

    def __init__(self, path: str, nslots: int = 16) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)
        self.sock.settimeout(10.0)
        size = queue_bytes(nslots, SQ_SLOT)
        fd = sealed_memfd("test-sq", size)
        self.map = __import__("mmap").mmap(fd, size)
        self.next_id = 1
        self.tail = 0
        try:
            assert "ok" in self.call("hello", [fd], v=PROTOCOL_VERSION, pid=os.getpid(),
                                     sq_slots=nslots)
        finally:
            os.close(fd)
        self.nslots = nslots

    def call(self, op: str, fds: list[int] | None = None, **args: object) -> dict[str, object]:
        rid = self.next_id
        self.next_id += 1
        data = json.dumps({"id": rid, "op": op, **args}).encode()
        if fds:
            socket.send_fds(self.sock, [data], fds)
        else:
            self.sock.send(data)
        while True:
            msg = self.recv()
            if msg.get("id") == rid:
                return msg

    def recv(self) -> dict[str, object]:
        while True:
            data = self.sock.recv(1 << 16)
            assert data, "mrcd closed the connection"
            if data != b"!":
                return dict(json.loads(data))

    def post(self, *fields: int) -> None:
        off = HEADER + (self.tail % self.nslots) * SQ_SLOT
        WORK_REQUEST.pack_into(self.map, off, *fields)
        self.tail += 1
        struct.pack_into("<Q", self.map, OFF_TAIL, self.tail)
        self.sock.send(b"!")


@pytest.mark.skipif(not PRECISE, reason="without the C module mrcd uses no shared queues")
def test_scribbled_send_queue_is_an_error_to_that_client_only(mrcd_pair: MrcdPair) -> None:
    raw = RawRings(mrcd_pair.a.socket)
    cq = raw.call("create_cq", depth=16)["ok"]
    qpn = raw.call("create_qp", cq=cq["cq"])["ok"]["qpn"]  # type: ignore[index]
    # A bad opcode, then a QP that is not the client's: an error each, raised later by
    # the library (a post_error push), and the session goes on.
    raw.post(99, 0, qpn, 1, 0, 0, 0, 0, 0, 0)
    err = raw.recv()
    assert err["push"] == "post_error" and err["error"]["type"] == "InvalidArgument"  # type: ignore[index]
    raw.post(OP_WRITE, 0, 4242, 1, 0, 8, 0, 0, 0, 0)
    err = raw.recv()
    assert err["error"]["type"] == "InvalidQP"  # type: ignore[index]
    assert "ok" in raw.call("stats")
    # A tail far beyond the ring: mrcd ends this session, and only this one.
    struct.pack_into("<Q", raw.map, OFF_TAIL, raw.tail + 10_000)
    raw.sock.send(b"!")
    err = raw.recv()
    assert err["error"]["type"] == "ProtocolError"  # type: ignore[index]
    assert raw.sock.recv(1 << 16) == b""  # closed by mrcd
    assert mrcd_pair.a.proc.poll() is None
    with Context(mrcd_pair.a.socket) as c:
        assert "host" in c.stats()


def test_post_errors_surface_in_a_later_call(mrcd_pair: MrcdPair) -> None:
    """A post mrcd refuses (checked there, not in the library) is raised by the next
    call of the context, as when posts were requests on the socket."""
    with Context(mrcd_pair.a.socket) as ca:
        cq = ca.create_cq()
        qp = ca.create_qp(cq)
        ghost = QueuePair(ca, qp.qpn + 100, cq)
        ghost.post_recv(wr_id=1)
        with pytest.raises(InvalidQP, match="an earlier post_recv failed"):
            ca.stats()
        with pytest.raises(InvalidArgument):
            qp.post_recv(wr_id=-1)


# --- many posts per doorbell (mrcd stopped while the client posts, so that one
# doorbell finds them all: mrcd hands them to the core together, sent as runs) ---

@contextmanager
def _paused(pid: int) -> Iterator[None]:
    """mrcd ``pid`` (started by this test's fixture) stopped meanwhile."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_many_small_posts_in_one_doorbell_land_and_complete_in_order(
        mrcd_pair: MrcdPair) -> None:
    """Batches of up to 200 posts in a 256-slot send queue and a 64-slot completion
    ring, eight rounds (both rings wrap several times): writes of 0-200 bytes."""
    size = 1 << 16
    with Context(mrcd_pair.a.socket, sq_depth=256) as ca, \
            Context(mrcd_pair.b.socket) as cb:
        mr_a, cq_a, qp_a, mr_b, _, _ = _connect(ca, cb, 31, size, depth=64)
        assert qp_a.peer is not None
        remote = qp_a.peer.regions[0]
        mr_a.buf[:] = os.urandom(size)
        wr = 0
        at = 0
        want = bytearray(size)
        for rnd in range(8):
            n = 200 if rnd % 2 else 37
            with _paused(mrcd_pair.a.proc.pid):
                for i in range(n):
                    length = (wr * 7) % 201
                    qp_a.post_write(mr_a, at, length, remote, at, wr_id=wr)
                    want[at:at + length] = mr_a.buf[at:at + length]
                    at = (at + length + i % 3) % (size - 256)
                    wr += 1
            got = _drain(cq_a, n)
            assert [w.wr_id for w in got] == list(range(wr - n, wr))
            assert all(w.ok for w in got)
        assert bytes(mr_b.buf) == bytes(want)
        assert not cq_a.poll(16)  # nothing twice


@pytest.mark.skipif(not PRECISE, reason="without the C module mrcd uses no shared queues")
def test_refused_posts_in_the_middle_of_a_batch(mrcd_pair: MrcdPair) -> None:
    """One doorbell, 60 writes: a QP that is not the client's, an lkey that is not its
    region and a range beyond its region among them (the library's own checks
    bypassed). Each refused one comes back as its own error; the other 57 land and
    complete in order."""
    with Context(mrcd_pair.a.socket) as ca, Context(mrcd_pair.b.socket) as cb:
        mr_a, cq_a, qp_a, mr_b, _, _ = _connect(ca, cb, 32, 1 << 14)
        assert qp_a.peer is not None and ca._q is not None
        remote = qp_a.peer.regions[0]
        mr_a.buf[: 60 * 64] = os.urandom(60 * 64)
        bad = {10: "InvalidQP", 25: "BadLkey", 40: "OutOfBounds"}
        with _paused(mrcd_pair.a.proc.pid):
            for i in range(60):
                qpn, lkey, addr = qp_a.qpn, mr_a.lkey, mr_a.addr + i * 64
                if i == 10:
                    qpn += 100
                elif i == 25:
                    lkey ^= 0x5A5A
                elif i == 40:
                    addr = mr_a.addr + (1 << 14) - 32
                ca._q.post_write(qpn, i, lkey, addr, 64, remote.addr + i * 64, remote.rkey,
                                 None, ca.timeout)
        got: list[WorkCompletion] = []
        errors: list[str] = []
        deadline = time.monotonic() + 20
        while len(got) < 57:  # (waiting raises the refusals, one per call)
            assert time.monotonic() < deadline, f"{len(got)} of 57 completions"
            try:
                got += cq_a.wait(timeout=1.0, max_entries=1 << 16)
            except ApiError as e:
                errors.append(type(e).__name__)
        assert [w.wr_id for w in got] == [i for i in range(60) if i not in bad]
        assert all(w.ok for w in got)
        for i in range(60):
            if i not in bad:
                assert mr_b.buf[i * 64:(i + 1) * 64] == mr_a.buf[i * 64:(i + 1) * 64]
            else:
                assert bytes(mr_b.buf[i * 64:(i + 1) * 64]) == bytes(64)
        while len(errors) < len(bad):
            with pytest.raises(ApiError) as raised:
                ca.stats()
            errors.append(type(raised.value).__name__)
        assert errors == list(bad.values())
        assert "host" in ca.stats()


# --- selective signalling (verbs' sq_sig_all false and IBV_SEND_SIGNALED) ---

@pytest.mark.parametrize("queues", [pytest.param(True, id="rings"),
                                    pytest.param(False, id="json")])
def test_unsignalled_writes_complete_only_when_signalled_or_failed(
        mrcd_pair: MrcdPair, monkeypatch: pytest.MonkeyPatch, queues: bool) -> None:
    """QPs made with sq_sig_all=False: of 30 writes only the two posted signalled
    complete (every byte lands); a ping-pong of unsignalled writes-with-immediate shows
    each side its receives only; an unsignalled write that fails completes with its
    error. Through the shared rings and through JSON posts (a client without them)."""
    if not queues:
        monkeypatch.setattr(api_client, "SHARED_QUEUES", False)
    with Context(mrcd_pair.a.socket) as ca, Context(mrcd_pair.b.socket) as cb:
        assert (ca._q is not None) == (queues and PRECISE)
        mr_a, cq_a, qp_a, mr_b, cq_b, qp_b = _connect(ca, cb, 40, sq_sig_all=False)
        assert qp_a.peer is not None and qp_b.peer is not None
        assert not qp_a.sq_sig_all and not qp_b.sq_sig_all
        remote = qp_a.peer.regions[0]
        mr_a.buf[: 30 * 64] = os.urandom(30 * 64)
        for i in range(30):
            qp_a.post_write(mr_a, i * 64, 64, remote, i * 64, wr_id=i, signaled=i in (9, 29))
        assert [(w.wr_id, w.status) for w in _drain(cq_a, 2)] == [(9, "SUCCESS"),
                                                                   (29, "SUCCESS")]
        assert cq_a.wait(timeout=0.3) == []
        assert bytes(mr_b.buf[: 30 * 64]) == bytes(mr_a.buf[: 30 * 64])
        for i in range(4):
            qp_a.post_recv(wr_id=i)
            qp_b.post_recv(wr_id=i)
        for i in range(20):
            qp_a.post_write(mr_a, 0, 8, remote, imm=i, wr_id=100 + i)
            (w,) = cq_b.wait(timeout=10)
            assert (w.opcode, w.imm) == ("RECV_RDMA_WITH_IMM", i)
            qp_b.post_recv(wr_id=w.wr_id)
            qp_b.post_write(mr_b, 0, 8, qp_b.peer.regions[0], imm=i, wr_id=200 + i)
            (w,) = cq_a.wait(timeout=10)
            assert (w.opcode, w.imm) == ("RECV_RDMA_WITH_IMM", i)
            qp_a.post_recv(wr_id=w.wr_id)
        time.sleep(0.1)  # (the last writes' ACKs)
        assert cq_a.poll() == [] and cq_b.poll() == []
        qp_a.post_write(mr_a, 0, 16, RemoteRegion(remote.addr, 16, remote.rkey ^ 0x5A5A),
                        wr_id=77)
        writes: list[WorkCompletion] = []
        deadline = time.monotonic() + 10
        while not writes:
            assert time.monotonic() < deadline, "no error completion"
            writes = [w for w in cq_a.wait(timeout=1.0) if w.opcode == "RDMA_WRITE"]
        assert [(w.wr_id, w.status) for w in writes] == [(77, "REM_ACCESS_ERR")]


def test_every_write_completes_on_a_qp_made_with_sq_sig_all(mrcd_pair: MrcdPair) -> None:
    """The default (every write signalled) is unchanged: ``signaled=False`` means
    nothing there, and mrcd ignores the slot's unsignalled flag on such a QP."""
    with Context(mrcd_pair.a.socket) as ca, Context(mrcd_pair.b.socket) as cb:
        mr_a, cq_a, qp_a, _mr_b, _cq_b, _qp_b = _connect(ca, cb, 41)
        assert qp_a.peer is not None and qp_a.sq_sig_all
        for i in range(5):
            qp_a.post_write(mr_a, 0, 64, qp_a.peer.regions[0], wr_id=i, signaled=False)
        assert [w.wr_id for w in _drain(cq_a, 5)] == list(range(5))
        qp_a.sq_sig_all = False  # (this end only: its slots carry the flag from now on)
        for i in range(5, 10):
            qp_a.post_write(mr_a, 0, 64, qp_a.peer.regions[0], wr_id=i)
        assert [w.wr_id for w in _drain(cq_a, 5)] == list(range(5, 10))


def test_a_run_of_unsignalled_writes_as_long_as_the_send_queue_is_refused(
        mrcd_pair: MrcdPair) -> None:
    """A 16-slot send queue: 15 unsignalled writes in a row pass, the 16th (it would
    stall a verbs QP) raises QueueFull and is not posted; a signalled write then
    completes, and the next run may be 15 long again."""
    with Context(mrcd_pair.a.socket, sq_depth=16) as ca, \
            Context(mrcd_pair.b.socket) as cb:
        mr_a, cq_a, qp_a, _mr_b, _cq_b, _qp_b = _connect(ca, cb, 42, sq_sig_all=False)
        assert qp_a.peer is not None and ca._q is not None
        remote = qp_a.peer.regions[0]
        for _ in range(2):
            for i in range(15):
                qp_a.post_write(mr_a, 0, 64, remote, wr_id=i)
            tail = ca._q.sq.tail
            with pytest.raises(QueueFull, match="signaled=True"):
                qp_a.post_write(mr_a, 0, 64, remote, wr_id=15)
            assert ca._q.sq.tail == tail  # nothing posted
            qp_a.post_write(mr_a, 0, 64, remote, wr_id=99, signaled=True)
            assert [w.wr_id for w in _drain(cq_a, 1)] == [99]
        assert cq_a.wait(timeout=0.2) == []


def test_an_unsignalled_write_rings_no_doorbell(mrcd_pair: MrcdPair) -> None:
    """The point of it: a client asleep on its CQ is not woken for an unsignalled write
    (mrcd writes nothing into the ring and rings nothing); a signalled one rings."""
    with Context(mrcd_pair.a.socket, busy_poll_us=0) as ca, \
            Context(mrcd_pair.b.socket) as cb:
        mr_a, cq_a, qp_a, mr_b, _cq_b, _qp_b = _connect(ca, cb, 43, sq_sig_all=False)
        assert qp_a.peer is not None
        remote = qp_a.peer.regions[0]
        mr_a.buf[:8] = b"unsigned"
        before = int(ca.stats()["doorbells"])
        qp_a.post_write(mr_a, 0, 8, remote, wr_id=1)
        assert cq_a.wait(timeout=0.5) == []  # asleep, armed: nothing came
        assert bytes(mr_b.buf[:8]) == b"unsigned"
        assert int(ca.stats()["doorbells"]) == before
        # The signalled write is posted once this thread sleeps in the wait (posted
        # before it, its completion can be in the ring before the wait looks, and then
        # rightly rings nothing: the race a loaded machine showed)
        poster = threading.Timer(
            0.3, lambda: qp_a.post_write(mr_a, 0, 8, remote, wr_id=2, signaled=True))
        poster.start()
        try:
            assert [w.wr_id for w in cq_a.wait(timeout=5)] == [2]
        finally:
            poster.join()
        assert int(ca.stats()["doorbells"]) == before + 1
