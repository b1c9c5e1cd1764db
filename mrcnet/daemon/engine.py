"""mrcd's engine: the event loop around the sans-I/O core.

Follow one frame: a port's socket becomes readable -> :meth:`Daemon._receive`
takes a batch (:class:`~mrcnet.io.PacketPort`) and feeds each frame to
``core.Host.receive`` -> :meth:`Daemon._pump` drains ``Host.frames_to_send`` into the
ports (batched), pushes completions and events to the clients that own them, and re-arms
the one timer from ``Host.next_timer``. Client requests (:mod:`mrcnet.daemon.apiserver`,
handled in :mod:`mrcnet.daemon.verbs`) and peer connect requests
(:mod:`mrcnet.daemon.control`) end in the same ``_pump``.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import select
import socket
import time
from collections.abc import Awaitable, Callable

import structlog

from mrcnet import buffers, core
from mrcnet.constants import IPV6_HEADER_LEN
from mrcnet.core import HostConfig
from mrcnet.daemon.apiserver import ApiServer, Session, claim_socket_path
from mrcnet.daemon.busyports import BULK_FRAMES, BusyPorts
from mrcnet.daemon.config import DaemonConfig, PortConfig
from mrcnet.daemon.control import (
    ControlServer,
)
from mrcnet.daemon.deadline import LazyTimer
from mrcnet.daemon.heap import settle_gc
from mrcnet.daemon.idlepoll import IdlePoll
from mrcnet.daemon.paths import FabricPaths, LocalPort, StaticPaths
from mrcnet.daemon.sched import BulkBatch, use_batch_policy
from mrcnet.daemon.verbs import Verbs
from mrcnet.fabric.describe import FabricDescription, load
from mrcnet.io import IOSetupError, KernelDrop, PacketPort, neighbour_mac
from mrcnet.io import batch as batch_io
from mrcnet.io.kernel_drop import remove_stale_tables
from mrcnet.io.linkwatch import LinkWatch
from mrcnet.io.packet_port import interface_running
from mrcnet.wire import mac_to_bytes

__all__ = ["Daemon"]

log = structlog.get_logger("mrcd")

#: Rounds of one batch per port read per wake-up before the loop moves on (fairness
#: between ports and clients).
RX_BATCHES_PER_WAKEUP = 8
_INF = float("inf")
#: Bytes of headers around a data payload, worst case (outer + inner IPv6, a 4-segment
#: SRH, UDP, BTH, RETH, METH + ImmDt, TSETH, ICRC): the payload must fit the rest of the MTU.
DATA_OVERHEAD = 2 * IPV6_HEADER_LEN + 8 + 4 * 16 + 8 + 12 + 16 + 8 + 4 + 4
MIN_PAYLOAD = 256
#: A timer armed for a deadline that moved later (or went away) is kept while it is
#: further away than this (s); nearer, it is moved (mrcnet.daemon.deadline): a held
#: ACK that left with the answer would cost an idle wake-up per round trip (measured:
#: 0.85 per round trip on each mrcd when kept, tools/bench_latency.py).
KEEP_EARLY_TIMER = 0.005
#: At most this many frames in the core's list and on the send queues: the list goes
#: behind the data (Daemon._send_out). More: the list first, as a SACK behind a long
#: batch of data would inflate the RTT the peer's congestion control sees.
BEHIND_DATA_MAX = 4
#: EVs per QP towards directly cabled peers: every EV of a plane is the same single path
#: there, so many EVs only multiply per-EV state and probes.
STATIC_EVS_PER_QP = 16
#: Ports one mrcd drives at most (the send queues' pass: one bit per port).
MAX_PORTS = 32


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
    """One mrcd: ports, core, control channel and client API. :meth:`run` until stopped.

    The data path, timer and port state are here; client requests, QP connection
    management and the pushes to clients are in ``verbs`` (a
    :class:`~mrcnet.daemon.verbs.Verbs` holding this engine).
    """

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
        self._timer: LazyTimer | None = None
        self._want: Callable[[float | None], None] = lambda t: None  # (run(): the timer's)
        self._stop = asyncio.Event()
        self._writers: set[int] = set()
        self._links: LinkWatch | None = None
        self.tx_queues: batch_io.SendQueue | None = None
        #: Per port index: the ports in the order a pass it woke reads them (open()).
        self._rx_orders: list[list[tuple[int, PacketPort, batch_io.CBatchIO | None, int,
                                         Callable[[], int] | None,
                                         list[buffers.SlotFrames]]]] = []
        self._gid: int | None = None
        #: Internal errors caught in callbacks (a bug if not 0; see the log).
        self.errors = 0
        #: Loop passes by what woke them: a port's frames, a client's posts or requests,
        #: the timer (``timer_idle``: it found nothing due). A round trip's cost in
        #: wake-ups (tools/bench_latency.py prints them per round trip).
        # (answer_hit / answer_miss: answer_poll_us's looks that found a post or not)
        self._passes = {"port": 0, "client": 0, "timer": 0, "answer_hit": 0,
                        "answer_miss": 0}
        #: ``sched_batch = "bulk"``: SCHED_BATCH while the port passes read bulk
        self._bulk = BulkBatch() if cfg.sched_batch == "bulk" else None
        self._ports_poll: select.poll | None = None  # (_frames_waiting's, made once)
        self._idle: IdlePoll | None = None  # (idle_poll_us: the look before sleeping)
        self._busy: BusyPorts | None = None  # (the ports' readers; busy_ports)
        self._rx_total = 0  # (frames the last port pass read: a batch or not)
        self.log = log.bind(host=cfg.host)
        self.verbs = Verbs(self)
        #: Awaited once mrcd serves (service hooks: metrics endpoint, sd_notify READY).
        self.on_ready: list[Callable[[], Awaitable[None]]] = []

    # --- what Verbs calls (its Engine) -----------------------------------------------------
    @property
    def passes(self) -> dict[str, int]:
        """Loop passes by what woke them: a port's frames, a client's posts or requests,
        the timer (``timer_idle``: it fired, found nothing due and re-armed without a
        pass); ``timer_arms``: loop timers made; ``busy_ports``: times the ports left
        the loop's epoll set. A round trip's cost in wake-ups (tools/bench_latency.py
        prints them per round trip)."""
        t = self._timer
        b = self._bulk
        i = self._idle
        return {**self._passes, "timer_idle": t.idle if t else 0,
                "timer_arms": t.arms if t else 0,
                "idle_looks": i.looks if i else 0, "idle_hits": i.hits if i else 0,
                "busy_ports": self._busy.left if self._busy else 0,
                **({"sched_batch_changes": b.changes} if b is not None else {})}

    def pump(self, now: float | None = None) -> None:
        """After a client request changed the core: send, deliver, re-arm."""
        self._passes["client"] += 1
        self._pump(now)

    def after_requests(self) -> None:
        """The API server's end of a burst of a client's requests and posts: one pump
        for all of them (:meth:`Verbs.after_requests`'s, without its two calls)."""
        self._passes["client"] += 1
        try:
            self._pump(None)
        except Exception:
            self._guarded("requests")

    def guarded(self, what: str) -> None:
        """An internal error caught in a request handler: log it, keep going."""
        self._guarded(what)

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
        if len(port_cfgs) > MAX_PORTS:  # (before any side effect)
            raise IOSetupError(f"{len(port_cfgs)} ports: mrcd drives at most {MAX_PORTS}")
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
            # An mrcd killed with SIGKILL leaves its table (and its drop rules) behind:
            # remove those whose owner is gone (exact name format and pid check only).
            stale = remove_stale_tables()
            if stale:
                self.log.warning("removed kernel drop tables of mrcds that are gone",
                                 tables=stale)
            self.kdrop = KernelDrop([p.ifname for p in self.ports])
            self.kdrop.install()
        if self.desc is not None:
            self.paths = FabricPaths(self.desc, cfg.host, self.local)
        else:
            self.paths = StaticPaths(cfg.peers, self.local)
        mtu = min(p.mtu for p in self.ports)
        knobs = dict(cfg.core)
        rate = self.paths.port_rate() if isinstance(self.paths, FabricPaths) else 0.0
        if rate:
            # A shaped fabric's links are the ports' real rate: sized for 10 Gbit/s, the
            # first window of a QP on a 500 Mbit/s fabric was 15x its BDP, and most of it
            # died in the shapers' queues (a round of timeouts per new QP, measured).
            knobs["link_rate"] = min(float(knobs["link_rate"]), rate)
        if isinstance(self.paths, StaticPaths):
            knobs.setdefault("evs_per_qp", STATIC_EVS_PER_QP * len(self.ports))
        fabric_dscp = self.desc.options.get("dscp") if self.desc is not None else None
        if fabric_dscp:
            # The description's classes win: its switches mark trims with them, and a host
            # that read them otherwise would take every trim for intact data.
            if knobs.get("dscp") not in (None, fabric_dscp):
                self.log.warning("core.dscp ignored: the fabric description's win",
                                 config=knobs["dscp"], fabric=fabric_dscp)
            knobs["dscp"] = dict(fabric_dscp)
        hc = HostConfig(ev_profile=cfg.ev_profile, cc_profile=cfg.cc_profile,
                        mtu_payload=payload_for_mtu(mtu), completion_events=False, **knobs)
        self.host = core.Host(cfg.host, [core.Port(lp.index, lp.plane, lp.mac, lp.ip)
                                         for lp in self.local], self.paths, hc)
        # A pass tests for anything to deliver, the core's events included, in one call
        self.verbs.delivery.watch(self.host.event_queues)
        # New data frames go from the C frame builder to the ports' queues and sendmmsg,
        # without a Python object per frame: handed to every frames_to_send call (the rest
        # comes in its list).
        self.tx_queues = sq = batch_io.send_queue(len(self.ports))
        if sq is not None:  # (the queues are sent in one C call: SendQueue.flush)
            for i, p in enumerate(self.ports):
                sq.bind(i, p.rx_batch)
        # A port with a C batch is read straight into the core's C lane, one C call per
        # read (batch_io.lane_reader); the lane stays alive with the host.
        # A read's frames go to the core as one of the port's SlotFrames made here, one
        # per count (a SlotFrames is the batch and a count, nothing of the frames: a
        # read made one, a call of Python per pass).
        lane = self.host.rx_lane
        ports = [(i, p, p.rx_batch, p.max_batch,
                  batch_io.lane_reader(b, lane) if b is not None and lane is not None
                  else None,
                  [buffers.SlotFrames(b, k) for k in range(p.max_batch + 1)]
                  if b is not None else [])
                 for i, p in enumerate(self.ports) for b in (p.rx_batch,)]
        self._rx_orders = [ports[i:] + ports[:i] for i in range(len(ports))]
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
        for i, port in enumerate(self.ports):
            if self.tx_queues is not None:
                self.tx_queues.bind(i, None)  # (its fd is no longer the port's)
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

    def stop(self) -> None:
        """Ask :meth:`run` to return (signal handlers call this)."""
        self._stop.set()

    async def run(self) -> None:
        """Serve until :meth:`stop`; always cleans up."""
        loop = self._loop = asyncio.get_running_loop()
        assert self.host is not None
        why = use_batch_policy(self.cfg.sched_batch is True)
        if why is not None:
            self.log.warning("sched_batch: SCHED_BATCH not set", error=why)
        self._timer = LazyTimer(loop, self._next_deadline, self._on_timer,
                                near=KEEP_EARLY_TIMER)
        self._want = self._timer.want
        try:
            self._busy = BusyPorts(loop, [p.fileno() for p in self.ports], self._receive,
                                   self._look, self.cfg.busy_ports)
            self._busy.watch()
            self._watch_links(loop)
            verbs = self.verbs
            self.api = ApiServer(self.cfg.socket, self.cfg.socket_mode, verbs.dispatch,
                                 verbs.on_session_closed, self.cfg.host, len(self.ports),
                                 after_burst=self.after_requests,
                                 addresses=[socket.inet_ntop(socket.AF_INET6, lp.ip)
                                            for lp in self.local], group=self._gid,
                                 limits=self.cfg.limits, attach=verbs.posts.attach,
                                 take_posts=verbs.posts.take,
                                 settle=verbs.posts.settle)
            if self.cfg.idle_poll_us:
                api, timer = self.api, self._timer
                self._idle = IdlePoll(self.cfg.idle_poll_us, self._idle_fds,
                                      lambda: api.generation, lambda: timer.armed_at)
                api.idle = self._look
            self.api.start(loop)
            listen = list(self.cfg.control_listen) or [
                socket.inet_ntop(socket.AF_INET6, lp.ip) for lp in self.local]
            self.control = ControlServer(self.verbs.on_connect_request, listen,
                                         self.cfg.control_port)
            await self.control.start()
            self.log.info("mrcd ready", socket=self.cfg.socket, control=listen,
                          control_port=self.cfg.control_port)
            for hook in self.on_ready:
                await hook()
            settle_gc()  # (start-up's objects, frozen: the collector leaves them be)
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
                self._reattach_port(i)
            self._pump(now)
        except Exception:
            self._guarded("link change")

    def _reattach_port(self, index: int) -> None:
        """Watch a port's socket again after its link changed.

        When a link goes down the kernel sets ENETDOWN on the packet socket (EPOLLERR),
        and libuv (uvloop) stops a poll handle that reports an error: without this the
        port would never be read again after the link came back (measured on a fabric:
        0 frames received on the port while its leaf sent 1,760). Reading consumes the
        error (:meth:`PacketPort.recv` returns no frames and counts ``rx_link_down``).
        """
        loop = self._loop
        if loop is None:
            return
        if self._busy is None or not self._busy.out:  # (out: the looks poll it)
            fd = self.ports[index].fileno()
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(fd)
            loop.add_reader(fd, self._receive, index)
        self._receive(index)

    # --- data path ----------------------------------------------------------------------
    def _guarded(self, what: str) -> None:
        """Log a bug in a callback; the loop and the timer keep going (never crash on it)."""
        self.errors += 1
        self.log.exception("internal error", where=what)
        with contextlib.suppress(Exception):
            self._rearm()
        busy = self._busy
        if busy is not None and busy.out:  # (no look may come: the loop watches again)
            with contextlib.suppress(Exception):
                busy.watch()

    def _core_error(self) -> None:
        """Log the internal error the core caught (receiving a frame, or sending for a
        QP, which it failed: ``rx_internal_error`` / ``tx_internal_error``) with its
        traceback, once, and count it with mrcd's own (``mrcctl``'s internal errors)."""
        assert self.host is not None
        err, self.host.last_internal_error = self.host.last_internal_error, None
        self.errors += 1
        self.log.error("internal error in the core", error=repr(err), exc_info=err)

    def _receive(self, index: int) -> None:
        """Port ``index`` is readable: take what every port has, deliver, then pump
        (the loop's reader; never raises: a bug is logged and counted).

        What the frames completed reaches the clients before anything is sent: the
        acknowledgement a request asks for (AckReq) costs a ``sendmmsg`` that runs the
        fabric's forwarding inline, and rung after it the client of a ping-pong woke
        that much later (the ACK is off the round trip's path, the completion on it).
        (The pass's steps inline: each of its calls was a round trip's cost, twice.)
        Then, with ``answer_poll_us``, a look for the answers of the clients the pass
        woke for a receive (:meth:`_await_answers`)."""
        try:
            self._passes["port"] += 1
            now = self._read_ports(index)
            host = self.host
            assert host is not None
            host.settle_acks(now)  # (the ACKs' completions ring with the frames')
            verbs = self.verbs
            if any(verbs.delivery.queues):  # (Verbs.deliver's own test, without its call)
                verbs.deliver()
            else:
                verbs.delivery.due = _INF
            self._pump(now)
            woken = verbs.delivery.woken
            if woken:  # clients woken for completions: their answers may follow at once
                if self.cfg.answer_poll_us:
                    self._await_answers(woken)
                woken.clear()
            self._look()
        except Exception:
            self._guarded("receive")

    def _await_answers(self, woken: list[Session]) -> None:
        """``answer_poll_us``: look for the answers of the clients this pass woke
        (Posts.await_answer), each once, all of them within ``answer_poll_us`` (many
        clients woken at once do not hold the loop for long)."""
        posts = self.verbs.posts
        until = time.perf_counter() + self.cfg.answer_poll_us / 1e6
        for s in dict.fromkeys(woken):
            hit = posts.await_answer(s, until, self._frames_waiting)
            self._passes["answer_hit" if hit else "answer_miss"] += 1

    def _look(self, task: bool = False) -> None:
        """The end of every pass (a port's, a client's, the timer's): mrcd's look before
        it sleeps (``idle_poll_us``), whose outcome decides whether the ports stay out of
        the loop's epoll set (``busy_ports``). ``task``: the pass (a client's) started a
        task, whose first step runs first: no look now, one after it if the ports are
        out of the loop."""
        idle, busy = self._idle, self._busy
        if idle is None:
            return
        if task:
            if busy is not None and busy.out:
                assert self._loop is not None
                self._loop.call_soon(self._look)
            return
        found = idle.look()
        if busy is not None and busy.enter_after:
            busy.after_look(idle.ready if found else None, self._rx_total >= BULK_FRAMES)

    def _idle_fds(self) -> list[int]:
        """What the look before sleeping watches: the ports and the API server's sockets
        (the control plane's and the link watch's wait for the loop)."""
        own = [p.fileno() for p in self.ports if not p.closed]
        return own + (self.api.fds() if self.api is not None else [])

    def _frames_waiting(self) -> bool:
        """Does a port have frames to read (a poll(2) of their sockets, no wait)?"""
        p = self._ports_poll
        if p is None:
            p = self._ports_poll = select.poll()
            for port in self.ports:
                p.register(port.fileno(), select.POLLIN)
        return bool(p.poll(0))

    def _read_ports(self, index: int) -> float:
        """Read every port, one batch each in turn, starting with ``index``; returns the
        time after the last batch.

        Round robin, not port after port: the peer sprays packets over the planes, and
        draining one port first (up to 8 batches, about 5 ms of work) delivered the other
        plane's packets that much later, out of order: more SACKs, stale SACKs, and
        losses declared for packets that were only waiting in our other socket."""
        host = self.host
        assert host is not None
        now = time.monotonic()
        receive, lane = host.receive_batch, host.rx_lane
        # (index, port, its C batch or None, frames per batch, its reader into the
        # core's C lane or None, its batch's SlotFrames by count) per port from
        # ``index`` on, made once: a pass read them through three properties per port.
        order = self._rx_orders[index]
        total = 0  # frames this pass read (sched_batch = "bulk")
        for _ in range(RX_BATCHES_PER_WAKEUP):
            full = []  # ports that gave a whole batch: maybe more queued
            for entry in order:
                i, port, rxb, most, read, views = entry
                if port.closed:
                    continue
                if read is not None:  # received and handed to the lane in one C call
                    k = read()
                    if k > 0:
                        st = port.stats  # (PacketPort.recv_slots' counts, inlined)
                        st.rx_frames += k
                        st.rx_batches += 1
                        receive(views[k], i, now, rxb, lane, k)
                    elif k:
                        k = port.recv_failed(-k)
                elif rxb is not None:  # the core's lane reads them in the port's buffers
                    k = port.recv_slots()
                    if k:
                        receive(views[k], i, now, rxb, None, k)
                else:
                    frames = port.recv()
                    k = len(frames)
                    if k:
                        receive(frames, i, now)
                if k >= most:
                    full.append(entry)
                total += k
            order = full  # a short read drained the socket: epoll wakes us for more
            if not order:
                break
            # Send after every round, not after the whole wakeup: SACKs that wait behind
            # hundreds of frames inflate the RTT the peer's congestion control sees.
            self._send_out(now)
            now = time.monotonic()
        self._rx_total = total
        if self._bulk is not None and (why := self._bulk.note(total)) is not None:
            self.log.warning("sched_batch bulk: policy not changed, no more tries",
                             error=why)
        return now

    def _pump(self, now: float | None = None) -> None:
        """After any input: send what the core has, deliver completions, re-arm the timer."""
        host = self.host
        assert host is not None
        if now is None:
            now = time.monotonic()
        self._send_out(now)
        delivery = self.verbs.delivery
        # (what sending completed or reported, seldom anything: Verbs.deliver's test of
        # its queues and the core's events inline, then _next_deadline's body)
        if any(delivery.queues):
            self.verbs.deliver()
        else:
            delivery.due = _INF
        t = host.next_timer()
        due = delivery.due
        if due < _INF:
            t = due if t is None else min(t, due)
        self._want(t)

    def _send_out(self, now: float) -> None:
        """Drain the core's frames into the ports, one batch per port: the list's, then
        the data frames on the send queues; a short list after a little data instead
        (behind it)."""
        host = self.host
        assert host is not None
        sq = self.tx_queues
        out = host.frames_to_send(now, sendq=sq)
        if host.last_internal_error is not None:  # (the core caught a bug of its own)
            self._core_error()
        first = 0  # (the ports to send first, as bits; none: in port order)
        if out and sq is not None and 0 < sq.waiting <= BEHIND_DATA_MAX \
                and len(out) <= BEHIND_DATA_MAX:
            # The list's few frames (a response's ACK: ``ack_with_data``) go behind the
            # data frames on the send queues, the ports with data sent first. On one
            # port the ACK leaves in the response's ``sendmmsg``, on another right
            # after it: either way the requester's mrcd, woken by the response, finds
            # the ACK in the same pass (sent first, the ACK woke it on its own and the
            # response a second time). (Here, not in a method: a call per round trip.)
            first = sq.add_behind(out)
            sq.added -= len(out)  # (the host counted them in tx_frames already)
            out = []
        if out:
            if len(self.ports) == 1:
                self._send(0, [f for _, f in out])
            else:
                by_port: dict[int, list[bytes]] = {}
                for idx, frame in out:
                    by_port.setdefault(idx, []).append(frame)
                for idx, frames in by_port.items():
                    self._send(idx, frames)
        if sq is not None and sq.waiting:
            # Every port's queue in one C call (the ports with data first), then each
            # port's counts; an error (a full socket, a link down) by the port's policy
            done = sq.flush(first)
            if done:
                ports = self.ports
                sent, calls, errs = sq.flushed_frames, sq.flushed_calls, sq.flushed_errs
                for idx in range(len(ports)):
                    if done >> idx & 1:
                        st = ports[idx].stats  # (PacketPort.send_queue's counts)
                        st.tx_frames += sent[idx]
                        st.tx_batches += calls[idx]
                        if errs[idx]:
                            self._flush_failed(idx, errs[idx])

    def _flush_failed(self, idx: int, err: int) -> None:
        """Port ``idx``'s queue did not all go (``err``): its policy, then the rest when
        it can (PacketPort.send_queue's loop; the socket's writability)."""
        port, sq = self.ports[idx], self.tx_queues
        assert sq is not None
        if port.queue_failed(sq, idx, err):
            port.send_queue(sq, idx)
        if sq.pending(idx):
            self._want_writable(idx)

    def _send(self, index: int, frames: list[bytes]) -> None:
        port = self.ports[index]
        port.send(frames)
        if port.backlog:
            self._want_writable(index)

    def _want_writable(self, index: int) -> None:
        """Port ``index`` has frames the socket did not take: send them when it can."""
        if index not in self._writers:
            assert self._loop is not None
            self._writers.add(index)
            self._loop.add_writer(self.ports[index].fileno(), self._on_port_writable, index)

    def _on_port_writable(self, index: int) -> None:
        port = self.ports[index]
        port.flush()
        sq = self.tx_queues
        if sq is not None and not port.backlog and sq.pending(index):
            port.send_queue(sq, index)  # (after the list's frames, as in _send_out)
        if not port.backlog and not (sq is not None and sq.pending(index)):
            assert self._loop is not None
            self._loop.remove_writer(port.fileno())
            self._writers.discard(index)

    def _next_deadline(self) -> float | None:
        """The core's next deadline, or a moderated CQ's (a full ring's retry)."""
        assert self.host is not None
        t = self.host.next_timer()
        due = self.verbs.delivery.due  # (mod_due, without the property's call per pass)
        if due < _INF:  # a moderated CQ's period ends
            t = due if t is None else min(t, due)
        return t

    def _rearm(self) -> None:
        """After a pass: the timer learns the next deadline (it re-arms only if earlier)."""
        self._want(self._next_deadline())

    def _on_timer(self, now: float) -> None:
        """Something is due (the timer checked): run the core's timers, then pump."""
        assert self.host is not None
        try:
            # What our sockets hold first: libuv runs due timers before it polls for I/O,
            # so after a long callback the retransmission and loss timers fired on packets
            # whose SACKs were already here, unread (spurious timeouts: every packet they
            # resent arrived twice).
            now = self._read_ports(0) if self.ports else now
            self._passes["timer"] += 1
            self.host.handle_timer(now)
            self._pump(now)
            self.verbs.delivery.woken.clear()  # (only a port pass waits for answers)
            self._look()
        except Exception:
            self._guarded("timer")
