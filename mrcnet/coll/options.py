"""The collective options both ``mrc-coll`` (fabrics, real hosts) and ``mrc-sim
collective`` (the simulator) accept, parsed once: ``--op``, ``--size`` or the
nccl-tests sweep ``-b/-e/-f``, ``--iters``, ``--warmup``, ``--fail``."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from mrcnet.coll.algorithms import OPS
from mrcnet.coll.errors import CollError
from mrcnet.topology.errors import SpecError
from mrcnet.topology.units import parse_bytes

__all__ = ["CollOptions", "add_collective_options", "collective_options", "sweep"]

#: Largest sweep accepted (a typo like -e 64g should not allocate it).
MAX_SIZE = 1 << 30


@dataclass(frozen=True)
class CollOptions:
    """What to run: one collective at one or more sizes."""

    op: str
    sizes: tuple[int, ...]
    iters: int
    warmup: int
    fail: tuple[str, ...]


def sweep(begin: int, end: int, factor: int) -> list[int]:
    """nccl-tests' ``-b B -e E -f F``: B, B*F, ... up to E."""
    if begin <= 0 or end < begin:
        raise CollError(f"bad sweep -b {begin} -e {end}: need 0 < begin <= end")
    if factor < 2:
        raise CollError(f"bad sweep factor -f {factor}: at least 2")
    out = [begin]
    while out[-1] * factor <= end:
        out.append(out[-1] * factor)
    return out


def add_collective_options(p: argparse.ArgumentParser, *, iters: int = 30,
                           warmup: int = 3) -> None:
    """Add the shared options to ``p``."""
    p.add_argument("--op", choices=OPS, default="allreduce",
                   help="the collective (default allreduce)")
    p.add_argument("--size", "-s", metavar="BYTES",
                   help="one size (k/m/g suffixes, 1024-based), e.g. 4M")
    p.add_argument("-b", "--minbytes", metavar="BYTES", help="sweep: first size")
    p.add_argument("-e", "--maxbytes", metavar="BYTES", help="sweep: last size")
    p.add_argument("-f", "--stepfactor", type=int, default=2, metavar="F",
                   help="sweep: size factor (default 2)")
    p.add_argument("--iters", "-n", type=int, default=iters,
                   help=f"timed iterations per size (default {iters})")
    p.add_argument("--warmup", "-w", type=int, default=warmup,
                   help=f"untimed iterations first (default {warmup})")
    p.add_argument("--fail", action="append", default=[], metavar="SPEC",
                   help="a failure during the run, mrc-sim's grammar with the fabric's "
                   "node names, times from the first timed step (mrc-sim: from the first "
                   "warm-up step): link:L0.0-S0.1@2s:down, "
                   "link:L0.0-S0.1@1s..9s:flap=2s/2s, switch:S0.1@1s:blackhole, "
                   "loss:L0.0-S0.1=1%%, port:h0.1@2s:down (fabrics only) (repeatable)")


def collective_options(a: argparse.Namespace, *, default_size: str = "4M") -> CollOptions:
    """The shared options of a parsed command line, checked."""
    try:
        if a.minbytes is not None or a.maxbytes is not None:
            if a.size is not None:
                raise CollError("give --size or a sweep -b/-e, not both")
            b = parse_bytes(a.minbytes or a.maxbytes)
            e = parse_bytes(a.maxbytes or a.minbytes)
            sizes = sweep(b, e, a.stepfactor)
        else:
            sizes = [parse_bytes(a.size or default_size)]
    except SpecError as e:
        raise CollError(str(e)) from None
    if max(sizes) > MAX_SIZE:
        raise CollError(f"size {max(sizes)} is over the limit of {MAX_SIZE} bytes")
    if a.iters < 1:
        raise CollError("--iters must be at least 1")
    if a.warmup < 0:
        raise CollError("--warmup must not be negative")
    return CollOptions(a.op, tuple(sizes), a.iters, a.warmup, tuple(a.fail))
