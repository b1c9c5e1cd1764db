"""Fixtures for tests/api (the socket-like API): namespaces, mrcds, a small fabric.

Everything here is created and removed by these fixtures only: namespaces are named
``sa`` + a random suffix, mrcds are stopped by the PID this process started, the fabric
is named ``sa`` + random hex and taken down by its own API. Nothing is killed or deleted
by pattern.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: Console scripts of the environment running the tests (the venv's bin directory).
MRCD = os.path.join(os.path.dirname(sys.executable), "mrcd")


def _run(*args: str, ns: str | None = None, check: bool = True) -> str:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return r.stdout


@dataclass
class _Namespaces:
    """The namespaces one test made; :meth:`cleanup` removes exactly those."""

    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    made: list[str] = field(default_factory=list)

    def add(self, role: str) -> str:
        name = f"sa{self.tag}{role}"
        self.made.append(name)  # recorded first: cleanup also after a half-made one
        _run("ip", "netns", "add", name)
        _run("ip", "link", "set", "lo", "up", ns=name)
        return name

    def cleanup(self) -> None:
        for name in reversed(self.made):
            _run("ip", "netns", "del", name, check=False)
        self.made.clear()


@dataclass
class Mrcd:
    """An mrcd this test started (stopped or killed by its PID only)."""

    name: str
    socket: str
    proc: subprocess.Popen[bytes]
    log: str

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
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


def start_mrcd(name: str, ns: str, config: str, sock: str, logdir: str,
               timeout: float = 20.0) -> Mrcd:
    log = os.path.join(logdir, f"{name}.log")
    with open(log, "wb") as lf:
        # `ip netns exec` execs mrcd: the PID is mrcd's own.
        proc = subprocess.Popen(["ip", "netns", "exec", ns, MRCD, "--config", config],
                                stdout=lf, stderr=subprocess.STDOUT)
    m = Mrcd(name, sock, proc, log)
    deadline = time.monotonic() + timeout
    while not os.path.exists(sock) or "mrcd ready" not in m.logs():
        if proc.poll() is not None:
            raise RuntimeError(f"mrcd {name} exited {proc.returncode}: {m.logs()}")
        if time.monotonic() > deadline:
            m.stop()
            raise RuntimeError(f"mrcd {name} not ready in {timeout} s: {m.logs()}")
        time.sleep(0.05)
    return m


@dataclass
class MrcdPair:
    """mrcd "ha" and "hb" in two namespaces joined by one veth, directly cabled peers."""

    a: Mrcd
    b: Mrcd


def _veth_config(path: Path, host: str, ip: str, sock: str, peer: str, peer_ip: str) -> str:
    path.write_text("\n".join([
        f'host = "{host}"', f'socket = "{sock}"', "[[port]]", 'ifname = "eth0"',
        "plane = 0", f'address = "{ip}"', f"[peers.{peer}]", f'control = "{peer_ip}"',
        f'addresses = ["{peer_ip}"]']) + "\n")
    return str(path)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, raw sockets)")


@pytest.fixture
def mrcd_pair(tmp_path: Path) -> Iterator[MrcdPair]:
    """Two mrcds on two namespaces (``sa<hex>a``, ``sa<hex>b``) and one veth."""
    if os.geteuid() != 0:
        pytest.skip("needs root (netns, raw sockets)")
    nss = _Namespaces()
    started: list[Mrcd] = []
    try:
        a, b = nss.add("a"), nss.add("b")
        va, vb = f"sa{nss.tag}va", f"sa{nss.tag}vb"
        _run("ip", "link", "add", va, "mtu", "9000", "type", "veth", "peer", "name", vb,
             "mtu", "9000")
        ips = {a: "fd00:5341::a", b: "fd00:5341::b"}
        for ns, tmp_if, mac in ((a, va, "02:00:00:00:5a:01"), (b, vb, "02:00:00:00:5b:01")):
            _run("ip", "link", "set", tmp_if, "netns", ns, "name", "eth0")
            _run("ip", "link", "set", "eth0", "address", mac, ns=ns)
            _run("ip", "addr", "add", f"{ips[ns]}/64", "dev", "eth0", "nodad", ns=ns)
            _run("ip", "link", "set", "eth0", "up", ns=ns)
        sock_a, sock_b = str(tmp_path / "ha.sock"), str(tmp_path / "hb.sock")
        cfg_a = _veth_config(tmp_path / "ha.toml", "ha", ips[a], sock_a, "hb", ips[b])
        cfg_b = _veth_config(tmp_path / "hb.toml", "hb", ips[b], sock_b, "ha", ips[a])
        started.append(start_mrcd("ha", a, cfg_a, sock_a, str(tmp_path)))
        started.append(start_mrcd("hb", b, cfg_b, sock_b, str(tmp_path)))
        yield MrcdPair(started[0], started[1])
    finally:
        for m in started:
            m.stop()
        nss.cleanup()


@dataclass
class FabricPair:
    """Two mrcds on hosts of a real mrc-fabric (2 planes x 2 spines)."""

    a: Mrcd
    b: Mrcd
    fabric: object


@pytest.fixture
def fabric_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FabricPair]:
    """A fabric ``sa<hex>`` (leafspine planes=2,spines=2,leaves=2,hosts=1) with mrcd on
    its first two hosts (every port from the fabric description)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (netns, raw sockets)")
    from mrcnet.fabric.fabric import Fabric

    # The fabric records (and `down` removes) exactly what it makes.
    monkeypatch.setenv("MRC_FABRIC_STATE_DIR", str(tmp_path / "fabrics"))
    started: list[Mrcd] = []
    with Fabric.up("leafspine:planes=2,spines=2,leaves=2,hosts=1,mtu=9000",
                   name="sa" + secrets.token_hex(2)) as fab:
        try:
            for h in fab.description.hosts[:2]:
                sock = f"{tmp_path}/{h.name}.sock"
                cfg = tmp_path / f"{h.name}.toml"
                cfg.write_text(f'host = "{h.name}"\nsocket = "{sock}"\n'
                               f'fabric = "{fab.description_path}"\n')
                started.append(start_mrcd(h.name, fab.netns(h.name), str(cfg), sock,
                                          str(tmp_path)))
            yield FabricPair(started[0], started[1], fab)
        finally:
            for m in started:
                m.stop()
