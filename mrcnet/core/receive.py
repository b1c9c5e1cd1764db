"""The receive loop: frames in, dispatched to their QPs, with the receive lane in step.

:meth:`Receiver.receive_batch` hands a batch to the receive lane (mrcnet/core/rxlane.py,
in C), which handles the common case on its own: plain data for the QP it serves, and
the SACKs of the QP whose table it was given. Every frame the lane stops at takes the
per-frame path (parse, checks, ``QueuePair.on_data`` / ``on_sack``, or the host's
dispatch for everything else), and so does every frame when there is no lane (no C
module, or ``fast_parse`` off): the lane makes the per-frame path's decisions. Before
each batch the lane's copy of what it needs (the QP's state record, peers, window, the
sending QP's window and table) is checked and brought in step with the QPs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from mrcnet.constants import ENDPOINT_QPN, MPR_UNIT
from mrcnet.core import forged
from mrcnet.core.config import HostConfig, Port
from mrcnet.core.memory import MemoryTable
from mrcnet.core.qp import QueuePair
from mrcnet.core.rxlane import (
    RX_ACKAT,
    RX_ACKS,
    RX_END,
    RX_IMM,
    RX_POS_SHIFT,
    RX_SACK,
    RX_SACKS,
    RX_STOP,
    WHY_MR_MISS,
    WHY_PARSE,
    CRxLane,
    new_lane,
)
from mrcnet.core.states import RTR, RTS
from mrcnet.errors import MalformedFrame
from mrcnet.wire.parsed import FrameParser, PyParsed

#: Tests set this: every check that ``QueuePair.setup_ver`` lets the receive loop skip
#: runs anyway, and raises AssertionError when it finds a change the version missed.
VERIFY_SETUP = False


class ReceivingHost(Protocol):
    """What the receive loop uses of its host."""

    config: HostConfig
    memory: MemoryTable
    ports: dict[int, Port]
    port_up: dict[int, bool]
    rx_frames: int
    last_internal_error: BaseException | None
    _last_now: float
    _qps: dict[int, QueuePair]
    _dirty: set[int]
    _sendq: set[int]
    _ctrl: list[tuple[int, bytes]]
    _parser: FrameParser

    def count(self, name: str, n: int = 1) -> None:
        """Bump a host counter."""

    def _dispatch(self, f: PyParsed, frame: bytes | bytearray | memoryview, port: int,
                  now: float) -> None:
        """Any frame that is not plain data or a SACK for a QP."""


class Receiver:
    """The receive loop of one host (see the module docstring)."""

    def __init__(self, host: ReceivingHost) -> None:
        self.host = host
        # The receive lane: data of one QP at a time (the last one whose data took the
        # full path), the regions it may write, and what it was set up with (re-checked
        # before each batch). None: frame by frame.
        self._lane: Any = None
        self._lane_slots = False  # the lane reads a C batch in place
        self._lane_qp: QueuePair | None = None
        # The QP whose SACKs the lane takes (the last one a SACK came for), and the table
        # and peers the lane was given for it
        self._ack_qp: QueuePair | None = None
        self._ack_txt: Any = None
        self._ack_peers: frozenset[bytes] = frozenset()
        self._lane_peers: frozenset[bytes] = frozenset()
        self._lane_win = 0
        # The setup_ver of the lane's QP and of the ack QP when the lane's copy was last
        # found in step with them (-1: check it before the next batch), and the ack
        # QP's "too early" floor then
        self._lane_seen = self._ack_seen = -1
        self._ack_floor = 0.0
        # The ack QP's snd_una and next_seq last handed to the lane by ack_sync (-1: the
        # lane's copy is not known to be theirs: paused, or not synced since a change),
        # so that a batch whose window did not move skips the call
        self._ack_una = self._ack_nxt = -1
        # The same for the SACK planes and templates the lane was given for its QP
        # (_sack_sync), and that QP's EV manager and usable planes then
        self._sack_seen = -1
        # The imm_ver of the lane's QP's responder when the lane was last given its
        # write-with-immediate state (-1: give it before the next batch)
        self._imm_seen = -1
        self._sack_evm: Any = None
        self._sack_usable: Any = None
        self._lane_gen = host.memory.generation
        self.set_lane(new_lane(host.config.fast_parse))

    def set_lane(self, lane: Any) -> None:
        """Use ``lane`` from now on (None: frame by frame). Anything with the interface
        of :class:`mrcnet.core.rxlane.CRxLane` will do: the tests plant the lane's
        Python oracle here."""
        self._lane = lane
        self._lane_slots = isinstance(lane, CRxLane)
        self._lane_qp = self._ack_qp = None
        self._lane_seen = self._ack_seen = self._sack_seen = self._imm_seen = -1
        self._ack_una = self._ack_nxt = -1
        if lane is not None:
            lane.verify = self.host.config.verify_checksums

    @property
    def c_lane(self) -> CRxLane | None:
        """The C receive lane, for a reader that points it at the frames it receives
        (mrcnet/io/batch.py ``lane_reader``); None without one."""
        return self._lane if self._lane_slots else None

    def receive_batch(self, frames: Sequence[bytes | bytearray | memoryview], port: int,
                      now: float, slots: Any = None, in_lane: Any = None,
                      n: int = 0) -> None:
        """:meth:`mrcnet.core.host.Host.receive_batch` (its arguments; ``in_lane``: the
        lane that ``slots``' receive pointed at ``frames`` already, as
        :func:`mrcnet.io.batch.lane_reader` does; ``n``: ``len(frames)`` when the caller
        knows it, 0 otherwise: a batch's ``len`` is a call of Python). Never raises.

        The receive lane (mrcnet/core/rxlane.py) goes through the batch and handles the
        common case of data for the QP it serves on its own; each frame it stops at
        takes the path below (:meth:`_lane_frame`), and so does each SACK it finds due.
        Data frames that take that path set the lane to their QP."""
        if not n:
            n = len(frames)
            if not n:
                return
        host = self.host
        host._last_now = now
        host.rx_frames += n
        lane = self._lane
        p = host.ports.get(port)
        if lane is None or p is None or not host.port_up[port]:
            self._receive_frames(frames, port, now)
            return
        loaded = None
        one = False
        if slots is not None and self._lane_slots:  # (views into the slots: not one)
            if in_lane is not lane:  # (else the read pointed the lane at them)
                lane.load_slots(slots, n)
        elif n == 1 and self._lane_slots and (type(f0 := frames[0]) is bytearray
                                              or type(f0) is bytes):
            # one plain frame and the C lane (mrc-sim's hosts): run_one, no load and
            # release
            one = True
        else:
            loaded = lane.load(frames)
            if loaded is None:  # a buffer the lane cannot read: frame by frame
                self._receive_frames(frames, port, now)
                return
            frames = loaded
        if host.memory.generation != self._lane_gen:  # a region went: forget them all
            lane.clear_mrs()
            self._lane_gen = host.memory.generation
        # What the lane was set up with for its QP and the ack QP: checked only when one
        # of those QPs changed since (QueuePair.setup_ver), which it seldom does
        qp = self._lane_qp
        if qp is not None and (qp.setup_ver != self._lane_seen or VERIFY_SETUP):
            self._lane_check()
        aq = self._ack_qp
        if aq is not None:  # _ack_sync's common case, inlined (once per batch)
            rec = aq.rec  # (its parts' attributes: QueuePair's are properties)
            if (aq.setup_ver == self._ack_seen and not rec.lost_log and not rec.suspects
                    and not VERIFY_SETUP):
                una, nxt = rec.snd_una, aq.snd.next_seq
                if una != self._ack_una or nxt != self._ack_nxt:  # (else the lane has them)
                    self._ack_una, self._ack_nxt = una, nxt
                    lane.ack_sync(una, nxt, self._ack_floor)
            else:
                self._ack_sync()
        plane, run, ctrl = p.plane, lane.run, host._ctrl
        if one:  # (CRxLane.run_one, inlined: its C entry straight from here)
            run_one, buf = lane.one, lane.cdata_of
        marked = -1  # the lane's QP is in _dirty and _sendq (nothing clears them in here)
        i = 0
        qp = self._lane_qp  # (only _lane_frame changes it)
        if qp is not None:  # _sack_sync's common case, inlined (once per batch)
            evm = self._sack_evm
            if (qp.setup_ver != self._sack_seen or VERIFY_SETUP
                    or (evm is not None and evm.usable_planes is not self._sack_usable)):
                self._sack_sync(qp)
            # (the C lane completes writes-with-immediate: its state given when it moved)
            if self._lane_slots and (qp.resp.imm_ver != self._imm_seen or VERIFY_SETUP):
                self._imm_seen = qp.resp.lane_imm_setup(lane, self._imm_seen, VERIFY_SETUP)
        try:
            while i < n:
                r = (run_one(f0 if type(f0) is bytes else buf(f0), len(f0), now, plane)
                     if one else run(i, n, now, plane))
                k, st = r >> RX_POS_SHIFT, r & 3
                # SACKs the lane took (for the ack QP): their decisions, before anything else
                acks = self._ack_replay(now) if r & RX_ACKS else 0
                # the SACKs (and NACKs) the lane built, in their place among the rest
                nacks = self._take_built(lane, qp, ctrl) if r & RX_SACKS else 0
                if r & RX_IMM:  # writes-with-immediate completed (after those SACKs)
                    assert qp is not None
                    self._lane_imms(qp, now, acks)
                # data frames the lane handled (qp's), the trimmed ones it NACKed included
                # (frame k too after RX_SACK and RX_DONE: the odd results)
                got = k - i + (st & 1) - acks
                if got:  # (then the lane has a QP)
                    assert qp is not None
                    qp.resp.rx_packets += got - nacks  # (qp.rx_packets: a property)
                    if r & RX_ACKAT:  # the lane moved ack_at (QPTimers.refresh)
                        qp.tv += 1
                    if marked != qp.qpn:
                        marked = qp.qpn
                        host._dirty.add(marked)
                        host._sendq.add(marked)
                if st != RX_END:
                    if st == RX_SACK:
                        assert qp is not None
                        self._sack_due(qp, now, ctrl)
                    elif st == RX_STOP:
                        qp = self._lane_stop(lane, frames[k], port, plane, now)
                        marked = -1
                i = k + 1
        except Exception as e:  # a bug (frames are handled above): count it loudly, and
            # what the lane built still goes out
            self.host.last_internal_error = e
            self.host.count("rx_internal_error")
            if qp is not None:
                self._take_built(lane, qp, ctrl)
                self._ack_check(qp)
        finally:
            if loaded is not None:
                lane.release()

    def receive_one(self, frame: bytes, port: int, now: float) -> None:
        """:meth:`receive_batch` of the one frame ``frame`` (bytes), for a host handed
        one frame at a time (mrc-sim's): the same calls into the core in the same order,
        without the batch's generality, when the C lane has nothing to be brought in
        step first (its QP's and the ack QP's setup, planes and immediate state as last
        given, the ack QP without lost records or suspect paths, the regions, the port
        up); anything else is :meth:`receive_batch`'s. Never raises."""
        self.receive_at(frame, len(frame), port, now, None)

    def receive_at(self, frame: Any, size: int, port: int, now: float, buf: Any) -> None:
        """:meth:`receive_one` of the ``size``-byte frame at ``frame``: its bytes (``buf``
        None), or a ``uint8_t *`` into ``buf``, a cffi buffer of the same memory (mrc-sim's
        C network's, where the frame arrived), which the C lane reads in place: the frame
        is copied out of it (``buf[:size]``, bytes) only for a path that keeps it, a
        frame the lane stops at or :meth:`receive_batch`'s. Never raises."""
        host, qp, aq = self.host, self._lane_qp, self._ack_qp
        p = host.ports.get(port)
        if (qp is None or VERIFY_SETUP or not self._lane_slots or p is None
                or qp.setup_ver != self._lane_seen or qp.setup_ver != self._sack_seen
                or qp.resp.imm_ver != self._imm_seen
                or not host.port_up[port] or host.memory.generation != self._lane_gen
                or (aq is not None and (aq.setup_ver != self._ack_seen or aq.rec.lost_log
                                        or aq.rec.suspects))
                or (self._sack_evm is not None
                    and self._sack_evm.usable_planes is not self._sack_usable)):
            self.receive_batch((frame if buf is None else buf[:size],), port, now)
            return
        host._last_now = now
        host.rx_frames += 1
        lane, ctrl, plane = self._lane, host._ctrl, p.plane
        if aq is not None:
            una, nxt = aq.rec.snd_una, aq.snd.next_seq
            if una != self._ack_una or nxt != self._ack_nxt:  # (else the lane has them)
                self._ack_una, self._ack_nxt = una, nxt
                lane.ack_sync(una, nxt, self._ack_floor)
        try:  # (receive_batch's loop body for its one frame)
            r = lane.one(frame, size, now, plane)
            st = r & 3
            acks = self._ack_replay(now) if r & RX_ACKS else 0
            nacks = self._take_built(lane, qp, ctrl) if r & RX_SACKS else 0
            if r & RX_IMM:
                self._lane_imms(qp, now, acks)
            if (r >> RX_POS_SHIFT) + (st & 1) - acks:  # a data frame of qp's, handled
                qp.resp.rx_packets += 1 - nacks
                if r & RX_ACKAT:  # (a SACK it built disarmed it, or the frame armed it)
                    qp.tv += 1
                host._dirty.add(qp.qpn)
                host._sendq.add(qp.qpn)
            if st == RX_SACK:
                self._sack_due(qp, now, ctrl)
            elif st == RX_STOP:
                self._lane_stop(lane, frame if buf is None else buf[:size], port, plane, now)
        except Exception as e:  # (as receive_batch's)
            host.last_internal_error = e
            host.count("rx_internal_error")
            self._take_built(lane, qp, ctrl)
            self._ack_check(qp)

    def _lane_imms(self, qp: QueuePair, now: float, acks: int) -> None:
        """The writes-with-immediate the lane completed (RX_IMM), after the SACKs it
        took (``acks`` of them) were replayed."""
        lane = self._lane
        qp.resp.lane_completed(lane.imm_rec, lane.take_imm_n(), now)
        if acks:  # (what the replay decided may pause the ack lane)
            self._ack_sync()

    def _sack_due(self, qp: QueuePair, now: float, ctrl: list[tuple[int, bytes]]) -> None:
        """The lane's QP ``qp`` owes a SACK now that the lane did not build (RX_SACK)."""
        try:
            qp.send_sack(now, ctrl)
            self._sack_sync(qp)  # a new path
        except Exception as e:  # never crash on network input; count it
            self.host.last_internal_error = e
            self.host.count("rx_internal_error")

    def _lane_stop(self, lane: Any, frame: bytes | bytearray | memoryview, port: int,
                   plane: int, now: float) -> QueuePair | None:
        """A frame the lane stopped at (RX_STOP), through :meth:`_lane_frame`, and the
        lane brought in step with what that changed; returns the lane's QP then."""
        self._lane_frame(lane, frame, port, plane, now)
        qp = self._lane_qp
        if qp is not None:  # (its planes or credit may have changed)
            self._sack_sync(qp)
            if self._lane_slots:
                self._imm_seen = qp.resp.lane_imm_setup(lane, self._imm_seen, VERIFY_SETUP)
        if self._ack_qp is not None:  # (its window or losses may have)
            self._ack_sync()
        return qp

    @staticmethod
    def _take_built(lane: Any, qp: QueuePair | None, ctrl: list[tuple[int, bytes]]) -> int:
        """The frames the lane built for its QP ``qp`` into ``ctrl``, counted as the
        per-frame path counts them (send_sack, and on_data's NACK of a trimmed packet:
        rx_trimmed, tx_nack and their _lasthop); returns how many were NACKs."""
        assert qp is not None
        built = lane.take_sacks()
        ctrl += built
        # (a SACK built disarmed the lane's ack_at: the run says so, RX_ACKAT)
        nacks = lane.nacks
        qp.resp.tx_sacks += len(built) - nacks  # (qp.tx_sacks: a property)
        if nacks:
            last = lane.nacks_last
            qp.count_each((("rx_trimmed", nacks), ("rx_trimmed_lasthop", last),
                           ("tx_nack", nacks), ("tx_nack_lasthop", last)) if last
                          else (("rx_trimmed", nacks), ("tx_nack", nacks)))
        return int(nacks)

    @staticmethod
    def _ack_check(qp: QueuePair) -> None:
        """After a run that raised (its RX_ACKAT unknown): the QP's timer version moved
        if the lane's ``ack_at`` differs from the one its deadline last read."""
        if qp.resp.rx.ack_at != qp.ack_seen:
            qp.tv += 1

    def _lane_frame(self, lane: Any, frame: bytes | bytearray | memoryview, port: int,
                    plane: int, now: float) -> None:
        """A frame the lane stopped at, its parse in ``lane``: what the per-frame path
        does with it (the lane then serves the QP of a data frame that got to on_data)."""
        if lane.why == WHY_PARSE:
            reason = lane.malformed()
            if reason is None:
                self.host.last_internal_error = lane.error
                self.host.count("rx_internal_error")
            else:
                self.host.count(f"rx_malformed_{reason.value}")
            return
        f = lane.parsed
        try:
            dest_qp = f.dest_qp
            if f.has_neth and dest_qp != ENDPOINT_QPN:
                # (a NACK, the lane's most common stop: Host._dispatch's own branch,
                # without its port check, which receive_batch made)
                qp = self._ready_qp(f, frame)
                if qp is not None:
                    qp.on_nack(f, now)
                self._lane_check()
                return
            if not (f.is_data or f.has_seth) or dest_qp == ENDPOINT_QPN:
                self.host._dispatch(f, frame, port, now)
                self._lane_check()
                return
            qp = self._ready_qp(f, frame)
            if qp is None:
                return
            if not f.is_data:
                qp.on_sack(f, now)
                if qp is not self._ack_qp:
                    self._ack_use(qp)
                self._lane_check()
                return
            rkey = f.rkey if lane.why == WHY_MR_MISS else None
            qp.on_data(f, frame, plane, now, self.host._ctrl)
            if rkey is not None:  # a region the lane has not met yet
                mr = self.host.memory.lookup(rkey)
                if mr is not None and mr.remote_write:
                    lane.add_mr(mr)
            if qp is not self._lane_qp:
                self._lane_use(qp)
            else:
                self._lane_check()
        except Exception as e:  # never crash on network input; count it loudly
            self.host.last_internal_error = e
            self.host.count("rx_internal_error")

    def _ready_qp(self, f: PyParsed, frame: bytes | bytearray | memoryview
                  ) -> QueuePair | None:
        """The frame's QP if it is ready and the frame comes from its peer (then marked
        for timers and sending), else None (counted)."""
        dest_qp = f.dest_qp
        qp = self.host._qps.get(dest_qp)
        if qp is None:
            self.host.count("rx_unknown_qpn")
            return None
        if qp.state is not RTS and qp.state is not RTR:
            self.host.count("rx_qp_not_ready")
            return None
        o = f.src_off
        if bytes(frame[o : o + 16]) not in qp.peer_ips:
            self.host.count("rx_wrong_peer")
            return None
        self.host._dirty.add(dest_qp)
        self.host._sendq.add(dest_qp)
        return qp

    def _lane_use(self, qp: QueuePair) -> None:
        """The lane serves ``qp`` (a ready QP) from now on."""
        # (set_qp and clear_qp reset the lane's)
        self._lane_seen = self._sack_seen = self._imm_seen = -1
        st = qp.state
        if ((st is not RTS and st is not RTR)
                or self.host._qps.get(qp.qpn) is not qp):
            self._lane.clear_qp()
            self._lane_qp = None
            return
        cfg, mpr = self.host.config, qp.attrs.mpr_dest
        win = mpr * MPR_UNIT if mpr else cfg.rx_window
        if self._lane.set_qp(qp.qpn, qp.rx, qp.peer_ips, win, cfg.ack_every, cfg.ack_delay,
                             cfg.reorder_floor, cfg.sack_on_reorder, cfg.ack_req_burst,
                             cfg.ack_gap_fill, cfg.ack_late, cfg.ack_span):
            self._lane_qp, self._lane_peers, self._lane_win = qp, qp.peer_ips, win
            self._lane_seen = qp.setup_ver
        else:
            self._lane_qp = None

    def _sack_sync(self, qp: QueuePair) -> None:
        """``qp.lane_sack_setup`` (the lane's QP ``qp``), unless nothing it reads moved
        since the last call: the QP's setup_ver (its EV manager, paths, SACK templates
        and lane planes), the EV manager's usable planes (a new list on each change) and
        the lane's QP (_lane_use)."""
        lane = self._lane
        evm = qp.resp.evm
        usable = evm.usable_planes if evm is not None else None
        if qp.setup_ver == self._sack_seen and usable is self._sack_usable:
            if VERIFY_SETUP:
                before = (lane.sack_planes, lane.npaths, lane.nplanes)
                qp.lane_sack_setup(lane)
                if (lane.sack_planes, lane.npaths, lane.nplanes) != before:
                    raise AssertionError(
                        f"QP {qp.qpn}: the lane's SACK setup changed and setup_ver did "
                        "not move (a writer without changed())")
            return
        qp.lane_sack_setup(lane)
        self._sack_seen, self._sack_evm, self._sack_usable = qp.setup_ver, evm, usable

    def _ack_use(self, qp: QueuePair) -> None:
        """The lane takes ``qp``'s SACKs from now on (when :meth:`_ack_sync` allows)."""
        self._ack_qp = qp
        self._ack_seen = self._ack_una = self._ack_nxt = -1
        self._ack_txt, self._ack_peers = qp.txt, qp.peer_ips
        if not self._lane.set_ack(qp.qpn, qp.txt, qp.peer_ips, qp._txcap):
            self._ack_qp = None

    def _ack_sync(self) -> None:
        """Before the lane runs: let it take the ack QP's SACKs, from where its window is
        now, if on_sack's decisions cannot change what a later SACK's table work does
        (rxlane.h struct mrc_rx_ack): the QP is sending, keeps no "declared lost" records
        and suspects no path. Else every SACK stops and takes the full path."""
        qp = self._ack_qp
        assert qp is not None
        lane = self._lane
        una, nxt = self._ack_una, self._ack_nxt
        self._ack_una = self._ack_nxt = -1  # (set again below when the lane is synced)
        if qp.setup_ver == self._ack_seen:  # the checks below that do not need it passed
            if VERIFY_SETUP:
                self._verify_ack(qp)
            rec = qp.rec  # (its parts' attributes: QueuePair's are properties)
            if rec.lost_log or rec.suspects:
                lane.ack_pause()
                return
            now_una, now_nxt = rec.snd_una, qp.snd.next_seq
            self._ack_una, self._ack_nxt = now_una, now_nxt
            if una == now_una and nxt == now_nxt:  # the lane has them (as the batch loop)
                if not VERIFY_SETUP:
                    return
                self._verify_ack_sync(una, nxt)
            lane.ack_sync(now_una, now_nxt, self._ack_floor)
            return
        if (qp.state is not RTS or qp.lost_log or qp.suspects or qp.evm is None
                or qp.cc is None):
            lane.ack_pause()
            return
        if self.host._qps.get(qp.qpn) is not qp:  # destroyed
            lane.ack_pause()
            self._ack_qp = None
            return
        if qp.txt is not self._ack_txt or qp.peer_ips is not self._ack_peers:
            self._ack_use(qp)  # a new table (reset) or new peers
            if self._ack_qp is None:
                return
        self._ack_seen, self._ack_floor = qp.setup_ver, forged.early_floor(qp.cfg.ack_rtt_floor)
        self._ack_una, self._ack_nxt = qp.snd_una, qp.next_seq
        lane.ack_sync(qp.snd_una, qp.next_seq, self._ack_floor)

    def _verify_ack(self, qp: QueuePair) -> None:
        """(VERIFY_SETUP) The ack QP's setup_ver did not move: neither did what it guards."""
        if not (qp.state is RTS and qp.evm is not None and qp.cc is not None
                and self.host._qps.get(qp.qpn) is qp and qp.txt is self._ack_txt
                and qp.peer_ips is self._ack_peers
                and self._ack_floor == forged.early_floor(qp.cfg.ack_rtt_floor)):
            raise AssertionError(f"QP {qp.qpn}: the ack lane's setup changed and "
                                 "setup_ver did not move (a writer without changed())")

    def _verify_ack_sync(self, una: int, nxt: int) -> None:
        """(VERIFY_SETUP) The batch loop would skip ``ack_sync(una, nxt)`` (the window it
        last handed over did not move): the lane must be taking SACKs with exactly that."""
        state = getattr(self._lane, "ack_state", None)
        if state is not None and state() != (una, nxt, self._ack_floor, True):
            raise AssertionError(f"the ack lane holds {state()}, not the window "
                                 f"{(una, nxt, self._ack_floor)} it was last given "
                                 "(a change of the lane's ack setup without a reset of "
                                 "_ack_una)")

    def _ack_replay(self, now: float) -> int:
        """on_sack's decisions for the SACKs the lane took (in order); returns how many."""
        qp = self._ack_qp
        assert qp is not None
        n: int
        if self._lane_slots:  # the C lane: its arrays straight to the records' C
            lane = self._lane
            n = lane.take_ack_n()
            qp.rec.on_lane_records(lane.ack_rec, lane.ack_sent, n, now)
        else:
            ints, sents_ = self._lane.take_acks()
            qp.on_sack_records(ints, sents_, now)
            n = len(sents_)
        qpn = qp.qpn
        self.host._dirty.add(qpn)
        self.host._sendq.add(qpn)
        return n

    def _lane_check(self) -> None:
        """Is the lane's QP still ready, with the same state record, peers and window?
        (Between batches the API, the timers or a frame may have changed any of them.)"""
        qp = self._lane_qp
        if qp is None:
            return
        seen = qp.setup_ver == self._lane_seen
        if seen and not VERIFY_SETUP:
            return
        mpr = qp.attrs.mpr_dest
        win = mpr * MPR_UNIT if mpr else self.host.config.rx_window
        st = qp.state
        if ((st is not RTS and st is not RTR) or qp.rx is not self._lane.qp
                or qp.peer_ips is not self._lane_peers or win != self._lane_win
                or self.host._qps.get(qp.qpn) is not qp):
            if seen:  # (VERIFY_SETUP)
                raise AssertionError(f"QP {qp.qpn}: the receive lane's setup changed and "
                                     "setup_ver did not move (a writer without changed())")
            self._lane_use(qp)
        elif not seen:
            # (its attributes may have moved too: max_wimm_dest, read by lane_imm_setup)
            self._lane_seen, self._imm_seen = qp.setup_ver, -1

    def _receive_frames(self, frames: Sequence[bytes | bytearray | memoryview], port: int,
                        now: float) -> None:
        """:meth:`receive_batch` frame by frame, without the lane (a port that is down,
        or no lane): the data and SACKs of a ready QP go to it without
        :meth:`_dispatch`."""
        parse, verify = self.host._parser.parse, self.host.config.verify_checksums
        p = self.host.ports.get(port)
        up = p is not None and self.host.port_up[port]
        plane, qps, ctrl = p.plane if p is not None else -1, self.host._qps, self.host._ctrl
        rts, rtr = RTS, RTR
        dirty, sendq = self.host._dirty, self.host._sendq
        last = -1  # the QP of the previous data or SACK frame
        marked = False  # ``last`` is in _dirty and _sendq (nothing clears them in here)
        qp: QueuePair | None = None
        for frame in frames:
            try:
                if type(frame) is memoryview and (frame.itemsize != 1 or frame.ndim != 1):
                    frame = frame.cast("B")  # offsets below are byte offsets
                f = parse(frame, verify)
            except MalformedFrame as e:
                self.host.count(f"rx_malformed_{e.reason.value}")
                continue
            except Exception as e:  # a parser bug must not take the host down
                self.host.last_internal_error = e
                self.host.count("rx_internal_error")
                continue
            try:
                if not up:
                    self.host.count("rx_port_down")
                    continue
                # _dispatch inlined for data and SACKs (the QP looked up once per run
                # of frames for it); anything else goes through _dispatch itself.
                dest_qp = f.dest_qp
                if not (f.is_data or f.has_seth) or dest_qp == ENDPOINT_QPN:
                    self.host._dispatch(f, frame, port, now)
                    continue
                if dest_qp != last or qp is None:
                    qp = qps.get(dest_qp)
                    if qp is None:
                        last = -1
                        self.host.count("rx_unknown_qpn")
                        continue
                    last, marked = dest_qp, False
                st = qp.state
                if st is not rts and st is not rtr:
                    self.host.count("rx_qp_not_ready")
                    continue
                o = f.src_off
                if bytes(frame[o : o + 16]) not in qp.peer_ips:
                    self.host.count("rx_wrong_peer")
                    continue
                if not marked:
                    dirty.add(dest_qp)
                    sendq.add(dest_qp)
                    marked = True
                if f.is_data:
                    qp.on_data(f, frame, plane, now, ctrl)
                else:
                    qp.on_sack(f, now)
            except Exception as e:  # never crash on network input; count it loudly
                self.host.last_internal_error = e
                self.host.count("rx_internal_error")
