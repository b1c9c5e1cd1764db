"""mrcd's engine: the event loop around the sans-I/O core.

Follow one frame: a port's socket becomes readable -> :meth:`Daemon._on_port_readable`
takes a batch (:class:`~mrcnet.io.PacketPort`) and feeds each frame to
``core.Host.receive`` -> :meth:`Daemon._pump` drains ``Host.frames_to_send`` into the
ports (batched), pushes completions and events to the clients that own them, and re-arms
the one timer from ``Host.next_timer``. Client requests (:mod:`mrcnet.daemon.apiserver`)
and peer connect requests (:mod:`mrcnet.daemon.control`) end in the same ``_pump``.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import mmap
import os
import secrets
import socket
import time
from collections.abc import Awaitable
from typing import Any

import structlog

from mrcnet import core
from mrcnet.api.errors import (
    BadLkey,
    ConnectError,
    InvalidArgument,
    InvalidCQ,
    InvalidQP,
    OutOfBounds,
)
from mrcnet.api.protocol import Message
from mrcnet.constants import IPV6_HEADER_LEN, PSN_MASK
from mrcnet.core import Access, HostConfig, QPState
from mrcnet.daemon.apiserver import ApiServer, Session, claim_socket_path
from mrcnet.daemon.config import DaemonConfig, PortConfig
from mrcnet.daemon.control import (
    Acceptance,
    ConnectRequest,
    ControlError,
    ControlServer,
    control_request,
)
from mrcnet.daemon.paths import FabricPaths, LocalPort, StaticPaths, UnknownPeer
from mrcnet.fabric.describe import FabricDescription, load
from mrcnet.io import IOSetupError, KernelDrop, PacketPort, neighbour_mac
from mrcnet.io.linkwatch import LinkWatch
from mrcnet.io.packet_port import interface_running
from mrcnet.wire import mac_to_bytes

__all__ = ["Daemon"]

log = structlog.get_logger("mrcd")

#: Batches read from one port before the loop moves on (fairness between ports/clients).
RX_BATCHES_PER_WAKEUP = 8
#: Completions pushed to a client per message.
WC_PER_PUSH = 256
#: Bytes of headers around a data payload, worst case (outer + inner IPv6, a 4-segment
#: SRH, UDP, BTH, RETH, METH + ImmDt, TSETH, ICRC): the payload must fit the rest of the MTU.
DATA_OVERHEAD = 2 * IPV6_HEADER_LEN + 8 + 4 * 16 + 8 + 12 + 16 + 8 + 4 + 4
MIN_PAYLOAD = 256
#: EVs per QP towards directly cabled peers: every EV of a plane is the same single path
#: there, so many EVs only multiply per-EV state and probes.
STATIC_EVS_PER_QP = 16


def payload_for_mtu(mtu: int) -> int:
    """The largest power-of-two payload per data packet that fits an IP MTU."""
    room = mtu - DATA_OVERHEAD
    p = MIN_PAYLOAD
    while p * 2 <= room:
        p *= 2
    return p


def _interface_address(ifname: str) -> str:
    """The interface's first global IPv6 address (when neither config nor fabric says)."""
    from pyroute2 import IPRoute  # only needed on this path

    with IPRoute() as ipr:
        idx = socket.if_nametoindex(ifname)
        for a in ipr.get_addr(family=socket.AF_INET6, index=idx):
            if a["scope"] == 0:
                return str(a.get_attr("IFA_ADDRESS"))
    raise IOSetupError(f"{ifname} has no global IPv6 address: set address = \"...\" in its "
                       "[[port]] or give a fabric description")


class Daemon:
    """One mrcd: ports, core, control channel and client API. :meth:`run` until stopped."""

    def __init__(self, cfg: DaemonConfig) -> None:
        self.cfg = cfg
        self.ports: list[PacketPort] = []
        self.local: list[LocalPort] = []
        self.kdrop: KernelDrop | None = None
        self.desc: FabricDescription | None = None
        self.host: core.Host | None = None
        self.paths: FabricPaths | StaticPaths | None = None
        self.api: ApiServer | None = None
        self.control: ControlServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._stop = asyncio.Event()
        self._writers: set[int] = set()
        self._links: LinkWatch | None = None
        self._gid: int | None = None
        #: Internal errors caught in callbacks (a bug if not 0; see the log).
        self.errors = 0
        # Ownership, for pushes and clean-up.
        self._cqs: dict[int, tuple[core.CompletionQueue, Session]] = {}
        self._qp_owner: dict[int, Session] = {}
        self._mr_by_lkey: dict[int, tuple[core.MemoryRegion, mmap.mmap, Session]] = {}
        self._listens: dict[int, tuple[Session, int, list[int], Any]] = {}
        self.log = log.bind(host=cfg.host)

    # --- setup / teardown ---------------------------------------------------------------
    def open(self) -> None:
        """Open ports, install the kernel drop rule, build the core (raises on problems)."""
        cfg = self.cfg
        claim_socket_path(cfg.socket)  # before any side effect: fail fast, leave nothing
        if cfg.socket_group is not None:
            try:
                self._gid = grp.getgrnam(cfg.socket_group).gr_gid
            except KeyError:
                raise IOSetupError(f"socket_group {cfg.socket_group!r}: no such group") \
                    from None
        port_cfgs = list(cfg.ports)
        if cfg.fabric:
            self.desc = load(cfg.fabric)
            me = self.desc.host(cfg.host)  # the host must be in it
            if not port_cfgs:
                port_cfgs = [PortConfig(p.ifname, p.plane) for p in me.ports]
        for i, pc in enumerate(sorted(port_cfgs, key=lambda p: p.plane)):
            port = PacketPort(pc.ifname)
            self.ports.append(port)
            fport = self.desc.host(cfg.host).port(pc.plane) if self.desc else None
            addr = pc.address or (fport.address if fport else _interface_address(pc.ifname))
            nh_mac: bytes | None = None
            if pc.next_hop_mac:
                nh_mac = mac_to_bytes(pc.next_hop_mac)
            elif pc.next_hop:
                nh_mac = neighbour_mac(pc.ifname, pc.next_hop)
            self.local.append(LocalPort(i, pc.plane, pc.ifname, port.mac,
                                        socket.inet_pton(socket.AF_INET6, addr), nh_mac))
        if cfg.kernel_drop:
            self.kdrop = KernelDrop([p.ifname for p in self.ports])
            self.kdrop.install()
        if self.desc is not None:
            self.paths = FabricPaths(self.desc, cfg.host, self.local)
        else:
            self.paths = StaticPaths(cfg.peers, self.local)
        mtu = min(p.mtu for p in self.ports)
        knobs = dict(cfg.core)
        if isinstance(self.paths, StaticPaths):
            knobs.setdefault("evs_per_qp", STATIC_EVS_PER_QP * len(self.ports))
        hc = HostConfig(ev_profile=cfg.ev_profile, cc_profile=cfg.cc_profile,
                        mtu_payload=payload_for_mtu(mtu), completion_events=False, **knobs)
        self.host = core.Host(cfg.host, [core.Port(lp.index, lp.plane, lp.mac, lp.ip)
                                         for lp in self.local], self.paths, hc)
        self.log.info("ports open", ports=[p.ifname for p in self.ports],
                      payload=hc.mtu_payload, kernel_drop=self.kdrop.table if self.kdrop
                      else None)

    def close(self) -> None:
        """Release everything :meth:`open` and :meth:`run` took (safe to call twice)."""
        if self.api is not None:
            self.api.close()
            self.api = None
        loop = self._loop
        if self._links is not None:
            if loop is not None:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(self._links.fileno())
            self._links.close()
            self._links = None
        for port in self.ports:
            if loop is not None and not port.closed:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(port.fileno())
                    loop.remove_writer(port.fileno())
            port.close()
        self.ports.clear()
        if self.kdrop is not None:
            try:
                self.kdrop.remove()
            except IOSetupError as e:
                self.log.error("kernel drop rule not removed", table=self.kdrop.table,
                               error=str(e))
            self.kdrop = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def stop(self) -> None:
        """Ask :meth:`run` to return (signal handlers call this)."""
        self._stop.set()

    async def run(self) -> None:
        """Serve until :meth:`stop`; always cleans up."""
        loop = self._loop = asyncio.get_running_loop()
        assert self.host is not None
        try:
            for i, port in enumerate(self.ports):
                loop.add_reader(port.fileno(), self._on_port_readable, i)
            self._watch_links(loop)
            self.api = ApiServer(self.cfg.socket, self.cfg.socket_mode, self._dispatch,
                                 self._on_session_closed, self.cfg.host, len(self.ports),
                                 after_burst=self._after_requests,
                                 addresses=[socket.inet_ntop(socket.AF_INET6, lp.ip)
                                            for lp in self.local], group=self._gid)
            self.api.start(loop)
            listen = list(self.cfg.control_listen) or [
                socket.inet_ntop(socket.AF_INET6, lp.ip) for lp in self.local]
            self.control = ControlServer(self._on_connect_request, listen,
                                         self.cfg.control_port)
            await self.control.start()
            self.log.info("mrcd ready", socket=self.cfg.socket, control=listen,
                          control_port=self.cfg.control_port)
            await self._stop.wait()
            self.log.info("mrcd stopping")
        finally:
            if self.control is not None:
                await self.control.close()
            self.close()

    # --- port state ---------------------------------------------------------------------
    def _watch_links(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow the ports' carrier: a port that goes down takes its plane out of use."""
        initial = {p.ifindex: interface_running(p.ifname) for p in self.ports}
        self._links = LinkWatch(initial, initial)
        loop.add_reader(self._links.fileno(), self._on_link_change)
        now = time.monotonic()
        assert self.host is not None
        for i, p in enumerate(self.ports):
            if not initial[p.ifindex]:
                self.log.warning("port down at start", port=p.ifname)
                self.host.set_port_state(i, False, now)

    def _on_link_change(self) -> None:
        assert self._links is not None and self.host is not None
        by_index = {p.ifindex: i for i, p in enumerate(self.ports)}
        now = time.monotonic()
        try:
            for ifindex, up in self._links.changes():
                i = by_index[ifindex]
                self.log.warning("port " + ("up" if up else "down"),
                                 port=self.ports[i].ifname, plane=self.local[i].plane)
                self.host.set_port_state(i, up, now)
            self._pump(now)
        except Exception:
            self._guarded("link change")

    # --- data path ----------------------------------------------------------------------
    def _guarded(self, what: str) -> None:
        """Log a bug in a callback; the loop and the timer keep going (never crash on it)."""
        self.errors += 1
        self.log.exception("internal error", where=what)
        with contextlib.suppress(Exception):
            self._rearm()

    def _on_port_readable(self, index: int) -> None:
        try:
            self._receive(index)
        except Exception:
            self._guarded("receive")

    def _receive(self, index: int) -> None:
        host = self.host
        assert host is not None
        port = self.ports[index]
        now = time.monotonic()
        receive = host.receive
        for _ in range(RX_BATCHES_PER_WAKEUP):
            frames = port.recv()
            if not frames:
                break
            for f in frames:
                receive(f, index, now)
            # Send after every batch, not after the whole wakeup: SACKs that wait behind
            # hundreds of frames inflate the RTT the peer's congestion control sees.
            self._send_out(now)
            now = time.monotonic()
        self._pump(now)

    def _pump(self, now: float | None = None) -> None:
        """After any input: send what the core has, deliver completions, re-arm the timer."""
        host = self.host
        assert host is not None
        if now is None:
            now = time.monotonic()
        self._send_out(now)
        self._deliver()
        self._rearm()

    def _send_out(self, now: float) -> None:
        """Drain the core's frames into the ports, one batch per port."""
        assert self.host is not None
        out = self.host.frames_to_send(now)
        if not out:
            return
        if len(self.ports) == 1:
            self._send(0, [f for _, f in out])
            return
        by_port: dict[int, list[bytes]] = {}
        for idx, frame in out:
            by_port.setdefault(idx, []).append(frame)
        for idx, frames in by_port.items():
            self._send(idx, frames)

    def _send(self, index: int, frames: list[bytes]) -> None:
        port = self.ports[index]
        port.send(frames)
        if port.backlog and index not in self._writers:
            assert self._loop is not None
            self._writers.add(index)
            self._loop.add_writer(port.fileno(), self._on_port_writable, index)

    def _on_port_writable(self, index: int) -> None:
        port = self.ports[index]
        port.flush()
        if not port.backlog:
            assert self._loop is not None
            self._loop.remove_writer(port.fileno())
            self._writers.discard(index)

    def _deliver(self) -> None:
        host = self.host
        assert host is not None
        for handle, (cq, session) in self._cqs.items():
            while len(cq):
                wcs = host.poll_cq(cq, WC_PER_PUSH)
                session.send({"push": "wc", "cq": handle, "wcs": [
                    {"status": c.status.value, "wr_id": c.wr_id, "opcode": c.opcode.value,
                     "byte_len": c.byte_len, "imm": c.imm, "qpn": c.qpn} for c in wcs]})
        while (ev := host.next_event()) is not None:
            qpn = getattr(ev, "qpn", None)
            body = {"type": type(ev).__name__, **{
                k: (v.value if hasattr(v, "value") else v)
                for k, v in ((s, getattr(ev, s)) for s in ev.__slots__)}}
            if qpn is not None:
                owner = self._qp_owner.get(qpn)
                if owner is not None:
                    owner.send({"push": "event", "event": body})
                    if isinstance(ev, core.QPError):  # (not for a QP its client destroyed)
                        self.log.warning("QP error", qpn=qpn, reason=ev.reason)
            elif self.api is not None:
                for s in list(self.api.sessions.values()):
                    s.send({"push": "event", "event": body})

    def _rearm(self) -> None:
        host = self.host
        assert host is not None and self._loop is not None
        t = host.next_timer()
        if t == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = t
        if t is not None:
            self._timer = self._loop.call_later(max(0.0, t - time.monotonic()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        now = time.monotonic()
        assert self.host is not None
        try:
            self.host.handle_timer(now)
            self._pump(now)
        except Exception:
            self._guarded("timer")

    # --- client API ---------------------------------------------------------------------
    def _dispatch(self, s: Session, msg: Message, fds: list[int]) -> Message | Awaitable[Message]:
        op = msg.get("op")
        handler = getattr(self, f"_op_{op}", None)
        if handler is None or not isinstance(op, str):
            raise InvalidArgument(f"unknown request {op!r}")
        if fds and op != "reg_mr":
            for fd in fds:
                os.close(fd)
            raise InvalidArgument(f"{op} takes no file descriptor")
        try:
            result: Message | Awaitable[Message] = (
                handler(s, msg, fds) if op == "reg_mr" else handler(s, msg))
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidArgument(f"{op}: bad or missing argument {e}") from None
        except (core.InvalidRequest, core.InvalidAttribute, core.IllegalTransition) as e:
            raise InvalidQP(str(e)) from None
        return result  # the API server calls _after_requests once per burst

    def _after_requests(self) -> None:
        try:
            self._pump()
        except Exception:
            self._guarded("requests")

    def _qpn(self, s: Session, msg: Message) -> int:
        qpn = int(msg["qpn"])
        if self._qp_owner.get(qpn) is not s:
            raise InvalidQP(f"no QP {qpn} in this context")
        return qpn

    def _op_reg_mr(self, s: Session, msg: Message, fds: list[int]) -> Message:
        assert self.host is not None
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise InvalidArgument("reg_mr needs exactly one memfd")
        fd = fds[0]
        try:
            length = int(msg["length"])
            if length <= 0 or os.fstat(fd).st_size < length:
                raise OutOfBounds(f"the memfd is smaller than the {length} bytes to register")
            mp = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)  # the mapping keeps the memory
        mr = self.host.register_mr(mp, Access(int(msg.get("access", 3))))
        self._mr_by_lkey[mr.lkey] = (mr, mp, s)
        s.mrs[mr.lkey] = mr
        return {"lkey": mr.lkey, "rkey": mr.rkey, "addr": mr.addr}

    def _release_mr(self, lkey: int) -> None:
        assert self.host is not None
        mr, mp, s = self._mr_by_lkey.pop(lkey)
        s.mrs.pop(lkey, None)
        self.host.deregister_mr(mr)
        # Writes in flight may still hold views; the map then goes with them (GC).
        with contextlib.suppress(BufferError, ValueError):
            mr.view.release()
            mp.close()

    def _op_dereg_mr(self, s: Session, msg: Message) -> Message:
        lkey = int(msg["lkey"])
        if lkey not in s.mrs:
            raise BadLkey(f"lkey {lkey:#x} is not a region of this context")
        self._release_mr(lkey)
        return {}

    def _op_create_cq(self, s: Session, msg: Message) -> Message:
        assert self.host is not None
        cq = self.host.create_cq()
        self._cqs[cq.handle] = (cq, s)
        s.cqs.add(cq.handle)
        return {"cq": cq.handle}

    def _op_create_qp(self, s: Session, msg: Message) -> Message:
        assert self.host is not None
        handle = int(msg["cq"])
        entry = self._cqs.get(handle)
        if entry is None or entry[1] is not s:
            raise InvalidCQ(f"no CQ {handle} in this context")
        qpn = self.host.create_qp(entry[0])
        init: dict[str, Any] = {
            "ev_profile": msg.get("ev_profile") or self.cfg.ev_profile,
            "cc_profile": msg.get("cc_profile") or self.cfg.cc_profile,
        }
        if msg.get("max_imm") is not None:
            init["max_imm_outstanding"] = int(msg["max_imm"])
        self._qp_owner[qpn] = s
        s.qps.add(qpn)
        try:
            self.host.modify_qp(qpn, QPState.INIT, **init)
        except core.InvalidAttribute as e:
            self._destroy_qp(qpn)
            raise InvalidArgument(str(e)) from None
        return {"qpn": qpn}

    def _destroy_qp(self, qpn: int) -> None:
        assert self.host is not None
        s = self._qp_owner.pop(qpn, None)
        if s is not None:
            s.qps.discard(qpn)
        for service, (_ls, lq, _m, _p) in list(self._listens.items()):
            if lq == qpn:
                del self._listens[service]
        with contextlib.suppress(core.InvalidRequest):
            self.host.destroy_qp(qpn)

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
        self._exposed(s, msg.get("mrs", []))  # check the keys now, not at connect time
        held = self._listens.get(service)
        if held is not None and held[0] is not s:
            raise InvalidArgument(f"service {service} is already listened on by another "
                                  "client")
        self._listens[service] = (s, qpn, list(msg.get("mrs", [])), msg.get("private"))
        s.listens.add(service)
        return {}

    def _qp_profile(self, qpn: int) -> tuple[str, str, int]:
        assert self.host is not None
        a = self.host.qp(qpn).attrs
        return (a.ev_profile or self.cfg.ev_profile, a.cc_profile or self.cfg.cc_profile,
                a.max_imm_outstanding)

    def _to_rtr(self, qpn: int, peer: str, remote: ConnectRequest, my_psn: int) -> None:
        """INIT -> RTR towards the peer's QP (ControlError when the core refuses)."""
        assert self.host is not None
        _, _, max_imm = self._qp_profile(qpn)
        try:
            self.host.modify_qp(qpn, QPState.RTR, peer=peer, dest_qp_num=remote.qpn,
                                rq_psn=remote.psn, sq_psn=my_psn,
                                max_imm_outstanding=min(max_imm, remote.max_imm))
        except (core.InvalidAttribute, core.IllegalTransition, core.InvalidRequest) as e:
            raise ControlError(str(e)) from None

    def _to_rts(self, qpn: int) -> None:
        assert self.host is not None
        try:
            self.host.modify_qp(qpn, QPState.RTS)
        except (core.IllegalTransition, core.InvalidRequest) as e:
            raise ControlError(str(e)) from None

    def _back_to_init(self, qpn: int) -> None:
        """After a connection attempt broke off: the QP is as it was before (INIT)."""
        assert self.host is not None
        if qpn not in self._qp_owner:
            return
        ev, cc, max_imm = self._qp_profile(qpn)
        try:
            if self.host.qp(qpn).state is not QPState.INIT:
                self.host.modify_qp(qpn, QPState.RESET)
                self.host.modify_qp(qpn, QPState.INIT, ev_profile=ev, cc_profile=cc,
                                    max_imm_outstanding=max_imm)
        except (core.InvalidAttribute, core.IllegalTransition, core.InvalidRequest) as e:
            self.log.error("QP not reset after a failed connect", qpn=qpn, error=str(e))

    async def _prepare_peer(self, peer: str) -> None:
        if isinstance(self.paths, StaticPaths):
            # Neighbour discovery may block up to a second: keep the loop running.
            await asyncio.to_thread(self.paths.resolve, peer)

    def _op_connect(self, s: Session, msg: Message) -> Awaitable[Message]:
        qpn = self._qpn(s, msg)
        peer = str(msg["peer"])
        service = int(msg["service"])
        mrs = self._exposed(s, msg.get("mrs", []))
        return self._connect(s, qpn, peer, service, mrs, msg.get("private"))

    async def _connect(self, s: Session, qpn: int, peer: str, service: int,
                       mrs: list[dict[str, int]], private: Any) -> Message:
        assert self.paths is not None and self.host is not None
        ev, cc, max_imm = self._qp_profile(qpn)
        psn = secrets.randbelow(PSN_MASK + 1)

        def on_accept(remote: ConnectRequest) -> None:
            if remote.src != peer:
                raise ControlError(f"{peer}'s control address answered as {remote.src!r}")
            if self._qp_owner.get(qpn) is not s:
                raise ControlError(f"QP {qpn} was destroyed while connecting")
            self._to_rtr(qpn, peer, remote, psn)  # ready to receive before "ready"

        try:
            addr = self.paths.control_address(peer)
            port = (self.cfg.peers[peer].control_port if peer in self.cfg.peers
                    else self.cfg.control_port)
            await self._prepare_peer(peer)
            req = ConnectRequest(self.cfg.host, qpn, psn, ev, cc, max_imm, tuple(mrs),
                                 private, service)
            remote = await control_request(addr, port, req, on_accept)
            if self._qp_owner.get(qpn) is not s:
                raise ControlError(f"QP {qpn} was destroyed while connecting")
            self._to_rts(qpn)
        except (UnknownPeer, ControlError, IOSetupError) as e:
            self._back_to_init(qpn)
            raise ConnectError(f"connecting QP {qpn} to {peer} service {service}: {e}") \
                from None
        self.log.info("QP connected", qpn=qpn, peer=peer, peer_qpn=remote.qpn,
                      service=service)
        self._pump()
        return {"peer": remote.src, "peer_qpn": remote.qpn, "mrs": list(remote.mrs),
                "private": remote.private, "max_imm": remote.max_imm}

    async def _on_connect_request(self, req: ConnectRequest) -> Acceptance:
        held = self._listens.pop(req.service, None)  # reserved for this exchange
        if held is None:
            raise ControlError(f"no QP listens on service {req.service} at {self.cfg.host}")
        s, qpn, lkeys, private = held

        def give_back() -> None:
            if not s.closed and qpn in self._qp_owner and req.service not in self._listens:
                self._listens[req.service] = held

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

        def commit() -> None:
            if s.closed or self._qp_owner.get(qpn) is not s:
                raise ControlError(f"the listening QP {qpn} went away")
            self._to_rtr(qpn, req.src, req, psn)
            self._to_rts(qpn)
            s.listens.discard(req.service)  # one connection per listen, as accept()
            s.send({"push": "connected", "qpn": qpn, "peer": req.src, "peer_qpn": req.qpn,
                    "mrs": list(req.mrs), "private": req.private, "max_imm": req.max_imm})
            self.log.info("QP accepted", qpn=qpn, peer=req.src, peer_qpn=req.qpn,
                          service=req.service)
            self._pump()

        def abort() -> None:
            self._back_to_init(qpn)
            give_back()

        reply = ConnectRequest(self.cfg.host, qpn, psn, ev, cc, max_imm, tuple(mrs), private,
                               req.service)
        return Acceptance(reply, commit, abort)

    def _op_post_write(self, s: Session, msg: Message) -> Message:
        assert self.host is not None
        qpn = self._qpn(s, msg)
        lkey = int(msg["lkey"])
        mr = s.mrs.get(lkey)
        if mr is None:
            raise BadLkey(f"lkey {lkey:#x} is not a region of this context")
        offset = int(msg["addr"]) - mr.addr
        length = int(msg["length"])
        if offset < 0 or length < 0 or offset + length > mr.length:
            raise OutOfBounds(f"[{msg['addr']:#x}, +{length}) is outside region lkey "
                              f"{lkey:#x}")
        imm = msg.get("imm")
        self.host.post_write(qpn, int(msg.get("wr_id", 0)), mr, offset, length,
                             int(msg["remote_addr"]), int(msg["rkey"]),
                             None if imm is None else int(imm))
        return {}

    def _op_post_recv(self, s: Session, msg: Message) -> Message:
        assert self.host is not None
        self.host.post_recv(self._qpn(s, msg), int(msg.get("wr_id", 0)), time.monotonic())
        return {}

    def _op_stats(self, s: Session, msg: Message) -> Message:
        assert self.host is not None
        out: Message = {"host": self.host.counters(), "mrcd_internal_errors": self.errors,
                        "ports": {p.ifname: vars(p.stats) for p in self.ports}}
        if "qpn" in msg:
            out["qp"] = {k: v for k, v in self.host.qp_stats(self._qpn(s, msg)).items()
                         if isinstance(v, int | float | str | dict | type(None))}
        return out

    def _on_session_closed(self, s: Session) -> None:
        for qpn in list(s.qps):
            self._destroy_qp(qpn)
        for service in list(s.listens):
            self._listens.pop(service, None)
        for handle in list(s.cqs):
            self._cqs.pop(handle, None)
        for lkey in list(s.mrs):
            self._release_mr(lkey)
