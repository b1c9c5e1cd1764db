"""Congestion control: a small pluggable interface, a registry by profile name, and NSCC.

Like aioquic's congestion package: :func:`register_cc` binds a profile name to a class,
:func:`create_cc` makes one per QP. The QP calls the hooks and obeys ``cwnd`` (bytes in
flight). NSCC follows PROTOCOL-NOTES.md section 5 (Ultra Ethernet's NSCC as MRC uses it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Final

from mrcnet import native

# --- NSCC parameters (fractions of the measured base RTT / BDP; see docs/CORE.md) -------
NSCC_TARGET_FRACTION: Final = 0.5  # target queueing delay = this x base RTT
NSCC_TARGET_FLOOR: Final = 1e-6  # never target less than 1 us of queueing
NSCC_MAX_BDP: Final = 1.5  # max window = 1.5 x BDP
NSCC_ALPHA: Final = 0.5  # proportional increase per acked byte at zero queueing
NSCC_FI_BDP: Final = 0.01  # fair increase per RTT: 1% of BDP (at least one MTU)
NSCC_GAMMA: Final = 0.8  # multiplicative decrease gain
NSCC_MD_MIN: Final = 0.5  # never cut below half in one decrease
NSCC_QA_DELAY: Final = 4.0  # quick adapt when queueing delay > 4 x target ...
# ... in two RTT samples in a row (NSCC.delay_prev: a queue delays every packet; one late
# SACK, held by the receiver's ACK coalescing behind a loss or a reordered sibling, is one
# sample)
PENALTY_SCALE: Final = 254.0  # window penalty p (0..127) shrinks cwnd by p/254 (<= 50%)


class CongestionControl:
    """Interface every CC profile implements. ``cwnd`` is in bytes."""

    cwnd: float

    def __init__(self, mss: int, rate: float, base_rtt_hint: float, *,
                 target_floor: float = 0.0, rtt_floor: float = 0.0,
                 delay_filter: float = 0.0) -> None:
        self.mss = mss
        self.rate = rate
        self.target_floor = target_floor
        self.rtt_floor = rtt_floor
        self.delay_filter = delay_filter
        self.cwnd = float(max(mss, rate * max(base_rtt_hint, rtt_floor)))

    def on_ack(self, acked: int, rtt: float | None, ece: bool, now: float) -> None:
        """``acked`` bytes newly acknowledged; ``rtt`` a fresh sample if the ACK gave one;
        ``ece``: the packet that triggered the ACK was CE-marked."""

    def on_trim(self, now: float, lasthop: bool) -> None:
        """A packet was trimmed (congestion)."""

    def on_loss(self, now: float) -> None:
        """A packet was lost (path failure or overflow)."""

    def on_penalty(self, penalty: int, now: float) -> None:
        """The receiver asked for a smaller window (0..127)."""


CC_REGISTRY: dict[str, type[CongestionControl]] = {}


def register_cc(name: str) -> Callable[[type[CongestionControl]], type[CongestionControl]]:
    """Class decorator: make a CC class available under profile ``name``."""

    def deco(cls: type[CongestionControl]) -> type[CongestionControl]:
        CC_REGISTRY[name] = cls
        return cls

    return deco


def create_cc(name: str, mss: int, rate: float, base_rtt_hint: float, *,
              target_floor: float = 0.0, rtt_floor: float = 0.0,
              delay_filter: float = 0.0) -> CongestionControl:
    """A new CC instance for profile ``name``; unknown names raise ``KeyError`` with the list.
    The keywords: see ``HostConfig.cc_target_floor``/``cc_rtt_floor``/``cc_delay_filter``."""
    try:
        cls = CC_REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown CC profile {name!r}; known: {sorted(CC_REGISTRY)}") from None
    if cls is NSCC and native.HAVE_C:
        cls = CNSCC  # the same NSCC, its per-ACK update in C
    return cls(mss, rate, base_rtt_hint, target_floor=target_floor, rtt_floor=rtt_floor,
               delay_filter=delay_filter)


@register_cc("fixed")
class FixedWindow(CongestionControl):
    """A constant window of one BDP (for tests and baselines): no reaction at all."""


@register_cc("nscc")
class NSCC(CongestionControl):
    """UET's NSCC as MRC uses it: four quadrants of (ECN?) x (delay above target?).

    - no ECN, low delay: proportional increase ``alpha x acked x (target - d) / target``
    - no ECN, high delay: fair increase ``fi x acked / cwnd`` (fi bytes per RTT)
    - ECN, high delay: multiplicative decrease, at most once per base RTT
    - ECN, low delay: no change
    - quick adapt on trim/loss or d > 4 x target in two samples in a row: cwnd = bytes
      delivered in the last RTT, at most once per base RTT.
    ``d`` is the queueing delay (RTT sample minus the smallest RTT seen). Every parameter
    scales with the measured BDP (rate x base RTT), rescaled when the base RTT drops.
    """

    def __init__(self, mss: int, rate: float, base_rtt_hint: float, *,
                 target_floor: float = 0.0, rtt_floor: float = 0.0,
                 delay_filter: float = 0.0) -> None:
        super().__init__(mss, rate, base_rtt_hint, target_floor=target_floor,
                         rtt_floor=rtt_floor, delay_filter=delay_filter)
        self.base_rtt = 0.0  # 0: no sample yet
        self.delay = 0.0
        # the sample before's queueing delay: quick adapt on delay wants both over (a
        # queue persists; one SACK the receiver held ack_delay reads as a queue alone)
        self.delay_prev = 0.0
        self.srtt = 0.0
        self._rescale(base_rtt_hint)
        self.cwnd = self.bdp
        self.last_md = -1.0
        self.last_qa = -1.0
        self.qa_pending = False
        # (time, RTT) samples, increasing RTTs: a sliding-window minimum
        self._standing: deque[tuple[float, float]] = deque()
        self._delivered: deque[tuple[float, int]] = deque()
        self._delivered_sum = 0
        self.quadrant = ""  # last quadrant applied, for tests and stats

    def _rescale(self, base_rtt: float) -> None:
        # The floors stand for the endpoint: its scheduling delay is part of every RTT
        # the window has to cover, and part of every delay sample without being a queue.
        eff = max(base_rtt, self.rtt_floor)
        self.scale_rtt = eff
        self.bdp = max(float(self.mss), self.rate * eff)
        self.maxwnd = NSCC_MAX_BDP * self.bdp
        self.target = max(NSCC_TARGET_FLOOR, self.target_floor, NSCC_TARGET_FRACTION * base_rtt)
        self.fi = max(float(self.mss), NSCC_FI_BDP * self.bdp)

    def _clamp(self) -> None:
        self.cwnd = min(max(self.cwnd, float(self.mss)), self.maxwnd)

    def _window_rtt(self) -> float:
        return max(self.base_rtt, self.rtt_floor) if self.base_rtt else self.scale_rtt

    def _delivery_rtt(self) -> float:
        # "What was delivered in the last RTT" must use the RTT packets see now (queueing
        # included): over the base RTT alone a jittery path looks like a collapse.
        return max(self.srtt, self._window_rtt())

    def on_ack(self, acked: int, rtt: float | None, ece: bool, now: float) -> None:
        """Apply one ACK (see class docstring)."""
        if acked:
            dq = self._delivered
            dq.append((now, acked))
            self._delivered_sum += acked
            horizon = now - self._delivery_rtt()
            while dq and dq[0][0] < horizon:
                self._delivered_sum -= dq.popleft()[1]
        if rtt is not None and rtt > 0:
            if self.base_rtt == 0.0 or rtt < self.base_rtt:
                self.base_rtt = rtt
                self._rescale(rtt)
            self.srtt = rtt if self.srtt == 0.0 else self.srtt + 0.125 * (rtt - self.srtt)
            self.delay_prev = self.delay
            if self.delay_filter > 0:
                # Queueing delay from the *standing* RTT: the smallest sample of the last
                # delay_filter x srtt (Copa's filter, 0.5). A queue delays every packet,
                # so it shows in the minimum; endpoint scheduling jitter delays some and
                # not others, so the minimum drops it (mrcd's loop: up to 2 ms late).
                st = self._standing
                while st and st[-1][1] >= rtt:
                    st.pop()
                st.append((now, rtt))
                horizon = now - self.delay_filter * self.srtt
                while st[0][0] < horizon:
                    st.popleft()
                self.delay = st[0][1] - self.base_rtt
            else:
                self.delay = rtt - self.base_rtt
        d, target = self.delay, self.target
        if ((self.qa_pending or min(d, self.delay_prev) > NSCC_QA_DELAY * target)
                and self._quick_adapt(now)):
            return
        if not ece:
            if d < target:
                self.quadrant = "proportional_increase"
                self.cwnd += NSCC_ALPHA * acked * (target - d) / target
            else:
                self.quadrant = "fair_increase"
                self.cwnd += self.fi * acked / self.cwnd
        elif d >= target:
            self.quadrant = "multiplicative_decrease"
            # At most once per base RTT, and only on feedback from a packet sent after
            # the last cut (UET's "bytes to ignore"): ACKs of packets sent before it still
            # carry the old queue's delay, and cutting on them overshoots (measured in the
            # simulator: three halvings in a row, the window down to a fifth).
            sent = now - rtt if rtt is not None else now - self._delivery_rtt()
            if self.last_md < 0 or (sent >= self.last_md
                                    and now - self.last_md >= self._window_rtt()):
                self.last_md = now
                self.cwnd *= max(1.0 - NSCC_GAMMA * (d - target) / d, NSCC_MD_MIN)
        else:
            self.quadrant = "no_change"
        self._clamp()

    def _quick_adapt(self, now: float) -> bool:
        if self.last_qa >= 0 and now - self.last_qa < self._window_rtt():
            self.qa_pending = False
            return False
        self.last_qa = now
        self.qa_pending = False
        self.quadrant = "quick_adapt"
        self.cwnd = max(float(self.mss), float(self._delivered_sum))
        self._clamp()
        return True

    def on_trim(self, now: float, lasthop: bool) -> None:
        """Trims ask for quick adapt at the next ACK (then we know what got through)."""
        self.qa_pending = True

    def on_loss(self, now: float) -> None:
        """Losses, like trims, ask for quick adapt."""
        self.qa_pending = True

    def on_penalty(self, penalty: int, now: float) -> None:
        """Receiver window penalty: shrink by penalty/254, at most once per base RTT."""
        if penalty <= 0 or (self.last_md >= 0 and now - self.last_md < self._window_rtt()):
            return
        self.last_md = now
        self.cwnd *= 1.0 - penalty / PENALTY_SCALE
        self._clamp()


#: CNSCC.quadrant's values, by cc.h's MRC_NSCC_* number.
_QUADRANTS: Final = ("", "proportional_increase", "fair_increase", "multiplicative_decrease",
                     "no_change", "quick_adapt")


def _c_field(name: str, kind: type = float) -> Any:
    """A CNSCC attribute that is field ``name`` of its ``struct mrc_nscc``."""
    return native.c_field(name, kind, "_c")


class CNSCC(NSCC):
    """:class:`NSCC` with its state and its per-ACK update in C (``mrcnet/_csrc/cc.c``):
    the same arithmetic, operation for operation, so the same windows to the last bit
    (``tests/core/test_nscc.py`` compares the two). :func:`create_cc` gives it for
    ``"nscc"`` when the C fast path is built."""

    def __init__(self, mss: int, rate: float, base_rtt_hint: float, *,
                 target_floor: float = 0.0, rtt_floor: float = 0.0,
                 delay_filter: float = 0.0) -> None:
        c = native.C.mrc_nscc_new(mss, rate, base_rtt_hint, target_floor, rtt_floor,
                                     delay_filter)
        if c == native.ffi.NULL:
            raise MemoryError("NSCC state")
        self._c = native.ffi.gc(c, native.C.mrc_nscc_free)
        self._on_ack = native.C.mrc_nscc_on_ack
        self._penalty = native.C.mrc_nscc_on_penalty
        self.mss, self.rate = mss, rate

    cwnd = _c_field("cwnd")  # type: ignore[assignment]
    target_floor = _c_field("target_floor")
    rtt_floor = _c_field("rtt_floor")
    delay_filter = _c_field("delay_filter")
    base_rtt = _c_field("base_rtt")
    delay = _c_field("delay")
    delay_prev = _c_field("delay_prev")
    srtt = _c_field("srtt")
    scale_rtt = _c_field("scale_rtt")
    bdp = _c_field("bdp")
    maxwnd = _c_field("maxwnd")
    target = _c_field("target")
    fi = _c_field("fi")
    last_md = _c_field("last_md")
    last_qa = _c_field("last_qa")
    qa_pending = _c_field("qa_pending", bool)

    @property
    def quadrant(self) -> str:
        """The quadrant the last ACK applied (NSCC's names)."""
        return _QUADRANTS[self._c.quadrant]

    @quadrant.setter
    def quadrant(self, name: str) -> None:
        self._c.quadrant = _QUADRANTS.index(name)

    def on_ack(self, acked: int, rtt: float | None, ece: bool, now: float) -> None:
        """Apply one ACK (NSCC.on_ack)."""
        if self._on_ack(self._c, acked, 0.0 if rtt is None else rtt, rtt is not None, ece,
                        now):
            raise MemoryError("NSCC state")

    def on_trim(self, now: float, lasthop: bool) -> None:
        """Trims ask for quick adapt at the next ACK."""
        self._c.qa_pending = 1

    def on_loss(self, now: float) -> None:
        """Losses, like trims, ask for quick adapt."""
        self._c.qa_pending = 1

    def on_penalty(self, penalty: int, now: float) -> None:
        """Receiver window penalty (NSCC.on_penalty)."""
        self._penalty(self._c, penalty, now)
