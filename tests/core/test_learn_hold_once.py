"""RACK's reorder window learnt from a late arrival, with the peer's ACK hold counted
once (``HostConfig.learn_hold_once``; mrcnet/core/recovery.py ``_learn_reorder``;
docs/COLLECTIVES.md, "session 14")."""

from __future__ import annotations

import pytest

from mrcnet.core import HostConfig
from mrcnet.core.recovery import REO_LEARN_MARGIN

from .harness import Net, connect

HOLD = HostConfig().ack_delay


def _allowance_after(late: float, **cfg: object) -> tuple[float, float]:
    """A fresh QP's RACK allowance, then its allowance after a packet declared lost
    with it arrived ``late`` seconds after that."""
    net = Net(config=HostConfig(**cfg))  # type: ignore[arg-type]
    qa, _ = connect(net, 0, 1)
    rec = net.h(0).qp(qa).rec
    before = rec._reorder_allowance()
    rec._learn_reorder(late, before)
    return before, rec._reorder_allowance()


def test_hold_learnt_once() -> None:
    """One packet 12 us late: the allowance becomes the window it needed (the old
    allowance without the hold, plus 12 us) with the margin, plus the hold once. Without
    the knob the hold is learnt into the window and added again on top."""
    late = 12e-6
    before, after = _allowance_after(late, learn_hold_once=True)
    assert after == pytest.approx(REO_LEARN_MARGIN * (before - HOLD + late) + HOLD)
    assert after < before + 2 * late + HOLD  # (without the hold twice: 40 -> ~60 us)
    _, old = _allowance_after(late)
    assert old == pytest.approx(REO_LEARN_MARGIN * (before + late) + HOLD)
    assert old - after == pytest.approx(REO_LEARN_MARGIN * HOLD)


def test_hold_learnt_once_still_covers_the_late_packet() -> None:
    """The learnt allowance still covers what the late packet needed (the allowance it
    was declared lost with plus its lateness): a repeat is not declared lost again."""
    for late in (1e-6, 12e-6, 40e-6):
        before, after = _allowance_after(late, learn_hold_once=True)
        assert after >= before + late
