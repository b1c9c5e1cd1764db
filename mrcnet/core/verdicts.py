"""Shared path verdicts: what one QP learns about a route, every QP of the host knows.

EVs, their states and their probes are per QP (:mod:`mrcnet.core.evs`), but the physical
route behind an EV is not: every QP of a host going to any host behind the same
destination leaf crosses the same links up to that leaf (for a two-tier leaf-spine: this
host's leaf, the spine, the destination leaf), in the same plane. An all-to-all gives each
of thousands of QPs a few packets per step, so with per-QP verdicts QP after QP pays a loss
and its detection on a link that another QP of the same host already found dead.

:class:`PathVerdicts` is the host's table. A route's *fate key* is its plane and its hops
but the last (:func:`route_fate`: the uSIDs, or SRH segments, without the destination
host's own). Each QP's EV manager gets a :class:`VerdictView` (its path index -> fate key
per plane). When a QP retires a path for loss or a timeout (causes ``loss``, ``timeout``:
not the receiver's ALWAYS_SKIP, which is about that QP, nor ``shared`` itself), the view
reports it: the key is marked failing and every other QP whose path has that key
retires it at once (cause ``shared``: probed like any other retired path). A QP that
connects later retires such paths when it attaches. When a path's probes revive it in one
QP, the key is cleared and every QP revives it (cause ``shared``). No I/O, no clock of its
own: every call carries ``now``.

A route without hops to strip (plain IPv6, a one-uSID container) keys on the peer itself,
so only the QPs to that peer share it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mrcnet.wire.frame import Route
from mrcnet.wire.usid import usid_block, usid_list

if TYPE_CHECKING:
    from mrcnet.core.evs import EVManager

__all__ = ["PathVerdicts", "VerdictView", "route_fate"]


FateKey = tuple[int, object]  # (plane, the route's hops but the last)


def route_fate(route: Route, peer: str) -> object:
    """The part of ``route`` that QPs to other hosts behind the same leaf share: its hops
    without the destination host's (for a uSID route ``block, src leaf, spine, dst
    leaf``). A route with one hop or none is the peer's alone: ``peer`` keys it."""
    if route.usid is not None:
        hops = usid_list(route.usid)
        if route.usid_srh is not None:
            hops += usid_list(route.usid_srh)
        if len(hops) > 1:
            return (usid_block(route.usid), tuple(hops[:-1]))
    elif route.segments is not None and len(route.segments) > 1:
        return tuple(route.segments[:-1])
    return ("peer", peer)


class VerdictView:
    """One QP's view of the host's verdicts: its routes per plane (path index order), and
    their fate keys, worked out the first time a verdict needs them.

    (Lazily: a table of every path's key per QP, and the host's index from key to
    members, took 155 MB of the 480 MB the simulator allocates at 1024 hosts, and 3 GB
    at 8192, most of it for hosts that never see a failure.)"""

    __slots__ = ("_fates", "evm", "peer", "qpn", "routes", "table")

    def __init__(self, table: PathVerdicts, qpn: int, evm: EVManager, peer: str,
                 routes: dict[int, list[Route]]) -> None:
        self.table = table
        self.qpn = qpn
        self.evm = evm
        self.peer = peer
        self.routes = routes  # plane -> routes by path index
        self._fates: dict[int, list[FateKey]] = {}  # plane -> fate key by path index

    def fates(self, plane: int) -> list[FateKey]:
        """The fate key of each of ``plane``'s paths, by path index."""
        ks = self._fates.get(plane)
        if ks is None:
            peer = self.peer
            ks = self._fates[plane] = [(plane, route_fate(r, peer))
                                       for r in self.routes.get(plane, ())]
        return ks

    def key(self, plane: int, path: int) -> FateKey | None:
        """The fate key of (plane, path), None for a path the QP has not."""
        ks = self.fates(plane)
        return ks[path] if 0 <= path < len(ks) else None

    def bad_paths(self, plane: int) -> set[int]:
        """Path indexes of ``plane`` the host holds failing (the refill avoids them)."""
        bad = self.table.bad
        if not bad:
            return set()
        return {path for path, key in enumerate(self.fates(plane)) if key in bad}

    def failing_since(self) -> float:
        """When the host last learnt of a route failing (this QP's or another's) among
        those it holds failing; -1 when it holds none."""
        bad = self.table.bad
        return max(bad.values()) if bad else -1.0

    def failed(self, plane: int, path: int, now: float) -> None:
        """This QP retired (plane, path) for loss or a timeout: tell the others."""
        key = self.key(plane, path)
        if key is not None:
            self.table.failed(key, self, now)

    def revived(self, plane: int, path: int, now: float) -> None:
        """This QP's probes revived (plane, path): tell the others."""
        key = self.key(plane, path)
        if key is not None:
            self.table.revived(key, self, now)

    def last_with(self, key: FateKey) -> tuple[int, int] | None:
        """The (plane, path) with fate ``key``, the last in plane and path order when
        several have it; None when none has."""
        found = None
        for plane in self.routes:
            for path, k in enumerate(self.fates(plane)):
                if k == key:
                    found = (plane, path)
        return found


def _uplink(key: FateKey) -> tuple[int, object, tuple[int, ...]] | None:
    """A uSID fate key's plane, block and hops without the last (the destination leaf):
    the links from this host's leaf up to the spine; None for another kind of key."""
    plane, fate = key
    if (isinstance(fate, tuple) and len(fate) == 2 and isinstance(fate[1], tuple)
            and len(fate[1]) >= 3):
        return plane, fate[0], fate[1][:-1]
    return None


class PathVerdicts:
    """A host's shared path verdicts (see the module docstring).

    ``uplink`` (``HostConfig.verdict_uplink``; 0: off): once routes to this many
    destination leaves through one leaf-to-spine hop of a plane are held failing, every
    route through that hop is (what fails them all is the hop: a link down between
    this host's leaf and the spine). Without it a QP learns such a route failing only
    from a loss on a route to its own destination leaf, which a sprayed all-to-all
    sends few packets on (docs/COLLECTIVES.md, "session 14")."""

    def __init__(self, uplink: int = 0) -> None:
        self.uplink = uplink
        self.bad: dict[FateKey, float] = {}  #: failing fate key -> when it was reported
        self._views: dict[int, VerdictView] = {}
        self.shared = 0  #: paths retired in other QPs by a shared verdict
        self.revived_shared = 0  #: paths revived in other QPs by a shared revival

    def attach(self, qpn: int, evm: EVManager, peer: str,
               routes: dict[int, list[Route]], now: float) -> None:
        """QP ``qpn`` (EV manager ``evm``) goes to ``peer`` over ``routes`` (per plane,
        in path index order): share its verdicts, and retire at once its paths the host
        already holds failing. Replaces the QP's earlier view."""
        self.detach(qpn)
        if evm.ecmp:
            return  # one EV by hash that never retires: nothing to share
        view = VerdictView(self, qpn, evm, peer, routes)
        self._views[qpn] = view
        evm.verdicts = view
        if self.bad:
            for plane in routes:
                for path, key in enumerate(view.fates(plane)):
                    if key in self.bad:
                        evm.retire_path(plane, path, now, "shared")

    def detach(self, qpn: int) -> None:
        """Forget QP ``qpn`` (destroyed, reset or given a new EV set)."""
        view = self._views.pop(qpn, None)
        if view is not None:
            view.evm.verdicts = None

    def _others(self, key: FateKey, by: VerdictView) -> list[tuple[VerdictView, int, int]]:
        """Every other QP with a path of fate ``key`` (its last such path), in the order
        the QPs attached. Verdicts are rare: a walk over the views, not an index."""
        out = []
        for qpn, view in self._views.items():
            if qpn != by.qpn:
                at = view.last_with(key)
                if at is not None:
                    out.append((view, *at))
        return out

    def failed(self, key: FateKey, by: VerdictView, now: float) -> None:
        """``by`` retired a path with fate ``key``: every other member retires it."""
        if key in self.bad:
            return
        self.bad[key] = now
        for view, plane, path in self._others(key, by):
            if view.evm.retire_path(plane, path, now, "shared"):
                self.shared += 1
        if self.uplink:
            self._failed_uplink(key, now)

    def _failed_uplink(self, key: FateKey, now: float) -> None:
        """``uplink``: if ``key``'s leaf-to-spine hop now has routes to ``uplink``
        destination leaves failing, hold every route through it failing, and every QP
        with one retires it (cause ``shared``)."""
        up = _uplink(key)
        if up is None or sum(1 for k in self.bad if _uplink(k) == up) < self.uplink:
            return
        plane, views = up[0], list(self._views.values())
        new = {k for view in views for k in view.fates(plane)
               if k not in self.bad and _uplink(k) == up}
        for k in new:
            self.bad[k] = now
        for view in views:
            for path, k in enumerate(view.fates(plane)):
                if k in new and view.evm.retire_path(plane, path, now, "shared"):
                    self.shared += 1

    def revived(self, key: FateKey, by: VerdictView, now: float) -> None:
        """``by``'s probes revived a path with fate ``key``: every member revives it."""
        if self.bad.pop(key, None) is None:
            return
        for view, plane, path in self._others(key, by):
            if view.evm.revive_path(plane, path, now):
                self.revived_shared += 1
