"""MRC wire format: one module per header, and whole-frame build/parse in :mod:`.frame`.

This pure-Python code is the reference; the C twins beside it (:mod:`mrcnet.native`) must produce
identical bytes.
"""

from mrcnet.errors import MalformedFrame, MalformedReason
from mrcnet.wire.aeth import AETH
from mrcnet.wire.bth import BTH
from mrcnet.wire.dscp import DEFAULT_DSCP, DscpClasses, dscp_classes, set_dscp_classes
from mrcnet.wire.eeth import EETH
from mrcnet.wire.erth import ERTH
from mrcnet.wire.ethernet import Ethernet, mac_to_bytes, mac_to_str
from mrcnet.wire.frame import (
    Frame,
    Route,
    build_ack,
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
from mrcnet.wire.neth import NETH
from mrcnet.wire.peth import PETH
from mrcnet.wire.reth import RETH
from mrcnet.wire.seth import SETH, CCState
from mrcnet.wire.srh import SRH
from mrcnet.wire.tseth import TSETH
from mrcnet.wire.udp import (
    UDP,
    ev_from_headers,
    ev_order,
    ev_to_flow_label,
    ev_to_sport,
    set_ev_order,
)
from mrcnet.wire.usid import usid_block, usid_container, usid_final, usid_list, usid_shift

__all__ = [
    "AETH",
    "BTH",
    "DEFAULT_DSCP",
    "EETH",
    "ERTH",
    "METH",
    "NETH",
    "PETH",
    "RETH",
    "SETH",
    "SRH",
    "TSETH",
    "UDP",
    "CCState",
    "DscpClasses",
    "Ethernet",
    "Frame",
    "IPv6",
    "ImmDt",
    "MalformedFrame",
    "MalformedReason",
    "Route",
    "build_ack",
    "build_data",
    "build_endpoint",
    "build_frame",
    "build_nack",
    "build_probe",
    "build_sack",
    "dscp_classes",
    "ev_from_headers",
    "ev_order",
    "ev_to_flow_label",
    "ev_to_sport",
    "ip6",
    "ip6_str",
    "mac_to_bytes",
    "mac_to_str",
    "parse_frame",
    "set_dscp_classes",
    "set_ev_order",
    "usid_block",
    "usid_container",
    "usid_final",
    "usid_list",
    "usid_shift",
]
