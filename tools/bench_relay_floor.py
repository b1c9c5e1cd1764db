#!/usr/bin/env python3
"""The floor of a daemon per host: UDP round trips direct, and through a relay process
on each host (as the application -> mrcd -> fabric -> mrcd -> application path), same
fabric, same run.

A verbs round trip through mrcd wakes six processes in turn (client A, mrcd A, mrcd B,
client B, mrcd B, mrcd A) where kernel UDP wakes two. This bench measures what that
shape costs with no protocol work at all: each relay is a uvloop process that only
moves datagrams (``add_reader`` -> ``recvfrom`` -> ``sendto``), in Python, or with
``--relay-busy-poll`` spinning on its sockets instead of sleeping; and the same relay in
C (``relay-c``: an epoll loop, tools/relay_floor.c, built at run time with cffi), which
is what the wake-ups alone cost. The ratio relay / direct is the best a per-host daemon
can reach whatever its data path costs (issue 15's 3x target is measured against the
direct row); relay-c / direct is that floor for a daemon whose data path is C.

Paths, per round trip (h0 on one leaf, h1 on another; the fabric as bench_latency's):

- **direct**: client on h0 -> UDP echo on h1 (two wake-ups);
- **relay**: client on h0 -> relay h0 (loopback) -> relay h1 (fabric) -> echo on h1
  (loopback) and back (six wake-ups, as through two mrcds);
- **relay-c**: the same through the C relays (their own ports, started beside the
  Python ones).

Everything started is stopped by PID; the fabric is removed even on error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_latency import SPEC, _pct, _udp_echo  # (the same fabric, echo, percentiles)

ECHO_PORT, RELAY_CLIENT_PORT, RELAY_NET_PORT = 47990, 47991, 47992
C_CLIENT_PORT, C_NET_PORT = 47993, 47994  # the C relays'
SELF = os.path.abspath(__file__)
C_SOURCE = Path(SELF).with_name("relay_floor.c")
C_MODULE = "_relay_floor_c"


# --- the processes inside the hosts (run as `bench_relay_floor.py _role ...`) ------------

def _relay_sockets(side: str, client_port: int, net_port: int
                   ) -> tuple[socket.socket, socket.socket]:
    """A relay's (local, net) sockets, non-blocking: side "a" takes the client's datagrams
    on ``client_port``, side "b" is connected to the local echo."""
    net = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    net.bind(("::", net_port))
    local = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    if side == "a":
        local.bind(("::1", client_port))
    else:
        local.connect(("::1", ECHO_PORT))
    for s in (net, local):
        s.setblocking(False)
    return local, net


def _relay(side: str, peer: str, busy: bool) -> None:
    """``side`` "a": datagrams from a local client (on RELAY_CLIENT_PORT) go to ``peer``'s
    relay and its answers back to the client; "b": datagrams from the peer relay go to the
    local echo and its answers back. One uvloop loop, readers only (or a spin loop)."""

    import uvloop

    local, net = _relay_sockets(side, RELAY_CLIENT_PORT, RELAY_NET_PORT)
    far = (peer, RELAY_NET_PORT)
    back: list[Any] = [None]  # the address answers go to (client, or peer relay)

    def from_local() -> None:
        with contextlib.suppress(BlockingIOError):
            while True:
                data, addr = local.recvfrom(65536)
                if side == "a":
                    back[0] = addr
                    net.sendto(data, far)
                else:
                    net.sendto(data, back[0])

    def from_net() -> None:
        with contextlib.suppress(BlockingIOError):
            while True:
                data, addr = net.recvfrom(65536)
                if side == "a":
                    local.sendto(data, back[0])
                else:
                    back[0] = addr
                    local.send(data)

    print("ready", flush=True)
    if busy:
        while True:
            from_local()
            from_net()
    loop = uvloop.new_event_loop()
    loop.add_reader(local.fileno(), from_local)
    loop.add_reader(net.fileno(), from_net)
    loop.run_forever()


def _relay_c(side: str, peer: str, build_dir: str) -> None:
    """The same relay in C (tools/relay_floor.c), from the module built in ``build_dir``."""
    sys.path.insert(0, build_dir)
    mod = __import__(C_MODULE)
    local, net = _relay_sockets(side, C_CLIENT_PORT, C_NET_PORT)
    print("ready", flush=True)
    mod.lib.relay_run(local.fileno(), net.fileno(), side == "a", peer.encode(), C_NET_PORT)
    raise SystemExit("relay-c: epoll failed")


def _build_c(build_dir: Path) -> None:
    """Compile the C relay into ``build_dir`` (cffi, API mode)."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef("int relay_run(int local_fd, int net_fd, int side_a, const char *peer,"
             " int port);")
    ffi.set_source(C_MODULE, C_SOURCE.read_text(), extra_compile_args=["-O2"])
    ffi.compile(tmpdir=str(build_dir))


def _client(target: str, port: int, size: int, iters: int, warmup: int) -> None:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.connect((target, port))
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    xs = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        s.send(data)
        back = s.recv(65536)
        dt = time.perf_counter() - t0
        if back != data:
            raise SystemExit("mismatch")
        if i >= warmup:
            xs.append(dt * 1e6)
    print(json.dumps(xs), flush=True)


# --- the bench --------------------------------------------------------------------------

def _cpu(host: str, pin: bool) -> list[str]:
    """``taskset`` prefix: with ``pin``, h0's processes on CPU 0 and h1's on CPU 1."""
    return ["taskset", "-c", "0" if host == "h0" else "1"] if pin else []


@contextlib.contextmanager
def _started(fab: Any, host: str, args: list[str], pin: bool
             ) -> Iterator[subprocess.Popen[str]]:
    p = fab.popen(host, [*_cpu(host, pin), sys.executable, SELF, *args],
                  stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{args[0]} on {host} did not start")
        yield p
    finally:
        p.kill()
        p.wait(10)


METHODS = ("direct", "relay", "relay-c")


def run(workdir: Path, size: int, iters: int, warmup: int, rounds: int,
        busy: bool, pin: bool) -> list[dict[str, Any]]:
    """Rows of (method, round, p50_us, p99_us), the methods alternating per round;
    ``pin``: each host's processes on its own CPU."""
    from mrcnet.fabric.fabric import Fabric

    _build_c(workdir)
    os.environ["MRC_FABRIC_STATE_DIR"] = str(workdir / "fabrics")
    fab = Fabric.up(SPEC, name="rf" + secrets.token_hex(3))
    rows: list[dict[str, Any]] = []
    try:
        h0 = str(fab.description.host("h0").port(0).address)
        h1 = str(fab.description.host("h1").port(0).address)
        common = [str(size), str(iters), str(warmup)]
        flag = ["busy"] if busy else ["sleep"]
        with _started(fab, "h1", ["_echo", str(ECHO_PORT)], pin), \
                _started(fab, "h1", ["_relay", "b", h0, *flag], pin), \
                _started(fab, "h0", ["_relay", "a", h1, *flag], pin), \
                _started(fab, "h1", ["_relay_c", "b", h0, str(workdir)], pin), \
                _started(fab, "h0", ["_relay_c", "a", h1, str(workdir)], pin):
            targets = {"direct": (h1, ECHO_PORT), "relay": ("::1", RELAY_CLIENT_PORT),
                       "relay-c": ("::1", C_CLIENT_PORT)}
            for r in range(rounds):
                for method in METHODS:
                    target, port = targets[method]
                    out = fab.exec("h0", [*_cpu("h0", pin), sys.executable, SELF, "_client",
                                          target, str(port), *common],
                                   capture_output=True, text=True,
                                   timeout=60 + iters * 0.05)
                    if out.returncode != 0:
                        raise RuntimeError(f"{method} client failed: {out.stderr[-1000:]}")
                    xs = json.loads(out.stdout)
                    rows.append({"method": method, "round": r, "p50_us": _pct(xs, 0.5),
                                 "p99_us": _pct(xs, 0.99)})
    finally:
        fab.down()
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0].startswith("_"):
        role, rest = argv[0], argv[1:]
        if role == "_echo":
            _udp_echo(int(rest[0]))
        elif role == "_relay":
            _relay(rest[0], rest[1], rest[2] == "busy")
        elif role == "_relay_c":
            _relay_c(rest[0], rest[1], rest[2])
        elif role == "_client":
            _client(rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--size", type=int, default=8, help="datagram bytes")
    ap.add_argument("--iters", type=int, default=2000, help="timed round trips per round")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3, help="direct/relay alternations")
    ap.add_argument("--relay-busy-poll", action="store_true",
                    help="the Python relays spin on their sockets instead of sleeping in epoll")
    ap.add_argument("--pin", action="store_true",
                    help="h0's processes on CPU 0, h1's on CPU 1 (taskset)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_relay_floor: needs root (network namespaces)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench_relay_floor.") as tmp:
        rows = run(Path(tmp), a.size, a.iters, a.warmup, a.rounds, a.relay_busy_poll, a.pin)
    if a.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"UDP round trips h0 <-> h1, {a.size} B, {a.iters} per round, {SPEC}"
          + (", relays busy-poll" if a.relay_busy_poll else "")
          + (", pinned: h0 CPU 0, h1 CPU 1" if a.pin else ""))
    print(f"{'round':>5} {'direct P50':>11} {'relay P50':>10} {'ratio':>6} "
          f"{'relay-c P50':>12} {'ratio':>6} {'direct P99':>11} {'relay P99':>10} "
          f"{'ratio':>6} {'relay-c P99':>12} {'ratio':>6}")
    for r in range(a.rounds):
        d, x, c = (next(w for w in rows if w["round"] == r and w["method"] == m)
                   for m in METHODS)
        print(f"{r:>5} {d['p50_us']:>11.0f} {x['p50_us']:>10.0f} "
              f"{x['p50_us'] / d['p50_us']:>6.2f} {c['p50_us']:>12.0f} "
              f"{c['p50_us'] / d['p50_us']:>6.2f} {d['p99_us']:>11.0f} "
              f"{x['p99_us']:>10.0f} {x['p99_us'] / d['p99_us']:>6.2f} "
              f"{c['p99_us']:>12.0f} {c['p99_us'] / d['p99_us']:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
