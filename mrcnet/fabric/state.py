"""Per-fabric state directory and record file: what a fabric made, so ``down`` removes it.

Layout under the state root (default ``/run/mrcnet/fabrics``, env ``MRC_FABRIC_STATE_DIR``)::

    <root>/.lock                    global lock: name/id reservation, down --all
    <root>/<name>/state.json        the record (below), rewritten atomically
    <root>/<name>/description.json the fabric description (see describe.py)
    <root>/<name>/lock              per-fabric lock: failures, status, down

The record is written *before* anything is created (intent first): a builder killed
halfway leaves a record listing every netns it may have made, and ``down`` deletes
exactly those that exist. Links live inside the fabric's namespaces, so deleting the
namespaces removes every link. Background processes (flaps) are recorded with their PID
and start time and killed by PID only after checking the start time still matches.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mrcnet.fabric.errors import FabricError

DEFAULT_STATE_ROOT = "/run/mrcnet/fabrics"
STATE_VERSION = 1


def state_root() -> Path:
    """The state root directory (env MRC_FABRIC_STATE_DIR overrides)."""
    return Path(os.environ.get("MRC_FABRIC_STATE_DIR") or DEFAULT_STATE_ROOT)


def fabric_dir(name: str) -> Path:
    """Directory of fabric ``name``."""
    return state_root() / name


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def global_lock() -> contextlib.AbstractContextManager[None]:
    """Lock for reserving names and fabric ids."""
    return locked(state_root() / ".lock")


def fabric_lock(name: str) -> contextlib.AbstractContextManager[None]:
    """Lock for changing one fabric."""
    return locked(fabric_dir(name) / "lock")


def proc_start_time(pid: int) -> int | None:
    """Start time (clock ticks since boot) of ``pid``, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2) may hold spaces, so split after its ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


@dataclass
class ProcRecord:
    """A background process a fabric started (e.g. a link flapper)."""

    pid: int
    start_time: int
    what: str

    def alive(self) -> bool:
        """True when the same process (same PID *and* start time) still runs."""
        return proc_start_time(self.pid) == self.start_time

    def kill(self, timeout: float = 2.0) -> None:
        """SIGTERM it (then SIGKILL) if it is still the process we started."""
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            _reap(self.pid)
            time.sleep(0.02)
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            _reap(self.pid)


def _reap(pid: int) -> None:
    # Our own child would linger as a zombie (same start time) until waited for.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


@dataclass
class StateRecord:
    """Everything a fabric created, plus its live failure settings."""

    name: str
    fabric_id: int
    status: str = "building"  #: building | up | removing
    builder_pid: int = 0
    builder_start: int = 0
    created: float = 0.0
    netns: list[str] = field(default_factory=list)
    processes: list[ProcRecord] = field(default_factory=list)
    bpf_object: str = ""
    #: "<node>/<ifname>" -> {"prog_id", "cfg", "vq", "cnt"} of the egress program
    maps: dict[str, dict[str, int]] = field(default_factory=dict)
    #: "<node>/<ifname>" -> host ingress drop program maps
    ingress_maps: dict[str, dict[str, int]] = field(default_factory=dict)
    #: failure state: "link:<a>:<b>" / "node:<sw>" / "port:<host>:<plane>" -> what is set
    failures: dict[str, Any] = field(default_factory=dict)
    version: int = STATE_VERSION

    @property
    def path(self) -> Path:
        """The record file."""
        return fabric_dir(self.name) / "state.json"

    def save(self) -> None:
        """Write atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"state.json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        os.replace(tmp, self.path)

    @classmethod
    def load(cls, name: str) -> StateRecord:
        """Read fabric ``name``'s record."""
        path = fabric_dir(name) / "state.json"
        try:
            d = json.loads(path.read_text())
        except FileNotFoundError as e:
            raise FabricError(f"no fabric named {name!r} (no {path})") from e
        except (OSError, json.JSONDecodeError) as e:
            raise FabricError(f"unreadable state file {path}: {e}") from e
        d["processes"] = [ProcRecord(**p) for p in d.get("processes", [])]
        try:
            return cls(**d)
        except TypeError as e:
            raise FabricError(f"malformed state file {path}: {e}") from e

    def builder_alive(self) -> bool:
        """True while the process that builds this fabric still runs."""
        return bool(self.builder_pid) and proc_start_time(self.builder_pid) == self.builder_start


def list_names() -> list[str]:
    """Names of every fabric with a state record."""
    root = state_root()
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/state.json"))


def used_fabric_ids() -> set[int]:
    """Fabric ids of every recorded fabric (two fabrics never share an address block)."""
    ids = set()
    for name in list_names():
        with contextlib.suppress(FabricError):
            ids.add(StateRecord.load(name).fabric_id)
    return ids
