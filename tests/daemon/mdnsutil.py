"""Network namespaces and mrcds for the daemon tests (and tests/api, whose conftest
imports this module): created and removed by exactly these helpers.

Every name is a suite's prefix (``md`` here, ``sa`` for tests/api) + a random suffix; a
:class:`NsRegistry` deletes only what it made, an :class:`Mrcd` is stopped by its PID.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def run(*args: str, ns: str | None = None, check: bool = True) -> str:
    """Run a command (inside ``ns`` when given) and return its stdout."""
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return r.stdout


@contextlib.contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Move the calling thread into netns ``name`` for the block (sockets made inside
    stay in that namespace), then back."""
    with open("/proc/thread-self/ns/net", "rb") as orig, \
            open(f"/run/netns/{name}", "rb") as target:
        if _libc.setns(target.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
        try:
            yield
        finally:
            if _libc.setns(orig.fileno(), CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")


def ns_prefix(default: str) -> str:
    """The first letters of the namespaces and fabrics a test makes: ``$MRC_E2E_PREFIX``
    when set (a run that shares the machine names its own), else ``default``."""
    return os.environ.get("MRC_E2E_PREFIX") or default


@dataclass
class NsRegistry:
    """The namespaces one test made; :meth:`cleanup` removes exactly those. Names are
    ``prefix`` + ``tag`` + a role."""

    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    made: list[str] = field(default_factory=list)
    prefix: str = field(default_factory=lambda: ns_prefix("md"))

    def netns(self, role: str) -> str:
        name = f"{self.prefix}{self.tag}{role}"
        run("ip", "netns", "add", name)
        self.made.append(name)
        run("ip", "link", "set", "lo", "up", ns=name)
        return name

    def cleanup(self) -> None:
        for name in reversed(self.made):
            run("ip", "netns", "del", name, check=False)
        self.made.clear()


@dataclass
class VethPair:
    """Two namespaces joined by one veth link, with IPv6 addresses (no DAD)."""

    ns_a: str
    ns_b: str
    if_a: str
    if_b: str
    ip_a: str
    ip_b: str
    mac_a: str
    mac_b: str


def make_veth_pair(reg: NsRegistry, mtu: int = 9000) -> VethPair:
    """Namespaces ``<prefix><tag>a`` and ``<prefix><tag>b`` with veth ``eth0`` in each."""
    a, b = reg.netns("a"), reg.netns("b")
    tmp_a, tmp_b = f"{reg.prefix}{reg.tag}va", f"{reg.prefix}{reg.tag}vb"
    run("ip", "link", "add", tmp_a, "mtu", str(mtu), "type", "veth", "peer", "name", tmp_b,
        "mtu", str(mtu))
    run("ip", "link", "set", tmp_a, "netns", a, "name", "eth0")
    run("ip", "link", "set", tmp_b, "netns", b, "name", "eth0")
    macs = {a: "02:00:00:00:0a:01", b: "02:00:00:00:0b:01"}
    ips = {a: "fd00:4d52::a", b: "fd00:4d52::b"}
    for ns in (a, b):
        run("ip", "link", "set", "eth0", "address", macs[ns], ns=ns)
        run("ip", "addr", "add", f"{ips[ns]}/64", "dev", "eth0", "nodad", ns=ns)
        run("ip", "link", "set", "eth0", "up", ns=ns)
    return VethPair(a, b, "eth0", "eth0", ips[a], ips[b], macs[a], macs[b])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


#: Console scripts of the environment running the tests (the venv's bin directory).
BIN = os.path.dirname(sys.executable)
MRCD = os.path.join(BIN, "mrcd")


@dataclass
class Mrcd:
    """An mrcd process this test started (stopped by PID, never by name)."""

    name: str
    ns: str
    config: str
    socket: str
    proc: subprocess.Popen[bytes]
    log: str

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM to exactly this PID
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash: no clean-up by mrcd (its nftables table stays; the
        namespace's removal takes it along)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def logs(self) -> str:
        with open(self.log) as f:
            return f.read()


def write_config(path: str, host: str, ifname: str, ip: str, sock: str,
                 peers: dict[str, str], extra: str = "", log_level: str = "debug") -> None:
    lines = [f'host = "{host}"', f'socket = "{sock}"', f'log_level = "{log_level}"', extra,
             "[[port]]", f'ifname = "{ifname}"', "plane = 0", f'address = "{ip}"']
    for name, addr in peers.items():
        lines += [f"[peers.{name}]", f'control = "{addr}"', f'addresses = ["{addr}"]']
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def start_mrcd(name: str, ns: str, config: str, sock: str, logdir: str,
               timeout: float = 15.0, args: tuple[str, ...] = ()) -> Mrcd:
    log = os.path.join(logdir, f"{name}.log")
    with open(log, "wb") as lf:
        # `ip netns exec` execs mrcd: the PID is mrcd's own.
        proc = subprocess.Popen(["ip", "netns", "exec", ns, MRCD, "--config", config, *args],
                                stdout=lf, stderr=subprocess.STDOUT)
    m = Mrcd(name, ns, config, sock, proc, log)
    deadline = time.monotonic() + timeout
    while not os.path.exists(sock) or "mrcd ready" not in m.logs():
        if proc.poll() is not None:
            raise RuntimeError(f"mrcd {name} exited {proc.returncode}: {m.logs()}")
        if time.monotonic() > deadline:
            m.stop()
            raise RuntimeError(f"mrcd {name} not ready in {timeout} s: {m.logs()}")
        time.sleep(0.05)
    return m


#: Skip marker for tests that need root (namespaces, raw sockets, nftables).
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, raw sockets)")


@dataclass
class MrcdPair:
    """Two mrcds, "ha" in namespace a and "hb" in namespace b, on one veth link."""

    veth: VethPair
    a: Mrcd
    b: Mrcd


@contextlib.contextmanager
def mrcd_pair_on(veth: VethPair, workdir: Path, log_level: str = "debug",
                 timeout: float = 15.0, extra: str = "") -> Iterator[MrcdPair]:
    """mrcd "ha" in namespace a and "hb" in namespace b of ``veth``, directly cabled peers
    (configs, sockets and logs in ``workdir``; ``extra``: top-level TOML lines for
    both); both stopped by PID afterwards."""
    cfg_a, cfg_b = str(workdir / "ha.toml"), str(workdir / "hb.toml")
    sock_a, sock_b = str(workdir / "ha.sock"), str(workdir / "hb.sock")
    write_config(cfg_a, "ha", veth.if_a, veth.ip_a, sock_a, {"hb": veth.ip_b},
                 extra, log_level=log_level)
    write_config(cfg_b, "hb", veth.if_b, veth.ip_b, sock_b, {"ha": veth.ip_a},
                 extra, log_level=log_level)
    started: list[Mrcd] = []
    try:
        started.append(start_mrcd("ha", veth.ns_a, cfg_a, sock_a, str(workdir), timeout))
        started.append(start_mrcd("hb", veth.ns_b, cfg_b, sock_b, str(workdir), timeout))
        yield MrcdPair(veth, started[0], started[1])
    finally:
        for m in started:
            m.stop()


@dataclass
class Connected:
    """A connected QP on each side of an mrcd pair, each with its CQ and a region the
    other side may write (``qp_a`` wrote ``connect``, ``qp_b`` accepted)."""

    qp_a: Any
    mr_a: Any
    cq_a: Any
    qp_b: Any
    mr_b: Any
    cq_b: Any


def connect_qps(ca: Any, cb: Any, service: int, size: int, peer: str = "hb") -> Connected:
    """A QP of client context ``ca`` connected to one of ``cb`` listening on ``service``,
    each exposing a region of ``size`` bytes to the other."""
    mr_b, cq_b = cb.alloc_mr(size), cb.create_cq()
    qp_b = cb.create_qp(cq_b)
    cb.listen(service, qp_b, expose=[mr_b])
    mr_a, cq_a = ca.alloc_mr(size), ca.create_cq()
    qp_a = ca.create_qp(cq_a)
    qp_a.connect(peer, service, expose=[mr_a])
    qp_b.accept(timeout=10)
    return Connected(qp_a, mr_a, cq_a, qp_b, mr_b, cq_b)
