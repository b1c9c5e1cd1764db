"""mrcd's client-facing half: the verbs requests of :mod:`mrcnet.api` and connecting QPs.

Follow one request: the API server (:mod:`mrcnet.daemon.apiserver`) hands a message to
:meth:`Verbs.dispatch`, which calls ``_op_<name>``; the answer goes back by the server.
``connect`` talks to the peer's mrcd over the control channel
(:mod:`mrcnet.daemon.control`), whose server side ends in
:meth:`Verbs.on_connect_request`. Every request that changed the core is followed by one
``pump`` (per burst of requests) of the engine :class:`Verbs` holds (:class:`Engine`:
:class:`mrcnet.daemon.engine.Daemon`). Here also live the ownership tables (which client
owns which QP, CQ, region, listen) that decide where completions and events go
(:meth:`Verbs.deliver`) and what a client may touch.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import mmap
import resource
import secrets
import time
from collections.abc import Awaitable
from typing import Any, Final, Protocol

from mrcnet import core
from mrcnet.api.errors import (
    BadLkey,
    ConnectError,
    InvalidArgument,
    InvalidCQ,
    InvalidQP,
)
from mrcnet.api.protocol import Message, map_region, moderation_error
from mrcnet.api.shmqueues import F_UNSIGNALED
from mrcnet.constants import PSN_MASK
from mrcnet.core import Access, EVState, QPState
from mrcnet.core.endpoint import PathProbe
from mrcnet.daemon.apiserver import ApiServer, Session
from mrcnet.daemon.config import CC_PROFILES, EV_PROFILES, DaemonConfig
from mrcnet.daemon.control import (
    ACCEPT_TIMEOUT,
    Acceptance,
    ConnectRequest,
    ControlError,
    control_request,
    pair_token,
)
from mrcnet.daemon.delivery import Delivery
from mrcnet.daemon.guard import check_region_fd, over_limit
from mrcnet.daemon.listens import Listen, Listens
from mrcnet.daemon.paths import FabricPaths, StaticPaths, UnknownPeer
from mrcnet.daemon.posts import Posts
from mrcnet.daemon.rings import CompletionWriter
from mrcnet.daemon.signalling import Signalling
from mrcnet.io import IOSetupError, PacketPort

__all__ = ["PROBE_SERVICE", "Engine", "Verbs"]


def _cpu_seconds() -> dict[str, float]:
    """mrcd's own CPU time so far (user, system; s): what a pass or a message costs."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"user": ru.ru_utime, "system": ru.ru_stime}


#: Control-channel service of a probe hello (``mrcctl probe``): the prober's mrcd tells
#: the peer's mrcd who it is, so the peer answers EV probes before any QP joins them. No
#: application may listen on it.
PROBE_SERVICE: Final = -1
#: ``mrcctl probe``: default and largest probe rounds, the gap between rounds (s), and how
#: long to wait for answers after the last round (s; mrcd's RTT is 1-3 ms, but a
#: scheduling hiccup on a busy host can hold an answer for tens of ms).
PROBE_COUNT: Final = 5
PROBE_MAX_COUNT: Final = 1000
PROBE_GAP: Final = 0.02
PROBE_WAIT: Final = 1.0
#: Seconds a probe hello may take per address of the peer (fails fast when unreachable).
PROBE_HELLO_TIMEOUT: Final = 2.0
#: How often the probe coroutine looks whether every answer is in (s).
PROBE_POLL: Final = 0.005
_INF: Final = float("inf")
#: The largest backlog of a listen (connects waiting for the listener's next QP).
MAX_BACKLOG: Final = 4096


class Engine(Protocol):
    """What :class:`Verbs` needs of mrcd's engine (:class:`mrcnet.daemon.engine.Daemon`):
    its configuration, core, paths, ports and API server to read, its logger, and the
    two calls after a request changed the core."""

    @property
    def cfg(self) -> DaemonConfig:
        """mrcd's configuration."""

    @property
    def host(self) -> core.Host | None:
        """The core (None before ``open``)."""

    @property
    def paths(self) -> FabricPaths | StaticPaths | None:
        """How peers are reached (None before ``open``)."""

    @property
    def ports(self) -> list[PacketPort]:
        """The NIC ports, in the core's port order."""

    @property
    def api(self) -> ApiServer | None:
        """The client API server (its sessions get the events that concern every client)."""

    @property
    def errors(self) -> int:
        """Internal errors caught so far (reported in stats)."""

    @property
    def passes(self) -> dict[str, int]:
        """Loop passes so far by what woke them (reported in stats)."""

    @property
    def log(self) -> Any:
        """mrcd's structured logger."""

    def pump(self, now: float | None = None) -> None:
        """Send what the core has, deliver completions and events, re-arm the timer."""

    def guarded(self, what: str) -> None:
        """Log an internal error caught in ``what``; mrcd keeps going."""

    def after_requests(self) -> None:
        """The end of a burst of a client's posts: send what they made (one pump)."""


class Verbs:
    """Client requests and QP connection management, on the engine it is given."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # Ownership, for pushes and clean-up; the CQs and their moderation live with
        # the delivery of what the core has for clients.
        self.delivery = Delivery(engine.log)
        self._cqs = self.delivery.cqs
        self._qp_owner: dict[int, Session] = {}
        #: The QPs created with sq_sig_all false (selective signalling).
        self.signalling = Signalling()
        #: Work requests into the core (shared send queues and JSON posts).
        self.posts = Posts(engine, self._qp_owner, signalling=self.signalling)
        self._mr_by_lkey: dict[int, tuple[core.MemoryRegion, mmap.mmap, Session]] = {}
        self.listens = Listens(engine.cfg.host)
        #: CQs of clients that are gone (the core has no destroy_cq), for new clients.
        self._spare_cqs: list[core.CompletionQueue] = []

    def dispatch(self, s: Session, msg: Message,
                 fds: list[int]) -> Message | Awaitable[Message]:
        """One client request: ``_op_<name>``'s answer, or an awaitable of it (raises
        :class:`~mrcnet.api.errors.ApiError` to refuse it)."""
        op = msg.get("op")
        handler = getattr(self, f"_op_{op}", None)
        if handler is None or not isinstance(op, str):
            raise InvalidArgument(f"unknown request {op!r}")
        with_fds = op in ("reg_mr", "create_cq")
        if fds and not with_fds:  # (the API server closes every fd it received)
            raise InvalidArgument(f"{op} takes no file descriptor")
        try:
            result: Message | Awaitable[Message] = (
                handler(s, msg, fds) if with_fds else handler(s, msg))
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidArgument(f"{op}: bad or missing argument {e}") from None
        except (core.InvalidRequest, core.InvalidAttribute, core.IllegalTransition) as e:
            raise InvalidQP(str(e)) from None
        return result  # the API server calls after_requests once per burst

    def after_requests(self) -> None:
        """After a burst of requests: one pump for all of them."""
        try:
            self.engine.pump()
        except Exception:
            self.engine.guarded("requests")

    def _qpn(self, s: Session, msg: Message) -> int:
        qpn = int(msg["qpn"])
        if self._qp_owner.get(qpn) is not s:
            raise InvalidQP(f"no QP {qpn} in this context")
        return qpn

    def _op_reg_mr(self, s: Session, msg: Message, fds: list[int]) -> Message:
        assert self.engine.host is not None
        if len(fds) != 1:
            raise InvalidArgument("reg_mr needs exactly one memfd")
        length = int(msg["length"])
        lim = self.engine.cfg.limits
        if len(s.mrs) >= lim.max_mrs:
            raise over_limit(f"reg_mr: this client has {len(s.mrs)} memory regions",
                             "limits.max_mrs", lim.max_mrs)
        if s.mr_bytes + length > lim.max_mr_bytes:
            raise over_limit(f"reg_mr: {length} bytes more would make this client's "
                             f"regions {s.mr_bytes + length} bytes",
                             "limits.max_mr_bytes", lim.max_mr_bytes)
        check_region_fd(fds[0], length)  # sealed: it can never shrink under the mapping
        # The API server closes the fd afterwards; the mapping keeps the memory.
        mp = map_region(fds[0], length, "mrcd")
        mr = self.engine.host.register_mr(mp, Access(int(msg.get("access", 3))))
        self._mr_by_lkey[mr.lkey] = (mr, mp, s)
        s.mrs[mr.lkey] = mr
        s.mr_bytes += mr.length
        return {"lkey": mr.lkey, "rkey": mr.rkey, "addr": mr.addr}

    def _release_mr(self, lkey: int) -> None:
        assert self.engine.host is not None
        mr, _map, s = self._mr_by_lkey.pop(lkey)
        if s.mrs.pop(lkey, None) is not None:
            s.mr_bytes -= mr.length
        self.engine.host.deregister_mr(mr)
        # Nothing here is released or closed: writes posted from the region before this
        # may still be on their way, and their work requests read it through the
        # region's own view (their frames' payloads are sent from it). Releasing that
        # view stopped each pass of the sender at them (and every QP after them in the
        # pass) and left them waiting forever. The region is unmapped when the last
        # reference to its view goes: here, or with the last of those writes.

    def _op_dereg_mr(self, s: Session, msg: Message) -> Message:
        lkey = int(msg["lkey"])
        if lkey not in s.mrs:
            raise BadLkey(f"lkey {lkey:#x} is not a region of this context")
        self._release_mr(lkey)
        return {}

    @property
    def mod_due(self) -> float:
        """When the engine's timer must wake for a moderated CQ or a full ring."""
        return self.delivery.due

    def _op_create_cq(self, s: Session, msg: Message, fds: list[int]) -> Message:
        assert self.engine.host is not None
        lim = self.engine.cfg.limits.max_cqs
        if len(s.cqs) >= lim:
            raise over_limit(f"create_cq: this client has {len(s.cqs)} CQs",
                             "limits.max_cqs", lim)
        writer = None
        if fds:
            if s.queues is None or len(fds) != 1:
                raise InvalidArgument("create_cq takes one memfd (the CQ's ring), after a "
                                      "hello with a send queue")
            writer = CompletionWriter(fds[0], msg.get("slots"))
        # The core keeps every CQ it made: reuse those of clients that are gone.
        if self._spare_cqs:
            cq = self._spare_cqs.pop()
            cq.poll(len(cq))
        else:
            cq = self.engine.host.create_cq()
        if writer is not None:
            s.queues.cqs[cq.handle] = writer
        self.delivery.add(cq.handle, cq, s, writer)
        s.cqs.add(cq.handle)
        return {"cq": cq.handle}

    def _op_modify_cq(self, s: Session, msg: Message) -> Message:
        handle = int(msg["cq"])
        entry = self._cqs.get(handle)
        if entry is None or entry[1] is not s:
            raise InvalidCQ(f"no CQ {handle} in this context")
        count, period_us = msg.get("count"), msg.get("period_us")
        why = moderation_error(count, period_us)
        if why is not None:
            raise InvalidArgument(why)
        assert isinstance(count, int) and isinstance(period_us, int)
        self.delivery.moderate(handle, count, period_us / 1e6)
        self.delivery.since.pop(handle, None)
        return {}

    def _op_create_qp(self, s: Session, msg: Message) -> Message:
        assert self.engine.host is not None
        handle = int(msg["cq"])
        entry = self._cqs.get(handle)
        if entry is None or entry[1] is not s:
            raise InvalidCQ(f"no CQ {handle} in this context")
        lim = self.engine.cfg.limits.max_qps
        if len(s.qps) >= lim:
            raise over_limit(f"create_qp: this client has {len(s.qps)} QPs",
                             "limits.max_qps", lim)
        qpn = self.engine.host.create_qp(entry[0])
        init: dict[str, Any] = {
            "ev_profile": msg.get("ev_profile") or self.engine.cfg.ev_profile,
            "cc_profile": msg.get("cc_profile") or self.engine.cfg.cc_profile,
        }
        if msg.get("max_imm") is not None:
            init["max_imm_outstanding"] = int(msg["max_imm"])
        self._qp_owner[qpn] = s
        s.qps.add(qpn)
        try:
            self.engine.host.modify_qp(qpn, QPState.INIT, **init)
        except core.InvalidAttribute as e:
            self._destroy_qp(qpn)
            raise InvalidArgument(str(e)) from None
        if msg.get("sq_sig_all", True) is False:  # (the answer says it was honoured)
            self.signalling.add_qp(qpn, entry[0])
            return {"qpn": qpn, "sq_sig_all": False}
        return {"qpn": qpn}

    def _destroy_qp(self, qpn: int) -> None:
        assert self.engine.host is not None
        s = self._qp_owner.pop(qpn, None)
        if s is not None:
            s.qps.discard(qpn)
        self.listens.drop_qp(qpn)
        self.signalling.forget(qpn)
        with contextlib.suppress(core.InvalidRequest):
            self.engine.host.destroy_qp(qpn)

    def _op_destroy_qp(self, s: Session, msg: Message) -> Message:
        self._destroy_qp(self._qpn(s, msg))
        return {}

    def _exposed(self, s: Session, lkeys: list[int]) -> list[dict[str, int]]:
        out = []
        for lkey in lkeys:
            mr = s.mrs.get(int(lkey))
            if mr is None:
                raise BadLkey(f"lkey {int(lkey):#x} is not a region of this context")
            out.append({"addr": mr.addr, "length": mr.length, "rkey": mr.rkey})
        return out

    def _op_listen(self, s: Session, msg: Message) -> Message:
        qpn = self._qpn(s, msg)
        service = int(msg["service"])
        if service == PROBE_SERVICE:
            raise InvalidArgument(f"service {service} is reserved (mrcctl probe)")
        self._exposed(s, msg.get("mrs", []))  # check the keys now, not at connect time
        backlog = int(msg.get("backlog", 0))
        if not 0 <= backlog <= MAX_BACKLOG:
            raise InvalidArgument(f"backlog {backlog}: give 0..{MAX_BACKLOG}")
        self.listens.listen(Listen(s, qpn, list(msg.get("mrs", [])), msg.get("private")),
                            service, backlog)
        return {}

    def _op_unlisten(self, s: Session, msg: Message) -> Message:
        self.listens.unlisten(s, int(msg["service"]))
        return {}

    def _qp_profile(self, qpn: int) -> tuple[str, str, int]:
        assert self.engine.host is not None
        a = self.engine.host.qp(qpn).attrs
        cfg = self.engine.cfg
        return (a.ev_profile or cfg.ev_profile, a.cc_profile or cfg.cc_profile,
                a.max_imm_outstanding)

    def _to_rtr(self, qpn: int, peer: str, remote: ConnectRequest, my_psn: int,
                my_token: int) -> None:
        """INIT -> RTR towards the peer's QP (ControlError when the core refuses); the
        endpoint token is both sides' halves combined."""
        assert self.engine.host is not None
        _, _, max_imm = self._qp_profile(qpn)
        try:
            self.engine.host.modify_qp(qpn, QPState.RTR, peer=peer, dest_qp_num=remote.qpn,
                                rq_psn=remote.psn, sq_psn=my_psn,
                                max_imm_outstanding=min(max_imm, remote.max_imm),
                                ep_token=pair_token(my_token, remote.token))
        except (core.InvalidAttribute, core.IllegalTransition, core.InvalidRequest) as e:
            raise ControlError(str(e)) from None

    def _to_rts(self, qpn: int) -> None:
        assert self.engine.host is not None
        try:
            self.engine.host.modify_qp(qpn, QPState.RTS)
        except (core.IllegalTransition, core.InvalidRequest) as e:
            raise ControlError(str(e)) from None

    def _back_to_init(self, qpn: int) -> None:
        """After a connection attempt broke off: the QP is as it was before (INIT)."""
        assert self.engine.host is not None
        if qpn not in self._qp_owner:
            return
        ev, cc, max_imm = self._qp_profile(qpn)
        try:
            if self.engine.host.qp(qpn).state is not QPState.INIT:
                self.engine.host.modify_qp(qpn, QPState.RESET)
                self.signalling.reset(qpn)
                self.engine.host.modify_qp(qpn, QPState.INIT, ev_profile=ev, cc_profile=cc,
                                    max_imm_outstanding=max_imm)
        except (core.InvalidAttribute, core.IllegalTransition, core.InvalidRequest) as e:
            self.engine.log.error("QP not reset after a failed connect", qpn=qpn, error=str(e))

    async def _prepare_peer(self, peer: str) -> None:
        if isinstance(self.engine.paths, StaticPaths):
            # Neighbour discovery may block up to a second: keep the loop running.
            await asyncio.to_thread(self.engine.paths.resolve, peer)

    def _op_connect(self, s: Session, msg: Message) -> Awaitable[Message]:
        qpn = self._qpn(s, msg)
        peer = self._host_named(str(msg["peer"]))  # a name, or one of its addresses
        service = int(msg["service"])
        mrs = self._exposed(s, msg.get("mrs", []))
        return self._connect(s, qpn, peer, service, mrs, msg.get("private"))

    async def _connect(self, s: Session, qpn: int, peer: str, service: int,
                       mrs: list[dict[str, int]], private: Any) -> Message:
        assert self.engine.paths is not None and self.engine.host is not None
        ev, cc, max_imm = self._qp_profile(qpn)
        psn = secrets.randbelow(PSN_MASK + 1)
        token = secrets.randbits(32) or 1

        def on_accept(remote: ConnectRequest) -> None:
            if remote.src != peer:
                raise ControlError(f"{peer}'s control address answered as {remote.src!r}")
            if self._qp_owner.get(qpn) is not s:
                raise ControlError(f"QP {qpn} was destroyed while connecting")
            self._to_rtr(qpn, peer, remote, psn, token)  # ready to receive before "ready"

        try:
            addr = self.engine.paths.control_address(peer)
            port = (self.engine.cfg.peers[peer].control_port if peer in self.engine.cfg.peers
                    else self.engine.cfg.control_port)
            await self._prepare_peer(peer)
            req = ConnectRequest(self.engine.cfg.host, qpn, psn, ev, cc, max_imm, tuple(mrs),
                                 private, service, token)
            remote = await control_request(addr, port, req, on_accept,
                                           accept_timeout=ACCEPT_TIMEOUT)
            if self._qp_owner.get(qpn) is not s:
                raise ControlError(f"QP {qpn} was destroyed while connecting")
            self._to_rts(qpn)
        except (UnknownPeer, ControlError, IOSetupError) as e:
            self._back_to_init(qpn)
            raise ConnectError(f"connecting QP {qpn} to {peer} service {service}: {e}") \
                from None
        self.engine.log.info("QP connected", qpn=qpn, peer=peer, peer_qpn=remote.qpn,
                      service=service)
        self.engine.pump()
        return {"peer": remote.src, "peer_qpn": remote.qpn, "mrs": list(remote.mrs),
                "private": remote.private, "max_imm": remote.max_imm}

    async def on_connect_request(self, req: ConnectRequest) -> Acceptance:
        """A peer's mrcd connects to a service here (the control channel's server side)."""
        if req.service == PROBE_SERVICE:
            return await self._on_probe_hello(req)
        # Reserved for this exchange; with a backlog, waits for the listener's next QP.
        held = await self.listens.take(req.service)
        s, qpn, lkeys, private = held.session, held.qpn, held.lkeys, held.private

        def give_back() -> None:
            if qpn in self._qp_owner:
                self.listens.give_back(req.service, held)

        try:
            ev, cc, max_imm = self._qp_profile(qpn)
            if req.ev_profile != ev:
                raise ControlError(f"EV profile {req.ev_profile!r} does not match {ev!r}")
            await self._prepare_peer(req.src)
            mrs = self._exposed(s, lkeys)
        except (UnknownPeer, IOSetupError, BadLkey, ControlError) as e:
            give_back()
            raise ControlError(str(e)) from None
        psn = secrets.randbelow(PSN_MASK + 1)
        token = secrets.randbits(32) or 1

        def commit() -> None:
            if s.closed or self._qp_owner.get(qpn) is not s:
                raise ControlError(f"the listening QP {qpn} went away")
            self._to_rtr(qpn, req.src, req, psn, token)
            self._to_rts(qpn)
            self.listens.consumed(s, req.service)  # one connection per listen
            s.send({"push": "connected", "qpn": qpn, "peer": req.src, "peer_qpn": req.qpn,
                    "mrs": list(req.mrs), "private": req.private, "max_imm": req.max_imm})
            self.engine.log.info("QP accepted", qpn=qpn, peer=req.src, peer_qpn=req.qpn,
                          service=req.service)
            self.engine.pump()

        def abort() -> None:
            self._back_to_init(qpn)
            give_back()

        reply = ConnectRequest(self.engine.cfg.host, qpn, psn, ev, cc, max_imm, tuple(mrs), private,
                               req.service, token)
        return Acceptance(reply, commit, abort)

    def _op_post_write(self, s: Session, msg: Message) -> Message:
        imm = msg.get("imm")
        self.posts.write(s, int(msg["qpn"]), int(msg.get("wr_id", 0)), int(msg["lkey"]),
                         int(msg["addr"]), int(msg["length"]), int(msg["remote_addr"]),
                         int(msg["rkey"]), None if imm is None else int(imm),
                         0 if msg.get("signaled", True) else F_UNSIGNALED)
        return {}

    def _op_post_recv(self, s: Session, msg: Message) -> Message:
        self.posts.recv(s, self._qpn(s, msg), int(msg.get("wr_id", 0)))
        return {}

    def _op_stats(self, s: Session, msg: Message) -> Message:
        assert self.engine.host is not None
        out: Message = {"host": self.engine.host.counters(),
                        "mrcd_internal_errors": self.engine.errors,
                        "loop_passes": dict(self.engine.passes),
                        "doorbells": (self.engine.api.doorbells if self.engine.api else 0)
                        + self.delivery.lane_bells(),
                        "doorbells_in": self.engine.api.doorbells_in if self.engine.api else 0,
                        "cpu_s": _cpu_seconds(),
                        "ports": {p.ifname: p.snapshot() for p in self.engine.ports}}
        if "qpn" in msg:
            qpn = self._qpn(s, msg)
            out["qp"] = {k: v for k, v in self.engine.host.qp_stats(qpn).items()
                         if isinstance(v, int | float | str | dict | type(None))}
            # The next PSN this QP expects as responder (24 bits), for tools and tests.
            rcv = getattr(self.engine.host.qp(qpn), "rcv_nxt", None)
            if isinstance(rcv, int):
                out["qp"]["rcv_psn"] = rcv & PSN_MASK
            if msg.get("evs"):
                # One entry per EV (plane, path = spine index, state, sent/acked/lost...).
                out["evs"] = list(self.engine.host.ev_stats(qpn).values())
        return out

    # --- admin (mrcctl): every client's QPs; access is gated by the socket's mode ---------

    def _admin_qpn(self, msg: Message) -> int:
        qpn = int(msg["qpn"])
        if qpn not in self._qp_owner:
            raise InvalidQP(f"no QP {qpn} on this host")
        return qpn

    def _op_admin_qps(self, s: Session, msg: Message) -> Message:
        assert self.engine.host is not None
        qps = []
        for qpn in sorted(self._qp_owner):
            info = {k: v for k, v in self.engine.host.qp_stats(qpn).items()
                    if isinstance(v, int | float | str | dict | type(None))}
            info["owner_pid"] = self._qp_owner[qpn].pid
            info["ev_profile"], info["cc_profile"], _ = self._qp_profile(qpn)
            qps.append(info)
        return {"host": self.engine.cfg.host, "qps": qps}

    def _op_admin_evs(self, s: Session, msg: Message) -> Message:
        assert self.engine.host is not None
        qpn = self._admin_qpn(msg)
        return {"qpn": qpn, "evs": list(self.engine.host.ev_stats(qpn).values())}

    def _op_admin_ports(self, s: Session, msg: Message) -> Message:
        assert self.engine.host is not None
        return {"host": self.engine.host.counters(), "mrcd_internal_errors": self.engine.errors,
                "ports": [{"port": i, "ifname": p.ifname, **p.snapshot()}
                          for i, p in enumerate(self.engine.ports)]}

    def _op_admin_profiles(self, s: Session, msg: Message) -> Message:
        return {"ev_profiles": list(EV_PROFILES), "cc_profiles": list(CC_PROFILES),
                "default_ev_profile": self.engine.cfg.ev_profile,
                "default_cc_profile": self.engine.cfg.cc_profile}

    def _admin_ev(self, msg: Message, deny: bool) -> Message:
        assert self.engine.host is not None
        qpn = self._admin_qpn(msg)
        ev = int(msg["ev"])
        ok = self.engine.host.deny_ev(qpn, ev) if deny else self.engine.host.allow_ev(qpn, ev)
        if not ok:
            state = self.engine.host.ev_stats(qpn).get(ev, {}).get("state")
            if state is None:
                raise InvalidArgument(f"QP {qpn} has no EV {ev}")
            raise InvalidArgument(f"EV {ev} of QP {qpn} is {state}: not changed")
        self.engine.log.info("EV denied" if deny else "EV allowed", qpn=qpn, ev=ev)
        return {"qpn": qpn, "ev": ev, "state": self.engine.host.ev_stats(qpn)[ev]["state"]}

    def _op_admin_set_profile(self, s: Session, msg: Message) -> Message:
        """Give a live QP another EV and/or CC profile (effective at once)."""
        assert self.engine.host is not None
        qpn = self._admin_qpn(msg)
        ev, cc = msg.get("ev_profile"), msg.get("cc_profile")
        if ev is None and cc is None:
            raise InvalidArgument("set_profile needs an EV profile, a CC profile or both")
        for kind, name, known in (("EV", ev, EV_PROFILES), ("CC", cc, CC_PROFILES)):
            if name is not None and name not in known:
                raise InvalidArgument(f"unknown {kind} profile {name!r}: this mrcd offers "
                                      f"{', '.join(known)}")
        self.engine.host.set_qp_profiles(qpn, ev_profile=ev, cc_profile=cc, now=time.monotonic())
        ev_now, cc_now, _ = self._qp_profile(qpn)
        self.engine.log.info("QP profile set", qpn=qpn, ev_profile=ev_now, cc_profile=cc_now)
        return {"qpn": qpn, "ev_profile": ev_now, "cc_profile": cc_now,
                "state": self.engine.host.qp(qpn).state.value,
                "evs": len(self.engine.host.ev_stats(qpn))}

    def _op_admin_planes(self, s: Session, msg: Message) -> Message:
        """Per plane: its port's counters and link, and every QP's EVs in it summed."""
        assert self.engine.host is not None
        host = self.engine.host
        rows: dict[int, dict[str, Any]] = {}
        for idx, port in sorted(host.ports.items()):
            st = self.engine.ports[idx].snapshot()  # mrcd's port i is the core's port i
            rows[port.plane] = {
                "plane": port.plane, "ifname": self.engine.ports[idx].ifname,
                "link": "up" if host.port_up[idx] else "down",
                **{k: st.get(k, 0) for k in ("tx_frames", "rx_frames", "tx_dropped",
                                              "rx_link_down")},
                "qps": 0, "evs": 0, **{state.value.lower(): 0 for state in EVState},
                "sent": 0, "acked": 0, "lost": 0, "trimmed": 0, "ecn": 0}
        for qpn in sorted(self._qp_owner):
            seen: set[int] = set()
            for e in host.ev_stats(qpn).values():
                row = rows.get(e["plane"])
                if row is None:
                    continue
                seen.add(e["plane"])
                row["evs"] += 1
                row[str(e["state"]).lower()] += 1
                for k in ("sent", "acked", "lost", "trimmed", "ecn"):
                    row[k] += e[k]
            for plane in seen:
                rows[plane]["qps"] += 1
        return {"host": self.engine.cfg.host, "planes": [rows[p] for p in sorted(rows)]}

    # --- admin probe: EV probes down every path to a host, no QP needed ----------------

    def _peer_name(self, text: str) -> str:
        """A peer to probe, by name or by one of its port addresses (InvalidArgument if
        this mrcd's fabric description or [peers] does not know it)."""
        name = self._host_named(text)
        if name == self.engine.cfg.host:
            raise InvalidArgument(f"{name} is this host: probe another one")
        assert self.engine.paths is not None
        try:
            self.engine.paths.planes(name)
        except UnknownPeer as e:
            raise InvalidArgument(str(e)) from None
        return name

    def _host_named(self, text: str) -> str:
        """The host name for ``text``: a name as it is, or the host that has ``text`` as
        one of its port addresses (InvalidArgument if no host of the fabric or [peers]
        has it)."""
        try:
            addr = ipaddress.IPv6Address(text)
        except ValueError:
            return text
        if isinstance(self.engine.paths, FabricPaths):
            found = [h.name for h in self.engine.paths.desc.hosts
                     if any(ipaddress.IPv6Address(p.address) == addr for p in h.ports)]
        elif isinstance(self.engine.paths, StaticPaths):
            found = [n for n, pc in self.engine.paths.peers.items()
                     if any(ipaddress.IPv6Address(a) == addr for a in pc.addresses)]
        else:
            found = []
        if not found:
            raise InvalidArgument(f"no host of this mrcd's fabric or [peers] has the "
                                  f"address {addr}")
        return found[0]

    def _op_admin_probe(self, s: Session, msg: Message) -> Awaitable[Message]:
        assert self.engine.paths is not None
        peer = self._peer_name(str(msg["host"]))
        count = PROBE_COUNT if msg.get("count") is None else int(msg["count"])
        if not 1 <= count <= PROBE_MAX_COUNT:
            raise InvalidArgument(f"count {count}: give 1..{PROBE_MAX_COUNT}")
        planes: list[int] | None = None
        if msg.get("plane") is not None:
            plane = int(msg["plane"])
            shared = list(self.engine.paths.planes(peer))
            if plane not in shared:
                raise InvalidArgument(f"plane {plane} does not reach {peer} from "
                                      f"{self.engine.cfg.host} (planes: {shared})")
            planes = [plane]
        return self._probe(peer, count, planes)

    def _control_addresses(self, peer: str) -> list[str]:
        """Where ``peer``'s mrcd may be reached: on a fabric, its port address in every
        shared plane, planes whose local port is up first (a hello must not fail just
        because the first plane's port is down); else its one control address."""
        assert self.engine.paths is not None and self.engine.host is not None
        if not isinstance(self.engine.paths, FabricPaths):
            return [self.engine.paths.control_address(peer)]
        host = self.engine.host
        up = {host.ports[i].plane for i, ok in host.port_up.items() if ok}
        them = self.engine.paths.desc.host(peer)
        return [them.port(plane).address for plane in
                sorted(self.engine.paths.planes(peer), key=lambda pl: (pl not in up, pl))]

    async def _probe_hello(self, peer: str) -> str:
        """Tell ``peer``'s mrcd who we are (so it can answer our probes): "ok" or why not."""
        cfg = self.engine.cfg
        port = cfg.peers[peer].control_port if peer in cfg.peers else cfg.control_port
        req = ConnectRequest(cfg.host, 0, 0, cfg.ev_profile, cfg.cc_profile, 0, (), None,
                             PROBE_SERVICE)
        errors = []
        try:
            for addr in self._control_addresses(peer):
                try:
                    await control_request(addr, port, req, timeout=PROBE_HELLO_TIMEOUT)
                except ControlError as e:
                    errors.append(str(e))
                else:
                    return "ok"
        except UnknownPeer as e:
            errors.append(str(e))
        return "; ".join(errors) or f"no control address for {peer}"

    async def _on_probe_hello(self, req: ConnectRequest) -> Acceptance:
        """A peer's mrcd is about to probe us: learn its routes, so its EV probes get an
        answer even though no QP joins the two hosts."""
        assert self.engine.host is not None
        try:
            await self._prepare_peer(req.src)
            if not self.engine.host.learn_peer(req.src):
                raise ControlError(f"no path from {self.engine.cfg.host} to {req.src}")
        except (UnknownPeer, IOSetupError) as e:
            raise ControlError(str(e)) from None
        cfg = self.engine.cfg
        reply = ConnectRequest(cfg.host, 0, 0, cfg.ev_profile, cfg.cc_profile, 0, (), None,
                               PROBE_SERVICE)
        return Acceptance(reply, lambda: None, lambda: None)

    async def _probe(self, peer: str, count: int, planes: list[int] | None) -> Message:
        assert self.engine.host is not None
        host = self.engine.host
        await self._prepare_peer(peer)
        hello = await self._probe_hello(peer)
        probes: list[PathProbe] = []
        try:
            for i in range(count):
                if i:
                    await asyncio.sleep(PROBE_GAP)
                probes += host.probe_paths(peer, time.monotonic(), planes)
                self.engine.pump()
            deadline = time.monotonic() + PROBE_WAIT
            while any(p.rtt is None for p in probes) and time.monotonic() < deadline:
                await asyncio.sleep(PROBE_POLL)
        finally:
            host.forget_probes(probes)
        by_path: dict[tuple[int, int], list[PathProbe]] = {}
        for p in probes:
            by_path.setdefault((p.plane, p.path), []).append(p)
        paths: list[dict[str, Any]] = []
        for (plane, path), ps in sorted(by_path.items()):
            rtts = [p.rtt * 1e6 for p in ps if p.rtt is not None]
            paths.append({
                "plane": plane, "path": path, "ev": ps[0].ev, "sent": len(ps),
                "answered": len(rtts), "lost": len(ps) - len(rtts),
                "rtt_min_us": round(min(rtts), 1) if rtts else None,
                "rtt_avg_us": round(sum(rtts) / len(rtts), 1) if rtts else None,
                "rtt_max_us": round(max(rtts), 1) if rtts else None,
                "port": "up" if host.port_up[host.port_of_plane(plane)] else "down"})
        self.engine.log.info("probed", peer=peer, count=count, paths=len(paths),
                      lost=sum(p["lost"] for p in paths), hello=hello)
        return {"host": self.engine.cfg.host, "peer": peer, "count": count, "hello": hello,
                "paths": paths}

    def _op_admin_deny_ev(self, s: Session, msg: Message) -> Message:
        return self._admin_ev(msg, True)

    def _op_admin_allow_ev(self, s: Session, msg: Message) -> Message:
        return self._admin_ev(msg, False)

    def on_session_closed(self, s: Session) -> None:
        """A client went away: free what it owned (mrcd destroys its QPs)."""
        for qpn in list(s.qps):
            self._destroy_qp(qpn)
        self.listens.drop_session(s)
        for handle in list(s.cqs):
            entry = self._cqs.get(handle)
            if entry is not None:  # its QPs are gone: another client may have it
                entry[0].poll(len(entry[0]))
                self._spare_cqs.append(entry[0])
            self.delivery.forget(handle)
        for lkey in list(s.mrs):
            self._release_mr(lkey)
        if s.queues is not None:
            s.queues.close()

    # --- pushes: what the core has for clients -----------------------------------------

    def deliver(self) -> None:
        """Push what the core has for clients: events, then completions. Events first:
        a QP error's reason then reaches the client before the work requests it failed
        (sent after it, a failed completion could be taken for the whole story by a
        client that read between the two messages)."""
        host = self.engine.host
        assert host is not None
        delivery = self.delivery
        watched = delivery.watched  # (the core's event queues, when mrcd gave them)
        if any(watched) if watched else host.has_events():
            api = self.engine.api
            self.delivery.events(host, self._qp_owner, api.sessions if api is not None
                                 else {})
        if not any(delivery.queues):  # (most passes: nothing waits, nothing is due)
            delivery.due = _INF
            return
        for s in delivery.completions(host):
            self.posts.ring_broken(s, "its completion ring is corrupt")
