"""The client library against live mrcds: typed errors, clean-up, asyncio, control channel."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mdnsutil import MrcdPair, VethPair, needs_root

from mrcnet.api import (
    BadLkey,
    ConnectError,
    Context,
    DaemonNotRunning,
    InvalidArgument,
    InvalidQP,
    OutOfBounds,
    QueuePair,
    RemoteRegion,
)
from mrcnet.core.events import PortStatusChanged, QPError
from mrcnet.daemon.control import (
    CONTROL_VERSION,
    Acceptance,
    ConnectRequest,
    ControlError,
    ControlServer,
    control_request,
)


def test_daemon_not_running(tmp_path: Path) -> None:
    with pytest.raises(DaemonNotRunning, match=f"mrcd is not running at {tmp_path}/none"):
        Context(str(tmp_path / "none.sock"))


@needs_root
def test_bad_calls_raise_typed_errors(mrcd_pair: MrcdPair) -> None:
    with Context(mrcd_pair.a.socket) as ca, Context(mrcd_pair.a.socket) as other:
        mr = ca.alloc_mr(4096)
        foreign = other.alloc_mr(4096)
        cq = ca.create_cq()
        qp = ca.create_qp(cq)
        far = RemoteRegion(0x1000, 4096, 1)
        with pytest.raises(OutOfBounds):
            qp.post_write(mr, 4000, 200, far)
        with pytest.raises(OutOfBounds):
            qp.post_write(mr, 0, 100, far, remote_offset=4090)
        with pytest.raises(BadLkey):
            qp.post_write(foreign, 0, 10, far)
        # mrcd checks too: a forged lkey and another client's QP number.
        with pytest.raises(BadLkey):
            ca._call("post_write", qpn=qp.qpn, lkey=foreign.lkey, addr=foreign.addr,
                     length=1, remote_addr=0, rkey=1)
        with pytest.raises(InvalidQP):
            other._call("post_recv", qpn=qp.qpn)
        with pytest.raises(ConnectError, match="no peer 'nobody'"):
            qp.connect("nobody", 1)
        with pytest.raises(ConnectError, match="no QP listens on service 42 at hb"):
            qp.connect("hb", 42)
        # The QP is still usable after a failed connect.
        assert ca.stats(qp)["qp"]["state"] == "INIT"
        # Posts are pipelined: a failure mrcd finds is raised by the next call.
        qp2 = ca.create_qp(cq)
        qp2.destroy()
        qp2.post_recv(wr_id=1)
        with pytest.raises(InvalidQP, match="an earlier post_recv failed: no QP"):
            ca.stats()
        assert "host" in ca.stats()  # reported once


@needs_root
def test_client_exit_releases_its_resources(mrcd_pair: MrcdPair) -> None:
    ca = Context(mrcd_pair.a.socket)
    cq = ca.create_cq()
    qp = ca.create_qp(cq)
    ca.listen(5, qp)
    ca.close()
    with Context(mrcd_pair.a.socket) as cb:
        # Service 5 is free again and the old QP is gone.
        q2 = cb.create_qp(cb.create_cq())
        cb.listen(5, q2)
        with pytest.raises(InvalidQP):
            cb._call("post_recv", qpn=qp.qpn)


@needs_root
def test_asyncio_completions(mrcd_pair: MrcdPair) -> None:
    async def scenario() -> None:
        with Context(mrcd_pair.b.socket) as cb, Context(mrcd_pair.a.socket) as ca:
            mr_b = cb.alloc_mr(65536)
            cq_b = cb.create_cq()
            qp_b = cb.create_qp(cq_b)
            cb.listen(2, qp_b, expose=[mr_b])
            for i in range(3):
                qp_b.post_recv(wr_id=i)
            mr_a = ca.alloc_mr(65536)
            mr_a.buf[:] = bytes(range(256)) * 256
            cq_a = ca.create_cq()
            qp_a = ca.create_qp(cq_a)
            # Both ends wait in one event loop: connect_async must not block it.
            peer, accepted = await asyncio.wait_for(
                asyncio.gather(qp_a.connect_async("hb", 2), qp_b.accept_async()), 10)
            assert accepted.qpn == qp_a.qpn and peer.qpn == qp_b.qpn
            for i in range(3):
                qp_a.post_write(mr_a, i * 1000, 1000, peer.regions[0], i * 1000, imm=i,
                                wr_id=10 + i)
            got: list[int] = []
            while len(got) < 3:
                wcs = await asyncio.wait_for(cq_b.wait_async(), 10)
                got += [w.imm for w in wcs if w.ok and w.imm is not None]
            assert got == [0, 1, 2]  # immediates complete in order
            done: list[int] = []
            while len(done) < 3:
                done += [w.wr_id for w in await asyncio.wait_for(cq_a.wait_async(), 10)]
            assert sorted(done) == [10, 11, 12]
            assert bytes(mr_b.buf[:3000]) == bytes(mr_a.buf[:3000])
    asyncio.run(scenario())


# --- control channel, in-process on loopback ---------------------------------------------

def _req(src: str = "h0") -> ConnectRequest:
    return ConnectRequest(src, 5, 100, "spray", "nscc", 64, ({"addr": 1, "length": 2,
                                                              "rkey": 3},), {"x": 1}, 9)


def _free_port() -> int:
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        return int(s.getsockname()[1])


def test_control_exchange_and_rejects() -> None:
    async def scenario() -> None:
        seen: list[ConnectRequest] = []
        log: list[str] = []

        async def handler(req: ConnectRequest) -> Acceptance:
            seen.append(req)
            if req.service != 9:
                raise ControlError("no QP listens on service")
            reply = ConnectRequest("h1", 6, 200, "spray", "nscc", 32, (), None, req.service)
            return Acceptance(reply, lambda: log.append("commit"), lambda: log.append("abort"))

        port = _free_port()
        server = ControlServer(handler, ["::1"], port)
        await server.start()
        try:
            accepted: list[int] = []
            reply = await control_request("::1", port, _req(),
                                          on_accept=lambda r: accepted.append(r.qpn))
            assert (reply.src, reply.qpn, reply.psn, reply.max_imm) == ("h1", 6, 200, 32)
            assert seen == [_req()] and accepted == [6] and log == ["commit"]
            # The requester's own RTR fails after the accept: the peer hears nothing more
            # and gives its QP back (abort), never half-connected.
            def refuse(_r: ConnectRequest) -> None:
                raise ControlError("local QP vanished")

            with pytest.raises(ControlError, match="local QP vanished"):
                await control_request("::1", port, _req(), on_accept=refuse)
            for _ in range(100):
                if log[-1:] == ["abort"]:
                    break
                await asyncio.sleep(0.01)
            assert log == ["commit", "abort"]
            with pytest.raises(ControlError, match="peer refused: no QP listens"):
                await control_request("::1", port, ConnectRequest(**{**_req().__dict__,
                                                                     "service": 1}))
            # A future protocol version is refused with a reason, not dropped.
            r, w = await asyncio.open_connection("::1", port)
            w.write(json.dumps({**_req().to_msg("connect"), "v": CONTROL_VERSION + 1})
                    .encode() + b"\n")
            answer = json.loads(await r.readline())
            w.close()
            assert answer["type"] == "reject" and "version" in answer["reason"]
        finally:
            await server.close()
        with pytest.raises(ControlError, match="cannot reach mrcd"):
            await control_request("::1", port, _req(), timeout=2)
    asyncio.run(scenario())


@needs_root
def test_first_immediate_needs_no_credit_probe(mrcd_pair: MrcdPair) -> None:
    # The responder advertises its receive credit when its QP reaches RTR; the handshake
    # makes sure the requester can already hear it (measured: the first write-with-
    # immediate after connect took 22 ms, a credit probe later, when that SACK was lost;
    # now about 1 ms). The timing is too noisy here to assert; the lost SACK is not.
    with Context(mrcd_pair.b.socket) as cb, Context(mrcd_pair.a.socket) as ca:
        mr_b = cb.alloc_mr(4096)
        qp_b = cb.create_qp(cb.create_cq())
        cb.listen(4, qp_b, expose=[mr_b])
        qp_b.post_recv(wr_id=1)
        mr_a = ca.alloc_mr(4096)
        qp_a = ca.create_qp(ca.create_cq())
        peer = qp_a.connect("hb", 4)
        qp_a.post_write(mr_a, 0, 64, peer.regions[0], imm=1, wr_id=1)
        assert [w.status for w in qp_a.cq.wait(timeout=10)] == ["SUCCESS"]
        assert "rx_qp_not_ready" not in ca.stats()["host"]  # nothing came before RTR


def test_memfd_is_shared_not_copied() -> None:
    # The mechanism the API relies on, in one process: two maps of one memfd.
    import mmap
    fd = os.memfd_create("t")
    os.ftruncate(fd, 4096)
    m1 = mmap.mmap(fd, 4096)
    m2 = mmap.mmap(fd, 4096)
    os.close(fd)
    m2[10:15] = b"hello"
    assert m1[10:15] == b"hello"
    m1.close()
    m2.close()


@needs_root
def test_socket_permissions_decide_who_may_use_mrcd(veth: VethPair, tmp_path: Path) -> None:
    import tempfile

    from mdnsutil import start_mrcd, write_config

    # A world-traversable directory, so only the socket file's own mode matters.
    d = tempfile.mkdtemp(prefix="md", dir="/tmp")
    os.chmod(d, 0o755)
    sock = f"{d}/ha.sock"
    code = ("import sys\nfrom mrcnet.api import Context, AccessDenied\n"
            f"try:\n    c = Context({sock!r}); print('host', c.host)\n"
            "except AccessDenied as e:\n    print('denied', e)\n")
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                 sys.executable, "-c", code]
    try:
        # nobody's primary group is set to nogroup (65534) by --regid below: a group
        # grant through socket_group then lets it in.
        for mode, group, expect in (("0600", "", "denied no permission to use mrcd"),
                                    ("0666", "", "host ha"),
                                    ("0660", "nogroup", "host ha")):
            cfg = str(tmp_path / f"ha{mode}{group}.toml")
            extra = f'socket_mode = "{mode}"' + (f'\nsocket_group = "{group}"' if group
                                                 else "")
            write_config(cfg, "ha", veth.if_a, veth.ip_a, sock, {"hb": veth.ip_b},
                         extra=extra)
            m = start_mrcd("ha", veth.ns_a, cfg, sock, str(tmp_path))
            try:
                st = os.stat(sock)
                assert oct(st.st_mode & 0o777) == oct(int(mode, 8))
                assert st.st_gid == (65534 if group else 0)
                r = subprocess.run(as_nobody, capture_output=True, text=True, timeout=30,
                                   check=False)
                assert r.stdout.startswith(expect), r.stdout + r.stderr
            finally:
                assert m.stop() == 0
    finally:
        shutil.rmtree(d, ignore_errors=True)  # the directory this test made


@needs_root
def test_peer_loss_fails_the_qp_with_an_event(mrcd_pair: MrcdPair) -> None:
    with Context(mrcd_pair.b.socket) as cb, Context(mrcd_pair.a.socket) as ca:
        mr_b = cb.alloc_mr(65536)
        qp_b = cb.create_qp(cb.create_cq())
        cb.listen(3, qp_b, expose=[mr_b])
        mr_a = ca.alloc_mr(65536)
        qp_a = ca.create_qp(ca.create_cq())
        peer = qp_a.connect("hb", 3)
        assert mrcd_pair.b.stop() == 0  # the peer host's mrcd goes away
        qp_a.post_write(mr_a, 0, 65536, peer.regions[0], wr_id=4)
        wcs = qp_a.cq.wait(timeout=60)
        assert [(w.status, w.wr_id) for w in wcs] == [("RETRY_EXC_ERR", 4)]
        ev = ca.get_async_event(timeout=5)
        while ev is not None and not isinstance(ev, QPError):
            ev = ca.get_async_event(timeout=5)
        assert isinstance(ev, QPError) and ev.qpn == qp_a.qpn
        assert "peer unreachable" in ev.reason
        # And a new connection to the host whose mrcd is gone says so.
        qp2 = ca.create_qp(ca.create_cq())
        with pytest.raises(ConnectError, match=r"cannot reach mrcd at \[fd00:4d52::b\]"):
            qp2.connect("hb", 3)


@needs_root
def test_port_carrier_loss_is_reported(mrcd_pair: MrcdPair) -> None:
    from mdnsutil import run

    v = mrcd_pair.veth
    with Context(mrcd_pair.a.socket) as ca:
        def next_port_event() -> PortStatusChanged:
            for _ in range(50):
                ev = ca.get_async_event(timeout=0.2)
                if isinstance(ev, PortStatusChanged):
                    return ev
            raise AssertionError("no PortStatusChanged event")

        # b's end goes down: a's port loses carrier, a's mrcd takes plane 0 out of use.
        run("ip", "link", "set", v.if_b, "down", ns=v.ns_b)
        assert next_port_event() == PortStatusChanged(port=0, plane=0, up=False, peer=None)
        run("ip", "link", "set", v.if_b, "up", ns=v.ns_b)
        assert next_port_event().up is True
    assert "port down" in mrcd_pair.a.logs()


@needs_root
def test_region_without_remote_write_is_refused(mrcd_pair: MrcdPair) -> None:
    from mrcnet.api import Access

    with Context(mrcd_pair.b.socket) as cb, Context(mrcd_pair.a.socket) as ca:
        ro = cb.alloc_mr(4096, access=Access.LOCAL_WRITE)  # not writable from the network
        qp_b = cb.create_qp(cb.create_cq())
        cb.listen(6, qp_b, expose=[ro])
        mr_a = ca.alloc_mr(4096)
        mr_a.buf[:4] = b"evil"
        qp_a = ca.create_qp(ca.create_cq())
        peer = qp_a.connect("hb", 6)
        qp_a.post_write(mr_a, 0, 4, peer.regions[0], wr_id=3)
        wcs = qp_a.cq.wait(timeout=30)
        assert [(w.status, w.wr_id) for w in wcs] == [("REM_ACCESS_ERR", 3)]
        assert bytes(ro.buf[:4]) == bytes(4)


@needs_root
def test_path_events_only_on_request(mrcd_pair: MrcdPair) -> None:
    # The peer goes away: the QPs fail. A client that did not ask for path events gets
    # only the QP error.
    with Context(mrcd_pair.b.socket) as cb, \
            Context(mrcd_pair.a.socket, path_events=True) as loud, \
            Context(mrcd_pair.a.socket) as quiet:
        qps = []
        for i, ctx in enumerate((loud, quiet)):
            mr_b = cb.alloc_mr(65536)
            qp_b = cb.create_qp(cb.create_cq())
            cb.listen(20 + i, qp_b, expose=[mr_b])
            mr = ctx.alloc_mr(65536)
            qp = ctx.create_qp(ctx.create_cq())
            qps.append((qp, mr, qp.connect("hb", 20 + i)))
        assert mrcd_pair.b.stop() == 0
        for qp, mr, peer in qps:
            qp.post_write(mr, 0, 65536, peer.regions[0], wr_id=1)
        for qp, _, _ in qps:
            assert [w.status for w in qp.cq.wait(timeout=60)] == ["RETRY_EXC_ERR"]

        def kinds(ctx: Context) -> set[str]:
            seen: set[str] = set()
            while (ev := ctx.get_async_event(timeout=0.2)) is not None:
                seen.add(type(ev).__name__)
            return seen

        # Since core 57ae6c5 a timeout with nothing newer acknowledged anywhere (a dead
        # peer) blames no path, so the loud context may hear of no EV here; the fabric
        # tests (test_mrcd_fabric_paths) check that one that asked does hear of them
        # under real path failures while one that did not hears nothing.
        assert kinds(loud) - {"PathStateChanged"} == {"QPError"}
        assert kinds(quiet) == {"QPError"}


@needs_root
def test_completion_moderation(mrcd_pair: MrcdPair) -> None:
    # mrcd holds a moderated CQ's completions until `count` wait or the period ends;
    # an error completion goes at once; bad values are refused with a typed error.
    with Context(mrcd_pair.b.socket) as cb, Context(mrcd_pair.a.socket) as ca:
        mr_b = cb.alloc_mr(65536)
        qp_b = cb.create_qp(cb.create_cq())
        cb.listen(9, qp_b, expose=[mr_b])
        mr_a = ca.alloc_mr(65536)
        cq = ca.create_cq()
        qp_a = ca.create_qp(cq)
        peer = qp_a.connect("hb", 9)
        for bad in ((0, 0), (1 << 16, 0), (4, -1), (4, 2_000_000), (4.0, 0)):
            with pytest.raises(InvalidArgument):
                cq.moderate(*bad)  # type: ignore[arg-type]
        cq.moderate(4, 1_000_000)
        for i in range(3):
            qp_a.post_write(mr_a, 0, 1024, peer.regions[0], wr_id=i)
        assert cq.wait(timeout=0.5) == []  # 3 < 4, and the second has not passed
        qp_a.post_write(mr_a, 0, 1024, peer.regions[0], wr_id=3)
        wcs = cq.wait(timeout=10)
        assert [w.wr_id for w in wcs] == [0, 1, 2, 3] and all(w.ok for w in wcs)
        # The period: one completion, sent when 0.2 s have passed.
        cq.moderate(4, 200_000)
        t0 = time.monotonic()
        qp_a.post_write(mr_a, 0, 1024, peer.regions[0], wr_id=4)
        wcs = cq.wait(timeout=10)
        assert [w.wr_id for w in wcs] == [4] and time.monotonic() - t0 >= 0.15
        # An error completion is not held back.
        cq.moderate(64, 1_000_000)
        t0 = time.monotonic()
        qp_a.post_write(mr_a, 0, 16, RemoteRegion(peer.regions[0].addr, 16, 0x5A5A), wr_id=5)
        wcs = cq.wait(timeout=10)
        assert [(w.wr_id, w.status) for w in wcs] == [(5, "REM_ACCESS_ERR")]
        assert time.monotonic() - t0 < 0.9
        # count 1 turns it off: each completion comes on its own.
        qp2 = ca.create_qp(cq)
        qp_b2 = cb.create_qp(cb.create_cq())
        cb.listen(10, qp_b2, expose=[mr_b])
        peer2 = qp2.connect("hb", 10)
        cq.moderate(1, 0)
        qp2.post_write(mr_a, 0, 1024, peer2.regions[0], wr_id=6)
        assert [w.wr_id for w in cq.wait(timeout=10)] == [6]


@needs_root
def test_listen_backlog_queues_connects_until_the_next_listen(mrcd_pair: MrcdPair) -> None:
    """A connect that finds no QP armed on a service with a backlog waits for the
    listener's next QP; beyond the backlog, or after unlisten, it is refused."""
    async def scenario() -> None:
        # One context per connecting QP: a context takes one async call at a time.
        cas = [Context(mrcd_pair.a.socket) for _ in range(5)]
        try:
            with Context(mrcd_pair.b.socket) as cb:
                await backlog(cb, [c.create_qp(c.create_cq()) for c in cas])
        finally:
            for c in cas:
                c.close()

    async def backlog(cb: Context, cq: list[QueuePair]) -> None:
        cq_b = cb.create_cq()
        lq = [cb.create_qp(cq_b) for _ in range(3)]
        cb.listen(3, lq[0], backlog=2)
        await cq[0].connect_async("hb", 3)  # takes the armed QP
        # Two wait in hb's mrcd (the backlog), a third is refused at once.
        waiting = [asyncio.ensure_future(q.connect_async("hb", 3)) for q in cq[1:3]]
        await asyncio.sleep(0.3)
        with pytest.raises(ConnectError, match="backlog of 2 is full"):
            await cq[3].connect_async("hb", 3)
        assert not any(w.done() for w in waiting)
        cb.listen(3, lq[1], backlog=2)  # each next listen takes one waiting connect
        done, pending = await asyncio.wait(waiting, timeout=5,
                                           return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1 and done.pop().result().qpn == lq[1].qpn
        cb.listen(3, lq[2], backlog=2)
        assert (await asyncio.wait_for(pending.pop(), 5)).qpn == lq[2].qpn
        # unlisten: a waiting connect is refused at once.
        late = asyncio.ensure_future(cq[4].connect_async("hb", 3))
        await asyncio.sleep(0.3)
        cb.unlisten(3)
        with pytest.raises(ConnectError, match="the listener closed"):
            await asyncio.wait_for(late, 5)
        assert cq[4].ctx.stats(cq[4])["qp"]["state"] == "INIT"  # usable again
    asyncio.run(scenario())
