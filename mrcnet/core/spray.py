"""Spraying: which EV each packet of a QP leaves on.

A different EV per packet: round robin over the usable planes, then over the plane's
paths that have an active EV, then over that path's EVs (so a plane's live paths share
its load equally, however many EVs each holds after refills). :class:`Spray` keeps that
rotation for one QP: the rings (per plane, its active EVs grouped by path, built when
first needed after a change), the counters (one over the planes, one per plane over its
paths, one per path over its EVs) and a version that moves whenever the set or a state
changes. :meth:`Spray.next` is one packet's choice, SKIP EVs and an EV to avoid
included; :meth:`Spray.take` is its first try for a whole run of packets (no SKIP EV
met, no EV to avoid), the plain rotation of the counters.

:class:`CSpray` is the same with ``take`` in one C call (``mrcnet/_csrc/spray.c``): the
rings are laid out in C (again when the version moves), the counters are handed to C at
its first run and stay there while runs follow runs (they come back to Python only for
``next``, a new layout or a reader), and the packets given to each EV are added to its
``sent`` when they are read (:meth:`Spray.fold_sent`, which brings the counters back
too). ``tests/core/test_spray.py`` compares the two, and both with ``next``.
:class:`mrcnet.core.evs.EVManager` keeps the EVs and their states and holds one spray
(:func:`new_spray`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Any, Generic, Protocol, TypeVar

from mrcnet.constants import EV_PATH_SHIFT
from mrcnet.core.states import EVState
from mrcnet.native import HAVE_C, NOT_BUILT, C, ffi

__all__ = ["CSpray", "PathSlots", "Spray", "SprayEV", "new_spray"]

_SKIP = EVState.SKIP  # (a global load instead of an attribute lookup per packet)


class SprayEV(Protocol):
    """What the rotation reads (and counts) of an EV (:class:`mrcnet.core.evs.EVInfo`)."""

    ev: int
    path: int
    state: EVState
    sent: int
    skip_plane: bool


E = TypeVar("E", bound=SprayEV)


class Spray(Generic[E]):
    """One QP's EV rotation in Python (the module docstring says what it does).

    ``active``: the EV manager's active EVs per plane (read when a ring is built);
    ``skip_done``: called with a SKIP EV the rotation passes over (which turns it GOOD).
    The manager calls :meth:`drop` when a plane's active EVs change and :meth:`changed`
    when a state or the usable planes do."""

    __slots__ = ("active", "inst_rr", "rings", "rr", "rr_plane", "skip_done", "ver")

    def __init__(self, active: Mapping[int, Sequence[E]],
                 skip_done: Callable[[E], None]) -> None:
        self.active = active
        self.skip_done = skip_done
        self.rr_plane = 0
        self.rr: dict[int, int] = {p: 0 for p in active}  # per plane, over its paths
        self.inst_rr: dict[int, int] = {}  # per path key (EV >> EV_PATH_SHIFT), its EVs
        self.rings: dict[int, list[list[E]]] = {}
        self.ver = 0

    def ring(self, plane: int) -> list[list[E]]:
        """``plane``'s active EVs grouped by path, in path order (built if missing)."""
        ring = self.rings.get(plane)
        if ring is None:
            by: dict[int, list[E]] = {}
            for info in self.active[plane]:
                by.setdefault(info.path, []).append(info)
            ring = self.rings[plane] = [by[p] for p in sorted(by)]
        return ring

    def drop(self, plane: int) -> None:
        """``plane``'s active EVs changed: its ring is built again when next needed."""
        self.rings.pop(plane, None)
        self.ver += 1

    def changed(self) -> None:
        """A state or the usable planes changed."""
        self.ver += 1

    def next(self, planes: Sequence[int], avoid_path: int) -> E | None:
        """The EV for the next packet over ``planes`` (the usable ones), avoiding path
        key ``avoid_path`` (-1: none) if any other is usable; None when no EV is usable
        at all (the caller then falls back). A SKIP EV is passed over once (its plane's
        turn going to the next plane when it was skipped after an ECN echo and another
        plane is left): :meth:`mrcnet.core.evs.EVManager.next_ev` says why."""
        n = len(planes)
        fallback: E | None = None
        handed = False  # a skipped plane handed this packet on
        rings, inst_rr, rr = self.rings, self.inst_rr, self.rr  # (runs per packet)
        for k in range(n):
            plane = planes[self.rr_plane % n]
            self.rr_plane += 1
            ring = rings.get(plane)
            if ring is None:
                ring = self.ring(plane)
            m = len(ring)
            if not m:
                continue
            last_plane = k == n - 1  # no other plane left to hand a skipped slot to
            i = rr[plane]
            for _ in range(m):
                lst = ring[i % m]
                i += 1
                key = lst[0].ev >> EV_PATH_SHIFT  # the path (plane and path index)
                c = inst_rr.get(key, 0)
                inst_rr[key] = c + 1
                info = lst[c % len(lst)]
                if info.state is _SKIP:
                    self.skip_done(info)
                    fallback = fallback or info
                    if info.skip_plane and not last_plane:
                        handed = True
                        break  # this plane's turn goes to the next plane
                    continue
                if key == avoid_path:
                    fallback = fallback or info
                    continue
                rr[plane] = i
                if handed:
                    # The packet was the skipped plane's: the plane that took it keeps
                    # its own turn, so one ECN echo moves one packet.
                    self.rr_plane -= 1
                return info
            rr[plane] = i
        return fallback

    def take(self, planes: Sequence[int], k: int) -> list[int]:
        """The EVs of the next ``k`` packets over ``planes`` (non-empty), as ``k`` calls
        of :meth:`next` would give them (each counted as sent), as long as each is the
        plain rotation's first try (not a SKIP EV): the list stops before the first that
        is not, and is empty if the very next one is not."""
        n = len(planes)
        rings, rr, inst_rr = self.rings, self.rr, self.inst_rr
        rr_plane = self.rr_plane
        out: list[int] = []
        for _ in range(k):
            plane = planes[rr_plane % n]
            ring = rings.get(plane)
            if ring is None:  # (built as next would build it, at the same moment)
                ring = self.ring(plane)
            if not ring:
                break
            i = rr[plane]
            lst = ring[i % len(ring)]
            key = lst[0].ev >> EV_PATH_SHIFT
            c = inst_rr.get(key, 0)
            info = lst[c % len(lst)]
            if info.state is _SKIP:
                break
            rr_plane += 1
            rr[plane] = i + 1
            inst_rr[key] = c + 1
            info.sent += 1
            out.append(info.ev)
        self.rr_plane = rr_plane
        return out

    def fold_sent(self) -> None:
        """Bring every EV's ``sent`` up to date (in Python :meth:`take` counts as it
        goes: nothing to do)."""


class PathSlots:
    """A sender's run slots of one rkey by path, laid out as its :class:`CSpray`'s paths:
    the tables of ``mrc_spray_take_slots`` (:meth:`CSpray.take_slots`), so that a run's
    EVs, their templates' slots and ports go from the spray to the frame build in C.
    ``lookup(path key)`` gives a path's (port, slot), None when it has none (its frames
    are built one at a time), or raises KeyError when it is not made yet."""

    __slots__ = ("_cap", "_lookup", "laid", "owner", "path_port", "path_slot", "ports", "slots",
                 "stop")

    #: path_slot's two marks: not made yet; none (built one at a time)
    UNKNOWN = -1
    NONE = -2

    def __init__(self, lookup: Callable[[int], tuple[int, int] | None]) -> None:
        if not HAVE_C:
            raise RuntimeError(NOT_BUILT)
        self._lookup = lookup
        #: The spray and its layout (version) the tables are of; -1: none yet.
        self.owner: object = None
        self.laid = -1
        self.path_slot: Any = ffi.new("int32_t[]", 1)
        self.path_port: Any = ffi.new("uint16_t[]", 1)
        self._cap = 1
        #: A take's slots and ports, one per EV (the take's count of them).
        self.slots: Any = ffi.new("uint16_t[]", 1)
        self.ports: Any = ffi.new("uint16_t[]", 1)
        #: Where the last take stopped for a path without a slot (its index), else -1.
        self.stop: Any = ffi.new("int32_t *")

    def lay(self, owner: object, keys: Sequence[int], version: int) -> None:
        """Fill the tables for the paths ``keys`` (spray ``owner``'s layout
        ``version``)."""
        n = max(1, len(keys))
        self.path_slot = ffi.new("int32_t[]", n)
        self.path_port = ffi.new("uint16_t[]", n)
        for i, key in enumerate(keys):
            try:
                self.set(i, self._lookup(key))
            except KeyError:
                self.path_slot[i] = self.UNKNOWN
        self.owner, self.laid = owner, version

    def set(self, path: int, at: tuple[int, int] | None) -> None:
        """Path ``path``'s (port, slot), or None: it has none."""
        if at is None:
            self.path_slot[path] = self.NONE
        else:
            self.path_port[path], self.path_slot[path] = at

    def room(self, k: int) -> None:
        """Room for a take of ``k``."""
        if k > self._cap:
            self._cap = max(k, 2 * self._cap)
            self.slots = ffi.new("uint16_t[]", self._cap)
            self.ports = ffi.new("uint16_t[]", self._cap)


class CSpray(Spray[E]):
    """:class:`Spray` with :meth:`take` in C (``mrcnet/_csrc/spray.c``): the same EVs,
    counters and counts. While C holds the counters (from a run on), ``rr_plane``,
    ``rr`` and ``inst_rr`` are current only after :meth:`fold_sent` (or in ``next``):
    handing them over per run cost more than the run."""

    __slots__ = ("_cap", "_infos", "_keep", "_keys", "_laid", "_nev", "_npath", "_nplane",
                 "_out", "_owned", "_planes", "_s")

    def __init__(self, active: Mapping[int, Sequence[E]],
                 skip_done: Callable[[E], None]) -> None:
        if not HAVE_C:
            raise RuntimeError(NOT_BUILT)
        super().__init__(active, skip_done)
        self._s = ffi.new("struct mrc_spray *")
        self._keep: list[Any] = []
        self._out = ffi.new("uint32_t[]", 1)
        self._cap = 1  # (len(self._out))
        #: C holds the counters of the layout's planes and paths (and ``rr_plane``):
        #: Python's are stale until :meth:`_sync`
        self._owned = False
        self._nplane = self._npath = self._nev = 0
        self._laid = -1  # the version the C layout is of
        self._planes: list[int] = []  # the usable planes, in the layout's order
        self._keys: list[int] = []  # path keys, in the layout's order
        self._infos: list[E] = []  # EVs, in the layout's order

    def _build(self, planes: list[list[list[tuple[int, bool]]]]) -> None:
        """Lay out the rings in C: ``planes[i]`` is usable plane i's list of paths
        (empty: the rotation stops at that plane), each path a non-empty list of (EV,
        is SKIP)."""
        paths = [path for ring in planes for path in ring]
        evs = [e for path in paths for e in path]
        np_, npath, nev = len(planes), len(paths), len(evs)
        a = self._keep = [
            ffi.new("uint32_t[]", max(1, np_)), ffi.new("uint32_t[]", max(1, np_)),
            ffi.new("uint64_t[]", max(1, np_)), ffi.new("uint32_t[]", max(1, npath)),
            ffi.new("uint32_t[]", [len(p) for p in paths] or [1]),
            ffi.new("uint64_t[]", max(1, npath)),
            ffi.new("uint32_t[]", [ev for ev, _ in evs] or [0]),
            ffi.new("uint8_t[]", [1 if skip else 0 for _, skip in evs] or [0]),
            ffi.new("uint32_t[]", max(1, nev))]
        first = 0
        for i, ring in enumerate(planes):
            a[0][i], a[1][i] = first, len(ring)
            first += len(ring)
        first = 0
        for j, path in enumerate(paths):
            a[3][j] = first
            first += len(path)
        s = self._s
        s.nplanes = np_
        (s.plane_first, s.plane_len, s.plane_rr, s.path_first, s.path_len, s.path_inst,
         s.ev, s.skip, s.sent) = a
        self._nplane, self._npath, self._nev = np_, npath, nev

    def _take_sent(self) -> list[int]:
        """Packets given to each EV (in the layout's order) since the last call."""
        nev = self._nev
        sent = ffi.unpack(self._s.sent, nev)
        self._s.sent[0:nev] = [0] * nev
        return sent  # type: ignore[no-any-return]

    def _lay(self, planes: Sequence[int]) -> None:
        """Lay the rings of ``planes`` out in C (the version moved): the old layout's
        counts and counters are brought back to Python first (they belong to its EVs,
        planes and paths)."""
        self.fold_sent()
        # (building a missing ring: its first packet would have built it in next, the
        # same ring at the same moment)
        layout = []
        keys: list[int] = []
        infos: list[E] = []
        for plane in planes:
            ring = self.ring(plane)
            layout.append([[(i.ev, i.state is _SKIP) for i in lst] for lst in ring])
            keys.extend(lst[0].ev >> EV_PATH_SHIFT for lst in ring)
            infos.extend(i for lst in ring for i in lst)
        self._build(layout)
        self._planes, self._keys, self._infos = list(planes), keys, infos
        self._laid = self.ver

    def _load(self) -> None:
        """Hand the counters of the layout's planes and paths to C, which keeps them
        from now on (until :meth:`_sync`); map keeps that free of Python bytecode per
        plane and path."""
        s = self._s
        s.rr_plane = self.rr_plane
        np_, npath = self._nplane, self._npath
        if np_:
            s.plane_rr[0:np_] = list(map(self.rr.__getitem__, self._planes))
        if npath:
            s.path_inst[0:npath] = list(map(self.inst_rr.get, self._keys,
                                            repeat(0, npath)))
        self._owned = True

    def _sync(self) -> None:
        """Bring ``rr_plane``, ``rr`` and ``inst_rr`` back from C when C holds them
        (C's runs moved them); Python's then hold them until the next C run."""
        if not self._owned:
            return
        self._owned = False
        s = self._s
        self.rr_plane = int(s.rr_plane)
        if self._nplane:
            self.rr.update(zip(self._planes, ffi.unpack(s.plane_rr, self._nplane),
                               strict=True))
        if self._npath:
            self.inst_rr.update(zip(self._keys, ffi.unpack(s.path_inst, self._npath),
                                    strict=True))

    def _ready(self, planes: Sequence[int], k: int) -> None:
        """C's layout of ``planes`` current, C holding the counters, room for ``k``."""
        if self._laid != self.ver:
            self._lay(planes)
        if not self._owned:
            self._load()
        if k > self._cap:
            self._cap = max(k, 2 * self._cap)
            self._out = ffi.new("uint32_t[]", self._cap)

    def take(self, planes: Sequence[int], k: int) -> list[int]:
        """:meth:`Spray.take` in one C call (on the layout of ``planes``: the manager
        passes its usable planes, whose every change moves the version)."""
        self._ready(planes, k)
        n = C.mrc_spray_take(self._s, k, self._out)
        return ffi.unpack(self._out, n) if n else []  # type: ignore[no-any-return]

    def take_slots(self, planes: Sequence[int], k: int, table: PathSlots) -> int:
        """:meth:`take` with each EV's run slot and port from ``table`` as well, in one
        C call: how many EVs (in :attr:`taken`, the slots and ports in ``table``). It
        stops before an EV whose path has no slot in ``table``: ``table.stop`` then
        holds that path (:meth:`path_ev` gives one of its EVs)."""
        self._ready(planes, k)
        if table.laid != self._laid or table.owner is not self:
            table.lay(self, self._keys, self._laid)
        table.room(k)
        return C.mrc_spray_take_slots(  # type: ignore[no-any-return]
            self._s, k, self._out, table.path_slot, table.path_port, table.slots,
            table.ports, table.stop)

    @property
    def taken(self) -> Any:
        """The EVs of the last take (a C array; :meth:`take_slots`' count of them)."""
        return self._out

    def path_ev(self, path: int) -> int:
        """An EV of path ``path`` of the layout (its first)."""
        s = self._s
        return int(s.ev[s.path_first[path]])

    def next(self, planes: Sequence[int], avoid_path: int) -> E | None:
        """:meth:`Spray.next` on the counters brought back from C."""
        self._sync()
        return super().next(planes, avoid_path)

    def fold_sent(self) -> None:
        """Bring the Python view up to date: add the packets the C rotation gave each EV
        to its ``sent`` (done when they are read, not per run), and bring the counters
        back from C (:meth:`_sync`)."""
        self._sync()
        if self._infos:
            for info, c in zip(self._infos, self._take_sent(), strict=True):
                if c:
                    info.sent += c


def new_spray(active: Mapping[int, Sequence[E]], skip_done: Callable[[E], None]
              ) -> Spray[E]:
    """A QP's rotation: :class:`CSpray` when the C module is built, else :class:`Spray`."""
    return CSpray(active, skip_done) if HAVE_C else Spray(active, skip_done)
