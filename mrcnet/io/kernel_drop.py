"""Keep the host's own network stack from answering MRC frames.

mrcd reads MRC frames from packet sockets, but the kernel also receives them: it would
answer each with an ICMPv6 error (port unreachable, or parameter problem for an
IPv6-in-IPv6 frame without a tunnel), which costs about half the packet rate. So mrcd
drops MRC frames in the kernel on ingress of its ports.

Mechanism: one nftables table of family ``netdev`` with one ingress chain per port.
Packet taps (AF_PACKET) run in ``__netif_receive_skb_core`` before tc ingress and before
the netdev ingress hook, so packet sockets still see every frame the rule drops (the
tests check this). The table's name is unique to this process (``mrcd_<pid>_<random>``)
and the table is the only thing it ever deletes: nothing else on the host is touched.

The rules match what the packet-socket BPF filter accepts (see :mod:`mrcnet.io.bpf`):
UDP to port 4791 directly after the outer IPv6 header or its SRH (nftables finds the
transport header past extension headers), and IPv6-in-IPv6 whose inner header carries
UDP to port 4791.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from typing import Final

from mrcnet.constants import IPPROTO_IPV6, IPPROTO_UDP, IPV6_HEADER_LEN, MRC_UDP_PORT
from mrcnet.io.errors import CapabilityError, IOSetupError

__all__ = ["KernelDrop", "remove_stale_tables", "stale_tables"]

#: Ahead of any other ingress chain (they should not spend work on MRC frames).
CHAIN_PRIORITY: Final = -500
_NFT_TIMEOUT: Final = 10.0
_IFNAME_RE: Final = re.compile(r"^[A-Za-z0-9_.@-]{1,15}$")
#: Exactly the table names :class:`KernelDrop` makes: ``mrcd_<pid>_<6 hex digits>``.
TABLE_RE: Final = re.compile(r"^mrcd_([1-9][0-9]{0,9})_([0-9a-f]{6})$")
_TABLE_LINE_RE: Final = re.compile(r"^table netdev (\S+)$")


class KernelDrop:
    """An nftables table, owned by this object, dropping MRC frames on ``ifnames``.

    :meth:`install` creates it, :meth:`remove` deletes it (idempotent); also a context
    manager. Needs CAP_NET_ADMIN and the ``nft`` command.
    """

    def __init__(self, ifnames: Sequence[str], *, port: int = MRC_UDP_PORT,
                 table: str | None = None) -> None:
        for name in ifnames:
            if not _IFNAME_RE.match(name):
                raise IOSetupError(f"bad interface name {name!r}")
        self.ifnames = list(ifnames)
        self.port = port
        self.table = table or f"mrcd_{os.getpid()}_{secrets.token_hex(3)}"  # see TABLE_RE
        self.installed = False

    def ruleset(self) -> str:
        """The nft script that creates the table."""
        # The inner UDP destination port sits 2 bytes into the UDP header that follows
        # the 40-byte inner IPv6 header; its next header field is at byte 6.
        inner_nh = 6 * 8
        inner_dport = (IPV6_HEADER_LEN + 2) * 8
        lines = [f"table netdev {self.table} {{",
                 f'  comment "mrcd pid {os.getpid()}: drop MRC frames after the packet tap"']
        for i, ifname in enumerate(self.ifnames):
            lines += [
                f"  chain port{i} {{",
                f'    type filter hook ingress device "{ifname}" priority '
                f"{CHAIN_PRIORITY}; policy accept;",
                f"    meta protocol ip6 meta l4proto {IPPROTO_UDP} udp dport {self.port} "
                "counter drop",
                f"    meta protocol ip6 meta l4proto {IPPROTO_IPV6} "
                f"@th,{inner_nh},8 {IPPROTO_UDP} @th,{inner_dport},16 {self.port} counter drop",
                "  }",
            ]
        lines.append("}")
        return "\n".join(lines) + "\n"

    def install(self) -> None:
        """Create the table (raises :class:`IOSetupError` with nft's message on failure)."""
        if self.installed:
            return
        _nft(["-f", "-"], self.ruleset())
        self.installed = True

    def remove(self) -> None:
        """Delete the table if this object created it."""
        if not self.installed:
            return
        _nft(["delete", "table", "netdev", self.table])
        self.installed = False

    def counters(self) -> list[int]:
        """Packets dropped so far by each rule (for tests and status)."""
        out = _nft(["list", "table", "netdev", self.table])
        return [int(m) for m in re.findall(r"counter packets (\d+)", out)]

    def __enter__(self) -> KernelDrop:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _pid_alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie, killed but not yet reaped, counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # cannot tell: keep its table


def stale_tables() -> list[str]:
    """Kernel drop tables of this network namespace left by an mrcd that is gone.

    A table is stale only if all of these hold: family ``netdev``; its name has exactly
    the form :class:`KernelDrop` gives (``mrcd_<pid>_<6 hex>``, :data:`TABLE_RE`); its
    comment names the same pid (``mrcd pid <pid>: ...``); and that pid is not running.
    Anything else, including tables of live mrcds, is never touched. (PIDs are those of
    mrcd's PID namespace: mrcds sharing a network namespace must share a PID namespace.)
    """
    out = _nft(["list", "tables", "netdev"])
    stale: list[str] = []
    for line in out.splitlines():
        m = _TABLE_LINE_RE.match(line.strip())
        if m is None:
            continue
        name = m.group(1)
        nm = TABLE_RE.match(name)
        if nm is None:
            continue
        pid = int(nm.group(1))
        if pid == os.getpid() or _pid_alive(pid):
            continue
        try:
            text = _nft(["list", "table", "netdev", name])
        except IOSetupError:
            continue  # gone meanwhile
        if f'comment "mrcd pid {pid}: ' in text:
            stale.append(name)
    return stale


def remove_stale_tables() -> list[str]:
    """Delete the tables :func:`stale_tables` finds (by exact name); returns their names.

    A table another process deletes at the same time is skipped silently.
    """
    removed: list[str] = []
    for name in stale_tables():
        try:
            _nft(["delete", "table", "netdev", name])
        except IOSetupError:
            continue
        removed.append(name)
    return removed


def _nft(args: list[str], stdin: str | None = None) -> str:
    nft = shutil.which("nft") or shutil.which("nft", path="/usr/sbin:/sbin")
    if nft is None:
        raise IOSetupError("the nft command is missing: install nftables (apt-get install "
                           "nftables); mrcd uses it to stop the kernel answering MRC frames")
    try:
        r = subprocess.run([nft, *args], input=stdin, capture_output=True, text=True,
                           timeout=_NFT_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as e:
        raise IOSetupError(f"nft {' '.join(args)} did not finish in {_NFT_TIMEOUT} s") from e
    if r.returncode != 0:
        msg = r.stderr.strip()
        if "Operation not permitted" in msg:
            raise CapabilityError("installing the kernel drop rule needs CAP_NET_ADMIN: run "
                                  "as root or grant the capability")
        raise IOSetupError(f"nft {' '.join(args)} failed: {msg}")
    return r.stdout
