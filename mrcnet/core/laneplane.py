"""A plane's control-frame routes for the receive lane (rxlane.h ``struct mrc_rx_plane``).

A responder answers on the path the triggering packet came on, and a QP that sprays over
every path of every plane would make a SACK template (and a NACK one) per path: in
Python, for about every SACK of a short flow. On MRC's fabrics (plain, encapsulated uSID
routes) a plane's routes differ only in their outer destination, which neither the ICRC
nor the UDP checksum's pseudo-header covers: the lane builds a control frame on any of
the plane's paths from the QP's first template on the plane with that one address put in
(the bytes ``SackTemplate.for_route`` / ``NackTemplate.for_route`` make; the tests compare
every frame a run sends with and without). Other routes (SRH, plain IPv6, a route whose
MACs or addresses differ) are marked as not served: their frames take the Python path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mrcnet.core.ctrl import only_outer_dst_differs
from mrcnet.native import ffi
from mrcnet.wire import Route

__all__ = ["RX_PLANE_ROUTES", "LanePlane"]

RX_PLANE_ROUTES = 64  # routes of a plane a lane serves (rxlane.h MRC_RX_PLANE_ROUTES)


class LanePlane:
    """One plane of one QP: its routes (``routes[i]``: route i of the plane, None where
    the plane's templates do not serve it), its port, and the QP's SACK template ``t``
    (made for receive window ``win``) and NACK template ``nt`` once made (None before).
    ``c`` is the C record the lane reads (None without the C lane: the tests' Python
    lane reads the fields)."""

    __slots__ = ("_keep", "c", "n", "nt", "port", "route", "routes", "t", "win")

    def __init__(self, port: int, route: Route, routes: Sequence[Route], native: bool) -> None:
        self.port, self.route, self.n = port, route, len(routes)
        self.routes: list[Route | None] = [r if only_outer_dst_differs(route, r) else None
                                           for r in routes[:RX_PLANE_ROUTES]]
        self.t: Any = None
        self.nt: Any = None
        self.win = 0
        self._keep: list[Any] = []  # the templates c points to
        self.c: Any = None
        if native:
            pl = self.c = ffi.new("struct mrc_rx_plane *")
            pl.port, pl.nroutes = port, len(routes)
            for i, r in enumerate(self.routes):
                if r is not None:
                    pl.ok[i] = 1
                    ffi.memmove(pl.dst + 16 * i, r.outer_dst, 16)

    def serves(self, route: Route) -> bool:
        """Is ``route``'s frame this plane's template's with the outer destination put
        in? (a template made along it can serve the plane)"""
        return route is self.route or only_outer_dst_differs(self.route, route)

    def set_sack(self, t: Any, win: int) -> None:
        """The QP's SACK template along a route the plane serves (the responder state's
        ``sack_template``: C ``(struct mrc_rx_sackt *, length)``), for window ``win``."""
        self.t, self.win = t, win
        if self.c is not None:
            self.c.t, self.c.win = t[0], win
            self._keep.append(t)

    def set_nack(self, nt: Any) -> None:
        """The QP's NACK template along a route the plane serves (the responder state's
        ``nack_template``: C ``struct mrc_rx_nackt *``)."""
        self.nt = nt
        if self.c is not None:
            self.c.nt = nt
            self._keep.append(nt)
