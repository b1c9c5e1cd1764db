"""DSCP classes: the code points a fabric's operator assigns to MRC's traffic classes.

UEC 1.0.3 section 4.1 leaves the values to the operator. Senders mark ordinary data
TRIMMABLE, retransmissions TRIMMABLE_RETX and control frames (SACK, ACK, NACK, probes,
endpoint operations) CONTROL; a switch that trims a packet re-marks it TRIMMED, or
TRIMMED_LASTHOP when it trims at the port to the receiving host (incast: not a path
problem); NO_TRIM packets are dropped, never trimmed. A receiver reads both trimmed code
points as a trim and answers with the NACK reason of the same name.

Like the EV order, the classes in use are process-wide (every codec of the process, the C
parser and templates too, follow :func:`set_dscp_classes`): every host of a fabric must
use the fabric's. Defaults: mrcnet.constants.DSCP_*.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from mrcnet.constants import (
    DSCP_CONTROL,
    DSCP_NO_TRIM,
    DSCP_TRIMMABLE,
    DSCP_TRIMMABLE_RETX,
    DSCP_TRIMMED,
    DSCP_TRIMMED_LASTHOP,
)


@dataclass(frozen=True, slots=True)
class DscpClasses:
    """The six code points (0..63, all distinct)."""

    trimmable: int = DSCP_TRIMMABLE
    trimmable_retx: int = DSCP_TRIMMABLE_RETX
    trimmed: int = DSCP_TRIMMED
    trimmed_lasthop: int = DSCP_TRIMMED_LASTHOP
    no_trim: int = DSCP_NO_TRIM
    control: int = DSCP_CONTROL

    def __post_init__(self) -> None:
        values = []
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 63:
                raise ValueError(f"DSCP {f.name} = {v!r}: a code point is an integer 0..63")
            values.append(v)
        if len(set(values)) != len(values):
            raise ValueError(f"DSCP classes must be distinct: {self.to_dict()}")

    def to_dict(self) -> dict[str, int]:
        """``{class name: code point}`` (the fabric description's and mrcd's form)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, where: str = "dscp") -> DscpClasses:
        """From ``{class name: code point}``; absent classes keep their defaults.
        ``ValueError`` names an unknown class or a bad value."""
        if not d:
            return cls()
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object of class name -> code point")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"{where}: unknown DSCP class(es) {unknown}; known: {sorted(known)}")
        try:
            return cls(**d)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None


DEFAULT_DSCP = DscpClasses()
_classes = [DEFAULT_DSCP]


def set_dscp_classes(classes: DscpClasses) -> None:
    """Use ``classes`` in every codec of this process (the C module's too, when built)."""
    _classes[0] = classes
    from mrcnet.native import C

    if C is not None:
        C.mrc_set_dscps(classes.trimmable_retx, classes.trimmed, classes.trimmed_lasthop)


def dscp_classes() -> DscpClasses:
    """The classes in use (:data:`DEFAULT_DSCP` unless :func:`set_dscp_classes` said)."""
    return _classes[0]
