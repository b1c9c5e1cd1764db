"""The sender reads its window from the QP's congestion control: through the C struct of
a CNSCC (no property call per emit) or the CC itself, and from the new one as soon as
the QP is handed another (``QueuePair.cc``'s setter, as at a reset or RTR)."""

from __future__ import annotations

import random

import pytest

from mrcnet.core import HostConfig
from mrcnet.core.cc import CNSCC, NSCC, CongestionControl, create_cc
from mrcnet.native import HAVE_C

from .harness import Net, connect, write_regions

_MTU = 1024


def _cc(native: bool, window: float) -> CongestionControl:
    """A new NSCC (its C twin when ``native``) whose window is ``window`` bytes."""
    cc = create_cc("nscc", _MTU, 1e9, 1e-5) if native else NSCC(_MTU, 1e9, 1e-5)
    assert isinstance(cc, CNSCC) == native
    cc.cwnd = window
    return cc


@pytest.mark.parametrize("native", [False, True])
def test_window_of_the_cc_held_now(native: bool) -> None:
    """Eight 8-byte writes, then eight more; each emit under a new CC: a window of one
    byte lets one packet go (nothing in flight), a wide one the seven left, one that
    leaves less than a packet beside the 64 bytes in flight none, and one that leaves
    exactly a packet one."""
    if native and not HAVE_C:
        pytest.skip("C fast path not built")
    net = Net(seed=1, config=HostConfig(mtu_payload=_MTU))
    qa, _ = connect(net, 0, 1)
    ha = net.h(0)
    _, _, ms, m1, _ = write_regions(net, random.Random(1))
    qp = ha.qp(qa)

    def post() -> None:
        for j in range(8):
            ha.post_write(qa, j, ms, 8 * j, 8, m1.addr + 8 * j, m1.rkey)

    def emit(window: float) -> int:
        qp.cc = cc = _cc(native, window)
        assert qp.snd.cc is cc
        frames: list[tuple[int, bytes]] = []
        qp.snd.emit(net.now, frames)
        return len(frames)

    post()
    assert emit(1.0) == 1
    assert emit(1e9) == 7
    post()
    assert emit(64 + _MTU - 1) == 0
    assert emit(64 + _MTU) == 1  # (room for one packet: then 72 bytes are in flight)
    assert emit(1e9) == 7
