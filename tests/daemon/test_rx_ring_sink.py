"""tools/bench_rx_ring.py's ring sink on a real veth pair: every frame sent is counted
once with its length, through more frames than the ring has slots (the reader hands
each slot back to the kernel and wraps), and short frames are left out as the bench
means them to be."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mdnsutil import VethPair, needs_root

pytestmark = needs_root

TOOL = Path(__file__).resolve().parents[2] / "tools" / "bench_rx_ring.py"

#: Sends the frames given on stdin (one length per line) from a packet socket on eth0,
#: in bursts the Python ring reader keeps up with.
SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
s.bind(("eth0", 0))
dst, src = bytes.fromhex(sys.argv[1].replace(":", "")), bytes.fromhex(sys.argv[2].replace(":", ""))
for i, n in enumerate(int(x) for x in sys.stdin.read().split()):
    s.send(dst + src + b"\\x86\\xdd" + bytes([i & 0xFF]) * (n - 14))
    if i % 64 == 63:
        time.sleep(0.01)
"""


def test_ring_sink_counts_every_frame_through_wrap_around(veth: VethPair) -> None:
    # 1500 frames the bench counts (8000..9014 bytes) among 100 short ones it does not:
    # more than the ring's 1024 slots, so the reader must hand slots back and wrap.
    big = [8000 + (i * 7) % 1015 for i in range(1500)]
    lengths: list[int] = []
    for i, n in enumerate(big):
        lengths += (n, 200) if i % 15 == 0 else (n,)
    sink = subprocess.Popen(["ip", "netns", "exec", veth.ns_b, sys.executable, str(TOOL),
                             "--ring-sink", veth.if_b], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert sink.stderr is not None
        assert "listening" in sink.stderr.readline()
        subprocess.run(["ip", "netns", "exec", veth.ns_a, sys.executable, "-c", SENDER,
                        veth.mac_b, veth.mac_a], input="\n".join(map(str, lengths)),
                       text=True, check=True, timeout=60)
        out, _ = sink.communicate(timeout=30)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait(5)
    r = json.loads(out)
    assert r["frames"] == len(big)
    assert r["bytes"] == sum(big)
    assert 0 < r["seconds"] < 60
    assert r["transfer_cpu_user"] + r["transfer_cpu_system"] > 0

