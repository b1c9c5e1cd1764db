"""MRC wire format: one module per header, and whole-frame build/parse in :mod:`.frame`.

This pure-Python code is the reference; the C twins beside it (:mod:`mrcnet.native`) must produce
identical bytes.
"""

from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire.bth import BTH
from mrcnet.wire.endpoint import EndpointHeader
from mrcnet.wire.ethernet import Ethernet, mac_to_bytes, mac_to_str
from mrcnet.wire.frame import (
    Frame,
    Route,
    build_data,
    build_endpoint,
    build_frame,
    build_nack,
    build_probe,
    build_sack,
    parse_frame,
)
from mrcnet.wire.immdt import ImmDt
from mrcnet.wire.ipv6 import IPv6, ip6, ip6_str
from mrcnet.wire.meth import METH
from mrcnet.wire.nack import NETH
from mrcnet.wire.probe import ProbeHeader
from mrcnet.wire.reth import RETH
from mrcnet.wire.sack import SETH, CCState
from mrcnet.wire.srh import SRH
from mrcnet.wire.tseth import TSETH
from mrcnet.wire.udp import UDP, ev_from_headers, ev_to_flow_label, ev_to_sport
from mrcnet.wire.usid import usid_block, usid_container, usid_final, usid_list, usid_shift

__all__ = [
    "BTH",
    "METH",
    "NETH",
    "RETH",
    "SETH",
    "SRH",
    "TSETH",
    "UDP",
    "CCState",
    "EndpointHeader",
    "Ethernet",
    "Frame",
    "IPv6",
    "ImmDt",
    "MalformedFrame",
    "MalformedReason",
    "ProbeHeader",
    "Route",
    "build_data",
    "build_endpoint",
    "build_frame",
    "build_nack",
    "build_probe",
    "build_sack",
    "ev_from_headers",
    "ev_to_flow_label",
    "ev_to_sport",
    "ip6",
    "ip6_str",
    "mac_to_bytes",
    "mac_to_str",
    "parse_frame",
    "usid_block",
    "usid_container",
    "usid_final",
    "usid_list",
    "usid_shift",
]
