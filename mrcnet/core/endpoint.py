"""Endpoint operations (QPN 2): PORT_STATUS and EV probes, bound to the connection.

A request carries the endpoint token of a QP with the peer (ERTH's reserved word @8,
``QPAttrs.ep_token``, agreed by the two mrcds at connect). The receiver checks it against
the tokens of its QPs with the sender's address:

- a PORT_STATUS acts only with a token of one of them (``rx_endpoint_bad_token``
  otherwise: dropped, not answered). A host whose QPs with the peer carry no token
  (the core used without mrcd: tests, the simulator) takes any, as before;
- an EV probe is answered unless the peer has QPs here with tokens and the request
  carries none of them (an answer changes nothing but the prober's RTT; mrcd's probe
  hello, before any QP, sends no token).

A PORT_STATUS that would leave the peer's QPs no plane at all is not believed at once:
the planes it takes away stay in use while one EV probe goes down every path of them;
after :data:`CONFIRM_FACTOR` probe timeouts, planes that answered stay
(``rx_port_status_unconfirmed``) and only the silent ones go. A genuine port down on one
plane of two leaves a plane, so it acts at once, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from mrcnet.constants import BTH_LEN, UDP_HEADER_LEN, EndpointOp, Opcode
from mrcnet.core.config import Port
from mrcnet.core.events import PortStatusChanged
from mrcnet.core.evs import ev_path, make_ev
from mrcnet.core.seqnum import ts16
from mrcnet.wire import build_endpoint
from mrcnet.wire.eeth import EETH
from mrcnet.wire.erth import TokenERTH, erth_token
from mrcnet.wire.parsed import PyParsed

#: mrcnet.core.host.Host, which imports this module (not imported back: no circle).
Host = Any

#: An "every plane down" claim waits this many probe timeouts for the probes' answers.
CONFIRM_FACTOR: Final = 4
_ERTH_AT: Final = UDP_HEADER_LEN + BTH_LEN  # from the UDP header


@dataclass(slots=True)
class PathProbe:
    """One standalone EV probe down one path to a peer (see ``Host.probe_paths``)."""

    request_id: int
    peer: str
    plane: int
    path: int  #: the path index in the plane (for a leaf-spine: the spine)
    ev: int
    sent: float
    rtt: float | None = None  #: seconds, set when the answer arrives; None while unanswered



def peer_tokens(h: Host, peer: str) -> frozenset[int] | None:
    """Tokens of the QPs with ``peer`` (None: no QP with it at all; cached until a QP
    is modified or destroyed)."""
    cache: dict[str, frozenset[int] | None] = h._ep_tokens
    if peer not in cache:
        qps = [qp for qp in h._qps.values() if qp.attrs.peer == peer]
        cache[peer] = (frozenset(t for qp in qps if (t := qp.attrs.ep_token) is not None)
                       if qps else None)
    return cache[peer]


def peer_token(h: Host, peer: str) -> int:
    """The token to send in a request to ``peer`` (0: none known)."""
    tokens = peer_tokens(h, peer)
    return min(tokens) if tokens else 0


def _frame_token(f: PyParsed, frame: bytes | bytearray | memoryview) -> int:
    return erth_token(frame, f.udp_off + _ERTH_AT)


def plane_ev(plane: int) -> int:
    """EV for connectionless endpoint frames in a plane (path 0, instance 0)."""
    return make_ev(plane, 0, 0)


def send_port_status(h: Host, now: float) -> None:
    """(Re)send the due PORT_STATUS requests (retried until answered)."""
    for peer, (rid, tries, due) in list(h._port_status.items()):
        if due > now:
            continue
        if tries >= h.config.port_status_retries:
            del h._port_status[peer]
            h.count("port_status_unacked")
            continue
        erth = TokenERTH(EndpointOp.PORT_STATUS, port_status_mask=h._live_mask(),
                    timestamp=ts16(now), token=peer_token(h, peer))
        for plane, routes in h._paths_to(peer).items():
            idx = h._plane_port.get(plane)
            if idx is None or not h.port_up[idx]:
                continue
            h._ctrl.append((idx, build_endpoint(routes[0], ev=plane_ev(plane),
                                                request_id=rid, erth=erth)))
        h._port_status[peer] = (rid, tries + 1, now + h.config.probe_interval)


def next_due(h: Host) -> float:
    """The earliest endpoint timer (inf: none)."""
    t = float("inf")
    for _, _, due in h._port_status.values():
        t = min(t, due)
    for _, due, _ in h._ps_confirm.values():
        t = min(t, due)
    return t


def on_timer(h: Host, now: float) -> None:
    """Run the endpoint timers due at ``now``."""
    if h._port_status:
        send_port_status(h, now)
    for peer, (live, due, probes) in list(h._ps_confirm.items()):
        if due > now:
            continue
        del h._ps_confirm[peer]
        h.forget_probes(probes)
        answered = {p.plane for p in probes if p.rtt is not None}
        if answered - live:
            h.count("rx_port_status_unconfirmed")
        _apply_live(h, peer, live | answered, now)


def _apply_live(h: Host, peer: str, live: set[int], now: float) -> None:
    old = h._peer_live.get(peer)
    h._peer_live[peer] = live
    for plane in h._paths_to(peer):
        was = old is None or plane in old
        if was != (plane in live):
            h.emit(PortStatusChanged(None, plane, plane in live, peer))
    h._replan_peer(peer, now)


def _port_status(h: Host, peer: str, mask: int, now: float) -> None:
    live = {pl for pl in range(32) if mask >> pl & 1}
    pending = h._ps_confirm.pop(peer, None)
    if pending is not None:  # a newer status replaces a claim still being checked
        h.forget_probes(pending[2])
    in_use = set(h._planes_for(peer))
    if in_use and not in_use & live:
        # Every plane in use claimed down: probe them before believing it.
        qps = [qp for qp in h._qps.values() if qp.attrs.peer == peer]
        wait = CONFIRM_FACTOR * max([h.config.probe_interval,
                                     *(qp.probe_timeout() for qp in qps)])
        probes = h.probe_paths(peer, now, planes=in_use)
        h._ps_confirm[peer] = (live, now + wait, probes)
        return
    _apply_live(h, peer, live, now)


def on_endpoint(h: Host, f: PyParsed, frame: bytes | bytearray | memoryview, port: Port,
                now: float) -> None:
    """An endpoint request or response from the network on ``port``."""
    o = f.src_off
    peer = h._ip_peer.get(bytes(frame[o : o + 16]))
    if peer is None:
        h.count("rx_endpoint_unknown_peer")
        return
    rid, op, ev = f.psn, f.ep_op, f.ev  # (request id in BTH.PSN; probes: EV under test)
    if f.opcode == Opcode.ENDPOINT_REQ:
        tokens = peer_tokens(h, peer)
        bound = not tokens or _frame_token(f, frame) in tokens
        if op == EndpointOp.EV_PROBE:
            if not bound:
                h.count("rx_endpoint_bad_token")
                return
            route = h._route_for_ev(peer, ev)
            if route is None:
                h.count("rx_probe_bad_ev")
                return
            h._ctrl.append((route[0], build_endpoint(
                route[1], ev=ev, request_id=rid,
                eeth=EETH(EndpointOp.EV_PROBE, f.ep_timestamp))))
            h.count("tx_probe_response")
            return
        # PORT_STATUS: only from a peer with a QP here, with its token
        if tokens is None or not bound:
            h.count("rx_endpoint_bad_token")
            return
        _port_status(h, peer, f.ep_port_mask, now)
        routes = h._paths_to(peer).get(port.plane)
        if routes:
            h._ctrl.append((port.index, build_endpoint(
                routes[0], ev=plane_ev(port.plane), request_id=rid,
                eeth=EETH(EndpointOp.PORT_STATUS, f.ep_timestamp))))
        return
    # responses
    if op == EndpointOp.EV_PROBE:
        if h._path_probes and h._path_probe_answer(rid, ev, peer, now):
            return
        _probe_answer(h, rid, ev, now)
    else:
        st = h._port_status.get(peer)
        if st is not None and st[0] == rid:
            del h._port_status[peer]


def _probe_answer(h: Host, rid: int, ev: int, now: float) -> None:
    rec = h._probes.pop(rid, None)
    if rec is None:
        h.count("rx_probe_stale")
        return
    qpn, pev, sent = rec
    plane, path, _ = ev_path(pev)
    if h._probe_of_path.get((qpn, plane, path)) == rid:
        del h._probe_of_path[(qpn, plane, path)]
    qp = h._qps.get(qpn)
    h._dirty.add(qpn)
    h._sendq.add(qpn)
    if qp is not None and qp.evm is not None and pev == ev:
        qp.evm.probe_result(ev, True, now - sent, now)
        ppk = (qp.attrs.peer or "", plane, path)
        if h._peer_path_probe.get(ppk) == rid:
            del h._peer_path_probe[ppk]
        # The same path works for every other QP to this peer that probes it.
        for other in h._qps.values():
            if other is qp or other.attrs.peer != qp.attrs.peer or other.evm is None:
                continue
            oev = other.evm.bad_ev_on(plane, path)
            if oev is not None:
                other.evm.probe_result(oev, True, now - sent, now)
                h._dirty.add(other.qpn)
                h._sendq.add(other.qpn)


__all__ = ["CONFIRM_FACTOR", "PathProbe", "next_due", "on_endpoint", "on_timer",
           "peer_token", "peer_tokens", "plane_ev", "send_port_status"]
