"""The codec of what mrcd pushes: each core dataclass comes back as the same type."""

from __future__ import annotations

import json

import pytest

from mrcnet.api import (
    ImmediateReceived,
    PathStateChanged,
    PortStatusChanged,
    QPError,
    WorkCompletion,
    WriteCompleted,
)
from mrcnet.api.errors import ProtocolError
from mrcnet.api.messages import (
    TYPES,
    completions_push,
    decode,
    decode_completions,
    encode,
    event_push,
    stamped_event,
)
from mrcnet.core import EVState
from mrcnet.core.events import Completion, WCOpcode, WCStatus

SAMPLES = [
    WriteCompleted(qpn=3, wr_id=1 << 62, byte_len=4096),
    ImmediateReceived(qpn=3, wr_id=7, imm=0xFFFFFFFF, byte_len=0),
    QPError(qpn=9, reason="peer unreachable: retry budget exhausted"),
    PathStateChanged(qpn=9, ev=0x1234567, old=EVState.GOOD, new=EVState.ASSUMED_BAD,
                     cause="loss"),
    PortStatusChanged(port=None, plane=1, up=False, peer="h2"),
    Completion(WCStatus.RETRY_EXC_ERR, 4, WCOpcode.RDMA_WRITE, 65536, None, 9),
]


def test_every_registered_type_has_a_sample() -> None:
    assert {type(s) for s in SAMPLES} == set(TYPES.values())


@pytest.mark.parametrize("obj", SAMPLES, ids=lambda o: type(o).__name__)
def test_round_trip_through_json_gives_the_same_dataclass(obj: object) -> None:
    back = decode(json.loads(json.dumps(encode(obj))))
    assert type(back) is type(obj) and back == obj


def test_event_push_keeps_mrcd_clock() -> None:
    ev = QPError(qpn=1, reason="x")
    got = stamped_event(json.loads(json.dumps(event_push(ev, 12.5))))
    assert got.event == ev and got.clock == 12.5


def test_completions_become_work_completions() -> None:
    wcs = [Completion(WCStatus.SUCCESS, 1, WCOpcode.RECV_RDMA_WITH_IMM, 10, 7, 2),
           Completion(WCStatus.WR_FLUSH_ERR, 2, WCOpcode.RDMA_WRITE, 0, None, 2)]
    msg = json.loads(json.dumps(completions_push(5, wcs)))
    assert msg["cq"] == 5
    assert decode_completions(msg["wcs"], WorkCompletion.of) == [
        WorkCompletion("SUCCESS", 1, "RECV_RDMA_WITH_IMM", 10, 7, 2),
        WorkCompletion("WR_FLUSH_ERR", 2, "RDMA_WRITE", 0, None, 2)]


def test_unknown_or_malformed_events_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError, match="unknown event type"):
        decode({"type": "NoSuchEvent"})
    with pytest.raises(ProtocolError, match="malformed QPError"):
        decode({"type": "QPError", "qpn": 1})
    with pytest.raises(ProtocolError, match="malformed PathStateChanged"):
        decode({"type": "PathStateChanged", "qpn": 1, "ev": 2, "old": "NOPE",
                "new": "GOOD", "cause": "loss"})
    with pytest.raises(ProtocolError, match="malformed completion"):
        decode_completions([[1, 2]], WorkCompletion.of)
