"""``HostConfig.ack_span``: the receiver's SACK once the PSNs received since the last SACK
span more than this (32 by default, half the bitmap; mrcd 64, the bitmap's width).

A sprayed flow reaches a receiving mrcd a port's batch at a time, and the two planes'
batches interleave their PSNs: a batch of 16 frames spans ~32 PSNs, so at 32 the rule
fires every ~16 frames whatever ``ack_every`` is. The C lane, the Python lane, the batch
path and the frame-by-frame responder decide alike at any span; at 64 with ``ack_every``
32 such a flow is SACKed about half as often, every byte placed and acknowledged.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from mrcnet.constants import PSN_MASK, SACK_BITMAP_BITS
from mrcnet.core import HostConfig
from mrcnet.daemon.config import DAEMON_CORE
from mrcnet.errors import InvalidAttribute

from .test_rxlane import _batches, _compare, _generate

SIZE = 1_200_000  # ~300 packets of 4 KiB


def _sprayed(frames: list[tuple[int, bytes]], per_port: int = 64
             ) -> list[list[tuple[int, bytes]]]:
    """Receive passes as a busy receiving mrcd reads a flow sprayed over two planes, a
    port's batch at a time: of each ``2 x per_port`` packets, one plane's (the even
    PSNs), then the other's (the odd ones)."""
    out = []
    for i in range(0, len(frames), 2 * per_port):
        run = frames[i : i + 2 * per_port]
        out.append(run[0::2] + run[1::2])
    return out


@pytest.mark.parametrize("psn", [0, PSN_MASK - 40])  # and through the PSN wrap
def test_the_span_at_the_bitmap_width_halves_a_sprayed_flows_sacks(psn: int) -> None:
    """ack_every 32: at span 32 a pass is SACKed every ~16 frames, at 64 every 32 (295
    packets in 3 passes: 25 acknowledgements against 16); the same bytes placed, the
    same final state (all acknowledged), and the four receive paths alike at both
    spans."""
    frames = _generate(psn, {}, size=SIZE)
    batches = _sprayed(frames)
    res = {span: _compare(batches, psn, {"ack_every": 32, "ack_span": span}, size=SIZE)
           for span in (SACK_BITMAP_BITS // 2, SACK_BITMAP_BITS)}
    half, full = res[SACK_BITMAP_BITS // 2]["ref"], res[SACK_BITMAP_BITS]["ref"]
    assert half["dst"] == full["dst"] and half["cq"] == full["cq"]
    assert half["state"][0] == full["state"][0]  # everything acknowledged either way
    n_half, n_full = len(half["out"]), len(full["out"])
    # (besides the span's and ack_every's: each write's AckReq and each pass's end, 8)
    ends = 5 + len(batches)
    assert n_full <= len(frames) // 32 + ends, (n_full, len(frames))
    assert n_half - ends >= 1.6 * (n_full - ends), (n_half, n_full)


@pytest.mark.parametrize("span", [0, 1, 48, 64, 100])
def test_any_span_decides_alike_on_reordered_trimmed_duplicated_frames(span: int) -> None:
    """Reordering, duplicates and trims: the lanes decide as the responder does at any
    span (past the bitmap's width a SACK may need a second window)."""
    kw: dict[str, Any] = {"ack_every": 64, "ack_span": span}
    frames = _generate(0, kw, size=SIZE)
    _compare(_batches(frames, random.Random(span), reorder=40, batch=30), 0, kw, size=SIZE)


def test_defaults_and_checks() -> None:
    """The core keeps half the bitmap (the simulator's results do not move), and so does
    mrcd (at its ack_every 16 a wider span changes nothing; 32 with it slowed a transfer
    through loss: docs/PERFORMANCE.md session 14); a negative span is refused."""
    assert HostConfig().ack_span == SACK_BITMAP_BITS // 2
    assert DAEMON_CORE.get("ack_span", HostConfig().ack_span) == SACK_BITMAP_BITS // 2
    with pytest.raises(InvalidAttribute):
        HostConfig(ack_span=-1)
