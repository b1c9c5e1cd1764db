"""A fabric with its own DSCP classes (the spec's ``dscp=`` key): the switches mark and
the mrcds read the same code points, end to end."""

from __future__ import annotations

import os
from pathlib import Path

from mdfabric import fabric_with_mrcds
from mdnsutil import needs_root

from mrcnet.api import Context
from mrcnet.wire.dscp import DscpClasses

MIB = 1 << 20
#: Every class moved off its default: a side that kept the defaults would read the
#: switches' trims as ordinary (spoilt) data and the senders' data as something else.
CLASSES = DscpClasses(trimmable=20, trimmable_retx=22, trimmed=10, trimmed_lasthop=12,
                      no_trim=4, control=48)
SPEC = ("leafspine:planes=1,spines=1,leaves=2,hosts=1,rate=50mbit,mtu=9000,trim=2pkt,"
        "dscp=" + "/".join(f"{k}:{v}" for k, v in CLASSES.to_dict().items()))
#: The sender's window made to overrun the link, so that it queues and trims whatever
#: the receiver's acknowledgements do. With mrcd's own cc_rtt_floor (1.5 ms) NSCC's
#: window is at most 1.5 x 50 Mbit/s x 1.5 ms = 14 KB, under two 8 KiB frames: one frame
#: in flight, clocked by its SACK. With ack_lone each frame is SACKed in its pass (~80 us)
#: and the frames outrun the link's rate (trims); without it the receiving mrcd SACKs a
#: frame read alone at ack_delay (held ~1.15 ms on its 1 ms timer), a frame per 1.41 ms
#: against the link's 1.33 ms: no queue, no trim (measured, docs/PERFORMANCE.md session
#: 14). A 4 ms floor allows ~4.6 frames in flight: the two-frame queue overflows.
CORE = "[core]\ncc_rtt_floor = 0.004\n"
#: Namespace prefix (another run's may be told apart by it).
PREFIX = os.environ.get("MRC_E2E_PREFIX", "dq")


@needs_root
def test_trims_marked_and_read_with_the_fabric_classes(tmp_path: Path) -> None:
    with fabric_with_mrcds(tmp_path, SPEC, extra=CORE, prefix=PREFIX) as fm:
        desc = fm.fab.description
        assert DscpClasses.from_dict(desc.options["dscp"]) == CLASSES
        with Context(fm.sock("h1")) as cb, Context(fm.sock("h0")) as ca:
            mr_b = cb.alloc_mr(8 * MIB)
            cq_b = cb.create_cq()
            qp_b = cb.create_qp(cq_b)
            cb.listen(1, qp_b, expose=[mr_b])
            qp_b.post_recv(wr_id=1)
            mr_a = ca.alloc_mr(8 * MIB)
            data = os.urandom(8 * MIB)
            mr_a.buf[:] = data
            qp_a = ca.create_qp(ca.create_cq())
            peer = qp_a.connect("h1", 1)
            before = fm.fab.counters()
            qp_a.post_write(mr_a, 0, 8 * MIB, peer.regions[0], imm=7, wr_id=9)
            assert [w.status for w in qp_a.cq.wait(timeout=60)] == ["SUCCESS"]
            assert [(w.imm, w.byte_len) for w in cq_b.wait(timeout=10)] == [(7, 8 * MIB)]
            assert bytes(mr_b.buf) == data
            after = fm.fab.counters()
            trims = {k: a["trims"] - before[k]["trims"] for k, a in after.items()}
            got = cb.stats(qp_b)["qp"]["counters"]
        # The switches trimmed (the 50 Mbit/s link to the spine holds 2 frames), and every
        # trim reached the responder as one, under the fabric's code points: those of the
        # port to h1 as last-hop trims (the responder counts them in both counters).
        assert sum(trims.values()) > 100, trims
        assert got.get("rx_trimmed", 0) == sum(trims.values()), (got, trims)
        assert got.get("rx_trimmed_lasthop", 0) == trims["L0.1->h1"], (got, trims)
