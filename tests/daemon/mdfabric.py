"""mrcd on real mrc-fabric fabrics: fabric + mrcd per host, and a streaming writer.

Fabrics are named ``mf`` + a random suffix and recorded in a state directory private to
the test module; :func:`fabric_with_mrcds` removes exactly what it made (mrcds by PID,
then the fabric's recorded namespaces). Nothing is ever killed or deleted by pattern.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mdnsutil import Mrcd, ns_prefix, start_mrcd

from mrcnet.api import Context, MemoryRegion, QueuePair
from mrcnet.api.client import CompletionQueue, PeerInfo
from mrcnet.core.events import Event, PathStateChanged
from mrcnet.fabric.fabric import Fabric

MIB = 1 << 20


@dataclass
class FabricMrcds:
    """A fabric with one mrcd per host (by host name)."""

    fab: Fabric
    mrcds: dict[str, Mrcd]
    tmp: Path

    def sock(self, host: str) -> str:
        return self.mrcds[host].socket


def write_fabric_config(tmp: Path, host: str, fabric_path: str, extra: str = "") -> str:
    lines = [f'host = "{host}"', f'socket = "{tmp}/{host}.sock"',
             f'fabric = "{fabric_path}"', 'log_level = "info"', extra]
    path = tmp / f"{host}.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@contextlib.contextmanager
def fabric_with_mrcds(tmp: Path, spec: str, hosts: int | None = None,
                      extra: str = "", prefix: str | None = None) -> Iterator[FabricMrcds]:
    """Bring up a fabric ``<prefix><hex>`` (state under ``tmp``; ``prefix`` by default
    ``$MRC_E2E_PREFIX``, else ``mf``) and an mrcd on its first ``hosts`` hosts; stop them
    (by PID) and remove the fabric afterwards."""
    prefix = prefix or ns_prefix("mf")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRC_FABRIC_STATE_DIR", str(tmp / "fabrics"))
        fab = Fabric.up(spec, name=prefix + secrets.token_hex(3))
        started: dict[str, Mrcd] = {}
        try:
            for h in fab.description.hosts[:hosts]:
                cfg = write_fabric_config(tmp, h.name, str(fab.description_path), extra)
                started[h.name] = start_mrcd(h.name, fab.netns(h.name), cfg,
                                             f"{tmp}/{h.name}.sock", str(tmp))
            yield FabricMrcds(fab, started, tmp)
        finally:
            for m in started.values():
                m.stop()
            fab.down()


@dataclass
class PathEvent:
    """A PathStateChanged event as the sender's application saw it, with arrival time."""

    t: float
    ev: int
    old: str
    new: str
    cause: str

    @property
    def plane(self) -> int:
        return (self.ev >> 24) & 0x7F

    @property
    def path(self) -> int:
        return (self.ev >> 12) & 0xFFF


@dataclass
class Conn:
    """A connected QP pair: ``a`` (sender, its own context) writes into ``b``'s region."""

    ca: Context
    cb: Context
    qp_a: QueuePair
    qp_b: QueuePair
    cq_a: CompletionQueue
    cq_b: CompletionQueue
    mr_a: MemoryRegion
    mr_b: MemoryRegion
    peer: PeerInfo
    events: list[PathEvent] = field(default_factory=list)
    other_events: list[Event] = field(default_factory=list)

    def close(self) -> None:
        for c in (self.ca, self.cb):
            with contextlib.suppress(Exception):
                c.close()

    def drain_events(self) -> None:
        """Collect the sender's asynchronous events, timed by mrcd's stamp (when the EV
        changed; time.monotonic() in mrcd), or on arrival if it has none."""
        while (got := self.ca.get_stamped_event(timeout=0)) is not None:
            e = got.event
            if isinstance(e, PathStateChanged):
                self.events.append(PathEvent(got.clock, e.ev, e.old.value, e.new.value,
                                             e.cause))
            else:
                self.other_events.append(e)

    def ev_stats(self) -> list[dict[str, Any]]:
        evs: list[dict[str, Any]] = self.ca.stats(self.qp_a, evs=True)["evs"]
        return evs

    def sent_per_path(self) -> dict[tuple[int, int], int]:
        """Data packets sent so far per (plane, spine)."""
        out: dict[tuple[int, int], int] = {}
        for e in self.ev_stats():
            key = (e["plane"], e["path"])
            out[key] = out.get(key, 0) + e["sent"]
        return out

    def stream(self, total: int, chunk: int, depth: int, *, timeout: float = 60.0,
               on_progress: Callable[[int], None] | None = None) -> list[str]:
        """Write ``total`` bytes of ``mr_a`` (cycling over it) to ``mr_b``, ``chunk`` per
        write, at most ``depth`` outstanding; the last carries an immediate. Calls
        ``on_progress(bytes_completed)`` after every completion batch. Returns the
        completion statuses that were not SUCCESS (empty on success). A stall longer
        than ``timeout`` raises TimeoutError."""
        size = self.mr_a.length
        nwrites = -(-total // chunk)
        posted = done = 0
        bad: list[str] = []
        last = time.monotonic()
        while done < nwrites:
            while posted < nwrites and posted - done < depth:
                off = (posted * chunk) % size
                n = min(chunk, size - off, total - posted * chunk)
                imm = 1 if posted == nwrites - 1 else None
                self.qp_a.post_write(self.mr_a, off, n, self.peer.regions[0], off, imm=imm,
                                     wr_id=posted)
                posted += 1
            wcs = self.cq_a.wait(timeout=0.05, max_entries=depth)
            self.drain_events()
            if wcs:
                last = time.monotonic()
                done += len(wcs)
                bad += [w.status for w in wcs if not w.ok]
                if bad:
                    return bad
                if on_progress is not None:
                    on_progress(min(done * chunk, total))
            elif time.monotonic() - last > timeout:
                raise TimeoutError(f"no completion in {timeout} s ({done}/{nwrites} done)")
        return bad


def connect(a_sock: str, b_sock: str, b_host: str, service: int, size: int,
            *, fill: bool = True, path_events: bool = True) -> Conn:
    """A QP from the mrcd at ``a_sock`` to a listening QP at ``b_sock`` (host ``b_host``),
    each side with a ``size``-byte region; the sender's region is random bytes. The
    sender's context asks for PathStateChanged events unless ``path_events`` is False."""
    cb = Context(b_sock)
    ca = Context(a_sock, path_events=path_events)
    try:
        mr_b = cb.alloc_mr(size)
        cq_b = cb.create_cq()
        qp_b = cb.create_qp(cq_b)
        cb.listen(service, qp_b, expose=[mr_b])
        for i in range(4):
            qp_b.post_recv(wr_id=i)
        mr_a = ca.alloc_mr(size)
        if fill:
            mr_a.buf[:] = os.urandom(size)
        cq_a = ca.create_cq()
        qp_a = ca.create_qp(cq_a)
        peer = qp_a.connect(b_host, service)
        qp_b.accept(timeout=10)
    except BaseException:
        ca.close()
        cb.close()
        raise
    return Conn(ca, cb, qp_a, qp_b, cq_a, cq_b, mr_a, mr_b, peer)
