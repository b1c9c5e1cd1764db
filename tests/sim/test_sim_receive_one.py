"""A frame of the C network handed to its host alone (Host.receive_one: the receive
loop's one-frame path, mrc-sim's) against the same run with every frame handed over as
a batch of one (receive_batch): the same decisions, with the lane's set-up checks
verified (receive.VERIFY_SETUP, as in every test) and not (as mrc-sim runs), through
trims, NACKs, a link failure and the ack lane's pauses."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from mrcnet.core import receive
from mrcnet.native import HAVE_C
from mrcnet.sim.failures import parse_failure
from mrcnet.sim.matrix import incast, permutation
from mrcnet.sim.runner import SimRun
from mrcnet.sim.topology import parse_topology

pytestmark = pytest.mark.skipif(not HAVE_C, reason="the C network and lane are not built")


def _run(one: bool, counts: dict[str, int]) -> tuple[Any, ...]:
    spec = parse_topology("leafspine:planes=2,spines=4,leaves=4,hosts=4,queue=4pkt")
    flows = [*permutation(16, 512 << 10, seed=3), *incast(range(1, 6), 0, 128 << 10)]
    flows = [dataclasses.replace(f, id=i) for i, f in enumerate(flows)]
    run = SimRun(spec, flows, seed=3, failures=[parse_failure("link:L0.1-S0.2@40us:down")])
    for node in run.fabric.hosts:
        assert node._rx_one is not None
        assert node._rx_at is not None
        if not one:  # (a batch of one: receive_batch, as before receive_one)
            batch = node.endpoint.receive_batch
            node._rx_one = lambda f, p, t, batch=batch: batch((f,), p, t)
            node._rx_at = None  # (then arrive: the frame's bytes)
    res = run.run()
    d = res.as_dict()
    counts["completed"] = d["summary"]["completed"]
    return d["flows"], d["ports"], d["hosts"], res.events


@pytest.mark.parametrize("verify", [False, True])
def test_one_frame_at_a_time_decides_as_a_batch_of_one(
        verify: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receive, "VERIFY_SETUP", verify)
    calls = {"one": 0, "batch": 0, "in_place": 0}
    one, batch = receive.Receiver.receive_one, receive.Receiver.receive_batch
    at = receive.Receiver.receive_at

    def counting_one(self: Any, *a: Any) -> None:
        calls["one"] += 1
        one(self, *a)

    def counting_at(self: Any, *a: Any) -> None:
        calls["one"] += 1
        calls["in_place"] += a[-1] is not None  # (the C network's buffer, not bytes)
        at(self, *a)

    def counting_batch(self: Any, *a: Any, **kw: Any) -> None:
        calls["batch"] += 1
        batch(self, *a, **kw)

    monkeypatch.setattr(receive.Receiver, "receive_one", counting_one)
    monkeypatch.setattr(receive.Receiver, "receive_at", counting_at)
    monkeypatch.setattr(receive.Receiver, "receive_batch", counting_batch)
    counts: dict[str, int] = {}
    a = _run(True, counts)
    took = dict(calls)
    b = _run(False, counts)
    assert counts["completed"] == 16 + 5
    assert sum(p["trimmed"] for p in a[1].values()) > 0
    assert a == b
    # receive_one was the entry for every frame; unverified, it handled most of them
    # itself (the rest it handed to receive_batch); verified, none
    assert took["one"] > 1500
    # ... each frame read by the lane where the C network left it (Host.receive_at)
    assert took["in_place"] == took["one"]
    if verify:
        assert took["batch"] == took["one"]
    else:
        assert took["batch"] < took["one"] // 5
