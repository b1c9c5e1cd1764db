"""Failures during a collective on a fabric: mrc-sim's grammar, applied by mrc-fabric's
controls at times relative to the first timed step, and always undone at the end.

The specs are :mod:`mrcnet.sim.failures`' (``link:L0.0-S0.1@2s:down``,
``link:A-B@1s..9s:flap=2s/2s``, ``switch:S0.1@1s:blackhole``, ``loss:L0.0-S0.1=1%``,
``loss:*=0.5%``) plus one the simulator has no use for, a host NIC port:
``port:HOST.PLANE[@START[..END]]:down`` (e.g. ``port:h0.1@2s:down``). Node names are
the fabric's. A flap here is done by this process (down, then up, at the spec's own
two durations); everything touched is cleared at the end, whatever happened.
"""

from __future__ import annotations

import heapq
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from mrcnet.coll.errors import CollError
from mrcnet.fabric.errors import FabricError
from mrcnet.fabric.fabric import Fabric
from mrcnet.sim.errors import SpecError
from mrcnet.sim.failures import Failure, parse_failure
from mrcnet.topology.units import format_time, parse_time

__all__ = ["FailureRunner", "parse_fabric_failure"]

_PORT = re.compile(r"port:(?P<host>[A-Za-z0-9]+)\.(?P<plane>\d+)"
                   r"(?:@(?P<start>[^.:]+(?:\.\d+[a-z]*)?)(?:\.\.(?P<end>[^:]+))?)?(?::down)?")


def parse_fabric_failure(text: str) -> Failure:
    """One ``--fail`` spec (mrc-sim's grammar, or ``port:HOST.PLANE...``)."""
    m = _PORT.fullmatch(text.strip())
    try:
        if m:
            start = parse_time(m.group("start")) if m.group("start") else 0.0
            end = parse_time(m.group("end")) if m.group("end") else None
            if end is not None and end <= start:
                raise SpecError(f"bad failure {text!r}: the end time must be after the start")
            return Failure("port", f"{m.group('host')}.{m.group('plane')}", start, end,
                           "down", text=text.strip())
        return parse_failure(text)
    except SpecError as e:
        raise CollError(str(e)) from None


def _all(calls: Iterable[Callable[[], object]]) -> Callable[[], None]:
    """One action doing each of ``calls`` in turn."""
    todo = list(calls)

    def run() -> None:
        for c in todo:
            c()
    return run


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    what: str = field(compare=False)
    act: Callable[[], None] = field(compare=False)
    then: Callable[[], _Due | None] | None = field(compare=False, default=None)


class FailureRunner:
    """Applies failures to a fabric on a thread; :meth:`undo` clears what they touched.

    ``events`` records what was done: ``{"t": seconds after start, "clock": monotonic,
    "what": "..."}``, for reports and plots."""

    def __init__(self, fab: Fabric, specs: list[str]) -> None:
        self.fab = fab
        self.failures = [parse_fabric_failure(s) for s in specs]
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._touched: dict[str, Callable[[], None]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seq = 0
        self._plan: list[_Due] = []
        for f in self.failures:
            try:
                self._plan += self._dues(f)
            except FabricError as e:
                raise CollError(f"--fail {f.text}: {e}") from None

    def _due(self, at: float, what: str, act: Callable[[], None],
             then: Callable[[], _Due | None] | None = None) -> _Due:
        self._seq += 1
        return _Due(at, self._seq, what, act, then)

    def _links(self, f: Failure) -> list[tuple[str, str]]:
        d = self.fab.description
        if f.target == "*":
            return [(ln.a.node, ln.b.node) for ln in d.links if ln.kind == "leaf-spine"]
        a, b = re.split("[->]", f.target)
        d.link(a, b)  # a clear error now for a link that does not exist
        return [(a, b)]

    def _dues(self, f: Failure) -> list[_Due]:
        fab, end = self.fab, f.end
        on: Callable[[], None]
        off: Callable[[], None]
        if f.kind == "port":
            host, plane = f.target.split(".")
            port = fab.port(host, int(plane))
            on, off = port.down, port.up
            self._touched[f"port {f.target}"] = port.up
        elif f.kind == "switch":
            if f.action == "blackhole":
                node = fab.node(f.target)
                on, off = node.blackhole, node.restore
                self._touched[f"switch {f.target}"] = node.restore
            else:
                ctls = [fab.link(ln.a.node, ln.b.node)
                        for ln in fab.description.links_of(f.target)]
                on, off = _all(c.down for c in ctls), _all(c.up for c in ctls)
                for c in ctls:
                    self._touched[f"link {c.link_.name}"] = c.clear
        else:
            ctls = [fab.link(a, b) for a, b in self._links(f)]
            for c in ctls:
                self._touched[f"link {c.link_.name}"] = c.clear
            both = ">" not in f.target
            if f.action == "loss":
                pct = f.value * 100
                on = _all(partial(c.loss, pct, both=both) for c in ctls)
                off = _all(partial(c.loss, 0, both=both) for c in ctls)
            elif f.action == "blackhole":
                on = _all(partial(c.blackhole, both=both) for c in ctls)
                off = _all(c.clear for c in ctls)
            elif f.action == "flap":
                return [self._flap(f, ctls[0].down, ctls[0].up, f.start, True)]
            else:
                on = _all(c.up if f.action == "up" else c.down for c in ctls)
                off = _all(c.up for c in ctls)
        label = f.describe()
        dues = [self._due(f.start, label, on)]
        if end is not None:
            dues.append(self._due(end, f"{f.kind} {f.target} restored", off))
        return dues

    def _flap(self, f: Failure, down: Callable[[], None], up: Callable[[], None],
              at: float, going_down: bool) -> _Due:
        """One edge of a flap; each schedules the next, until the spec's end."""
        if f.end is not None and at >= f.end:
            return self._due(f.end, f"link {f.target} up (flap ends)", up)
        nxt = at + (f.flap_down if going_down else f.flap_up)
        what = f"link {f.target} {'down' if going_down else 'up'} (flap)"
        return self._due(at, what, down if going_down else up,
                         lambda: self._flap(f, down, up, nxt, not going_down)
                         if not (f.end is not None and at >= f.end) else None)

    def describe(self) -> list[str]:
        """One line per failure, as given."""
        return [f"{f.text}: {f.describe()}" for f in self.failures]

    def start(self, t0: float) -> None:
        """Run the plan with ``t0`` (``time.monotonic()``) as time zero."""
        if not self._plan or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, args=(t0,), daemon=True,
                                        name="mrc-coll-failures")
        self._thread.start()

    def _run(self, t0: float) -> None:
        heap = list(self._plan)
        heapq.heapify(heap)
        while heap and not self._stop.is_set():
            due = heapq.heappop(heap)
            if self._stop.wait(max(0.0, t0 + due.at - time.monotonic())):
                return
            try:
                due.act()
                now = time.monotonic()
                self.events.append({"t": round(now - t0, 4), "clock": now, "what": due.what})
            except (FabricError, OSError) as e:
                self.errors.append(f"{due.what} at {format_time(due.at)}: {e}")
            if due.then is not None and (nxt := due.then()) is not None:
                heapq.heappush(heap, nxt)

    def undo(self) -> list[str]:
        """Stop the plan and clear everything it may have touched; what could not be
        cleared (normally nothing)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        left = []
        for what, clear in self._touched.items():
            try:
                clear()
            except (FabricError, OSError) as e:
                left.append(f"{what}: {e}")
        return left
