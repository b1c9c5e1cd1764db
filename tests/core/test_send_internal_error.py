"""A bug in one QP's sending (an exception out of its emit) fails that QP alone: it is
counted as ``tx_internal_error`` and kept in ``last_internal_error``, its work requests
are flushed (the first with ``GENERAL_ERR``), and another QP of the same host, sending in
the same passes, completes byte-exact. Raised out of ``frames_to_send`` instead, it
stopped every pass at that QP, and the QPs after it never sent again."""

from __future__ import annotations

import os
from typing import Any

from mrcnet.core import QPState, WCStatus

from .harness import Net, connect


def test_a_qp_whose_sending_raises_fails_alone() -> None:
    net = Net()
    qa, _ = connect(net, 0, 1)
    qc, _ = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    src = bytearray(os.urandom(1 << 16))
    dst, dst2 = bytearray(1 << 16), bytearray(1 << 16)
    ms, md, md2 = ha.register_mr(src), hb.register_mr(dst), hb.register_mr(dst2)
    broken, good = ha.qp(qa), ha.qp(qc)

    def bug(*_: Any) -> None:
        raise RuntimeError("a bug in the send path")

    broken.emit = bug  # type: ignore[method-assign]
    ha.post_write(qa, 1, ms, 0, 4096, md.addr, md.rkey)
    ha.post_write(qa, 2, ms, 4096, 4096, md.addr, md.rkey)
    ha.post_write(qc, 3, ms, 0, 1 << 16, md2.addr, md2.rkey)
    got: list[Any] = []
    net.run(until=lambda: len(got) + len(good.cq) >= 1, max_time=5.0)
    got += ha.poll_cq(good.cq, 10)
    assert [(w.wr_id, w.status) for w in got] == [(3, WCStatus.SUCCESS)]
    assert dst2 == src
    flushed = ha.poll_cq(broken.cq, 10)
    assert [(w.wr_id, w.status) for w in flushed] == [(1, WCStatus.GENERAL_ERR),
                                                        (2, WCStatus.WR_FLUSH_ERR)]
    assert broken.state is QPState.ERROR and "a bug in the send path" in broken.error_reason
    assert ha.counters()["tx_internal_error"] == 1
    assert isinstance(ha.last_internal_error, RuntimeError)
    assert not any(dst)  # (nothing of the failed QP's writes was sent)
