"""What the command-line tools share: how they find mrcd (and say where they looked), a
quiet end on a closed pipe, ``--version``, and options accepted on either side of the
subcommand."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mrcnet import version_text
from mrcnet.api.client import SOCKET_ENV, default_socket_path

__all__ = ["add_version", "both_sides", "fabric_sockets", "not_running", "socket_origin",
           "survive_pipe"]

# mrc-fabric's state root (mrcnet.fabric.state: not imported here, it pulls in netlink).
FABRIC_STATE_ENV = "MRC_FABRIC_STATE_DIR"
DEFAULT_FABRIC_STATE_ROOT = "/run/mrcnet/fabrics"


def add_version(ap: argparse.ArgumentParser) -> None:
    """``--version``: the tool's name and the package version."""
    ap.add_argument("--version", action="version", version=version_text())


def both_sides(add: Callable[[argparse.ArgumentParser, Any], None],
               top: argparse.ArgumentParser, *subs: argparse.ArgumentParser) -> None:
    """Options accepted before and after the subcommand: ``add(parser, default)`` adds
    them. The top parser holds the defaults; on a subparser they are SUPPRESSed, so a
    value given after the subcommand wins and none given leaves the top's."""
    add(top, None)
    for p in subs:
        add(p, argparse.SUPPRESS)


def socket_origin(given: str | None) -> str:
    """Where the socket path came from, for messages."""
    if given:
        return "--socket"
    return f"${SOCKET_ENV}" if os.environ.get(SOCKET_ENV) else "the default"


def not_running(given: str | None) -> str:
    """"mrcd is not running at PATH" with where PATH came from and, when it is only
    the default, how to point the tool at an mrcd, naming the mrcd sockets of the
    fabrics on this machine when there are any."""
    path = given or default_socket_path()
    text = f"mrcd is not running at {path} ({socket_origin(given)})"
    if not given and not os.environ.get(SOCKET_ENV):
        text += (f": give --socket PATH or set {SOCKET_ENV}=PATH (mrc-fabric exec sets "
                 f"it for a fabric host with an mrcd; mrc-fabric status lists the "
                 "sockets), or start mrcd --config FILE")
        found = fabric_sockets()
        if found:
            text += "; mrcd sockets of the fabrics here: " + ", ".join(
                f"{fabric} {host} {sock}" for fabric, host, sock in found[:8])
    return text


def fabric_sockets() -> list[tuple[str, str, str]]:
    """(fabric, host, socket path) of every live mrcd socket under mrc-fabric's state
    root (``/run/mrcnet/fabrics/<name>/mrcd/<host>.sock``), sorted."""
    root = Path(os.environ.get(FABRIC_STATE_ENV) or DEFAULT_FABRIC_STATE_ROOT)
    try:
        socks = sorted(root.glob("*/mrcd/*.sock"))
    except OSError:
        return []
    return [(p.parent.parent.name, p.stem, str(p)) for p in socks if p.is_socket()]


def survive_pipe(main: Callable[[], int]) -> int:
    """Run ``main``; a reader that went away (``mrcctl evs 5 | head``) ends it quietly
    with status 141 (as SIGPIPE would), not a traceback."""
    try:
        status = main()
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141
