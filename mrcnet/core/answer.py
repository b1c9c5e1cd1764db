"""An answer's acknowledgement (``ack_with_data``): a QP that answers sends its data,
then the acknowledgement it owes (a held AckReq), on the plane that data took, so that
one batch of one port carries both (the requester's mrcd then finds the ACK in the
pass the answer woke it for)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mrcnet.core.config import Port
from mrcnet.core.qp import QueuePair

__all__ = ["emit_with_ack"]


def emit_with_ack(ports: Mapping[int, Port], qp: QueuePair, now: float,
                  out: list[tuple[int, bytes]], sendq: Any) -> None:
    """``qp``'s data into ``out`` (or ``sendq``: the caller's send queues, which the
    data built in C goes to), then its acknowledgement on the plane of the port the data
    took: the last frame's in ``out``, else the first of ``ports`` (in their order)
    whose queue grew; none (-1: the acknowledgement's own choice) if it sent nothing."""
    before = len(out)
    if sendq is not None:
        # (the sender notes which queues grew as it queues: Sender.grew)
        cell = qp.snd.grew
        cell[0] = 0
    qp.emit(now, out, sendq)
    port = -1
    if len(out) > before:
        port = out[-1][0]
    elif sendq is not None and (grew := cell[0]):
        if grew & (grew - 1):  # (several ports: the first in the host's order)
            port = next((i for i in ports if grew >> i & 1), -1)
        else:
            port = grew.bit_length() - 1
    qp.send_sack(now, out, plane=ports[port].plane if port in ports else -1)
