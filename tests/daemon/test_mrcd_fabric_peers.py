"""mrcd on a real mrc-fabric: a peer that dies, and forged or malformed frames.

One fabric for the module: 2 planes x 2 spines, 3 leaves with one host each, 500 Mbit/s
links, MTU 9000; mrcd on every host.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from forgery import Forger, counters, outer_len_fixed, udp_frame
from mdfabric import MIB, Conn, FabricMrcds, connect, fabric_with_mrcds
from mdnsutil import needs_root, run, start_mrcd

from mrcnet.core.events import QPError
from mrcnet.io.kernel_drop import TABLE_RE

SPEC = "leafspine:planes=2,spines=2,leaves=3,hosts=1,rate=500mbit,mtu=9000"

pytestmark = [needs_root]


@pytest.fixture(scope="module")
def fm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FabricMrcds]:
    with fabric_with_mrcds(tmp_path_factory.mktemp("mfpeers"), SPEC, hosts=3) as f:
        yield f


_service = iter(range(100, 1000))


def _mrcd_tables(fm: FabricMrcds, host: str) -> list[str]:
    out = run("nft", "list", "tables", "netdev", ns=fm.fab.netns(host))
    return [w for line in out.splitlines() for w in line.split()[-1:] if TABLE_RE.match(w)]


def test_peer_mrcd_killed_gives_a_clear_error_and_other_qps_keep_working(
        fm: FabricMrcds) -> None:
    to_h1 = connect(fm.sock("h0"), fm.sock("h1"), "h1", next(_service), 64 * MIB)
    to_h2 = connect(fm.sock("h0"), fm.sock("h2"), "h2", next(_service), 16 * MIB)
    try:
        assert to_h2.stream(8 * MIB, MIB, 8) == []
        victim = fm.mrcds["h2"]
        tables = _mrcd_tables(fm, "h2")
        assert [t for t in tables if t.startswith(f"mrcd_{victim.proc.pid}_")], tables
        os.kill(victim.proc.pid, signal.SIGKILL)  # exactly that PID (ip netns exec execs)
        victim.proc.wait(10)
        # Writes to the dead peer; the application waits for their completions on a
        # thread of its own (its own context), while the main thread uses the other QP.
        result: dict[str, Any] = {}
        t_post = time.monotonic()
        for i in range(4):
            to_h2.qp_a.post_write(to_h2.mr_a, i * MIB, MIB, to_h2.peer.regions[0], i * MIB,
                                  wr_id=100 + i)

        def wait_error() -> None:
            wcs: list[Any] = []
            deadline = time.monotonic() + 60
            while len(wcs) < 4 and time.monotonic() < deadline:
                got = to_h2.cq_a.wait(timeout=0.5)
                if got and "t" not in result:
                    result["t"] = time.monotonic()
                wcs += got
            result["wcs"] = wcs
            deadline = time.monotonic() + 5
            while "event" not in result and time.monotonic() < deadline:
                e = to_h2.ca.get_async_event(timeout=0.2)
                if isinstance(e, QPError):
                    result["event"] = e

        waiter = threading.Thread(target=wait_error)
        waiter.start()
        # Meanwhile mrcd keeps serving the QP to h1 (same mrcd, same ports).
        assert to_h1.stream(48 * MIB, MIB, 16, timeout=60) == []
        waiter.join(90)
        assert not waiter.is_alive()
        wcs = result["wcs"]
        assert [(w.wr_id, w.status) for w in wcs] == [
            (100, "RETRY_EXC_ERR"), (101, "WR_FLUSH_ERR"), (102, "WR_FLUSH_ERR"),
            (103, "WR_FLUSH_ERR")], wcs
        reason = result["event"].reason
        assert "peer unreachable" in reason and "h2" in reason \
            and "retry budget exhausted" in reason, reason
        elapsed = result["t"] - t_post
        print(f"\nmrcd of h2 SIGKILLed: RETRY_EXC_ERR {elapsed:.2f} s after the post; "
              f"QPError: {reason}")
        # The core's retry budget with mrcd's timers is 2.6 s (130 x 20 ms); the bound
        # is generous for the noisy machine.
        assert elapsed < 15
        assert hashlib.sha256(to_h1.mr_a.buf[:48 * MIB]).digest() == \
            hashlib.sha256(to_h1.mr_b.buf[:48 * MIB]).digest()
        assert to_h1.stream(16 * MIB, MIB, 16, timeout=60) == []
        st = to_h1.ca.stats(to_h1.qp_a)
        assert st["qp"]["state"] == "RTS" and st["mrcd_internal_errors"] == 0

        # The killed mrcd's kernel drop table stayed behind; the next mrcd on the same
        # ports removes it (owner pid gone, exact name format) and installs its own.
        stale = [t for t in _mrcd_tables(fm, "h2") if t.startswith(f"mrcd_{victim.proc.pid}_")]
        assert stale, "SIGKILL should have left the table behind"
        fm.mrcds["h2"] = new = start_mrcd("h2", victim.ns, victim.config, victim.socket,
                                          str(fm.tmp), args=())
        left = _mrcd_tables(fm, "h2")
        assert not [t for t in left if t in stale], left
        assert [t for t in left if t.startswith(f"mrcd_{new.proc.pid}_")], left
        assert "removed kernel drop tables of mrcds that are gone" in new.logs()
        again = connect(fm.sock("h0"), fm.sock("h2"), "h2", next(_service), 16 * MIB)
        try:
            assert again.stream(16 * MIB, MIB, 8) == []
        finally:
            again.close()
    finally:
        to_h1.close()
        to_h2.close()


@pytest.fixture
def target(fm: FabricMrcds) -> Iterator[Conn]:
    """h0 -> h1, nothing written yet (h1's region is all zeros)."""
    c = connect(fm.sock("h0"), fm.sock("h1"), "h1", next(_service), 4 * MIB)
    try:
        yield c
    finally:
        c.close()


def test_forged_and_malformed_frames_are_dropped_and_counted(fm: FabricMrcds,
                                                            target: Conn) -> None:
    c = target
    desc = fm.fab.description
    h1 = desc.host("h1").port(0)
    h2 = desc.host("h2").port(0)
    qpn = c.qp_b.qpn
    region = c.peer.regions[0]
    psn = c.cb.stats(c.qp_b)["qp"]["rcv_psn"]  # exactly what h1 expects next
    payload = b"\xaa" * 4096
    forger = Forger(desc, "h2")

    def data(src: str = "h0", *, qp: int = qpn, p: int = psn, va: int = region.addr,
             rkey: int = region.rkey, spine: int = 0) -> bytes:
        return forger.data(src, "h1", qp=qp, psn=p, va=va, rkey=rkey, body=payload,
                           spine=spine)

    n = 20
    forged = {
        # A well-formed write from a host that is not the QP's peer (h2's own address).
        "rx_wrong_peer": [data("h2", p=psn + i) for i in range(n)],
        # The peer's (spoofed) address, but a QPN nobody has.
        "rx_unknown_qpn": [data(qp=qpn + 1000 + i) for i in range(n)],
        # PSN far outside the receive window.
        "rx_psn_out_of_window": [data(p=psn + (1 << 23) - 10 - i) for i in range(n)],
        # In-window PSN, wrong rkey; then the right rkey but beyond the region's end.
        "rx_bad_rkey": [data(p=psn + i, rkey=region.rkey ^ 0x5A5A5A) for i in range(n)],
        "rx_out_of_bounds": [data(p=psn + i, va=region.addr + region.length - 100)
                             for i in range(n)],
    }
    good = data(p=psn)
    # Truncated inside BTH / RETH / payload (past the UDP port, so the socket filter lets
    # them through to mrcd's parser), and a corrupted payload byte (checksum/ICRC).
    # The outer IPv6 payload length is made to match (as a trimming switch does), or the
    # Linux leaf drops the frame itself (Ip6InTruncatedPkts); inner IPv6 and UDP lengths
    # still claim the full frame.
    udp_end = 14 + 40 + 40 + 8
    malformed = [outer_len_fixed(good[:udp_end + k]) for k in (1, 6, 11, 20, 27, 40, 60, 200)]
    corrupt = bytearray(good)
    corrupt[-100] ^= 0xFF
    malformed.append(bytes(corrupt))
    before = counters(c.cb)
    # Random bytes as UDP payload to port 4791, along an MRC path.
    container = desc.path_container("h2", "h1", plane=0, spine=1).packed
    rnd = [udp_frame(h2, h1.address, container, os.urandom(k))
           for k in (1, 12, 40, 100, 600, 1400, 4000, 8000)]
    with forger:
        for frames in [*forged.values(), malformed, rnd]:
            forger.send(frames)
    # Wait until h1 counted them all (nothing is written meanwhile).
    want = {k: len(v) for k, v in forged.items()}
    deadline = time.monotonic() + 10
    while True:
        after = counters(c.cb)
        diff = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
        mal = sum(v for k, v in diff.items() if k.startswith("rx_malformed_"))
        if (all(diff.get(k, 0) >= v for k, v in want.items())
                and mal >= len(malformed) + len(rnd)) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    print(f"\nh1 drop counters after the forged frames: "
          f"{ {k: v for k, v in sorted(diff.items()) if v and k.startswith('rx_')} }")
    for k, v in want.items():
        assert diff.get(k, 0) >= v, (k, diff)
    assert mal >= len(malformed) + len(rnd), diff
    assert diff.get("rx_internal_error", 0) == 0
    # Nothing of it reached memory...
    assert bytes(c.mr_b.buf) == bytes(c.mr_b.length), "a forged frame reached memory"
    # ...and mrcd keeps serving: the real peer's writes land, byte-exact.
    assert c.stream(4 * MIB, MIB, 4, timeout=60) == []
    assert hashlib.sha256(c.mr_a.buf).digest() == hashlib.sha256(c.mr_b.buf).digest()
    for ctx in (c.ca, c.cb):
        st = ctx.stats()
        assert st["mrcd_internal_errors"] == 0 and st["host"].get("rx_internal_error", 0) == 0
    assert c.ca.stats(c.qp_a)["qp"]["state"] == "RTS"
