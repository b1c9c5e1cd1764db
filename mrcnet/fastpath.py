"""Transitional: the names ``mrcnet.fastpath`` used to hold, re-exported from their homes.

The module was split by concept (each file holds a concept's Python code and its C twin):
:mod:`mrcnet.native` (the compiled module), :mod:`mrcnet.wire.checksum`,
:mod:`mrcnet.wire.icrc`, :mod:`mrcnet.wire.template`, :mod:`mrcnet.wire.parsed`,
:mod:`mrcnet.io.batch`, :mod:`mrcnet.buffers`, :mod:`mrcnet.core.txtable`,
:mod:`mrcnet.core.rxlane_c` and :mod:`mrcnet.core.spray`. Import from those: this shim
goes once no module imports it.
"""

# ruff: noqa: I001  (one line per module keeps this shim short)
from importlib import import_module
from typing import TYPE_CHECKING, Any

from mrcnet.buffers import SENDQ_CAP, SendQueue, SlotFrames, send_queue
from mrcnet.io.batch import (
    PACKET_OUTGOING, BatchIO, CBatchIO, PyBatchIO, Received, recv_batch, recv_slots, send_batch,
)
from mrcnet.native import HAVE_C
from mrcnet.wire.checksum import (
    c_udp6_checksum, c_udp6_checksum_ok, py_udp6_checksum, py_udp6_checksum_ok,
)
from mrcnet.wire.checksum import fast_udp6_checksum as udp6_checksum
from mrcnet.wire.checksum import fast_udp6_checksum_ok as udp6_checksum_ok
from mrcnet.wire.icrc import c_icrc, py_icrc
from mrcnet.wire.icrc import fast_icrc as icrc
from mrcnet.wire.parsed import (
    PARSE_REASONS, FrameParser, PyParsed, c_parse, parsed_to_frame, py_parse,
)
from mrcnet.wire.template import (
    CTemplate, DataTemplate, FrameFinisher, PathSpec, RunPatcher, Template, make_template,
    patch_data_frame, run_patcher,
)

# mrcnet.core's names load on first use: mrcnet.core's own modules import this shim.
_CORE = {"CRxLane": "mrcnet.core.rxlane_c", "CSpray": "mrcnet.core.spray",
         "CTxTable": "mrcnet.core.txtable"}
if TYPE_CHECKING:
    from mrcnet.core.rxlane_c import CRxLane
    from mrcnet.core.spray import CSpray
    from mrcnet.core.txtable import CTxTable


def __getattr__(name: str) -> Any:
    if name in _CORE:
        return getattr(import_module(_CORE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "HAVE_C", "PACKET_OUTGOING", "PARSE_REASONS", "SENDQ_CAP", "BatchIO", "CBatchIO",
    "CRxLane", "CSpray", "CTemplate", "CTxTable", "DataTemplate", "FrameFinisher",
    "FrameParser", "PathSpec", "PyBatchIO", "PyParsed", "Received", "RunPatcher",
    "SendQueue", "SlotFrames", "Template", "c_icrc", "c_parse", "c_udp6_checksum",
    "c_udp6_checksum_ok", "icrc", "make_template", "parsed_to_frame", "patch_data_frame",
    "py_icrc", "py_parse", "py_udp6_checksum", "py_udp6_checksum_ok", "recv_batch",
    "recv_slots", "run_patcher", "send_batch", "send_queue", "udp6_checksum",
    "udp6_checksum_ok",
]
