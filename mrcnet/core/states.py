"""QP and EV states, and the one table of legal QP state transitions (h11-style).

An illegal transition fails by lookup in :data:`QP_TRANSITIONS`, loudly, with
:class:`~mrcnet.errors.IllegalTransition`.
"""

from __future__ import annotations

import enum
from typing import Final


class QPState(enum.Enum):
    """Queue-pair life cycle (mrc.h / verbs names)."""

    RESET = "RESET"
    INIT = "INIT"
    RTR = "RTR"  # ready to receive: responder works, requester not yet
    RTS = "RTS"  # ready to send
    ERROR = "ERROR"


class EVState(enum.Enum):
    """State of one entropy value (one path) of a QP."""

    GOOD = "GOOD"
    SKIP = "SKIP"  # skip it once (ECN echo, non-last-hop trim), then GOOD again
    ASSUMED_BAD = "ASSUMED_BAD"  # loss or timeout seen: out of use until probes succeed
    DENIED = "DENIED"  # operator/controller said no: out of use until allowed


#: The two working states as plain module globals: the per-frame paths compare a QP's
#: state with these (a global's load is ~7 ns, the enum class's attribute ~74 ns).
RTS: Final = QPState.RTS
RTR: Final = QPState.RTR

_S = QPState

#: (from, to) -> (required attributes, optional attributes). Anything else is illegal.
#: RESET and ERROR are reachable from every state (tear-down and fatal error), as in verbs.
QP_TRANSITIONS: Final[dict[tuple[QPState, QPState], tuple[frozenset[str], frozenset[str]]]] = {}

# mrc.h: INIT takes the profiles; RTR the responder's limits; RTS the requester's limits,
# retry counts and timeout. Immediate limits and PSN windows are also taken one step
# early (RTR), as verbs does for most attributes.
_INIT_OPT = frozenset({"ev_profile", "cc_profile", "max_imm_outstanding", "evs_per_qp"})
_RTR_REQ = frozenset({"peer", "dest_qp_num", "rq_psn"})
_RTR_OPT = _INIT_OPT | {"sq_psn", "max_wimm_dest", "mpr_dest", "mpr", "ep_token"}
_RTS_OPT = frozenset({"timeout", "retry_cnt", "retry_linear", "retry_exp_cnt", "sq_psn",
                      "max_imm_outstanding", "mpr"})

QP_TRANSITIONS[(_S.RESET, _S.INIT)] = (frozenset(), _INIT_OPT)
QP_TRANSITIONS[(_S.INIT, _S.INIT)] = (frozenset(), _INIT_OPT)
QP_TRANSITIONS[(_S.INIT, _S.RTR)] = (_RTR_REQ, _RTR_OPT)
QP_TRANSITIONS[(_S.RTR, _S.RTS)] = (frozenset(), _RTS_OPT)
QP_TRANSITIONS[(_S.RTS, _S.RTS)] = (frozenset(), _RTS_OPT - {"sq_psn"})
for _st in QPState:
    QP_TRANSITIONS[(_st, _S.RESET)] = (frozenset(), frozenset())
    QP_TRANSITIONS[(_st, _S.ERROR)] = (frozenset(), frozenset())
del _st
