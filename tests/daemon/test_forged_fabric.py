"""Forged frames from a leaf port, aimed with live PSNs, during a verified transfer.

mrcd on two hosts of a real fabric (2 planes x 2 spines, 3 leaves with one host each,
500 Mbit/s links, MTU 9000); h0 writes to h1. The forger (docs/SECURITY.md, "Frames from
the network") taps the leaf interfaces facing h0 to learn what is live (PSN, EV, TSETH
stamp, rkey, address, QP numbers) and sends from h2's port, with h0's or h1's address:

- during the transfer, again and again: (a) PORT_STATUS "every port down" with a guessed
  endpoint token, (b) a write with a bad rkey inside the receive window, (c) a write out
  of the region's bounds, (d) "remote access error" NACKs, each naming the packet just
  sent and its EV, (e) a SACK acknowledging PSNs ahead of what h0 has sent. The transfer must verify
  byte-exact, both QPs must stay in RTS the whole time (polled by an operator client,
  as ``mrcctl qps`` does), and each kind's drop counter must move;
- after it, (f) a write with the sniffed valid rkey and the next PSN: it may land (there
  is no authentication on the wire, as in RoCEv2), and must not end the QP.

As root: ``.venv/bin/python -m pytest -s tests/daemon/test_forged_fabric.py`` (about 15 s).
"""

from __future__ import annotations

import hashlib
import queue
import secrets
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from forgery import Forger, Seen, Sniffer, counters
from mdfabric import MIB, Conn, FabricMrcds, connect, fabric_with_mrcds
from mdnsutil import needs_root, ns_prefix

from mrcnet.api import Context
from mrcnet.constants import EndpointOp, NackReason
from mrcnet.core.endpoint import plane_ev
from mrcnet.wire import CCState, build_endpoint, build_nack, build_sack
from mrcnet.wire.erth import TokenERTH
from mrcnet.wire.neth import NETH
from mrcnet.wire.seth import SETH

SPEC = "leafspine:planes=2,spines=2,leaves=3,hosts=1,rate=500mbit,mtu=9000"
PSN_MASK = 0xFFFFFF
REGION = 32 * MIB
TOTAL = 160 * MIB  # about 2 s at the fabric's 1 Gbit/s (2 planes x 500 Mbit/s)
ROUNDS = 3  # each kind is injected this many times, at different points of the transfer
#: A forged write's PSN: this far past the newest packet sniffed, inside h1's receive
#: window (4096) and past what h0 sends while the forger works (a Python tap and forger:
#: milliseconds, at 15k packets/s), so h1 checks its rkey and range and refuses it with
#: a NACK.
AHEAD = 1000
#: Forged frames per injection (1 for the kinds not named): a Python forger is slower
#: than h1's SACK for most packets it NACKs, so it sends several.
PER_KIND = {"nack": 16}

pytestmark = [needs_root]


@pytest.fixture(scope="module")
def fm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FabricMrcds]:
    with fabric_with_mrcds(tmp_path_factory.mktemp("forged"), SPEC, hosts=2,
                           prefix=ns_prefix("fg")) as f:
        yield f


class StatePoller:
    """Polls the QP lists of both mrcds (``admin qps``, what ``mrcctl qps --json`` shows)
    from a thread with its own operator clients; records every state each QP was in."""

    def __init__(self, fm: FabricMrcds, qpns: dict[str, int], period: float = 0.02) -> None:
        self.qpns, self.period = qpns, period
        self.states: dict[str, set[str]] = {h: set() for h in qpns}
        self.polls = 0
        self._ctxs = {h: Context(fm.sock(h)) for h in qpns}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for host, ctx in self._ctxs.items():
                qps = {q["qpn"]: q for q in ctx.admin("qps")["qps"]}
                q = qps.get(self.qpns[host])
                self.states[host].add("GONE" if q is None else q["state"])
            self.polls += 1
            self._stop.wait(self.period)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for ctx in self._ctxs.values():
            ctx.close()


def _kinds(c: Conn, forger: Forger, tap: Sniffer
           ) -> dict[str, tuple[tuple[str, ...], Callable[[Seen], bytes]]]:
    """Per kind: the counters that count it dropped (any of them; h0's for frames to h0,
    h1's for frames to h1) and how to make one from the newest frame the tap saw."""
    region = c.peer.regions[0]
    qa, qb = c.qp_a.qpn, c.qp_b.qpn
    to_h0 = forger.route("h1", "h0")  # claiming to be h1, the QP's peer

    def port_status(s: Seen) -> bytes:
        # "h1 has no live port" with a guessed token (32 random bits).
        erth = TokenERTH(EndpointOp.PORT_STATUS, port_status_mask=0,
                         token=secrets.randbits(32))
        return build_endpoint(to_h0, ev=plane_ev(0), request_id=secrets.randbits(24),
                              erth=erth)

    def bad_rkey(s: Seen) -> bytes:
        return forger.data("h0", "h1", qp=qb, psn=s.f.psn + AHEAD, va=s.f.va,
                           rkey=s.f.rkey ^ 0x5A5A5A, body=b"\xee" * 4096, ev=s.f.ev,
                           timestamp=s.f.timestamp)

    def out_of_bounds(s: Seen) -> bytes:
        return forger.data("h0", "h1", qp=qb, psn=s.f.psn + AHEAD,
                           va=region.addr + region.length - 100, rkey=s.f.rkey,
                           body=b"\xee" * 4096, ev=s.f.ev, timestamp=s.f.timestamp)

    nacked: set[int] = set()

    def nack(s: Seen) -> bytes:
        # "remote access error" for the packet just sent, naming the EV it went on; one
        # per PSN (three refusals of one PSN over two paths fail the QP by design: the
        # rule for a real access error, docs/SECURITY.md).
        if s.f.psn in nacked:
            with tap.lock:
                fresh = [x for x in reversed(tap.recent[0]) if x.f.psn not in nacked]
            s = fresh[0] if fresh else s
        nacked.add(s.f.psn)
        neth = NETH(reason=NackReason.UNEXP_EVENT, entropy=s.f.ev, nack_psn=s.f.psn)
        return build_nack(to_h0, ev=s.f.ev, dest_qp=qa, neth=neth)

    def sack_ahead(s: Seen) -> bytes:
        # "h1 has everything up to 5000 PSNs past the packet just sent" (40 MB: more than
        # h0 sends while the forged frame travels).
        seth = SETH(entropy=s.f.ev, cack_psn=(s.f.psn + 5000) & PSN_MASK, sack_bitmap=0)
        return build_sack(to_h0, ev=s.f.ev, dest_qp=qa, seth=seth,
                          cc=CCState(timestamp=s.f.timestamp))

    return {
        "port_status": (("rx_endpoint_bad_token",), port_status),
        "bad_rkey": (("rx_bad_rkey",), bad_rkey),
        "out_of_bounds": (("rx_out_of_bounds",), out_of_bounds),
        # Counted as a refusal to confirm (the packet is resent) while the packet is
        # outstanding, as stale once h1's SACK for it came first (the tap is in Python).
        "nack": (("rx_nack_access_unconfirmed", "rx_nack_stale"), nack),
        "sack_ahead": (("rx_sack_out_of_window",), sack_ahead),
    }


def _both(h0: Context, h1: Context) -> dict[str, int]:
    """h0's and h1's counters (through clients of their mrcds), keys prefixed with the
    host."""
    out = {f"h0.{k}": v for k, v in counters(h0).items()}
    out.update({f"h1.{k}": v for k, v in counters(h1).items()})
    return out


def _diff(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def _host_of(kind: str) -> str:
    """The host a kind of forged frame is sent to."""
    return "h1" if kind in ("bad_rkey", "out_of_bounds") else "h0"


class Injector:
    """Sends the forged frames of the kinds put on ``queue``, from a thread (the writer
    keeps its writes in flight meanwhile), and counts what the hosts dropped, through
    operator clients of its own."""

    def __init__(self, fm: FabricMrcds, kinds: dict[str, tuple[tuple[str, ...],
                 Callable[[Seen], bytes]]], tap: Sniffer, forger: Forger) -> None:
        self.kinds, self.tap, self.forger = kinds, tap, forger
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.injected: dict[str, int] = dict.fromkeys(kinds, 0)
        self.dropped: dict[str, int] = dict.fromkeys(kinds, 0)
        self.how: dict[str, dict[str, int]] = {k: {} for k in kinds}
        self.errors: list[str] = []
        self._h0, self._h1 = Context(fm.sock("h0")), Context(fm.sock("h1"))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (kind := self.queue.get()) is not None:
            try:
                self._inject(kind)
            except Exception as e:
                self.errors.append(f"{kind}: {e!r}")

    def _inject(self, kind: str) -> None:
        """``PER_KIND[kind]`` frames of ``kind``, each made from the newest frame the tap
        saw and sent at once; then wait (up to 3 s) until its host counts them dropped
        and what they set off has settled (a bad rkey or range: h1's NACK to h0, counted
        there), so that every count is theirs."""
        names, make = self.kinds[kind]
        host = _host_of(kind)
        before = _both(self._h0, self._h1)
        n_frames = PER_KIND.get(kind, 1)
        for _ in range(n_frames):
            self.forger.send([make(self.tap.latest(plane=0))], gap=0.0005)  # (plane 0)
        self.injected[kind] += n_frames
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            d = _diff(before, _both(self._h0, self._h1))
            n = sum(d.get(f"{host}.{k}", 0) for k in names)
            nacked = host == "h0" or sum(d.get(f"h0.{k}", 0) for k in (
                "rx_nack_stale", "rx_nack_access_unconfirmed")) > 0
            if n >= n_frames and nacked:
                self.dropped[kind] += n
                for k in names:
                    if d.get(f"{host}.{k}"):
                        self.how[kind][k] = self.how[kind].get(k, 0) + d[f"{host}.{k}"]
                return
            time.sleep(0.005)
        self.errors.append(f"{kind}: not counted in 3 s")

    def close(self) -> None:
        """Finish what is queued, then stop."""
        self.queue.put(None)
        self._thread.join(60)
        self._h0.close()
        self._h1.close()


def test_forged_frames_from_a_leaf_port_during_a_verified_transfer(fm: FabricMrcds) -> None:
    desc = fm.fab.description
    c = connect(fm.sock("h0"), fm.sock("h1"), "h1", 100, REGION)
    poller = StatePoller(fm, {"h0": c.qp_a.qpn, "h1": c.qp_b.qpn})
    try:
        with Sniffer(desc, "h0", planes=(0, 1)) as tap, Forger(desc, "h2") as forger:
            kinds = _kinds(c, forger, tap)
            plan = [k for _ in range(ROUNDS) for k in kinds]
            # Spread over 10 %..85 % of the transfer, one injection per step.
            marks = [TOTAL * (10 + 75 * i // len(plan)) // 100 for i in range(len(plan))]
            inj = Injector(fm, kinds, tap, forger)
            before_all = _both(c.ca, c.cb)

            def on_progress(done: int) -> None:
                while marks and done >= marks[0]:
                    marks.pop(0)
                    inj.queue.put(plan[len(plan) - len(marks) - 1])

            try:
                assert c.stream(TOTAL, MIB, 8, timeout=60, on_progress=on_progress) == []
            finally:
                inj.close()
            assert not marks and not inj.errors, (marks, inj.errors)
            injected, dropped, how = inj.injected, inj.dropped, inj.how
            # The transfer verifies byte-exact (the last REGION bytes written: the
            # stream cycles over the region).
            assert hashlib.sha256(c.mr_a.buf).digest() == \
                hashlib.sha256(c.mr_b.buf).digest(), "the transfer is not byte-exact"
            diff = _diff(before_all, _both(c.ca, c.cb))
            print(f"\ninjected {injected}; counted dropped {how}; tap saw "
                  f"{tap.data_frames} data frames of h0's")
            print("counters that moved: "
                  f"{ {k: v for k, v in sorted(diff.items()) if '.rx_' in k} }")
            # Each forged frame counted by the counter of its kind (h0's stale-NACK
            # count may also hold genuine trim NACKs of packets acknowledged meanwhile).
            assert injected == {k: ROUNDS * PER_KIND.get(k, 1) for k in kinds}
            assert all(dropped[k] >= n for k, n in injected.items()), (dropped, how)
            # Some forged NACKs named a packet still outstanding (in RoCEv2, one such
            # NAK fails the QP): they only made it resend that packet.
            assert how["nack"].get("rx_nack_access_unconfirmed", 0) >= 1, how
            # Nothing else went wrong: no genuine SACK taken for a forged one
            # (ack_rtt_floor), no internal error, no port-status claim believed.
            assert diff.get("h0.rx_sack_too_early", 0) == 0, diff
            for ctx in (c.ca, c.cb):
                assert ctx.stats()["mrcd_internal_errors"] == 0
            c.drain_events()
            assert not [e for e in c.other_events if type(e).__name__ == "PortStatusChanged"]
            rtts = [e["min_rtt"] for e in c.ev_stats() if e.get("min_rtt")]
            print(f"h0's smallest RTT measured on any EV: {min(rtts) * 1e6:.0f} us "
                  f"(ack_rtt_floor: 20 us)")

            # (f) A write with the sniffed valid rkey, an address inside the region and
            # the next PSN h1 expects: learn them from one genuine 4 KiB write on the
            # idle QP, then forge the next packet.
            c.mr_a.buf[:MIB] = secrets.token_bytes(MIB)
            base = c.peer.regions[0].addr
            for k in range(32):  # until one goes over plane 0, where the forger is
                c.qp_a.post_write(c.mr_a, k * 4096, 4096, c.peer.regions[0], k * 4096,
                                  wr_id=(1 << 20) + k)
                (wc,) = c.cq_a.wait(timeout=10)
                assert wc.ok, wc
                time.sleep(0.05)
                s = tap.latest()
                if s.plane == 0 and s.f.va == base + k * 4096:
                    break
            else:
                raise AssertionError("32 single-packet writes, none over plane 0")
            forged_at = 8 * MIB
            body = b"\xee" * 4096
            rx_before = _both(c.ca, c.cb)
            forger.send([forger.data("h0", "h1", qp=c.qp_b.qpn, psn=s.f.psn + 1,
                                     va=base + forged_at, rkey=s.f.rkey, body=body,
                                     ev=s.f.ev, timestamp=s.f.timestamp)])
            deadline = time.monotonic() + 5
            while bytes(c.mr_b.buf[forged_at:forged_at + 4096]) != body \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            landed = bytes(c.mr_b.buf[forged_at:forged_at + 4096]) == body
            print(f"(f) forged write with the sniffed rkey: "
                  f"{'landed' if landed else 'did not land'}")
            assert landed, ("a forged write with a valid rkey and the next PSN should land",
                            s.f.psn, c.cb.stats(c.qp_b)["qp"]["rcv_psn"])
            # Its SACK went to the real h0, which never sent that PSN: dropped there.
            time.sleep(0.2)
            d = _diff(rx_before, _both(c.ca, c.cb))
            assert d.get("h0.rx_sack_out_of_window", 0) >= 1, d
            # The QP lives on: h0's next write completes. The forged packet took its
            # first PSN, so h1 takes that packet for a duplicate (acknowledged, not
            # written: RC's duplicate rule): the bytes of exactly that one packet are
            # missing, and the write completes with SUCCESS.
            c.mr_a.buf[:MIB] = secrets.token_bytes(MIB)
            c.qp_a.post_write(c.mr_a, 0, MIB, c.peer.regions[0], 0, wr_id=2 << 20)
            (wc,) = c.cq_a.wait(timeout=10)
            assert wc.ok, wc
            bad = [i for i in range(0, MIB, 4096)
                   if c.mr_a.buf[i:i + 4096] != c.mr_b.buf[i:i + 4096]]
            print(f"the next genuine 1 MiB write: 4 KiB blocks that differ: "
                  f"{[hex(i) for i in bad]}")
            assert bad == [0, 4096], "not exactly the first packet (8 KiB at MTU 9000)"
            # ... and the one after is whole again.
            c.mr_a.buf[:MIB] = secrets.token_bytes(MIB)
            c.qp_a.post_write(c.mr_a, 0, MIB, c.peer.regions[0], 0, wr_id=3 << 20)
            (wc,) = c.cq_a.wait(timeout=10)
            assert wc.ok, wc
            assert bytes(c.mr_a.buf[:MIB]) == bytes(c.mr_b.buf[:MIB])
    finally:
        poller.close()
        c.close()
    # The QPs never left RTS, from the first poll to the last.
    print(f"QP states seen in {poller.polls} polls: {poller.states}")
    assert poller.polls >= 20
    assert poller.states == {"h0": {"RTS"}, "h1": {"RTS"}}, poller.states
