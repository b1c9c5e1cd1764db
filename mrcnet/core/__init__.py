"""mrcnet.core: the sans-I/O MRC protocol engine (QPs, reliability, EVs, NSCC).

Drive a :class:`Host` with ``receive`` / ``frames_to_send`` / ``next_timer`` /
``handle_timer`` / ``next_event``; see docs/CORE.md.

The names below are loaded when first used (PEP 562): a client that needs only
``mrcnet.core.events`` (the event dataclasses) imports that module and what it needs,
not the whole engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from mrcnet.core.endpoint import PathProbe
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
    from mrcnet.core.host import Host
    from mrcnet.core.memory import MemoryRegion
    from mrcnet.core.recovery import retry_schedule
    from mrcnet.core.states import QP_TRANSITIONS, EVState, QPState
    from mrcnet.errors import IllegalTransition, InvalidAttribute, InvalidRequest

# name -> the module that defines it
_HOMES: dict[str, str] = {
    "CC_REGISTRY": "mrcnet.core.cc",
    "NSCC": "mrcnet.core.cc",
    "CongestionControl": "mrcnet.core.cc",
    "create_cc": "mrcnet.core.cc",
    "register_cc": "mrcnet.core.cc",
    "EV_PROFILE_ECMP": "mrcnet.core.config",
    "EV_PROFILE_SPRAY": "mrcnet.core.config",
    "Access": "mrcnet.core.config",
    "HostConfig": "mrcnet.core.config",
    "PathProvider": "mrcnet.core.config",
    "Port": "mrcnet.core.config",
    "QPAttrs": "mrcnet.core.config",
    "CompletionQueue": "mrcnet.core.cq",
    "Completion": "mrcnet.core.events",
    "Event": "mrcnet.core.events",
    "ImmediateReceived": "mrcnet.core.events",
    "PathStateChanged": "mrcnet.core.events",
    "PortStatusChanged": "mrcnet.core.events",
    "QPError": "mrcnet.core.events",
    "WCOpcode": "mrcnet.core.events",
    "WCStatus": "mrcnet.core.events",
    "WriteCompleted": "mrcnet.core.events",
    "EVManager": "mrcnet.core.evs",
    "ev_path": "mrcnet.core.evs",
    "make_ev": "mrcnet.core.evs",
    "Host": "mrcnet.core.host",
    "PathProbe": "mrcnet.core.endpoint",
    "MemoryRegion": "mrcnet.core.memory",
    "retry_schedule": "mrcnet.core.recovery",
    "QP_TRANSITIONS": "mrcnet.core.states",
    "EVState": "mrcnet.core.states",
    "QPState": "mrcnet.core.states",
    "IllegalTransition": "mrcnet.errors",
    "InvalidAttribute": "mrcnet.errors",
    "InvalidRequest": "mrcnet.errors",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # (the next lookup finds it without this function)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


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
