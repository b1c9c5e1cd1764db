"""One forged frame of each kind, from a host with the peer's source address and a PSN
sniffed from the live transfer, injected mid-transfer: the QP stays in RTS, the write
completes byte-exact and the frame is counted as dropped (docs/SECURITY.md, "Frames from
the network")."""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable

import pytest

from mrcnet.constants import NackReason, Opcode
from mrcnet.core import HostConfig, QPState, WCStatus, make_ev
from mrcnet.core.forged import ACCESS_REFUSALS, AccessRefusals
from mrcnet.wire import CCState, build_data, build_nack, build_sack
from mrcnet.wire.neth import NETH
from mrcnet.wire.parsed import PyParsed, py_parse
from mrcnet.wire.seth import SETH

from .harness import Net, connect

SIZE = 2_000_000
PSN0 = (1 << 24) - 300  # the transfer crosses the 24-bit wrap


class Live:
    """A 2 MB write h0 -> h1 with every frame h0 sends logged (the forger's sniffer)."""

    def __init__(self, psn: int = PSN0, config: HostConfig | None = None) -> None:
        self.net = net = Net(config=config)
        net.log_tx = True
        self.qa, self.qb = connect(net, 0, 1, psn_a=psn, psn_b=psn ^ 0x5A5A5A)
        self.ha, self.hb = net.h(0), net.h(1)
        self.src = bytearray(os.urandom(SIZE))
        self.dst = bytearray(SIZE)
        self.ms, self.md = self.ha.register_mr(self.src), self.hb.register_mr(self.dst)
        self.fwd = net.fabric.provider("h0").routes("h1", 0)[0]  # h0 -> h1 (h0's address)
        self.back = net.fabric.provider("h1").routes("h0", 0)[0]  # h1 -> h0 (h1's address)
        self.ha.post_write(self.qa, 1, self.ms, 0, SIZE, self.md.addr, self.md.rkey)

    def run_until(self, nbytes: int) -> None:
        """Until h1 has ``nbytes``, stopping just as h0 sends data (a forger that sniffs a
        frame answers at once)."""
        rq, net = self.hb.qp(self.qb), self.net

        def fresh() -> bool:
            log = net.tx_log
            return (rq.rcvd_bytes > nbytes and bool(log) and log[-1][0] == net.now
                    and log[-1][1] == "h0" and py_parse(log[-1][3], False).is_data)

        net.run(until=fresh, max_time=5.0)
        assert self.ha.qp(self.qa).state is QPState.RTS

    def run_until_mid(self) -> None:
        self.run_until(SIZE // 3)

    def sniff(self) -> PyParsed:
        """The newest data frame h0 sent: its PSN, EV and stamp are live."""
        for _t, src, _port, f in reversed(self.net.tx_log):
            if src == "h0":
                p = py_parse(f, False)
                if p.is_data:
                    return p
        raise AssertionError("no data frame sent")

    def finish(self) -> None:
        qa = self.ha.qp(self.qa)
        states = set()

        def done() -> bool:
            states.add(qa.state)
            return len(qa.cq) > 0

        self.net.run(until=done, max_time=20.0)
        assert states == {QPState.RTS}
        (c,) = self.ha.poll_cq(qa.cq, 4)
        assert c.status is WCStatus.SUCCESS
        assert self.dst == self.src
        assert self.net.internal_errors() == 0


def _bad_rkey(w: Live, p: PyParsed) -> tuple[object, str]:
    frame = build_data(w.fwd, ev=p.ev, opcode=Opcode.WRITE_ONLY, dest_qp=w.qb, psn=p.psn,
                       va=w.md.addr, rkey=w.md.rkey ^ 0x4321, payload=b"\xee" * 64,
                       timestamp=p.timestamp)
    return (w.hb, frame), "rx_bad_rkey"


def _out_of_bounds(w: Live, p: PyParsed) -> tuple[object, str]:
    frame = build_data(w.fwd, ev=p.ev, opcode=Opcode.WRITE_ONLY, dest_qp=w.qb, psn=p.psn,
                       va=w.md.addr + SIZE - 8, rkey=w.md.rkey, payload=b"\xee" * 64,
                       timestamp=p.timestamp)
    return (w.hb, frame), "rx_out_of_bounds"


def _forged_nack(w: Live, p: PyParsed) -> tuple[object, str]:
    neth = NETH(reason=NackReason.UNEXP_EVENT, entropy=p.ev, nack_psn=p.psn)
    return (w.ha, build_nack(w.back, ev=p.ev, dest_qp=w.qa, neth=neth)), \
        "rx_nack_access_unconfirmed"


def _sack_ahead(w: Live, p: PyParsed) -> tuple[object, str]:
    # "everything up to the packet just sent arrived": sooner than any round trip
    seth = SETH(entropy=p.ev, cack_psn=p.psn, sack_bitmap=0)
    cc = CCState(timestamp=p.timestamp)
    return (w.ha, build_sack(w.back, ev=p.ev, dest_qp=w.qa, seth=seth, cc=cc)), \
        "rx_sack_too_early"


def _sack_unsent(w: Live, p: PyParsed) -> tuple[object, str]:
    seth = SETH(entropy=p.ev, cack_psn=(p.psn + 50) & 0xFFFFFF, sack_bitmap=0)
    return (w.ha, build_sack(w.back, ev=p.ev, dest_qp=w.qa, seth=seth, cc=CCState())), \
        "rx_sack_out_of_window"


def _sack_bits_unsent(w: Live, p: PyParsed) -> tuple[object, str]:
    qa = w.ha.qp(w.qa)
    # the real cumulative point, and a bit 53 PSNs past the newest sent
    off = qa.next_seq - 10 - (qa.snd_una - 1)
    seth = SETH(entropy=p.ev, cack_psn=(qa.snd_una - 1) & 0xFFFFFF, sack_offset=off,
                sack_bitmap=1 << 63)
    return (w.ha, build_sack(w.back, ev=p.ev, dest_qp=w.qa, seth=seth, cc=CCState())), \
        "rx_sack_unsent"


KINDS: dict[str, Callable[[Live, PyParsed], tuple[object, str]]] = {
    "bad_rkey": _bad_rkey, "out_of_bounds": _out_of_bounds, "forged_nack": _forged_nack,
    "sack_ahead": _sack_ahead, "sack_unsent": _sack_unsent,
    "sack_bits_unsent": _sack_bits_unsent,
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_one_forged_frame_does_not_end_the_transfer(kind: str) -> None:
    w = Live()
    w.run_until_mid()
    (host, frame), counter = KINDS[kind](w, w.sniff())
    before = host.counters().get(counter, 0)  # type: ignore[attr-defined]
    host.receive(frame, 0, w.net.now)  # type: ignore[attr-defined]
    assert host.counters().get(counter, 0) == before + 1  # type: ignore[attr-defined]
    w.finish()


def test_every_kind_repeated_during_one_transfer() -> None:
    """Each kind, again and again with fresh sniffed PSNs, through the whole transfer."""
    w = Live()
    seen: dict[str, int] = {}
    for step in range(12):
        w.run_until((step + 1) * SIZE // 16)
        for make in KINDS.values():
            (host, frame), counter = make(w, w.sniff())
            host.receive(frame, 0, w.net.now)  # type: ignore[attr-defined]
            seen[counter] = seen.get(counter, 0) + 1
    w.finish()
    counters = {**w.ha.counters(), **w.hb.counters()}
    for name, n in seen.items():
        assert counters.get(name, 0) >= n, name


def _lose(w: Live, p: PyParsed) -> None:
    """The network loses the data frame ``p`` (sent, still on its way): the peer never
    gets that transmission."""
    q = w.net._q  # the pipe's (time, n, host, plane, frame) heap
    keep = [x for x in q if not ((f := py_parse(x[4], False)).is_data and f.psn == p.psn)]
    assert len(keep) == len(q) - 1
    q[:] = keep
    heapq.heapify(q)


def _ahead_then_loss(floor: float) -> tuple[Live, set[QPState], list[WCStatus]]:
    """A forged SACK "everything up to the packet just sent arrived", made from that
    packet as sniffed, while the network loses that very packet: the sender must not
    take the forged word for it. Runs the transfer to its end (or 5 s)."""
    w = Live(config=HostConfig(ack_rtt_floor=floor))
    w.run_until_mid()
    p = w.sniff()
    _lose(w, p)
    (host, frame), _ = _sack_ahead(w, p)
    host.receive(frame, 0, w.net.now)  # type: ignore[attr-defined]
    qa = w.ha.qp(w.qa)
    states: set[QPState] = set()

    def done() -> bool:
        states.add(qa.state)
        return len(qa.cq) > 0

    w.net.run(until=done, max_time=w.net.now + 5.0)
    return w, states, [c.status for c in w.ha.poll_cq(qa.cq, 4)]


def test_a_forged_sack_ahead_cannot_make_the_sender_drop_unacknowledged_data() -> None:
    # With the floor (the default): the forged SACK is dropped, the lost packet is
    # resent and the write completes byte-exact.
    w, states, statuses = _ahead_then_loss(HostConfig().ack_rtt_floor)
    assert w.ha.counters().get("rx_sack_too_early", 0) == 1
    assert states == {QPState.RTS} and statuses == [WCStatus.SUCCESS]
    assert w.dst == w.src
    # Without it (what the check prevents): the sender takes the forged SACK, forgets the
    # packet the network lost and never resends it; the write even completes, with a
    # hole in the peer's memory (silent corruption).
    w, states, statuses = _ahead_then_loss(0.0)
    assert w.ha.counters().get("rx_sack_too_early", 0) == 0
    assert statuses == [WCStatus.SUCCESS] and w.dst != w.src


def test_access_refusals_need_consistent_evidence() -> None:
    r = AccessRefusals()
    ev1, ev2 = make_ev(0, 1, 0), make_ev(1, 2, 0)
    assert not r.refused(100, ev1, 1, 2)
    assert not r.refused(100, ev1, 1, 2)  # the same transmission again: a duplicate
    assert not r.refused(100, ev1, 2, 2)
    assert not r.refused(100, ev1, 3, 2)  # three, but all on one path of two
    assert r.refused(100, ev2, 4, 2)
    one = AccessRefusals()  # a QP with a single path: three refusals suffice
    assert [one.refused(7, ev1, tx, 1) for tx in range(1, ACCESS_REFUSALS + 1)] == [
        False] * (ACCESS_REFUSALS - 1) + [True]


def test_a_real_access_error_still_fails_the_qp() -> None:
    """The peer refuses every transmission: the QP fails after ACCESS_REFUSALS."""
    net = Net()
    qa, _qb = connect(net, 0, 1, psn_a=PSN0)
    ha, hb = net.h(0), net.h(1)
    src = bytearray(8192)
    ms = ha.register_mr(src)
    md = hb.register_mr(bytearray(4096))
    ha.post_write(qa, 9, ms, 0, 8192, md.addr, md.rkey)  # past the region's end
    net.run(until=lambda: len(ha.qp(qa).cq) > 0, max_time=5.0)
    (c,) = ha.poll_cq(ha.qp(qa).cq, 4)
    assert c.status is WCStatus.REM_ACCESS_ERR
    assert ha.counters()["rx_nack_access_unconfirmed"] == ACCESS_REFUSALS - 1
    assert ha.qp(qa).state is QPState.ERROR
