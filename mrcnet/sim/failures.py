"""Failure specs: what breaks, where, when, and for how long.

Grammar::

    link:A-B[@START[..END]][:down]          carrier lost both ways (frames in flight too)
    link:A-B@START:up                        carrier back (heal an earlier open-ended down)
    link:A>B[@START[..END]]:blackhole        A->B silently discards; the reverse still works
    link:A-B[@START[..END]]:blackhole        both directions discard, carrier stays up
    link:A-B@START[..END]:flap=DOWN/UP       down for DOWN, up for UP, repeated until END
    switch:NAME[@START[..END]]:blackhole     links up, nothing forwarded
    switch:NAME[@START[..END]]:down          every link of the switch loses carrier
    loss:A-B[@START[..END]]=P                random loss P (1%, 0.001) both directions
    loss:A>B[@START[..END]]=P                one direction only
    loss:*[@START[..END]]=P                  every leaf-spine link, both directions
    random:links=F[@START[..END]][:ACTION]   a fraction F (1%) or a number N of the
                                             leaf-spine links, drawn from the run's seed,
                                             down (default) or blackhole
    random:spines=F[@..][:ACTION]            the same for spines (leaves: random:leaves=F)

Times take s/ms/us/ns; no ``@`` means from 0; no ``..END`` means for good.
Nodes: hosts ``h<i>``, leaves ``L<plane>.<i>``, spines ``S<plane>.<i>``. Examples:
``link:L0.1-S0.3@0.5ms:down``, ``switch:S1.2@1ms:blackhole``, ``loss:*=0.1%``,
``link:L0.0-S0.2@1ms..3ms:flap=50us/200us``, ``random:links=1%@0..5ms``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from mrcnet.sim.errors import SpecError
from mrcnet.sim.net import EgressPort
from mrcnet.sim.topology import Fabric
from mrcnet.topology.units import format_time, parse_fraction, parse_time

FAIL_HELP = __doc__.split("Grammar::", 1)[1] if __doc__ else ""

_LINK_ACTIONS = ("down", "up", "blackhole", "flap")
_SWITCH_ACTIONS = ("down", "blackhole")
_WHEN = r"(?:@(?P<start>[^.:=]+(?:\.\d+[a-z]*)?)(?:\.\.(?P<end>[^:=]+))?)?"


@dataclass(frozen=True)
class Failure:
    """One parsed failure, ready to be scheduled on a fabric."""

    kind: str  #: "link", "switch" or "loss"
    target: str  #: "A-B", "A>B", switch name, or "*"
    start: float
    end: float | None  #: None = never heals by itself
    action: str  #: down / up / blackhole / flap / loss
    value: float = 0.0  #: loss probability
    flap_down: float = 0.0
    flap_up: float = 0.0
    text: str = ""
    count: int = 0  #: random: this many targets (0: the fraction ``value`` of them)

    def describe(self) -> str:
        """Human summary, e.g. ``L0.1-S0.3 down at 500.000us``."""
        when = f"at {format_time(self.start)}"
        if self.end is not None:
            when = f"from {format_time(self.start)} to {format_time(self.end)}"
        what = self.action
        if self.action == "loss":
            what = f"loss {self.value:.4%}"
        elif self.action == "flap":
            what = f"flap {format_time(self.flap_down)} down / {format_time(self.flap_up)} up"
        return f"{self.kind} {self.target} {what} {when}"


def parse_failure(text: str) -> Failure:
    """Parse one ``--fail`` spec (see the module docstring for the grammar)."""
    t = text.strip()
    kind, sep, rest = t.partition(":")
    if not sep or kind not in ("link", "switch", "loss", "random"):
        raise SpecError(
            f"bad failure {text!r}: starts with link:, switch:, loss: or random: "
            "(e.g. link:L0.1-S0.3@0.5ms:down, switch:S1.2@1ms:blackhole, loss:*=1%, "
            "random:links=1%@1ms)"
        )
    if kind == "random":
        return _parse_random(rest, text)
    if kind == "loss":
        m = re.fullmatch(r"(?P<target>[^@=]+)" + _WHEN + r"=(?P<value>.+)", rest)
        if not m:
            raise SpecError(f"bad failure {text!r}: expected loss:A-B[@START[..END]]=P")
        start, end = _times(m.group("start"), m.group("end"), text)
        return Failure("loss", _target(m.group("target"), text, star=True), start, end,
                       "loss", value=parse_fraction(m.group("value")), text=t)
    m = re.fullmatch(r"(?P<target>[^@:]+)" + _WHEN + r"(?::(?P<action>.+))?", rest)
    if not m:
        raise SpecError(f"bad failure {text!r}: expected {kind}:TARGET[@START[..END]][:ACTION]")
    start, end = _times(m.group("start"), m.group("end"), text)
    action, _, arg = (m.group("action") or "down").partition("=")
    if kind == "switch":
        name = m.group("target").strip()
        if action not in _SWITCH_ACTIONS or arg:
            raise SpecError(f"bad failure {text!r}: a switch can be down or blackhole")
        return Failure("switch", name, start, end, action, text=t)
    target = _target(m.group("target"), text, star=False)
    if action not in _LINK_ACTIONS:
        raise SpecError(f"bad failure {text!r}: a link action is one of {', '.join(_LINK_ACTIONS)}")
    if ">" in target and action != "blackhole":
        raise SpecError(f"bad failure {text!r}: only a blackhole is one-way (A>B); use A-B")
    if action == "up" and end is not None:
        raise SpecError(f"bad failure {text!r}: 'up' happens at one time (no ..END)")
    if action == "flap":
        down_s, slash, up_s = arg.partition("/")
        if not slash:
            raise SpecError(f"bad failure {text!r}: flap=DOWN/UP, e.g. flap=50us/200us")
        fd, fu = parse_time(down_s), parse_time(up_s)
        if fd <= 0 or fu <= 0:
            raise SpecError(f"bad failure {text!r}: flap times must be positive")
        return Failure("link", target, start, end, "flap", flap_down=fd, flap_up=fu, text=t)
    if arg:
        raise SpecError(f"bad failure {text!r}: {action} takes no value")
    return Failure("link", target, start, end, action, text=t)


_RANDOM_TARGETS = ("links", "spines", "leaves")


def _parse_random(rest: str, text: str) -> Failure:
    m = re.fullmatch(r"(?P<target>[a-z]+)=(?P<value>[^@:]+)" + _WHEN
                     + r"(?::(?P<action>[a-z]+))?", rest.strip())
    if not m or m.group("target") not in _RANDOM_TARGETS:
        raise SpecError(f"bad failure {text!r}: expected random:links=1%[@START[..END]]"
                        f"[:down|blackhole] (targets: {', '.join(_RANDOM_TARGETS)})")
    action = m.group("action") or "down"
    if action not in _SWITCH_ACTIONS:
        raise SpecError(f"bad failure {text!r}: random failures are down or blackhole")
    start, end = _times(m.group("start"), m.group("end"), text)
    raw = m.group("value").strip()
    count, value = (int(raw), 0.0) if raw.isdigit() else (0, parse_fraction(raw))
    if count == 0 and value == 0.0:
        raise SpecError(f"bad failure {text!r}: fail at least one (1, 1%, 0.01)")
    return Failure("random", m.group("target"), start, end, action, value=value,
                   count=count, text=text.strip())


def expand_failure(fabric: Fabric, f: Failure, seed: int) -> list[Failure]:
    """``f`` itself, or for a ``random:`` failure the link and switch failures it draws:
    ``count`` targets (or the fraction ``value`` of them, at least one) picked from
    ``seed`` and the spec's text (the same run picks the same ones; the simulator's own
    random stream is left as it was)."""
    if f.kind != "random":
        return [f]
    if f.target == "links":
        pool = sorted(ln.name for ln in fabric.links.values() if ln.kind == "leaf-spine")
    else:
        role = "spine" if f.target == "spines" else "leaf"
        pool = sorted(s.name for s in fabric.switches() if s.role == role)
    n = f.count or max(1, round(f.value * len(pool)))
    if n > len(pool):
        raise SpecError(f"bad failure {f.text!r}: {n} {f.target} asked, the fabric has "
                        f"{len(pool)}")
    picked = random.Random(f"{seed}|{f.text}").sample(pool, n)
    kind = "link" if f.target == "links" else "switch"
    return [Failure(kind, name, f.start, f.end, f.action, text=f"{f.text} -> {name}")
            for name in sorted(picked)]


def _times(start: str | None, end: str | None, text: str) -> tuple[float, float | None]:
    s = parse_time(start) if start else 0.0
    e = parse_time(end) if end else None
    if e is not None and e <= s:
        raise SpecError(f"bad failure {text!r}: the end time must be after the start")
    return s, e


def _target(raw: str, text: str, *, star: bool) -> str:
    t = raw.strip()
    if star and t == "*":
        return t
    if re.fullmatch(r"[A-Za-z0-9.]+[->][A-Za-z0-9.]+", t):
        return t
    raise SpecError(f"bad failure {text!r}: a link is A-B (both ways) or A>B (one way), "
                    "e.g. L0.1-S0.3, h2-L1.1, L0.1>S0.3")


def _ports(fabric: Fabric, target: str) -> list[EgressPort]:
    if target == "*":
        return [p for ln in fabric.links.values() if ln.kind == "leaf-spine"
                for p in (ln.ab, ln.ba)]
    if ">" in target:
        a, b = target.split(">")
        return [fabric.link(a, b).direction(a)]
    a, b = target.split("-")
    ln = fabric.link(a, b)
    return [ln.ab, ln.ba]


def schedule_failure(fabric: Fabric, f: Failure) -> None:
    """Resolve ``f`` against ``fabric`` (raises SpecError for unknown nodes) and put its
    state changes on the simulator's clock."""
    sim = fabric.sim
    on: Callable[[], None]
    off: Callable[[], None]
    if f.kind == "switch":
        sw = fabric.switch(f.target)
        if f.action == "blackhole":
            def on() -> None:
                sw.blackhole = True

            def off() -> None:
                sw.blackhole = False
        else:
            links = [ln for ln in fabric.links.values() if sw.name in (ln.a, ln.b)]

            def on() -> None:
                for ln in links:
                    ln.set_up(False)

            def off() -> None:
                for ln in links:
                    ln.set_up(True)
    elif f.action == "loss":
        ports = _ports(fabric, f.target)

        def on() -> None:
            for p in ports:
                p.loss = f.value

        def off() -> None:
            for p in ports:
                p.loss = 0.0
    elif f.action == "blackhole":
        ports = _ports(fabric, f.target)

        def on() -> None:
            for p in ports:
                p.blackhole = True

        def off() -> None:
            for p in ports:
                p.blackhole = False
    else:
        a, b = f.target.split("-")
        link = fabric.link(a, b)

        def on() -> None:
            link.set_up(f.action == "up")

        def off() -> None:
            link.set_up(True)

        if f.action == "flap":
            _schedule_flap(fabric, f, link.set_up)
            return
    sim.at(f.start, lambda _: on())
    if f.end is not None:
        sim.at(f.end, lambda _: off())


def _schedule_flap(fabric: Fabric, f: Failure, set_up: Callable[[bool], None]) -> None:
    """Down/up cycles from ``start``; each cycle schedules the next, so an open-ended flap
    costs two events per period, not an infinite list."""
    sim = fabric.sim

    def down(_: object) -> None:
        if f.end is not None and sim.now >= f.end:
            set_up(True)
            return
        set_up(False)
        up_at = sim.now + f.flap_down
        if f.end is not None and up_at >= f.end:
            sim.at(f.end, lambda _: set_up(True))
            return
        sim.at(up_at, up)

    def up(_: object) -> None:
        set_up(True)
        sim.at(sim.now + f.flap_up, down)

    sim.at(f.start, down)
