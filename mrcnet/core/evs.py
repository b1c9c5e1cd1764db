"""Entropy values (EVs): how an EV names a path, and the per-QP EV manager.

EV -> path is one pure function, :func:`ev_path` (and its inverse :func:`make_ev`)::

    bit 31      : 1 (so the UDP source port, EV >> 16, is >= 0x8000 and never 0)
    bits 24..30 : plane (7 bits)
    bits 12..23 : path index in that plane = index into PathProvider.routes(peer, plane)
                  (for a two-tier leaf-spine: the spine), 12 bits
    bits  0..11 : instance: distinguishes several EVs on the same path, 12 bits

So per-EV counters map to planes and spines directly, at both ends (the receiver decodes
the reflected EV the same way; it needs no table).

:class:`EVManager` keeps a QP's EV set: split evenly over the usable planes, a different EV
per packet (round robin over planes, then over the plane's EVs), GOOD / SKIP / ASSUMED_BAD
/ DENIED, refill from the same plane, per-EV RTT and counters, and probing of ASSUMED_BAD
EVs. In the ``ecmp`` profile it holds one EV, chosen by a hash, that never retires.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from mrcnet.constants import (
    EV_INSTANCE_MASK,
    EV_MARK,
    EV_PATH_MASK,
    EV_PATH_SHIFT,
    EV_PLANE_MASK,
    EV_PLANE_SHIFT,
)
from mrcnet.core.events import PathStateChanged
from mrcnet.core.spray import PathSlots, Spray, new_spray
from mrcnet.core.states import EVState
from mrcnet.native import HAVE_C, C, c_field, ffi

# Retirement causes shared with the host's other QPs (mrcnet.core.verdicts.SHARED_CAUSES:
# a dead or lossy route; not the receiver's ALWAYS_SKIP, nor a shared verdict itself).
_SHARED_CAUSES = frozenset({"loss", "timeout"})
_GOOD, _SKIP = EVState.GOOD, EVState.SKIP  # (global loads in skip_all's loop)
# skip_all's events made field by field through the slots' descriptors: the frozen
# dataclass's own __init__ goes through object.__setattr__ per field (~3x the time; one
# event per ECN echo or trim, ~5 % of a permutation's run). The same objects: equal,
# hashed and shown alike (tests/core/test_evs.py).
_new_event = object.__new__
_set_qpn, _set_ev, _set_old, _set_new, _set_cause = (
    PathStateChanged.__dict__[f].__set__ for f in ("qpn", "ev", "old", "new", "cause"))
RTT_ALPHA = 0.125  # RFC 6298 smoothing
RTT_BETA = 0.25
#: Whether new EV managers keep their EVs' numbers in C (:class:`CEVInfo`, :class:`EVTable`:
#: the sender's SACK decisions in C read and write them); off, plain :class:`EVInfo`, the
#: pure-Python reference (tests switch it to compare the two).
NATIVE = HAVE_C


def make_ev(plane: int, path: int, instance: int) -> int:
    """The EV for (plane, path index, instance)."""
    return (
        EV_MARK
        | (plane & EV_PLANE_MASK) << EV_PLANE_SHIFT
        | (path & EV_PATH_MASK) << EV_PATH_SHIFT
        | (instance & EV_INSTANCE_MASK)
    )


def ev_path(ev: int) -> tuple[int, int, int]:
    """(plane, path index, instance) of an EV."""
    return (
        (ev >> EV_PLANE_SHIFT) & EV_PLANE_MASK,
        (ev >> EV_PATH_SHIFT) & EV_PATH_MASK,
        ev & EV_INSTANCE_MASK,
    )


class Verdicts(Protocol):
    """A QP's view of its host's shared path verdicts (:class:`mrcnet.core.verdicts.
    VerdictView`): what the EV manager asks and tells."""

    def bad_paths(self, plane: int) -> set[int]:
        """Path indexes of ``plane`` the host holds failing."""

    def failing_since(self) -> float:
        """When the host last learnt of a route failing; -1 when it holds none."""

    def failed(self, plane: int, path: int, now: float) -> None:
        """This QP retired (plane, path) for loss or a timeout."""

    def revived(self, plane: int, path: int, now: float) -> None:
        """This QP's probes revived (plane, path)."""


class EVInfo:
    """One EV of a QP: its path, state, RTT estimate and counters."""

    __slots__ = (
        "acked",
        "ecn",
        "ev",
        "lost",
        "min_rtt",
        "path",
        "plane",
        "probe_due",
        "probes_ok",
        "probes_sent",
        "rttvar",
        "sent",
        "skip_plane",
        "srtt",
        "state",
        "trimmed",
    )

    def __init__(self, ev: int) -> None:
        self.ev = ev
        self.plane, self.path, _ = ev_path(ev)
        self.state = EVState.GOOD
        self.skip_plane = False  # the pending SKIP came from ECN: hand the slot across planes
        self.sent = 0
        self.lost = 0
        self._zero_numbers()
        self.probes_sent = 0
        self.probes_ok = 0  # consecutive successful probes while ASSUMED_BAD
        self.probe_due = 0.0

    def _zero_numbers(self) -> None:
        """The RTT estimate and the counters SACKs move, before the first (CEVInfo's are
        its C struct's, zeroed when made)."""
        self.srtt = 0.0  # 0: no sample yet
        self.rttvar = 0.0
        self.min_rtt = 0.0
        self.acked = 0
        self.ecn = 0
        self.trimmed = 0

    def rtt_sample(self, rtt: float) -> None:
        """Fold one RTT measurement into srtt/rttvar (RFC 6298)."""
        if self.srtt == 0.0:
            self.srtt = rtt
            self.rttvar = rtt / 2
            self.min_rtt = rtt
            return
        self.rttvar += RTT_BETA * (abs(self.srtt - rtt) - self.rttvar)
        self.srtt += RTT_ALPHA * (rtt - self.srtt)
        self.min_rtt = min(self.min_rtt, rtt)

    def marked_bad(self, bad: bool) -> None:
        """Its state became (``bad``) or stopped being ASSUMED_BAD (:class:`CEVInfo` tells
        its C twin)."""

    def stats(self) -> dict[str, Any]:
        """Counters and estimates, for mrcctl."""
        return {
            "ev": self.ev,
            "plane": self.plane,
            "path": self.path,
            "state": self.state.value,
            "srtt": self.srtt,
            "min_rtt": self.min_rtt,
            "sent": self.sent,
            "acked": self.acked,
            "lost": self.lost,
            "trimmed": self.trimmed,
            "ecn": self.ecn,
            "probes_sent": self.probes_sent,
        }


class CEVInfo(EVInfo):
    """:class:`EVInfo` whose RTT estimate and counters (``srtt``, ``rttvar``, ``min_rtt``,
    ``acked``, ``ecn``, ``trimmed``) and whether it is ASSUMED_BAD are a ``struct mrc_ev``'s
    (``mrcnet/_csrc/sackrec.h``), behind the same attributes: entry ``k`` of its QP's
    :class:`EVTable` ``tab``."""

    __slots__ = ("k", "tab")

    def __init__(self, ev: int, tab: EVTable) -> None:
        k = self.k = C.mrc_evtab_add(tab.c, ev)  # (a new entry, its numbers zero)
        if k < 0:
            raise MemoryError("EV table")
        self.tab = tab
        EVInfo.__init__(self, ev)

    @property
    def c(self) -> Any:
        """Its ``struct mrc_ev`` (where it is now: the table's array moves as it grows)."""
        return self.tab.c.e[self.k]

    srtt = c_field("srtt", float)  # type: ignore[assignment]
    rttvar = c_field("rttvar", float)  # type: ignore[assignment]
    min_rtt = c_field("min_rtt", float)  # type: ignore[assignment]
    acked = c_field("acked", int)  # type: ignore[assignment]
    ecn = c_field("ecn", int)  # type: ignore[assignment]
    trimmed = c_field("trimmed", int)  # type: ignore[assignment]

    def _zero_numbers(self) -> None:
        """(mrc_evtab_add zeroed them)"""

    def marked_bad(self, bad: bool) -> None:
        """Its state became (``bad``) or stopped being ASSUMED_BAD."""
        self.c.bad = bad


class EVTable:
    """A QP's EVs by EV in C (``struct mrc_evtab``), in the order they were made: what
    the C decisions (:class:`mrcnet.core.sackrec.CRecovery`)
    search."""

    __slots__ = ("c",)

    def __init__(self) -> None:
        c = C.mrc_evtab_new()
        if c == ffi.NULL:
            raise MemoryError("EV table")
        self.c = ffi.gc(c, C.mrc_evtab_free)

    def path_srtt(self, ev: int) -> float:
        """The EV's srtt, else its path's EVs' largest (``TailLoss._path_srtt``)."""
        return float(C.mrc_evtab_path_srtt(self.c, ev))

    def paths(self) -> dict[int, float]:
        """Each path with a measured EV: its key (EV >> EV_PATH_SHIFT) and its EVs'
        largest srtt."""
        n = self.c.n
        keys, srtts = ffi.new("uint32_t[]", n), ffi.new("double[]", n)
        m = C.mrc_evtab_paths(self.c, keys, srtts, n)
        return dict(zip(ffi.unpack(keys, m), ffi.unpack(srtts, m), strict=True))


class _ProbeGroup:
    """The ASSUMED_BAD EVs of one path: probed together, one probe per interval."""

    __slots__ = ("born", "due", "evs", "ok", "rr")

    def __init__(self, due: float, born: float) -> None:
        self.evs: list[EVInfo] = []
        self.due = due
        self.born = born  # when the path was retired (it has failed every probe since)
        self.ok = 0  # consecutive successful probes
        self.rr = 0


class EVManager:
    """The EV set of one QP (see module docstring).

    ``paths`` maps each plane to its number of distinct paths. ``on_change`` gets every
    state change as a :class:`PathStateChanged` event. ``native``: keep the EVs' numbers
    in C (:class:`CEVInfo`, :class:`EVTable`; None: ``NATIVE``).
    """

    def __init__(
        self,
        qpn: int,
        paths: dict[int, int],
        *,
        evs_per_qp: int,
        ecmp_key: str | None = None,
        min_active: int = 2,
        probe_interval: float = 1e-3,
        probe_successes: int = 3,
        events: list[PathStateChanged] | None = None,
        native: bool | None = None,
    ) -> None:
        self.qpn = qpn
        self.paths = {p: n for p, n in paths.items() if n > 0}
        self.ecmp = ecmp_key is not None
        self.min_active = max(1, min_active)
        self.probe_interval = probe_interval
        self.probe_successes = probe_successes
        self.events: list[PathStateChanged] = events if events is not None else []
        self.evs: dict[int, EVInfo] = {}
        #: the EVs' numbers in C for the sender's SACK decisions in C (None: Python's)
        native = NATIVE if native is None else native
        self.tab: EVTable | None = EVTable() if native else None
        self.active: dict[int, list[EVInfo]] = {p: [] for p in sorted(self.paths)}
        self.spares: dict[int, list[EVInfo]] = {p: [] for p in sorted(self.paths)}
        self.usable_planes: list[int] = sorted(self.paths)
        self._next_instance: dict[tuple[int, int], int] = {}
        self._bad: dict[int, EVInfo] = {}  # ASSUMED_BAD EVs (probed)
        # EVs of one path share its fate (SRv6: the EV names the path), so bad EVs are
        # probed per path: one probe per path and interval, k successes revive them all.
        self._groups: dict[tuple[int, int], _ProbeGroup] = {}
        self._last_resort = 0
        self._rr_reverse = 0
        # Which EV each packet takes (round robin over planes, paths, EVs): spray.py.
        # Told whenever the active EVs of a plane, a state or the usable planes change.
        self.spray: Spray[EVInfo] = new_spray(self.active, self._skip_done)
        self.next_probe = float("inf")
        #: bumped by every write of ``next_probe`` (QueuePair.deadline reads it; see
        #: QPTimers.refresh)
        self.tv = 0
        #: the host's shared verdicts (mrcnet.core.verdicts), when it shares them
        self.verdicts: Verdicts | None = None
        #: told (plane, path, now) when another QP's verdict retired one of this QP's
        #: paths (``HostConfig.verdict_inflight``: the QP's recovery, TailLoss)
        self.on_shared: Callable[[int, int, float], None] | None = None
        if not self.paths:
            return
        self.target = 1
        self._ecmp_hash = 0
        if ecmp_key is not None:
            h = zlib.crc32(ecmp_key.encode())
            planes = self.usable_planes
            plane = planes[h % len(planes)]
            self._ecmp_hash = h
            self._add(plane, (h >> 8) % self.paths[plane])
            return
        per_plane = max(1, evs_per_qp // len(self.paths))
        self.target = per_plane
        for plane, npaths in sorted(self.paths.items()):
            for i in range(per_plane):
                self._add(plane, i % npaths)

    # --- set management ---------------------------------------------------------------

    def _add(self, plane: int, path: int) -> EVInfo:
        key = (plane, path)
        inst = self._next_instance.get(key, 0)
        ev = make_ev(plane, path, inst)
        while ev in self.evs:
            inst = (inst + 1) & EV_INSTANCE_MASK
            ev = make_ev(plane, path, inst)
        self._next_instance[key] = (inst + 1) & EV_INSTANCE_MASK
        tab = self.tab
        info = EVInfo(ev) if tab is None else CEVInfo(ev, tab)
        self.evs[ev] = info
        self.active[plane].append(info)
        self._drop_ring(plane)
        return info

    def _drop_ring(self, plane: int) -> None:
        self.spray.drop(plane)

    def _set(self, info: EVInfo, new: EVState, cause: str) -> None:
        old = info.state
        if old is new:
            return
        info.state = new
        if new is EVState.ASSUMED_BAD or old is EVState.ASSUMED_BAD:
            info.marked_bad(new is EVState.ASSUMED_BAD)
        self.spray.changed()
        self.events.append(PathStateChanged(self.qpn, info.ev, old, new, cause))

    def _remove_active(self, info: EVInfo) -> None:
        lst = self.active.get(info.plane)
        if lst is not None and info in lst:
            lst.remove(info)
            self._drop_ring(info.plane)
        sp = self.spares.get(info.plane)
        if sp is not None and info in sp:
            sp.remove(info)

    def _bad_paths(self, plane: int) -> dict[int, int]:
        bad: dict[int, int] = {}
        for info in self.evs.values():
            if info.plane == plane and info.state in (EVState.ASSUMED_BAD, EVState.DENIED):
                bad[info.path] = bad.get(info.path, 0) + 1
        if self.verdicts is not None:
            for path in self.verdicts.bad_paths(plane):
                bad.setdefault(path, 0)  # failing for another QP of the host
        return bad

    def _refill(self, plane: int) -> None:
        """Replace a retired EV from the same plane, keeping planes evenly loaded."""
        lst = self.active[plane]
        if len(lst) >= self.target:
            return
        bad = self._bad_paths(plane)
        spares = self.spares[plane]
        for i, sp in enumerate(spares):
            if sp.path not in bad:
                lst.append(spares.pop(i))
                self._drop_ring(plane)
                return
        npaths = self.paths[plane]
        clean = [p for p in range(npaths) if p not in bad]
        if not clean:
            # Every path of the plane has failed: keep only the minimum going. Reuse the
            # bad EV whose path looks best instead of minting new EVs on failed paths, so
            # the set stays bounded under any loss pattern: most probe successes, then
            # the path retired last (it delivered until then; one retired earlier has
            # failed every probe since: the tour's dead spine, revived over the live
            # path that loss had just retired, took every packet for 7 retry rounds).
            if len(lst) >= self.min_active:
                return
            groups = [(g.ok, g.born, key) for key, g in self._groups.items()
                      if key[0] == plane]
            if groups:
                key = max(groups)[2]
                g = self._groups[key]
                info = g.evs[0]
                del self._bad[info.ev]
                self._ungroup(info)
                self._set(info, EVState.GOOD, "min_active")
                lst.append(info)
                self._drop_ring(plane)
                return
            clean = [min(range(npaths), key=lambda p: bad.get(p, 0))]
        load = {p: 0 for p in clean}
        for info in lst:
            if info.path in load:
                load[info.path] += 1
        self._add(plane, min(clean, key=lambda p: (load[p], p)))

    # --- per packet -----------------------------------------------------------------

    def next_ev(self, avoid: int = -1) -> EVInfo:
        """The EV for the next packet: round robin over planes, then over the plane's
        paths, then over each path's EVs (so a plane's live paths share its load equally,
        however many EVs each holds after refills).

        A SKIP EV (ECN echo, non-last-hop trim, receiver's SKIP_ONCE) is passed over once.
        After an ECN echo its packet goes to the *next plane* when there is one, so
        congestion moves load between planes, not only between a plane's paths: without
        that a plane that lost a path keeps exactly its half of the packets and overloads
        its surviving paths. The EV counts per plane stay even either way; only the choice
        per packet moves. ECN is the fabric's graded signal of a loaded path (the last hop
        does not mark); trims are not used for this: most come from the receiver's own
        port (incast), which the last-hop heuristic does not always recognise, and
        moving that load to another plane's port of the same receiver helps nothing.

        ``avoid``: an EV whose path not to use if any other is usable (a retransmission
        moves on). Never fails: with no usable EV left it falls back to ASSUMED_BAD ones
        in turn, so the retry budget, not a hang, decides the QP's fate.
        """
        if self.ecmp:
            return self.ecmp_ev()
        info = self.spray.next(self.usable_planes,
                               (avoid >> EV_PATH_SHIFT) if avoid >= 0 else -1)
        if info is not None:
            return info
        return self._last_resort_ev()

    def _skip_done(self, info: EVInfo) -> None:
        """The rotation passed over a SKIP EV: it is GOOD again."""
        self._set(info, EVState.GOOD, "skip_done")

    def take(self, k: int) -> list[int]:
        """The EVs of the next ``k`` packets, as ``k`` calls of :meth:`next_ev` would give
        them (each counted as sent), as long as each is its plain round robin's first try
        (not ECMP, not a SKIP EV): the list stops before the first that is not, and is
        empty if the very next one is not (the caller then asks :meth:`next_ev`). One
        call per run of new packets instead of one per packet (:meth:`Spray.take`)."""
        planes = self.usable_planes
        if self.ecmp or not planes:
            return []
        return self.spray.take(planes, k)

    def take_slots(self, k: int, table: PathSlots) -> int:
        """:meth:`take` with each EV's run slot from ``table`` too, in C (the spray
        must be a :class:`~mrcnet.core.spray.CSpray`: :meth:`CSpray.take_slots`): how
        many; 0 where :meth:`take` gives none."""
        planes = self.usable_planes
        if self.ecmp or not planes:
            return 0
        return self.spray.take_slots(planes, k, table)  # type: ignore[attr-defined,no-any-return]

    def _last_resort_ev(self) -> EVInfo:
        pool = [
            i for i in self.evs.values()
            if i.state is not EVState.DENIED and (not self.usable_planes or
                                                 i.plane in self.usable_planes)
        ] or list(self.evs.values())
        self._last_resort += 1
        return pool[self._last_resort % len(pool)]

    def reverse_ev(self, plane: int) -> int:
        """An EV for a SACK/NACK leaving on ``plane``: the QP's own live EVs in that plane
        double as its reverse EV set (a path is the same links in both directions)."""
        lst = self.active.get(plane)
        if lst:
            self._rr_reverse += 1
            return lst[self._rr_reverse % len(lst)].ev
        for info in self.evs.values():
            if info.plane == plane:
                return info.ev
        return make_ev(plane, 0, 0)

    # --- signals --------------------------------------------------------------------

    def skip(self, ev: int, cause: str) -> None:
        """ECN echo or a non-last-hop trim: skip this EV once (after ECN, in favour of
        another plane: see :meth:`next_ev`)."""
        info = self.evs.get(ev)
        if info is None or self.ecmp or info.state is not EVState.GOOD:
            return
        info.skip_plane = cause == "ecn"
        self._set(info, EVState.SKIP, cause)

    def skip_all(self, evs: Iterable[int], cause: str) -> None:
        """:meth:`skip` ``(ev, cause)`` for each of ``evs`` in order, in one call (a batch
        of SACK records' ECN echoes, a NACK's trim: mrcnet/core/sackrec.py): a GOOD EV
        becomes SKIP, with :meth:`_set`'s event and the spray's version, as there."""
        if self.ecmp:
            return
        get, events, spray, qpn = self.evs.get, self.events, self.spray, self.qpn
        plane = cause == "ecn"
        for ev in evs:
            info = get(ev)
            if info is None or info.state is not _GOOD:
                continue
            info.skip_plane = plane
            info.state = _SKIP
            spray.changed()
            e = _new_event(PathStateChanged)  # PathStateChanged(qpn, ev, _GOOD, _SKIP, cause)
            _set_qpn(e, qpn)
            _set_ev(e, ev)
            _set_old(e, _GOOD)
            _set_new(e, _SKIP)
            _set_cause(e, cause)
            events.append(e)

    def assume_bad(self, ev: int, now: float, cause: str) -> None:
        """Loss or timeout on this EV: stop using it at once, refill, start probing."""
        info = self.evs.get(ev)
        if info is None or self.ecmp:
            return
        if info.state in (EVState.ASSUMED_BAD, EVState.DENIED):
            return
        self._set(info, EVState.ASSUMED_BAD, cause)
        self._remove_active(info)
        self._bad[ev] = info
        key = (info.plane, info.path)
        g = self._groups.get(key)
        new = g is None
        if g is None:
            g = self._groups[key] = _ProbeGroup(now + self.probe_interval, now)
            self.next_probe = min(self.next_probe, g.due)
            self.tv += 1
        g.ok = 0  # fresh evidence against the path
        g.evs.append(info)
        info.probes_ok = 0
        info.probe_due = g.due
        if info.plane in self.active:
            self._refill(info.plane)
        if new and self.verdicts is not None and cause in _SHARED_CAUSES:
            self.verdicts.failed(info.plane, info.path, now)

    def retire_path(self, plane: int, path: int, now: float, cause: str,
                    evs: Sequence[int] = ()) -> bool:
        """Retire ``evs`` and every EV of (plane, path) in the set (active or spare: left
        GOOD, a refill could put a spare straight back onto the path): EVs of one path
        share its fate. True if any EV was retired now."""
        if self.ecmp:
            return False
        mine = [i.ev for i in (*self.active.get(plane, ()), *self.spares.get(plane, ()))
                if i.path == path]
        before = len(self._bad)
        for ev in (*evs, *mine):
            self.assume_bad(ev, now, cause)
        if len(self._bad) == before:
            return False
        if cause == "shared" and self.on_shared is not None:
            self.on_shared(plane, path, now)
        return True

    def revive_path(self, plane: int, path: int, now: float) -> bool:
        """Another QP's probes revived (plane, path): so do its bad EVs here (cause
        ``shared``). True if there were any."""
        g = self._groups.pop((plane, path), None)
        if g is None:
            return False
        self._revive_group(g, "shared")
        return True

    def _revive_group(self, g: _ProbeGroup, cause: str) -> None:
        for i in g.evs:
            del self._bad[i.ev]
            self._set(i, EVState.GOOD, cause)
            self._revive_into_set(i)

    def deny(self, ev: int) -> bool:
        """Operator: never use this EV until allowed. False if the QP has no such EV."""
        info = self.evs.get(ev)
        if info is None:
            return False
        self._set(info, EVState.DENIED, "deny")
        self._remove_active(info)
        if self._bad.pop(ev, None) is not None:
            self._ungroup(info)
        if info.plane in self.active:
            self._refill(info.plane)
        return True

    def allow(self, ev: int) -> bool:
        """Operator: a DENIED EV may be used again."""
        info = self.evs.get(ev)
        if info is None or info.state is not EVState.DENIED:
            return False
        self._set(info, EVState.GOOD, "allow")
        self._revive_into_set(info)
        return True

    def _revive_into_set(self, info: EVInfo) -> None:
        if info.plane not in self.active:
            return
        lst = self.active[info.plane]
        if len(lst) >= self.target and not self.ecmp and lst:
            # Keep the set size: the revived EV takes the place of one on the path that
            # has the most EVs (a refill), so the healed path carries data again at once.
            counts: dict[int, int] = {}
            for i in lst:
                counts[i.path] = counts.get(i.path, 0) + 1
            crowded = max(counts, key=lambda p: (counts[p], p))
            victim = next(i for i in reversed(lst) if i.path == crowded)
            lst.remove(victim)
            self.spares[info.plane].append(victim)
        lst.append(info)
        self._drop_ring(info.plane)

    def _ungroup(self, info: EVInfo) -> None:
        key = (info.plane, info.path)
        g = self._groups.get(key)
        if g is not None and info in g.evs:
            g.evs.remove(info)
            if not g.evs:
                del self._groups[key]

    def probes_due(self, now: float, timeout: float = 0.0) -> list[EVInfo]:
        """One EV per bad path whose probe is due (rotating over the path's bad EVs);
        reschedules them ``max(probe_interval, timeout)`` later: a probe counts as failed
        only when the next one goes, so it always has ``timeout`` (the QP's measured RTT
        and variance) to be answered, and a slow endpoint is not probed faster than it
        can answer."""
        if now < self.next_probe:
            return []
        due = []
        nxt = float("inf")
        usable = self.usable_planes
        for (plane, _), g in self._groups.items():
            if g.due <= now:
                g.due = now + max(self.probe_interval, timeout)
                if plane in usable:
                    info = g.evs[g.rr % len(g.evs)]
                    g.rr += 1
                    info.probes_sent += 1
                    due.append(info)
            nxt = min(nxt, g.due)
        self.next_probe = nxt
        self.tv += 1
        return due

    def bad_ev_on(self, plane: int, path: int) -> int | None:
        """An ASSUMED_BAD EV of this path (one being probed), if any."""
        g = self._groups.get((plane, path))
        return g.evs[0].ev if g is not None and g.evs else None

    def probe_result(self, ev: int, ok: bool, rtt: float | None = None,
                     now: float | None = None) -> None:
        """A probe on ``ev`` succeeded (response) or failed (unanswered by the next one).
        ``probe_successes`` successes in a row revive every bad EV of its path. An answer
        (at ``now``) brings the path's next probe forward to one probe interval after
        this one was sent: the pace is the interval or the RTT, whichever is longer."""
        info = self._bad.get(ev)
        if info is None:
            return
        key = (info.plane, info.path)
        g = self._groups.get(key)
        if g is None:
            return
        if not ok:
            g.ok = 0
            for i in g.evs:
                i.probes_ok = 0
            return
        if rtt is not None:
            info.rtt_sample(rtt)
        g.ok += 1
        if now is not None and rtt is not None:
            due = now + max(0.0, self.probe_interval - rtt)
            if due < g.due:
                g.due = due
                self.next_probe = min(self.next_probe, due)
                self.tv += 1
        for i in g.evs:
            i.probes_ok = g.ok
        if g.ok >= self.probe_successes:
            del self._groups[key]
            self._revive_group(g, "probe")
            if self.verdicts is not None:
                self.verdicts.revived(info.plane, info.path, now or 0.0)

    def set_planes(self, planes: Sequence[int]) -> None:
        """Only these planes may carry packets now (local ports and the peer's ports)."""
        new = [p for p in sorted(self.paths) if p in set(planes)]
        self.usable_planes = new
        self.spray.changed()
        if self.ecmp and new and not any(i.plane in new for i in self.evs.values()):
            # RoCE-like failover: the single EV moves to a live plane.
            plane = new[self._ecmp_hash % len(new)]
            self._add(plane, (self._ecmp_hash >> 8) % self.paths[plane])

    def ecmp_ev(self) -> EVInfo:
        """The ECMP profile's single EV (on a usable plane when there is one)."""
        for info in self.evs.values():
            if info.plane in self.usable_planes:
                return info
        return next(iter(self.evs.values()))

    def stats(self) -> dict[int, dict[str, Any]]:
        """Per-EV counters."""
        self.spray.fold_sent()
        return {ev: info.stats() for ev, info in self.evs.items()}
