"""The package's layout rules, checked from the source (docs/ARCHITECTURE.md):

- no import circle among mrcnet's modules, type-only imports included;
- no module over 800 lines;
- the sans-I/O core imports nothing, directly or through other mrcnet modules (package
  ``__init__`` files included), that does I/O: socket, fcntl, select, asyncio;
- one class per error concept: a single ``SpecError``;
- a client (``mrcnet.api``) does not load the protocol engine.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "mrcnet"
MAX_LINES = 800
IO_MODULES = {"socket", "fcntl", "select", "asyncio", "uvloop"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str) -> Iterator[str]:
    """Every module ``name`` imports, anywhere in the file (TYPE_CHECKING blocks and
    function bodies too), resolved to a module path (``from a import b`` is ``a.b`` when
    that is a module, else ``a``)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                yield sub if sub in MODULES else mod


def _graph() -> dict[str, set[str]]:
    return {m: {i for i in _imports(m) if i in MODULES and i != m} for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle() -> None:
    assert _cycles(_graph()) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_size(name: str) -> None:
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name]} has {lines} lines (at most {MAX_LINES})"


def _parents(name: str) -> list[str]:
    """The packages whose ``__init__`` runs before ``name`` can be imported."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _io_chains(start: list[str]) -> list[str]:
    """How the modules ``start`` reach an I/O module: one import chain per offender."""
    graph = _graph()
    seen: dict[str, str | None] = dict.fromkeys(start)
    todo = list(start)
    bad: list[str] = []
    while todo:
        mod = todo.pop()
        io = IO_MODULES & {i.split(".")[0] for i in _imports(mod)}
        if io:
            chain = [mod]
            while (prev := seen[chain[-1]]) is not None:
                chain.append(prev)
            bad.append(f"{' <- '.join(chain)} imports {', '.join(sorted(io))}")
        for nxt in sorted(graph[mod] | {p for p in _parents(mod) if p in MODULES}):
            if nxt not in seen:
                seen[nxt] = mod
                todo.append(nxt)
    return bad


def test_core_imports_no_io() -> None:
    """The sans-I/O core, and the frame memory it shares with io/, need no system calls."""
    core = [m for m in MODULES if m == "mrcnet.core" or m.startswith("mrcnet.core.")]
    assert _io_chains([*core, "mrcnet.buffers", "mrcnet.native"]) == []


def test_the_io_check_sees_an_io_import() -> None:
    assert _io_chains(["mrcnet.io.batch"])


def test_one_spec_error() -> None:
    defs = [
        f"{name}:{node.lineno}"
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name == "SpecError"
    ]
    assert len(defs) == 1, defs


def test_the_client_does_not_load_the_engine() -> None:
    """``import mrcnet.api`` takes the core's event dataclasses, not the engine: the
    package ``mrcnet.core`` loads its names when they are first used."""
    code = ("import sys, mrcnet.api; "
            "print(sorted(m for m in sys.modules if m.startswith('mrcnet.core')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    loaded = ast.literal_eval(out)
    assert "mrcnet.core.events" in loaded
    assert "mrcnet.core.host" not in loaded, loaded


def test_the_core_names_resolve() -> None:
    """Every name ``mrcnet.core`` offers is its home module's object."""
    import importlib

    import mrcnet.core as core

    for name in core.__all__:
        home = importlib.import_module(core._HOMES[name])
        assert getattr(core, name) is getattr(home, name), name
    assert set(core.__all__) == set(core._HOMES)
    with pytest.raises(AttributeError):
        core.no_such_name  # noqa: B018
