"""The core behaves the same with the C parser and the reference parse_frame.

``HostConfig(fast_parse=...)`` picks the receive path's parser. Under loss, duplicates,
trimming and reordering (a deterministic pipe, same seed) both hosts must send exactly the
same frames at the same times and end with the same counters: the parser changes speed,
nothing else.
"""

from __future__ import annotations

import pytest

from mrcnet.core import HostConfig
from mrcnet.native import HAVE_C

from .harness import Impairments, Net, connect


def _run(fast: bool) -> tuple[list[tuple[float, str, int, bytes]], list[dict[str, int]], bytes]:
    net = Net(planes=2, spines=4, seed=11, config=HostConfig(fast_parse=fast),
              imp=Impairments(loss=0.02, dup=0.03, trim=0.05, jitter=8e-6))
    net.log_tx = True
    qa, _qb = connect(net, 0, 1, recvs=4)
    ha, hb = net.h(0), net.h(1)
    src = bytearray(bytes(range(256)) * 1200)  # same bytes in both runs
    dst = bytearray(len(src))
    ms, md = ha.register_mr(src), hb.register_mr(dst)
    ha.post_write(qa, 1, ms, 0, len(src), md.addr, md.rkey, imm=5)
    for junk in (b"", b"\x00" * 70, b"\xff" * 200):  # frames no parser accepts
        hb.receive(junk, 0, 0.0)
    net.run(until=lambda: len(ha.qp(qa).cq) > 0, max_time=2.0)
    assert dst == src
    assert net.internal_errors() == 0
    return net.tx_log, [h.counters() for h in net.hosts.values()], bytes(dst)


@pytest.mark.skipif(not HAVE_C, reason="C fast path not built")
def test_c_parser_and_parse_frame_drive_the_core_identically() -> None:
    log_c, counters_c, dst_c = _run(True)
    log_py, counters_py, dst_py = _run(False)
    assert counters_c == counters_py
    assert counters_c[1].get("rx_trimmed", 0) > 0  # the trimmed path was exercised
    assert counters_c[1].get("rx_duplicate", 0) > 0
    assert counters_c[1].get("rx_malformed_truncated", 0) > 0
    assert len(log_c) == len(log_py)
    assert log_c == log_py
    assert dst_c == dst_py


@pytest.mark.parametrize("fast", [True, False])
def test_receive_takes_any_buffer_and_never_raises(fast: bool) -> None:
    """bytes, bytearray, memoryviews of any item size: the same frame, the same result;
    a buffer no parser can read is counted, not raised."""
    net = Net(planes=1, spines=2, config=HostConfig(fast_parse=fast))
    qa, _qb = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    src = bytearray(range(200)) * 40
    dst = bytearray(len(src))
    ms, md = ha.register_mr(src), hb.register_mr(dst)
    ha.post_write(qa, 1, ms, 0, len(src), md.addr, md.rkey)
    frames = [f for _, f in ha.frames_to_send(0.0)]
    assert len(frames) == 2 and all(len(f) % 2 == 0 for f in frames)
    hb.receive(memoryview(bytearray(frames[0])).cast("H"), 0, 0.0)
    hb.receive(bytearray(frames[1]), 0, 0.0)
    assert dst == src
    hb.receive(memoryview(bytes(200))[::2], 0, 0.0)  # not contiguous
    c = hb.counters()
    assert c["rx_data"] == 2 and c["rx_frames"] == 3 and c["rx_internal_error"] == 1
