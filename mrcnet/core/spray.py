"""The EV round robin of one QP in C: the twin of the plain rotation of
:meth:`mrcnet.core.evs.EVManager.take`.

``EVManager.next_ev`` sprays packets round robin over planes, then over each plane's
live paths, then over each path's EVs. Its first try for each packet (no SKIP EV met, no
EV to avoid) is a plain rotation of counters, which ``EVManager.take`` runs for a whole
run of packets: in Python, or with :class:`CSpray` (mrcnet/_csrc/spray.c) in one C call.
The EV manager keeps the EVs, their states and the counters; it lays them out here
(rebuilt when the set or a state changes), hands the counters over for each call and
takes them back after it (``tests/core/test_spray.py`` compares the two).
"""

from __future__ import annotations

from typing import Any

from mrcnet.native import HAVE_C, NOT_BUILT, C, ffi

__all__ = ["CSpray"]


class CSpray:
    """One QP's EV round robin in C (``mrcnet/_csrc/spray.c``): the plain rotation of
    ``EVManager.next_ev`` for a whole run of packets in one call.

    :meth:`build` lays out the rings (per usable plane, its paths, each a list of (EV,
    is SKIP)); :meth:`take` takes and returns the rotation counters, which the caller
    keeps."""

    __slots__ = ("_keep", "_nev", "_npath", "_nplane", "_out", "_s")

    def __init__(self) -> None:
        if not HAVE_C:
            raise RuntimeError(NOT_BUILT)
        self._s = ffi.new("struct mrc_spray *")
        self._keep: list[Any] = []
        self._out = ffi.new("uint32_t[]", 1)
        self._nplane = self._npath = self._nev = 0

    def build(self, planes: list[list[list[tuple[int, bool]]]]) -> None:
        """Lay out the rings: ``planes[i]`` is usable plane i's list of paths (empty: the
        rotation stops at that plane), each path a non-empty list of (EV, is SKIP)."""
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

    def take(self, k: int, rr_plane: int, plane_rr: list[int], path_inst: list[int]
             ) -> tuple[list[int], int, list[int], list[int]]:
        """EVs for up to ``k`` packets from the given counters (per plane and per path,
        in :meth:`build` order); returns them and the counters after. What each EV was
        given adds up until :meth:`take_sent`."""
        s = self._s
        if k > len(self._out):
            self._out = ffi.new("uint32_t[]", max(k, 2 * len(self._out)))
        s.rr_plane = rr_plane
        np_, npath = self._nplane, self._npath
        if np_:
            s.plane_rr[0:np_] = plane_rr
        if npath:
            s.path_inst[0:npath] = path_inst
        n = C.mrc_spray_take(s, k, self._out)
        return (ffi.unpack(self._out, n), int(s.rr_plane), ffi.unpack(s.plane_rr, np_),
                ffi.unpack(s.path_inst, npath))

    def take_sent(self) -> list[int]:
        """Packets given to each EV (in :meth:`build` order) since the last call."""
        nev = self._nev
        sent = ffi.unpack(self._s.sent, nev)
        self._s.sent[0:nev] = [0] * nev
        return sent  # type: ignore[no-any-return]

