"""``HostConfig.rack_prompt_queue`` (mrcnet/core/tailloss.py ``_prompt_losses``;
docs/COLLECTIVES.md, "session 14"): ``rack_prompt`` only while a QP's RTT samples show
less queueing than the bound. A ring's hops, queue-free, keep the rule's gain through a
spine link going down (simulated 16 hosts x 8 planes, 1 MiB, virtual time); a QP whose
samples show an incast's queues waits RACK's whole allowance, as without the rule."""

from __future__ import annotations

from mrcnet.core import HostConfig
from mrcnet.sim.collective import CollectiveRun, default_topology
from mrcnet.sim.failures import parse_failure
from mrcnet.sim.topology import parse_topology

from .harness import Impairments, Net, connect

QUIET = 20e-6  # the bound measured in docs/COLLECTIVES.md (RACK's reorder floor)


def _allreduce_steps(**cfg: object) -> list[float]:
    """A 16-host all-reduce's timed steps, link L0.0-S0.1 down in the second."""
    spec = parse_topology(default_topology(16))
    run = CollectiveRun(spec, "allreduce", 1 << 20, iters=6, warmup=2, transport="mrc",
                        failures=[parse_failure("link:L0.0-S0.1@700us:down")], seed=1,
                        host_config=cfg or None)
    run.run()
    assert run.error is None
    return list(run.steps)


def test_ring_keeps_the_prompt_gain() -> None:
    """The failure's step: defaults 326 us, ``rack_prompt`` 257, with the bound 262; the
    steps before it alike in all three."""
    base = _allreduce_steps()
    prompt = _allreduce_steps(rack_prompt=True)
    quiet = _allreduce_steps(rack_prompt=True, rack_prompt_queue=QUIET)
    assert base[0] == prompt[0] == quiet[0]
    assert max(prompt) < 0.85 * max(base)
    assert max(quiet) < 0.85 * max(base)
    assert max(quiet) < 1.05 * max(prompt)


def test_queued_qp_waits_the_whole_allowance() -> None:
    """A QP whose samples met 25 us of queue each way (srtt - min_RTT far above the
    bound): the rule finds nothing due, however late the packets in flight."""
    net = Net(imp=Impairments(delay=25e-6),
              config=HostConfig(rack_prompt=True, rack_prompt_queue=QUIET, ack_every=1))
    qa, _ = connect(net, 0, 1)
    ha, hb = net.h(0), net.h(1)
    mtu = ha.config.mtu_payload
    ms, md = ha.register_mr(bytearray(16 * mtu)), hb.register_mr(bytearray(16 * mtu))
    ha.post_write(qa, 0, ms, 0, 8 * mtu, md.addr, md.rkey)
    net.run(until=lambda: len(ha.qp(qa).cq) >= 1, max_time=1.0)
    rec = ha.qp(qa).rec
    rec.min_rtt = 5e-6  # (a quiet sample once: the queue since is 45 us)
    assert rec.srtt - rec.min_rtt >= QUIET
    assert rec._prompt_losses(net.now, 0.0, net.now + 1.0) == float("inf")
