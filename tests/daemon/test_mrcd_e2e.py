"""mrcd end to end on two namespaces: connect, 1 MiB write-with-immediate, clean exit."""

from __future__ import annotations

import os

from mdnsutil import MrcdPair, needs_root, run

from mrcnet.api import Context

MIB = 1 << 20


@needs_root
def test_one_mib_write_lands_byte_exact(mrcd_pair: MrcdPair) -> None:
    a, b = mrcd_pair.a, mrcd_pair.b
    with Context(b.socket) as cb, Context(a.socket) as ca:
        assert (ca.host, cb.host) == ("ha", "hb")
        # Responder: a region to be written, a QP listening on service 1, one receive.
        mr_b = cb.alloc_mr(MIB)
        cq_b = cb.create_cq()
        qp_b = cb.create_qp(cq_b)
        cb.listen(1, qp_b, expose=[mr_b], private={"hello": "from hb"})
        qp_b.post_recv(wr_id=99)
        # Requester: fill a region with random bytes, connect, write it all.
        mr_a = ca.alloc_mr(MIB)
        data = os.urandom(MIB)
        mr_a.buf[:] = data
        cq_a = ca.create_cq()
        qp_a = ca.create_qp(cq_a)
        peer = qp_a.connect("hb", 1)
        assert peer.host == "hb" and peer.private == {"hello": "from hb"}
        assert peer.regions[0].length == MIB
        qp_a.post_write(mr_a, 0, MIB, peer.regions[0], imm=0xC0FFEE, wr_id=7)
        wcs = cq_a.wait(timeout=30)
        assert [(w.status, w.wr_id, w.opcode) for w in wcs] == [("SUCCESS", 7, "RDMA_WRITE")]
        accepted = qp_b.accept(timeout=5)
        assert accepted.host == "ha" and accepted.qpn == qp_a.qpn
        wcs_b = cq_b.wait(timeout=10)
        assert [(w.status, w.wr_id, w.opcode, w.imm, w.byte_len) for w in wcs_b] == [
            ("SUCCESS", 99, "RECV_RDMA_WITH_IMM", 0xC0FFEE, MIB)]
        assert bytes(mr_b.buf) == data
    # Clean shutdown: exit 0, socket file and kernel rule gone.
    for m, ns in ((a, mrcd_pair.veth.ns_a), (b, mrcd_pair.veth.ns_b)):
        assert m.stop() == 0, m.logs()
        assert not os.path.exists(m.socket)
        assert "mrcd_" not in run("nft", "list", "tables", ns=ns)


@needs_root
def test_several_qps_at_once_keep_their_bytes_apart(mrcd_pair: MrcdPair) -> None:
    n, size = 4, 256 * 1024
    with Context(mrcd_pair.b.socket) as cb, Context(mrcd_pair.a.socket) as ca:
        regions_b, qps_b = [], []
        cq_b = cb.create_cq()
        for i in range(n):
            mr = cb.alloc_mr(size)
            qp = cb.create_qp(cq_b)
            cb.listen(10 + i, qp, expose=[mr])
            qp.post_recv(wr_id=i)
            regions_b.append(mr)
            qps_b.append(qp)
        cq_a = ca.create_cq()
        src = ca.alloc_mr(n * size)
        payloads = [bytes([i + 1]) * size for i in range(n)]
        src.buf[:] = b"".join(payloads)
        qps_a = []
        for i in range(n):
            qp = ca.create_qp(cq_a)
            peer = qp.connect("hb", 10 + i)
            qps_a.append((qp, peer))
        for i, (qp, peer) in enumerate(qps_a):  # all in flight together
            qp.post_write(src, i * size, size, peer.regions[0], imm=i, wr_id=100 + i)
        done: list[int] = []
        while len(done) < n:
            done += [w.wr_id for w in cq_a.wait(timeout=30) if w.ok]
        assert sorted(done) == [100 + i for i in range(n)]
        got: dict[int, int] = {}
        while len(got) < n:
            for w in cq_b.wait(timeout=10):
                assert w.ok and w.imm is not None
                got[w.qpn] = w.imm
        # Each responder QP got the immediate of the requester QP it is connected to.
        assert {qp.qpn: i for i, qp in enumerate(qps_b)} == got
        for i in range(n):
            assert bytes(regions_b[i].buf) == payloads[i]
