"""Configuration of a host and its QPs, the Port record and the PathProvider protocol.

Every knob the simulator and mrcd set lives in :class:`HostConfig` (per host) or
:class:`QPAttrs` (per QP, mrc.h names). Time is in seconds, sizes in bytes.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mrcnet.constants import (
    ACK_TIMEOUT_MAX_EXP,
    ACK_TIMEOUT_UNIT_S,
    DEFAULT_EVS_PER_QP,
    EV_ORDER_SPORT_HIGH,
    EV_ORDER_SPORT_LOW,
    PSN_MASK,
    RETRY_EXP_INFINITE,
    RETRY_LINEAR_MAX,
    SACK_BITMAP_BITS,
)
from mrcnet.errors import InvalidAttribute
from mrcnet.wire import Route
from mrcnet.wire.dscp import DscpClasses, set_dscp_classes

# --- core defaults (protocol-level choices of this implementation; see docs/CORE.md) ----
DEFAULT_MTU_PAYLOAD = 4096
DEFAULT_ACK_TIMEOUT_EXP = 14  # 1.024 us x 2^14 = 16.8 ms: initial RTO before any RTT sample
DEFAULT_RETRY_CNT = 7
DEFAULT_MAX_IMM_OUTSTANDING = 64
EV_PROFILE_SPRAY = "spray"
EV_PROFILE_ECMP = "ecmp"
EV_PROFILES = frozenset({EV_PROFILE_SPRAY, EV_PROFILE_ECMP})
MAX_QPN = 0xFFFFFE  # the highest QP number (ENDPOINT_QPN, 0xFFFFFF, is reserved)

#: mrc.h attribute names accepted by ``Host.modify_qp`` -> this module's names.
#: (``retry_linear_cnt``/``retry_exp_cnt`` map to ``retry_linear``/``retry_cnt``.)
MRC_H_ALIASES = {
    "ev_profile_id": "ev_profile",
    "cc_profile_id": "cc_profile",
    "max_wimm": "max_imm_outstanding",
    "retry_linear_cnt": "retry_linear",
}


class Access(enum.IntFlag):
    """Memory-region access rights (verbs names)."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4  # accepted for API familiarity; MRC has no READ


@dataclass(frozen=True, slots=True)
class Port:
    """One NIC port of a host. Each port is one network plane."""

    index: int
    plane: int
    mac: bytes
    ip: bytes


class PathProvider(Protocol):
    """Where a host learns its paths to peers (the simulator and mrcd implement it).

    ``routes(peer, plane)`` returns one :class:`~mrcnet.wire.Route` per distinct path to
    ``peer`` in that plane (for a two-tier leaf-spine: one per spine), in a stable order:
    the index in this sequence is the EV's *path index* (see :mod:`mrcnet.core.evs`).
    ``planes(peer)`` names the planes in which ``peer`` can be reached.
    """

    def routes(self, peer: str, plane: int) -> Sequence[Route]: ...

    def planes(self, peer: str) -> Sequence[int]: ...


@dataclass(slots=True)
class HostConfig:
    """Per-host knobs.

    - ``mtu_payload``: payload bytes per data packet.
    - ``evs_per_qp``: EVs per QP, split evenly over the planes.
    - ``ev_profile``: ``"spray"`` (MRC) or ``"ecmp"`` (one EV per QP by a hash of
      (src, dst, qpn), no spraying, no EV retirement: a RoCE-like baseline).
    - ``cc_profile``: a name in :data:`mrcnet.core.cc.CC_REGISTRY` (``"nscc"``, ``"fixed"``).
    - ``ack_every``: the responder SACKs at least every this many in-order packets.
    - ``ack_delay``: and at latest this long after an unacknowledged packet arrived.
    - ``timeout_floor``: the smallest retransmission timeout (timers are the backstop).
    - ``reorder_floor``: the smallest reorder allowance of SACK-based loss detection.
    - ``retry_cnt``/``retry_linear``: retry budget: ``retry_linear`` timeouts at the base
      RTO, then exponential backoff, ``retry_cnt`` timeouts in all before the QP fails.
    - ``min_active_evs``: per plane, never fewer usable EVs than this (refill from the
      least-bad paths when needed).
    - ``probe_interval``/``probe_successes``: ASSUMED_BAD EVs are probed this often and
      revived after this many consecutive successful probes.
    - ``link_rate``: bytes/s of one port (NSCC's BDP = rate x planes x base RTT).
    - ``base_rtt_hint``: RTT assumed before the first measurement.
    - ``rx_window``: PSNs the responder accepts ahead of its cumulative ACK point.
    - ``verify_checksums``: check UDP checksum and ICRC on receive (a simulator that
      corrupts nothing may turn it off for speed).
    - ``completion_events``: also report completions as events (besides the CQ).
    - ``port_status_retries``: PORT_STATUS sends to a peer before giving up.
    - ``use_templates``: build data frames by patching per-route header templates
      (:mod:`mrcnet.wire.template`, C when built) instead of :func:`mrcnet.wire.build_data`.
    - ``cc_target_floor``: NSCC never targets less queueing delay than this (seconds).
      An endpoint whose own scheduling adds jitter to every RTT sample (mrcd in Python:
      0.1-2 ms) must set it above that jitter, or NSCC reads the jitter as a queue.
    - ``cc_rtt_floor``: NSCC sizes its BDP (max window = 1.5 BDP, fair-increase step) and
      its once-per-RTT decisions with at least this RTT. Set it to the endpoint RTT the
      host really sees (mrcd: 1-2 ms), so the window can fill the link despite it.
    - ``cc_delay_filter``: NSCC's queueing delay is the smallest RTT sample of the last
      ``cc_delay_filter x srtt`` minus the base RTT (0: each sample alone). A queue delays
      every sample, endpoint jitter only some: 0.5 (Copa's window) filters the jitter.
    - ``retire_ambiguous``: a loss on a path that has since delivered a packet sent
      after the lost one is ambiguous (reordering, random drop): the EV is retired only
      after this many such losses on the path within ``8 x srtt`` (1: at once). A loss
      with no later packet through on its path retires the EV at once.
    - ``sack_on_reorder``: False (default): out-of-order arrivals are coalesced like
      in-order data (``ack_every`` / ``ack_delay``, and at the end of a receive burst of
      several packets); a SACK goes at once only when the hole at the cumulative point
      outlives ``reorder_floor`` (and when it closes), or on ACK-request, CE, duplicate,
      retransmission, trim, probe. Sprayed traffic: 0.46 -> 0.25 SACKs per data packet
      in the simulator. True: a SACK at once on every out-of-order arrival (before).
    - ``ack_rtt_floor``: no acknowledgement of a packet's first transmission comes back
      sooner than this (seconds) after it was sent; one that does is forged and dropped
      (``rx_sack_too_early``; :func:`mrcnet.core.forged.early_floor`). Set it at or below
      the fabric's propagation RTT: it drops no genuine SACK then, and the network cannot
      move it. Default 2 us: the wire, a switch hop each way and the peer's NIC and host
      take more on any fabric (the simulator sets it from its topology, mrcd from its
      configuration). 0: no such check.
    - ``ack_lone``: False (default): a receive burst of one packet is coalesced like the
      rest (``ack_every`` / ``ack_delay``: a NIC-like host that is handed one packet per
      call). True: it is acknowledged at the end of its burst too, so a small message
      that arrives while nothing else does is acknowledged in the pass that received it
      (mrcd: its requester's completion no longer waits ``ack_delay``, 0.5 ms rounded up
      to the loop's 1 ms timer).
    - ``ack_with_data``: False (default): an AckReq is answered at once. True: the
      AckReq of an in-order write-with-immediate (nothing missing before it) is held
      for this QP's next data, at most ``ack_delay``: the application it completed may
      answer (a ping-pong, a request and its response), and the ACK then leaves in the
      same :meth:`~mrcnet.core.Host.frames_to_send` call as the answer; any
      acknowledgement owed leaves with the QP's data. The requester reads both in one
      pass instead of waking for the ACK and again for the answer (mrcd). Only while
      the QP answers: it holds once it sent data within ``ack_delay`` of an AckReq it
      acknowledged at once, and stops when a held one's ``ack_delay`` ran out
      unanswered (a writer waiting for each completion is acknowledged at once).
    - ``ack_req_burst``: False (default): every AckReq is answered by a SACK of its own,
      at once. True: an AckReq that arrives with others in one receive burst (one call
      of :meth:`~mrcnet.core.Host.receive_batch`) is answered by the burst's SACK at its
      end (:meth:`~mrcnet.core.Host.frames_to_send`), which covers them all: a stream of
      small writes, each with its AckReq, costs a SACK per burst rather than per write
      (mrcd: the receiving mrcd sent ~1.2 SACKs per 64-byte write, ~11 us of system
      time each with the fabric's forwarding). The ACK leaves in the same pass.
    - ``ack_gap_fill``: True (default): a packet that completes a message whose last
      packet (and AckReq) arrived earlier, out of order, is acknowledged at once (at its
      burst's end with ``ack_req_burst``), as TCP acknowledges a segment that fills a
      gap at once (RFC 5681 section 4.2). False: coalesced like other in-order data
      (``ack_every`` / ``ack_delay``): the sender's work request then completes
      ``ack_delay`` late, and the late SACK's RTT sample reads as queueing (in the
      simulator's all-reduce it set off NSCC's quick adapt: docs/CORE.md).
    - ``ack_late``: False (default): a packet that arrives after something sent after
      it was already reported (a higher PSN in an earlier SACK, or a retransmission
      with a newer stamp) is coalesced like the rest (``ack_every`` / ``ack_delay``),
      so the sender's RACK allows for that hold (``rack_hold``). True: it is
      acknowledged at once (at its burst's end with ``ack_req_burst``): it is the news
      RACK waits for, and TCP's receiver acknowledges every out-of-order segment and
      gap fill at once (RFC 5681 section 4.2), which is why RFC 8985 leaves the ACK
      delay out of its reorder window (docs/CORE.md, "Session 10").
    - ``ack_span``: in-order or not, a SACK goes once a packet arrives more than this
      many PSNs past the first one received since the last SACK: 32 (default, half the
      SACK bitmap), so that one SACK's bitmap reports them all. A sprayed flow read a
      port's batch at a time spans about twice a batch's count (the planes' batches
      interleave their PSNs), so the rule fires after ~16 frames whatever ``ack_every``
      is; 64 (the bitmap's width) with ``ack_every`` 32 halves those SACKs (measured on
      mrcd, not kept there: no CPU or goodput gain, a transfer through loss slower;
      docs/PERFORMANCE.md, session 14); past 64 a SACK can need a second frame (a second
      bitmap window) when the cumulative point lags.
    - ``tail_probe``: True (default): a tail-loss probe (RFC 8985 section 7): two
      smoothed RTTs plus ``ack_delay`` without news while packets are in flight, the
      newest is resent on another path (:meth:`mrcnet.core.tailloss.TailLoss.arm_sent`),
      so a lost tail is found in about two RTTs instead of the retransmission timeout.
    - ``rack_tie_break``: True (default): of packets sent in one burst (one instant), one
      lost behind acknowledged siblings with a higher sequence is found by RACK's wait
      rather than the timeout (RFC 8985's tie-break, :mod:`mrcnet.core.tailloss`). mrcd
      turns it off: a whole pass's burst there shares one timestamp and leaves through
      two ports, so the planes' own reordering read as losses (all spurious, 10-100 per
      512 MiB on an unshaped fabric, goodput down 5-10 %).
    - ``rack_floor``: the sender's floor of RACK's reorder window (RFC 8985 section 6.2:
      min_RTT / 4, at least this); None (default): ``reorder_floor``, which the
      responder also uses for its hole timer. Sender-only: RACK can wait less on a
      fast fabric without the responder SACKing more (docs/CORE.md, "Session 9: loss
      detection time", has what half the base RTT does in the simulator).
    - ``rack_hold``: how long RACK's allowance lets the peer hold the report of a packet
      that arrived (the responder coalesces, so a late packet can wait ``ack_delay``
      while a later one was already reported: docs/CORE.md, "Session 9: loss detection
      time"); None (default): ``ack_delay``. 0: a held report shows as a spurious loss,
      and the allowance learns from it (measured: a regression, docs/CORE.md).
    - ``rack_prompt``: False (default). True: RACK leaves the hold
      (``rack_hold``) out of the wait of a packet whose arrival the peer reports at once
      (a retransmission, a message's last packet, a packet whose arrival completes a
      message whose later packets were all acknowledged: the peer's AckReq and
      ``ack_gap_fill`` rules, taken to be this host's), and its reorder window follows
      the queues the RTT samples show (4 rttvar or srtt - min_RTT, at least min_RTT /
      2, at most RACK's whole allowance). False: every packet waits the allowance with
      the hold. Sender-only; docs/CORE.md, "Session 11", docs/COLLECTIVES.md
      "session 12": it meets the 64-host all-reduce's link-down point but makes the
      all-to-all's failure steps slower (1.181 -> 1.345 of the no-failure P100 at one
      failure instant) and costs the simulator ~9 % of its CPU per event, so it is not
      the default.
    - ``rack_prompt_floor``: 0.5 (default): the floor of ``rack_prompt``'s reorder window,
      as a fraction of the minimum RTT. RFC 8985's quarter blamed a queue on
      tests/sim/test_coll_detection.py's ring after the failure; on the 64-host
      all-reduce it takes ~2.7 us off each loss on a dead link (the collective tuning
      takes it; docs/COLLECTIVES.md, "session 15").
    - ``rack_prompt_queue``: 0.0 (default: off). > 0: ``rack_prompt`` acts only while
      the QP's RTT samples show less queueing than this many seconds (4 rttvar and
      srtt - min_RTT both below it); a QP whose samples show more waits RACK's whole
      allowance as without ``rack_prompt`` (an incast's queues reorder past the shorter
      wait: docs/COLLECTIVES.md, "session 14").
    - ``tlp_prompt``: False (default). True: the tail-loss probe's timeout allows no
      hold (``tlp_hold``) when the newest packet in flight is a retransmission or a
      message's end (reported at once, as for ``rack_prompt``). Measured: the tails'
      reports then often come after the probe (a collective's tails queue at the
      receiver), docs/CORE.md, "Session 11".
    - ``tail_path``: False (default). True: while the host holds a route failing
      (shared verdicts), the last packet a QP sends before it has nothing more to send
      (a message's end with the send queue empty: a collective step's tail) goes on a
      path that has delivered a packet sent since the host learnt of the failure, if
      the sprayed one has not (:meth:`mrcnet.core.tailloss.TailLoss.tail_ev`): nothing
      sent after a tail lets RACK see it lost, so a tail on a dead path waits for the
      tail-loss probe. Measured on the 64-host all-to-all: the failure's step slower
      (240.9 against 189.4 us), so not the default (docs/COLLECTIVES.md, "session 12").
    - ``retire_inflight``: False (default). True: a path retired as dead (a loss with
      nothing sent on it later getting through, after the suspicion's grace; a probe's
      or a timeout's verdict) takes its packets still in flight with it: they are lost
      at once (``lost_path``), not each found by RACK, the probe or the timer.
      Measured (docs/COLLECTIVES.md, "session 12"): sim_digest's perm-linkdown-loss
      better over twelve seeds, but a spine bottleneck's goodput through a failure
      below tests/sim's 7/8 (0.875 against 0.897), so not the default.
    - ``tlp_fail_rtt``: False (default). True: while the host holds a route failing
      (shared verdicts), the tail-loss probe's timeout counts in the newest RTT sample
      (RACK's: the newest packet acknowledged) when it is below the smoothed RTT, which
      an incast's queues inflate while a step's tail leaves after they drained, and
      runs from the newest packet's send time, not from the latest acknowledgement
      (at least half a timeout from it: :meth:`mrcnet.core.tailloss.TailLoss.pto`,
      ``arm_sent``; docs/COLLECTIVES.md "session 13").
    - ``tlp_fail_path``: False (default). True: while the host holds a route failing,
      the probe's resend goes on a path that has delivered a packet sent since the host
      learnt of the failure (the newest so proven), if the sprayed one has not
      (:meth:`mrcnet.core.tailloss.TailLoss.probe_ev`): a resend onto the dead link
      waits for the next probe.
    - ``tlp_fail_window``: 0.0 (default): ``tlp_fail_rtt`` and ``tlp_fail_path`` act
      while the host holds any route failing. > 0: only within this many seconds of
      the newest such verdict (a route held failing since a cold start's spurious
      retirement is not news of a failure).
    - ``tlp_fail_gate``: True (default). False: ``tlp_fail_rtt`` acts on every probe,
      a failing route known or not (measured in docs/COLLECTIVES.md, "session 13").
    - ``learn_at_declare``: True (default, since session 12): a packet declared lost
      that arrives after all widens RACK's allowance to what it needed from the
      allowance it was declared lost with. False: from the allowance now, which the
      burst's other late packets already widened (compounding, up to the
      retransmission timeout's: docs/COLLECTIVES.md, "session 12").
    - ``verdict_inflight``: False (default). True: when another QP's verdict retires a
      route this QP shares (shared verdicts), this QP's packets still in flight on it
      are lost at once (cause ``path``: no blame, nothing learnt, no congestion signal)
      and resent on another path, instead of each waiting for RACK or, for a tail with
      nothing sent after it, the tail-loss probe
      (:meth:`mrcnet.core.tailloss.TailLoss._shared_retired`; docs/COLLECTIVES.md,
      "session 14").
    - ``verdict_uplink``: 0 (default: off). N: once the host holds routes to N
      destination leaves failing that share one leaf-to-spine hop of a plane, it holds
      every route through that hop failing (:class:`mrcnet.core.verdicts.PathVerdicts`):
      a link down between the host's leaf and a spine fails them all, and a sprayed QP
      sends too few packets on its own route to learn it before its tail takes it
      (docs/COLLECTIVES.md, "session 14").
    - ``tlp_srtts``: the tail-loss probe's timeout in smoothed RTTs (2.0, default:
      RFC 8985 section 7.2's 2 SRTT).
    - ``tlp_srtts_queued``: 0.0 (default: off). > 0: the tail-loss probe's timeout in
      smoothed RTTs for a QP whose RTT samples show queueing (4 rttvar or srtt -
      min_RTT at least ``tlp_queue``), ``tlp_srtts`` otherwise. An incast's tails gain
      from a shorter probe (the 64-host all-to-all through a link down), while on a
      ring's queue-free hops it pre-empts ``rack_prompt``'s RACK rule, which finds the
      loss sooner without a resend on spec (docs/COLLECTIVES.md, "session 14").
    - ``tlp_queue``: the queueing bound for ``tlp_srtts_queued``, in seconds; 0.0
      (default): ``rack_prompt_queue``'s, so that a QP takes either ``rack_prompt``'s
      shorter RACK wait or the shorter probe, not both (with both 0: always the
      shorter probe).
    - ``tlp_hold``: how long the probe's timeout lets the peer hold the report of the
      newest packet in flight; None (default): ``ack_delay``. A collective step's tail is
      its message's last packet, which asks for an ACK and is answered at once (the
      responder's AckReq rule): nothing to allow for there (docs/CORE.md, "Session 11").
    - ``share_verdicts``: True (default): a path one QP retires for loss or a timeout is
      retired at once by every QP of the host whose route shares its links up to the
      destination leaf, and revived with it (:mod:`mrcnet.core.verdicts`).
    - ``path_loss_cc``: False (default): a loss that condemns its path (nothing sent on
      it later got through: what a dead path shows) asks the CC for no quick adapt when
      found; if the suspicion is cleared (something newer gets through on the path: a
      real loss on a live path) the quick adapt comes then, one grace later; if the path
      is retired it never does (a dead link is not congestion). True: every loss asks
      for one when found (as before issue 16).
    - ``ev_order``: which half of the 32-bit EV rides in the UDP source port (the other in
      the flow labels): ``"sport-low"`` (default: the low 16 bits, PROTOCOL-NOTES section
      8) or ``"sport-high"``. Every host of a fabric must use the same; it is process-wide
      (:func:`mrcnet.wire.set_ev_order`: every codec of the process follows it).
    - ``dscp``: the fabric's DSCP classes, ``{class: code point}`` for any of trimmable,
      trimmable_retx, trimmed, trimmed_lasthop, no_trim, control (the rest keep
      mrcnet.constants' defaults: 26, 28, 40, 32, 0, 46). None: leave the process's classes
      as they are (the defaults, or what the simulator's fabric set). Process-wide like
      ``ev_order`` (:func:`mrcnet.wire.set_dscp_classes`); every host of a fabric and its
      switches must agree. mrcd takes the fabric description's when it has them.
    - ``fast_parse``: parse received frames with :class:`mrcnet.wire.parsed.FrameParser` (the
      C parser when built); False: the reference :func:`mrcnet.wire.parse_frame`. Same
      decisions either way (tests/wire/test_parse_differential.py); the switch exists to
      measure the difference.
    """

    mtu_payload: int = DEFAULT_MTU_PAYLOAD
    evs_per_qp: int = DEFAULT_EVS_PER_QP
    ev_profile: str = EV_PROFILE_SPRAY
    cc_profile: str = "nscc"
    ack_every: int = 4
    ack_delay: float = 20e-6
    timeout_floor: float = 200e-6
    reorder_floor: float = 20e-6
    retry_cnt: int = DEFAULT_RETRY_CNT
    retry_linear: int = 3
    min_active_evs: int = 2
    probe_interval: float = 1e-3
    probe_successes: int = 3
    link_rate: float = 100e9 / 8
    base_rtt_hint: float = 20e-6
    rx_window: int = 4096
    verify_checksums: bool = True
    completion_events: bool = True
    port_status_retries: int = 5
    use_templates: bool = True
    fast_parse: bool = True
    cc_target_floor: float = 0.0
    cc_rtt_floor: float = 0.0
    cc_delay_filter: float = 0.0
    retire_ambiguous: int = 3
    sack_on_reorder: bool = False
    ack_rtt_floor: float = 2e-6
    ack_lone: bool = False
    ack_with_data: bool = False
    ack_req_burst: bool = False
    ack_gap_fill: bool = True
    ack_late: bool = False
    ack_span: int = SACK_BITMAP_BITS // 2
    tail_probe: bool = True
    rack_tie_break: bool = True
    rack_floor: float | None = None
    rack_hold: float | None = None
    rack_prompt: bool = False
    rack_prompt_queue: float = 0.0
    rack_prompt_floor: float = 0.5
    tlp_prompt: bool = False
    tail_path: bool = False
    retire_inflight: bool = False
    learn_at_declare: bool = True
    verdict_inflight: bool = False
    verdict_uplink: int = 0
    tlp_fail_rtt: bool = False
    tlp_fail_path: bool = False
    tlp_fail_window: float = 0.0
    tlp_fail_gate: bool = True
    tlp_srtts: float = 2.0
    tlp_srtts_queued: float = 0.0
    tlp_queue: float = 0.0
    tlp_hold: float | None = None
    share_verdicts: bool = True
    path_loss_cc: bool = False
    ev_order: str = "sport-low"
    dscp: dict[str, int] | None = None

    def __post_init__(self) -> None:
        # Recovery.backoff's first round is 1.0 without reading retry_linear, which only
        # a negative retry_linear would make wrong (a QP's own is checked: check_qp_attrs)
        if self.retry_linear < 0:
            raise InvalidAttribute(f"retry_linear {self.retry_linear} must not be negative")
        if not self.tlp_srtts > 0:
            raise InvalidAttribute(f"tlp_srtts {self.tlp_srtts} must be positive")
        if self.tlp_srtts_queued < 0 or self.tlp_queue < 0:
            raise InvalidAttribute("tlp_srtts_queued and tlp_queue must not be negative")
        if not self.rack_prompt_floor >= 0:
            raise InvalidAttribute(f"rack_prompt_floor {self.rack_prompt_floor} must not be "
                                   "negative")
        if self.ack_span < 0:  # (the C lane holds it unsigned)
            raise InvalidAttribute(f"ack_span {self.ack_span} must not be negative")


#: Named sets of :class:`HostConfig` overrides, for a workload rather than a host.
#:
#: ``collective``: lockstep collectives (all-to-all, all-reduce), judged by the P100 of a
#: step. A failed link's last packets, sent before any QP knew, are found by the
#: tail-loss probe; these rules let one QP's verdict on a route act for the host's other
#: QPs at once (``verdict_inflight``, ``verdict_uplink``), probe sooner while a route
#: fails (``tlp_fail_*``) or while the QP's RTTs show queueing (``tlp_srtts_queued``),
#: and mark a late tail lost by RACK where queues are short (``rack_prompt`` with
#: ``rack_prompt_queue``, its window's floor RFC 8985's min_RTT / 4). With it one spine
#: link going down costs a 64-host x 8-plane simulated all-to-all or all-reduce at most
#: 5 % of its no-failure P100 at nine failure instants (docs/COLLECTIVES.md, session
#: 15). Not the host default: it sends ~185 spurious probes per all-to-all step without
#: any failure, and ``rack_prompt`` costs a single lossy flow's tail
#: (``tools/sim_digest.py``'s perm-linkdown-loss 2.14 -> 2.35 of ideal); docs/DECISIONS.md.
TUNINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "collective": {
        "tlp_fail_rtt": True,
        "tlp_fail_path": True,
        "tlp_fail_gate": False,
        "verdict_inflight": True,
        "verdict_uplink": 2,
        "rack_prompt": True,
        "rack_prompt_queue": 30e-6,
        "rack_prompt_floor": 0.25,
        "tlp_srtts_queued": 1.5,
    },
}


def tuning_overrides(name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The HostConfig overrides of the tuning ``name`` (:data:`TUNINGS`), with
    ``overrides`` on top (an explicit setting wins); InvalidAttribute if unknown."""
    if name not in TUNINGS:
        raise InvalidAttribute(f"tuning {name!r} unknown: use one of {', '.join(TUNINGS)}")
    return {**TUNINGS[name], **(overrides or {})}


#: HostConfig.ev_order's names of the EV orders (mrcnet.constants.EV_ORDER_*).
EV_ORDERS: dict[str, int] = {"sport-low": EV_ORDER_SPORT_LOW, "sport-high": EV_ORDER_SPORT_HIGH}


def ev_order_code(name: str) -> int:
    """The EV order called ``name`` (HostConfig.ev_order); InvalidAttribute if unknown."""
    if name not in EV_ORDERS:
        raise InvalidAttribute(f"ev_order {name!r}: use one of {sorted(EV_ORDERS)}")
    return EV_ORDERS[name]


def apply_dscp(dscp: dict[str, int] | None) -> None:
    """Use HostConfig.dscp's classes process-wide (None: leave them); InvalidAttribute if
    they are not six distinct code points of known classes."""
    if dscp is not None:
        try:
            set_dscp_classes(DscpClasses.from_dict(dscp))
        except ValueError as e:
            raise InvalidAttribute(str(e)) from None


@dataclass(slots=True)
class QPAttrs:
    """QP attributes (mrc.h names). ``None`` means: take the host default.

    - ``peer``/``dest_qp_num``: the remote host name and QP number (set at INIT->RTR).
    - ``sq_psn``/``rq_psn``: initial send / receive PSN (24 bits).
    - ``ev_profile``/``cc_profile``/``evs_per_qp``: path and congestion profiles.
    - ``max_imm_outstanding``: write-with-immediate messages in flight at most.
    - ``retry_cnt``: retry budget (timeouts without progress before ERROR).
    - ``timeout``: ack timeout exponent t: 1.024 us x 2^t, the RTO before any RTT sample.
    - ``retry_linear``: retry rounds at the base timeout before backing off exponentially.
    - ``mpr``/``mpr_dest``: max PSN range as requester / responder, in units of 128 PSNs
      (None: the host's ``rx_window``).
    - ``max_wimm_dest``: immediates the responder lets the peer have in flight at most
      (more are refused: NACK NO_RESOURCE, resent later).
    - ``ep_token``: the 32-bit endpoint token agreed with the peer at connect (set at
      INIT->RTR; None: unbound). Endpoint requests to the peer carry it; one from the
      peer that carries no token of a QP with it is dropped (docs/SECURITY.md).

    ``modify_qp`` also takes the mrc.h spellings (see :data:`MRC_H_ALIASES`).
    """

    peer: str | None = None
    dest_qp_num: int | None = None
    sq_psn: int = 0
    rq_psn: int = 0
    ev_profile: str | None = None
    cc_profile: str | None = None
    evs_per_qp: int | None = None
    max_imm_outstanding: int = DEFAULT_MAX_IMM_OUTSTANDING
    retry_cnt: int | None = None
    timeout: int = DEFAULT_ACK_TIMEOUT_EXP
    retry_linear: int | None = None
    mpr: int | None = None
    mpr_dest: int | None = None
    max_wimm_dest: int | None = None
    ep_token: int | None = None

    @property
    def ack_timeout_s(self) -> float:
        """The ack timeout in seconds."""
        return ACK_TIMEOUT_UNIT_S * (1 << self.timeout)


def check_timeout_exp(t: int) -> None:
    """Raise ValueError unless ``t`` is a valid ack timeout exponent."""
    if not 0 <= t <= ACK_TIMEOUT_MAX_EXP:
        raise ValueError(f"timeout exponent {t} outside 0..{ACK_TIMEOUT_MAX_EXP}")


def check_qp_attrs(attrs: dict[str, Any]) -> None:
    """Raise :class:`InvalidAttribute` for a QP attribute value out of range (names as
    in :class:`QPAttrs`, mrc.h aliases already mapped)."""
    for k in ("sq_psn", "rq_psn"):
        if k in attrs and not 0 <= int(attrs[k]) <= PSN_MASK:
            raise InvalidAttribute(f"{k}={attrs[k]} is not a 24-bit PSN")
    if "dest_qp_num" in attrs and not 0 < int(attrs["dest_qp_num"]) <= MAX_QPN:
        raise InvalidAttribute(f"dest_qp_num={attrs['dest_qp_num']} out of range")
    if "timeout" in attrs:
        try:
            check_timeout_exp(int(attrs["timeout"]))
        except ValueError as e:
            raise InvalidAttribute(str(e)) from None
    if attrs.get("ev_profile") not in (None, *EV_PROFILES):
        raise InvalidAttribute(f"ev_profile {attrs['ev_profile']!r} unknown")
    for k in ("retry_cnt", "max_imm_outstanding", "evs_per_qp", "max_wimm_dest",
              "retry_exp_cnt"):
        if k in attrs and int(attrs[k]) < 0:
            raise InvalidAttribute(f"{k} must not be negative")
    if "retry_linear" in attrs and not 0 <= int(attrs["retry_linear"]) <= RETRY_LINEAR_MAX:
        raise InvalidAttribute(f"retry_linear_cnt {attrs['retry_linear']} outside "
                               f"0..{RETRY_LINEAR_MAX}")
    if "retry_exp_cnt" in attrs and int(attrs["retry_exp_cnt"]) > RETRY_EXP_INFINITE:
        raise InvalidAttribute(f"retry_exp_cnt {attrs['retry_exp_cnt']} outside "
                               f"0..{RETRY_EXP_INFINITE} (25: forever)")
    if attrs.get("ep_token") is not None and not 0 <= int(attrs["ep_token"]) < 1 << 32:
        raise InvalidAttribute(f"ep_token={attrs['ep_token']} is not a 32-bit token")
    for k in ("mpr", "mpr_dest"):
        if k in attrs and not 0 < int(attrs[k]) <= 0xFF:
            raise InvalidAttribute(f"{k}={attrs[k]} must be 1..255 (units of 128 PSNs)")
