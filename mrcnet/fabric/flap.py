"""Background link flapper: ``python -m mrcnet.fabric.flap NAME A B PERIOD_MS``.

Started by :meth:`mrcnet.fabric.fabric.LinkControl.flap`, recorded (PID + start time) in
the fabric's state file, and killed by PID on ``clear`` / ``up`` / ``down``. It toggles
both ends of the link down and up every period and leaves the link up when it is told to
stop. It exits on its own once the fabric's namespaces are gone.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import FrameType

from mrcnet.fabric import plan
from mrcnet.fabric.nsutil import netns_exists
from mrcnet.fabric.state import fabric_dir
from mrcnet.topology.description import load

_stop = False


def _on_term(signum: int, frame: FrameType | None) -> None:
    global _stop
    _stop = True


def _run(netns: str, lines: list[str]) -> None:
    subprocess.run(
        ["ip", "-6", "-n", netns, "-batch", "-"],
        input="".join(ln + "\n" for ln in lines),
        capture_output=True,
        text=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Flap until SIGTERM."""
    args = sys.argv[1:] if argv is None else argv
    name, a, b, period_ms = args[0], args[1], args[2], int(args[3])
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    desc = load(fabric_dir(name) / "description.json")
    link = desc.link(a, b)
    ends = [(e.netns, e.node, e.ifname) for e in (link.a, link.b)]
    half = period_ms / 1000.0
    down = True
    while not _stop:
        if not all(netns_exists(ns) for ns, _, _ in ends):
            return 0
        for ns, node, ifname in ends:
            if down:
                _run(ns, [f"link set {ifname} down"])
            else:
                _run(ns, plan.device_lines(desc, node, ifname))
        down = not down
        deadline = time.monotonic() + half
        while not _stop and time.monotonic() < deadline:
            time.sleep(min(0.05, half))
    # Leave the link up.
    for ns, node, ifname in ends:
        if netns_exists(ns):
            _run(ns, plan.device_lines(desc, node, ifname))
    return 0


if __name__ == "__main__":
    sys.exit(main())
