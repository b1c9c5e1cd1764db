"""mrcnet.core: the sans-I/O MRC protocol engine (QPs, reliability, EVs, NSCC).

Drive a :class:`Host` with ``receive`` / ``frames_to_send`` / ``next_timer`` /
``handle_timer`` / ``next_event``; see docs/CORE.md.
"""

from mrcnet.core.cc import CC_REGISTRY, NSCC, CongestionControl, create_cc, register_cc
from mrcnet.core.config import (
    EV_PROFILE_ECMP,
    EV_PROFILE_SPRAY,
    Access,
    HostConfig,
    PathProvider,
    Port,
    QPAttrs,
)
from mrcnet.core.cq import CompletionQueue
from mrcnet.core.events import (
    Completion,
    Event,
    ImmediateReceived,
    PathStateChanged,
    PortStatusChanged,
    QPError,
    WCOpcode,
    WCStatus,
    WriteCompleted,
)
from mrcnet.core.evs import EVManager, ev_path, make_ev
from mrcnet.core.host import Host, PathProbe
from mrcnet.core.memory import MemoryRegion
from mrcnet.core.recovery import retry_schedule
from mrcnet.core.states import QP_TRANSITIONS, EVState, QPState
from mrcnet.errors import IllegalTransition, InvalidAttribute, InvalidRequest

__all__ = [
    "CC_REGISTRY",
    "EV_PROFILE_ECMP",
    "EV_PROFILE_SPRAY",
    "NSCC",
    "QP_TRANSITIONS",
    "Access",
    "Completion",
    "CompletionQueue",
    "CongestionControl",
    "EVManager",
    "EVState",
    "Event",
    "Host",
    "HostConfig",
    "IllegalTransition",
    "ImmediateReceived",
    "InvalidAttribute",
    "InvalidRequest",
    "MemoryRegion",
    "PathProbe",
    "PathProvider",
    "PathStateChanged",
    "Port",
    "PortStatusChanged",
    "QPAttrs",
    "QPError",
    "QPState",
    "WCOpcode",
    "WCStatus",
    "WriteCompleted",
    "create_cc",
    "ev_path",
    "make_ev",
    "register_cc",
    "retry_schedule",
]
