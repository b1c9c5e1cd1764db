"""``mrc-sim sweep GRID.toml``: the cartesian product of run parameters, one seeded run
per cell, on a local process pool or a Dask distributed cluster; one table of results.

A grid file::

    [base]                      # every cell's values (any key below)
    topology = "leafspine:planes=2,spines=4,leaves=4,hosts=4"
    traffic = "permutation"     # permutation | all-to-all | incast | a .cm file
    size = "1m"
    until = "50ms"

    [grid]                      # each key a list: the cells are every combination
    seed = [1, 2, 3]
    transport = ["mrc", "ecmp"]
    fail = ["", "random:links=5%@20us"]

Keys: ``topology`` (a spec line), ``traffic`` (``permutation``, ``all-to-all`` with
``steps`` (e.g. ``"1"`` or ``"1-4"``, default every step), ``incast`` with ``senders``
(``"1-8"``) and ``receiver``, or a traffic-matrix file), ``size``, ``start``, ``seed``
(the run's and the permutation's), ``transport`` (mrc, ecmp), ``trim`` (on, off),
``fail`` (one failure spec, a list of them, or ``""`` for none), ``until``, ``set`` (a
table of HostConfig overrides, e.g. ``set = { evs_per_qp = 64 }``). Cells are numbered in
the order of the product (the grid's keys as written, the last varying fastest).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from mrcnet.sim.errors import SimError, SpecError
from mrcnet.sim.failures import parse_failure
from mrcnet.sim.matrix import (
    Flow,
    all_to_all,
    incast,
    load_matrix,
    parse_host_list,
    permutation,
)
from mrcnet.sim.topology import LeafSpineSpec, parse_topology, with_options
from mrcnet.topology.spec import read_toml
from mrcnet.topology.units import parse_bool, parse_bytes, parse_time

KEYS = ("topology", "traffic", "size", "start", "steps", "senders", "receiver", "seed",
        "transport", "trim", "fail", "until", "set")
#: What a cell measured that is the same on every run of it (the sweep's identity)
RESULT_COLUMNS = ("flows", "completed", "errors", "p50_slowdown", "p99_slowdown",
                  "p100_slowdown", "mean_slowdown", "makespan", "makespan_ratio",
                  "sim_time", "events")
#: How long it took: differs run to run
TIMING_COLUMNS = ("cpu_seconds", "wall_seconds", "events_per_second")
_DEFAULTS: dict[str, Any] = {"traffic": "permutation", "size": "1m", "start": "0",
                             "seed": 1, "transport": "mrc", "fail": ""}


def load_grid(path: str | Path) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """(base, grid) of a grid file, checked: known keys, each grid value a non-empty list."""
    p = Path(path)
    doc = read_toml(p)
    extra = set(doc) - {"base", "grid"}
    if extra:
        raise SpecError(f"grid {p}: unknown table {sorted(extra)[0]!r} (use [base] and [grid])")
    base, grid = doc.get("base", {}), doc.get("grid", {})
    for where, table in (("base", base), ("grid", grid)):
        bad = set(table) - set(KEYS)
        if bad:
            raise SpecError(f"grid {p}: unknown key {sorted(bad)[0]!r} in [{where}] "
                            f"(known: {', '.join(KEYS)})")
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise SpecError(f"grid {p}: [grid] {k} must be a non-empty list")
    if "topology" not in base and "topology" not in grid:
        raise SpecError(f"grid {p}: no topology (a [base] or [grid] key)")
    return base, grid


def cells(base: dict[str, Any], grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid over the base, in order (the last key fastest)."""
    keys = list(grid)
    out = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        c = {**_DEFAULTS, **base, **dict(zip(keys, combo, strict=True))}
        out.append(c)
    return out


def _flows(c: dict[str, Any], spec: LeafSpineSpec) -> list[Flow]:
    kind, size = str(c["traffic"]), parse_bytes(str(c["size"]))
    start = parse_time(str(c["start"]), default_unit="us")
    n = spec.n_hosts
    if kind == "permutation":
        return permutation(n, size, seed=int(c["seed"]), start=start)
    if kind == "all-to-all":
        return all_to_all(n, size, steps=_ints(c.get("steps")), start=start)
    if kind == "incast":
        senders = _ints(c.get("senders"))
        if not senders or "receiver" not in c:
            raise SpecError("traffic incast needs senders (e.g. \"1-8\") and receiver")
        return incast(senders, int(c["receiver"]), size, start=start)
    return load_matrix(kind, n_hosts=n)


def _ints(v: Any) -> list[int] | None:
    """``"1-4"``, ``"1,3"``, ``3`` or ``[1, 2]`` as a list; None for None."""
    if v is None:
        return None
    if isinstance(v, int):
        return [v]
    if isinstance(v, list):
        return [int(x) for x in v]
    return parse_host_list(str(v))


def _fails(v: Any) -> list[str]:
    items = v if isinstance(v, list) else [v]
    return [str(x) for x in items if str(x).strip()]


def prepare(c: dict[str, Any]) -> tuple[LeafSpineSpec, list[Flow]]:
    """The cell's fabric and flows, every spec checked (raises SpecError)."""
    spec = parse_topology(str(c["topology"]))
    if c.get("trim") is not None:
        spec = with_options(spec, trim=parse_bool(str(c["trim"])))
    flows = _flows(c, spec)
    for f in _fails(c.get("fail", "")):
        parse_failure(f)
    if c.get("until") is not None:
        parse_time(str(c["until"]))
    if not isinstance(c.get("set", {}), dict):
        raise SpecError("set must be a table, e.g. set = { evs_per_qp = 64 }")
    return spec, flows


def run_cell(c: dict[str, Any]) -> dict[str, Any]:
    """Run one cell (a separate, seeded simulation) and return its row: the summary's
    figures (:data:`RESULT_COLUMNS`, :data:`TIMING_COLUMNS`). Runs in a worker process."""
    from mrcnet.sim.runner import SimRun  # (workers import the core only when they run)

    spec, flows = prepare(c)
    run = SimRun(spec, flows, transport=str(c["transport"]),
                 failures=[parse_failure(f) for f in _fails(c.get("fail", ""))],
                 seed=int(c["seed"]), host_config=dict(c.get("set", {})))
    until = parse_time(str(c["until"])) if c.get("until") is not None else None
    s = run.run(until=until).summary()
    return {k: _finite(s[k]) for k in (*RESULT_COLUMNS, *TIMING_COLUMNS)}


def _finite(x: Any) -> Any:
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _row(i: int, c: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    params = {k: (json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v)
              for k, v in c.items()}
    return {"cell": i, **params, **result}


def run_local(todo: Sequence[tuple[int, dict[str, Any]]], workers: int | None,
              done: Callable[[int, dict[str, Any]], None]) -> None:
    """Run cells on a local process pool; ``done(cell, result)`` as each finishes."""
    n = workers or os.cpu_count() or 1
    pool = ProcessPoolExecutor(max_workers=min(n, len(todo)) or 1)
    try:
        futs = {pool.submit(run_cell, c): i for i, c in todo}
        for fut in as_completed(futs):
            done(futs[fut], fut.result())
    except BaseException:
        # Interrupted (or a cell failed): stop now, not after every running cell ends
        # (the workers are this process's children; nothing else holds them).
        procs = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            proc.terminate()
        raise
    pool.shutdown()


def run_dask(todo: Sequence[tuple[int, dict[str, Any]]], address: str,
             done: Callable[[int, dict[str, Any]], None]) -> None:
    """Run cells on the Dask distributed scheduler at ``address`` (the ``cluster``
    extra); its workers need mrcnet installed."""
    try:
        import distributed
    except ImportError:
        raise SimError("--scheduler needs Dask distributed: pip install 'mrcnet[cluster]'"
                       ) from None
    dist: Any = distributed  # (untyped)
    try:
        client = dist.Client(address, timeout=10)
    except (OSError, TimeoutError) as e:
        raise SimError(f"cannot reach the Dask scheduler at {address}: {e}") from None
    try:
        # pure=False: a cell is run, never served from a cache of an earlier identical one
        futs = {client.submit(run_cell, c, pure=False): i for i, c in todo}
        for fut in dist.as_completed(list(futs)):
            done(futs[fut], fut.result())
    finally:
        client.close()


def sweep(grid_path: str | Path, *, only: Iterable[int] | None = None,
          workers: int | None = None, scheduler: str | None = None,
          previous: list[dict[str, Any]] | None = None,
          log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Run a grid (or only the cells ``only``, merged into the rows ``previous``) and
    return every row, in cell order."""
    base, grid = load_grid(grid_path)
    all_cells = cells(base, grid)
    for i, c in enumerate(all_cells):  # every spec checked before anything runs
        try:
            prepare(c)
        except SpecError as e:
            raise SpecError(f"cell {i}: {e}") from None
    picked = sorted(set(only)) if only is not None else list(range(len(all_cells)))
    bad = [i for i in picked if not 0 <= i < len(all_cells)]
    if bad:
        raise SpecError(f"no cell {bad[0]}: the grid has cells 0..{len(all_cells) - 1}")
    rows = {r["cell"]: r for r in previous or []}
    t0 = time.monotonic()
    todo = [(i, all_cells[i]) for i in picked]
    count = [0]

    def done(i: int, result: dict[str, Any]) -> None:
        rows[i] = _row(i, all_cells[i], result)
        count[0] += 1
        if log is not None:
            el = time.monotonic() - t0
            eta = el / count[0] * (len(todo) - count[0])
            log(f"cell {i} done ({count[0]}/{len(todo)}): p100 "
                f"{_fmt(result['p100_slowdown'])}, {result['completed']}/{result['flows']} "
                f"flows; {el:.0f}s elapsed, ETA {eta:.0f}s")

    if scheduler:
        run_dask(todo, scheduler, done)
    else:
        run_local(todo, workers, done)
    return [rows[i] for i in sorted(rows)]


def _fmt(x: Any) -> str:
    return "-" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)


def columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The table's columns: cell, the parameters, the results, the timings."""
    params = [k for k in KEYS if any(k in r for r in rows)]
    return ["cell", *params, *RESULT_COLUMNS, *TIMING_COLUMNS]


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV (header first)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns(rows), extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns(rows)})
    return buf.getvalue()


def to_table(rows: Sequence[dict[str, Any]]) -> str:
    """A terminal table: the parameters that vary, and the headline results."""
    varying = [k for k in KEYS if len({json.dumps(r.get(k)) for r in rows}) > 1]
    cols = ["cell", *varying, "completed", "p50_slowdown", "p99_slowdown", "p100_slowdown",
            "makespan_ratio", "events", "cpu_seconds"]
    body = [[_fmt(r.get(c)) for c in cols] for r in rows]
    head = [c.replace("_slowdown", "").replace("_seconds", "_s") for c in cols]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(b, widths, strict=True)) for b in body]
    return "\n".join(lines)


def write_results(out: Path, rows: Sequence[dict[str, Any]], grid_path: str | Path) -> None:
    """``results.json`` (the grid file's name and every row) and ``results.csv`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    doc = {"grid": str(grid_path), "columns": columns(rows), "rows": list(rows)}
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "results.csv").write_text(to_csv(rows))


def read_results(out: Path) -> list[dict[str, Any]]:
    """The rows an earlier sweep wrote to ``out`` (none if there is no such file)."""
    p = out / "results.json"
    if not p.exists():
        return []
    try:
        rows: list[dict[str, Any]] = json.loads(p.read_text())["rows"]
    except (ValueError, KeyError, TypeError) as e:
        raise SpecError(f"{p}: not a sweep's results ({e})") from None
    return rows


def cmd_sweep(args: Any) -> int:
    """``mrc-sim sweep`` (arguments from :func:`add_parser`)."""
    out = Path(args.out) if args.out else Path(f"{Path(args.grid).stem}-results")
    only = _ints(",".join(args.cell)) if args.cell else None
    previous = read_results(out) if only is not None else None

    def log(line: str) -> None:
        print(f"mrc-sim sweep: {line}", file=sys.stderr)

    rows = sweep(args.grid, only=only, workers=args.workers, scheduler=args.scheduler,
                 previous=previous, log=None if args.quiet else log)
    write_results(out, rows, args.grid)
    if args.json:
        print(json.dumps({"grid": args.grid, "columns": columns(rows), "rows": rows},
                         indent=1))
    else:
        print(to_table(rows))
        print(f"\nresults: {out / 'results.csv'}, {out / 'results.json'}")
    return 1 if any(r["completed"] != r["flows"] for r in rows) else 0


def add_parser(sub: Any) -> None:
    """The ``sweep`` subcommand on ``mrc-sim``'s subparsers."""
    import argparse

    s = sub.add_parser(
        "sweep", help="run every combination of a grid of parameters (GRID.toml)",
        description=(__doc__ or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("grid", metavar="GRID.toml")
    s.add_argument("--out", "-o", metavar="DIR",
                   help="where results.csv and results.json go (default: GRID-results)")
    s.add_argument("--cell", action="append", metavar="N",
                   help="run only these cells (e.g. 3 or 0-5, repeatable): their rows replace "
                   "those in DIR's results, the others are kept")
    s.add_argument("--workers", "-j", type=int, metavar="N",
                   help="local processes (default: one per CPU)")
    s.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the cells on a Dask distributed cluster (tcp://host:8786) "
                   "instead: pip install 'mrcnet[cluster]'")
    s.add_argument("--json", action="store_true", help="print the rows as JSON")
    s.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    s.set_defaults(fn=cmd_sweep)
