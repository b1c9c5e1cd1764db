"""``python -m mrcnet.wire decode`` shows mrcnet's endpoint token as the dissector does:
``endpoint_token`` in the ``--json`` fields and ``token=`` in the summary, both only when
one was sent (ERTH's public fields stay the spec readings')."""

from __future__ import annotations

from mrcnet.constants import EndpointOp
from mrcnet.wire import build_endpoint
from mrcnet.wire.__main__ import decode_frame
from mrcnet.wire.erth import ERTH, TokenERTH
from mrcnet.wire.samples import USID


def test_decode_shows_the_endpoint_token() -> None:
    sent = build_endpoint(USID, ev=0x0001_1005, request_id=10, erth=TokenERTH(
        EndpointOp.PORT_STATUS, port_status_mask=0, timestamp=0x1238, token=0xDEADBEEF))
    hello = build_endpoint(USID, ev=0x0001_1004, request_id=8, erth=ERTH(
        EndpointOp.EV_PROBE, timestamp=0x1236))
    d = decode_frame(1, 0.0, sent)
    assert d.error is None, d.detail
    assert d.fields["endpoint_token"] == 0xDEADBEEF
    assert d.info is not None and d.info.endswith("token=0xdeadbeef"), d.info
    h = decode_frame(2, 0.0, hello)
    assert h.error is None, h.detail
    assert "endpoint_token" not in h.fields
    assert h.info is not None and "token=" not in h.info, h.info
