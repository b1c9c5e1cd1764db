"""htsim-style traffic matrices: one flow per line, ``src->dst start T size B``.

::

    # 8->1 incast, 1 MiB each
    Nodes 16                    # optional htsim header: checked against the fabric
    Connections 8               # optional: checked against the number of flows
    1->0 start 0 size 1m
    h2->h0 id 7 start 10us size 1048576

- ``src``/``dst``: host index (htsim) or host name ``h<i>``.
- ``start``: a bare number is in microseconds, as in htsim; units s/ms/us/ns are accepted.
- ``size``: bytes; k/m/g suffixes are 1024-based.
- ``id N``: optional flow id (default: line order, from 0); ids must be unique.
- ``#`` starts a comment; blank lines are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mrcnet.sim.errors import SpecError
from mrcnet.topology.units import parse_bytes, parse_time


@dataclass(frozen=True)
class Flow:
    """One transfer: ``size`` bytes from host ``src`` to host ``dst`` starting at ``start``."""

    id: int
    src: int
    dst: int
    start: float  #: seconds
    size: int  #: bytes


_HOST = r"h?(\d+)"
_FLOW_RE = re.compile(_HOST + r"\s*->\s*" + _HOST + r"\s+(.*)")


def parse_matrix(lines: Iterable[str], *, n_hosts: int | None = None,
                 where: str = "matrix") -> list[Flow]:
    """Parse matrix text; with ``n_hosts`` every host index is checked against the fabric."""
    flows: list[Flow] = []
    declared_nodes: int | None = None
    declared_conns: int | None = None
    ids: set[int] = set()
    for lineno, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        at = f"{where}:{lineno}"
        head = line.split()
        if head[0].lower() in ("nodes", "connections") and len(head) == 2:
            if not head[1].isdigit():
                raise SpecError(f"{at}: {head[0]} needs a count, got {head[1]!r}")
            if head[0].lower() == "nodes":
                declared_nodes = int(head[1])
            else:
                declared_conns = int(head[1])
            continue
        m = _FLOW_RE.fullmatch(line)
        if not m:
            raise SpecError(f"{at}: expected 'src->dst start T size B', got {line!r}")
        src, dst = int(m.group(1)), int(m.group(2))
        words = m.group(3).split()
        if len(words) % 2:
            raise SpecError(f"{at}: keys and values must pair up (start T size B [id N])")
        kv: dict[str, str] = {}
        for k, v in zip(words[::2], words[1::2], strict=True):
            if k not in ("start", "size", "id"):
                raise SpecError(f"{at}: unknown key {k!r} (known: start, size, id)")
            if k in kv:
                raise SpecError(f"{at}: {k} given twice")
            kv[k] = v
        if "size" not in kv:
            raise SpecError(f"{at}: a flow needs a size (e.g. size 1m)")
        size = parse_bytes(kv["size"])
        start = parse_time(kv.get("start", "0"), default_unit="us")
        if size <= 0:
            raise SpecError(f"{at}: size must be positive")
        if src == dst:
            raise SpecError(f"{at}: a flow from h{src} to itself")
        if n_hosts is not None:
            for h in (src, dst):
                if h >= n_hosts:
                    raise SpecError(f"{at}: no host h{h} (the fabric has h0..h{n_hosts - 1})")
        fid = int(kv["id"]) if "id" in kv and kv["id"].isdigit() else len(flows)
        if "id" in kv and not kv["id"].isdigit():
            raise SpecError(f"{at}: id must be a non-negative integer")
        if fid in ids:
            raise SpecError(f"{at}: flow id {fid} used twice")
        ids.add(fid)
        flows.append(Flow(fid, src, dst, start, size))
    if declared_conns is not None and declared_conns != len(flows):
        raise SpecError(f"{where}: header says {declared_conns} connections, "
                        f"found {len(flows)} flows")
    if declared_nodes is not None and n_hosts is not None and declared_nodes > n_hosts:
        raise SpecError(f"{where}: header says {declared_nodes} nodes, the fabric has {n_hosts}")
    if not flows:
        raise SpecError(f"{where}: no flows (one per line: src->dst start T size B)")
    return flows


def load_matrix(path: str | Path, *, n_hosts: int | None = None) -> list[Flow]:
    """Read a matrix file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise SpecError(f"cannot read traffic matrix {p}: {e.strerror}") from None
    return parse_matrix(text.splitlines(), n_hosts=n_hosts, where=str(p))


def format_matrix(flows: Iterable[Flow], *, n_hosts: int | None = None) -> str:
    """Write flows back in the same format (start in microseconds, like htsim)."""
    fl = list(flows)
    out = []
    if n_hosts is not None:
        out.append(f"Nodes {n_hosts}")
    out.append(f"Connections {len(fl)}")
    out += [f"{f.src}->{f.dst} id {f.id} start {f.start * 1e6:g} size {f.size}" for f in fl]
    return "\n".join(out) + "\n"


def permutation(n_hosts: int, size: int, *, seed: int = 1, start: float = 0.0) -> list[Flow]:
    """A random permutation: every host sends ``size`` bytes to exactly one other host
    and receives from exactly one (a derangement, so nobody sends to itself)."""
    import random

    if n_hosts < 2:
        raise SpecError("a permutation needs at least 2 hosts")
    rng = random.Random(seed)
    while True:
        dst = list(range(n_hosts))
        rng.shuffle(dst)
        if all(i != d for i, d in enumerate(dst)):
            break
    return [Flow(i, i, d, start, size) for i, d in enumerate(dst)]


def incast(senders: Iterable[int], receiver: int, size: int, *, start: float = 0.0) -> list[Flow]:
    """Every sender sends ``size`` bytes to ``receiver`` at ``start``."""
    return [Flow(i, s, receiver, start, size) for i, s in enumerate(senders)]


def all_to_all(n_hosts: int, size: int, *, steps: Iterable[int] | None = None,
               start: float = 0.0) -> list[Flow]:
    """All-to-all by pairwise exchange: in step ``k`` (1 .. n_hosts - 1) host ``i`` sends
    ``size`` bytes to host ``(i + k) % n_hosts``, so every step is a permutation and the
    steps together send every host's block to every other host. ``steps`` picks some of
    them (e.g. ``[1]``: one step, n_hosts flows, what a scale run measures); None: all,
    n_hosts x (n_hosts - 1) flows, all starting at ``start``. Flow ids go step by step."""
    if n_hosts < 2:
        raise SpecError("an all-to-all needs at least 2 hosts")
    ks = list(range(1, n_hosts)) if steps is None else list(steps)
    bad = [k for k in ks if not 1 <= k < n_hosts]
    if bad:
        raise SpecError(f"all-to-all step {bad[0]} outside 1..{n_hosts - 1}")
    return [Flow(j * n_hosts + i, i, (i + k) % n_hosts, start, size)
            for j, k in enumerate(ks) for i in range(n_hosts)]


def parse_host_list(text: str) -> list[int]:
    """``"1-8"`` or ``"1,3,5"`` (or a mix) as host indices (or step numbers) in order."""
    out: list[int] = []
    for part in text.split(","):
        a, dash, b = part.strip().partition("-")
        try:
            out += list(range(int(a), int(b) + 1)) if dash else [int(a)]
        except ValueError:
            raise SpecError(f"bad list {text!r}: use e.g. 1-8 or 1,3,5") from None
    return out
