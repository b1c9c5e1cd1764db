"""Small helpers around network namespaces, iproute2 batches and sysctls.

Why iproute2 batches for bring-up: one ``ip -n NS -batch -`` per namespace configures a
whole node in a single process (links, addresses, static neighbours, routes, including
``seg6local ... flavors next-csid`` that pyroute2 0.9.7 cannot encode), and the batches
of all nodes run in parallel. pyroute2 is used where it is reliable and avoids process
spawns: reading interface counters and toggling links (see :mod:`mrcnet.fabric.fabric`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrcnet.fabric.errors import FabricError, PermissionProblem, ToolMissing

NETNS_RUN_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
CLONE_NEWUTS = 0x04000000
CAP_NET_ADMIN = 12

_libc = ctypes.CDLL(None, use_errno=True)


def netns_exists(name: str) -> bool:
    """True when ``ip netns`` knows a namespace of exactly this name."""
    return (NETNS_RUN_DIR / name).exists()


def check_privileges() -> None:
    """Raise :class:`PermissionProblem` unless we hold CAP_NET_ADMIN (and CAP_SYS_ADMIN)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                caps = int(line.split()[1], 16)
                if caps & (1 << CAP_NET_ADMIN) and caps & (1 << 21):  # 21 = CAP_SYS_ADMIN
                    return
                break
    except OSError:
        pass
    raise PermissionProblem(
        "run as root: mrc-fabric needs CAP_NET_ADMIN and CAP_SYS_ADMIN (network namespaces)"
    )


def require_tool(name: str, package: str) -> str:
    """Path of an external program, or a clear :class:`ToolMissing`."""
    path = shutil.which(name)
    if path is None:
        raise ToolMissing(f"{name} not found: install the Debian package {package}")
    return path


@contextlib.contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Move the calling thread into netns ``name`` for the block, then back.

    Sockets opened inside stay bound to that netns, so a pyroute2 ``IPRoute()`` created
    here talks to the namespace without any helper process.
    """
    try:
        target = os.open(NETNS_RUN_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as e:
        raise FabricError(f"network namespace {name} does not exist") from e
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise FabricError(f"setns({name}) failed: {os.strerror(err)}")
        try:
            yield
        finally:
            if _libc.setns(home, CLONE_NEWNET) != 0:  # pragma: no cover - cannot recover
                raise FabricError("could not return to the original network namespace")
    finally:
        os.close(target)
        os.close(home)


def set_uts_hostname(hostname: str) -> bool:
    """Give the calling process a UTS namespace of its own named ``hostname``.

    Meant for a process about to exec into a node (``mrc-fabric exec``): its children see
    the node's name as their hostname instead of the machine's. Returns False (and changes
    nothing) when the kernel refuses (no CAP_SYS_ADMIN).
    """
    if _libc.unshare(CLONE_NEWUTS) != 0:
        return False
    raw = hostname.encode()
    return bool(_libc.sethostname(raw, len(raw)) == 0)


def write_sysctls(netns: str, values: dict[str, str]) -> None:
    """Write ``net.*`` sysctls inside ``netns`` (keys with dots, like sysctl(8))."""
    with in_netns(netns):
        for key, value in values.items():
            path = Path("/proc/sys") / key.replace(".", "/")
            try:
                path.write_text(value)
            except OSError as e:
                raise FabricError(f"sysctl {key}={value} in {netns}: {e.strerror}") from e


@dataclass
class Batch:
    """One iproute2 batch to run: ``argv`` reading ``lines`` on stdin."""

    argv: list[str]
    lines: list[str]
    what: str

    def text(self) -> str:
        """The batch file content."""
        return "".join(line + "\n" for line in self.lines)


def ip_batch(netns: str | None, lines: Sequence[str], what: str = "") -> Batch:
    """An ``ip -6 [-n NS] -batch -`` (IPv6 family for route/neigh lines)."""
    argv = ["ip", "-6"] + (["-n", netns] if netns else []) + ["-batch", "-"]
    return Batch(argv, list(lines), what or f"ip in {netns or 'root'}")


def tc_batch(netns: str, lines: Sequence[str], what: str = "", as_json: bool = False) -> Batch:
    """A ``tc -n NS [-j] -batch -``."""
    argv = ["tc", "-n", netns] + (["-j"] if as_json else []) + ["-batch", "-"]
    return Batch(argv, list(lines), what or f"tc in {netns}")


def run_batches(batches: Sequence[Batch], parallel: int = 8) -> list[str]:
    """Run batches, ``parallel`` at a time; return each one's stdout, in order.

    Raises :class:`FabricError` naming the first failing batch and its error line.
    """
    outputs: list[str] = [""] * len(batches)
    errors: list[str] = []
    pending = list(enumerate(batches))
    while pending:
        chunk, pending = pending[:parallel], pending[parallel:]
        procs = []
        for i, b in chunk:
            p = subprocess.Popen(
                b.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            procs.append((i, b, p))
        try:
            for i, b, p in procs:
                out, err = p.communicate(b.text())
                outputs[i] = out
                if p.returncode != 0:
                    msg = " ".join(err.split()) or f"exit {p.returncode}"
                    errors.append(f"{b.what}: {msg}")
        except BaseException:
            # Interrupted (SIGTERM/SIGINT): stop our own children before the caller tears
            # down, so no batch keeps creating things behind the cleanup.
            for _, _, p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
            raise
        if errors:  # stop here: later batches would only add noise to the first error
            raise FabricError("; ".join(errors[:3]))
    return outputs


def run(argv: Sequence[str], what: str, check: bool = True) -> str:
    """Run one command, return stdout; a failure becomes a :class:`FabricError`."""
    p = subprocess.run(list(argv), capture_output=True, text=True)
    if check and p.returncode != 0:
        raise FabricError(f"{what}: {p.stderr.strip() or 'exit ' + str(p.returncode)}")
    return p.stdout


def json_stream(text: str) -> list[Any]:
    """Decode concatenated JSON documents (``tc -j -batch`` prints one per command)."""
    dec = json.JSONDecoder()
    out: list[Any] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        obj, end = dec.raw_decode(text, pos)
        out.append(obj)
        pos = end
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def delete_netns(names: Sequence[str]) -> list[str]:
    """Delete exactly these namespaces (those that exist); return the ones deleted."""
    present = [n for n in names if netns_exists(n)]
    if not present:
        return []
    # -force: carry on past one failure so a single stuck netns does not strand the rest.
    b = ip_batch(None, [f"netns del {n}" for n in present], "delete netns")
    b.argv.insert(1, "-force")
    p = subprocess.run(b.argv, input=b.text(), capture_output=True, text=True)
    left = [n for n in present if netns_exists(n)]
    if left:
        raise FabricError(f"could not delete netns {', '.join(left)}: {p.stderr.strip()}")
    return present
