"""The core's events and completions as they travel from mrcd to its clients.

mrcd pushes a dataclass of :mod:`mrcnet.core.events` (``QPError``, ``PathStateChanged``,
``Completion`` ...) as JSON; the client turns it back into the same dataclass type, so
an application dispatches on the type (``match`` / ``isinstance``), never on a string.
One registry (:data:`TYPES`) names the types that travel; the codec is generic over
their fields: enums travel by value, every other field as JSON has it.

- an event: ``{"push": "event", "event": {"type": "<class name>", <field>: ...},
  "clock": t}``, ``t`` being mrcd's ``time.monotonic()`` in the loop pass that made it
  (one clock for every process on the machine: tools measure when a path changed);
- completions of one CQ: ``{"push": "wc", "cq": handle, "wcs": [[<field>, ...], ...]}``,
  one list of field values (in field order) per completion: the type is known, and a
  push carries up to hundreds of them.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from mrcnet.api.errors import ProtocolError
from mrcnet.core import events
from mrcnet.core.events import Completion, Event

__all__ = ["TYPES", "WC_FIELDS", "PeerInfo", "RemoteRegion", "StampedEvent", "WorkCompletion",
           "completions_push", "decode", "decode_completions", "encode", "event_push",
           "peer_info", "stamped_event"]

#: Every dataclass that travels from mrcd to a client, by the name that travels with it.
TYPES: Final[dict[str, type]] = {cls.__name__: cls for cls in (
    events.WriteCompleted, events.ImmediateReceived, events.QPError,
    events.PathStateChanged, events.PortStatusChanged, Completion)}

D = TypeVar("D")


@dataclass(frozen=True, slots=True)
class StampedEvent:
    """An event and when mrcd made it (:meth:`mrcnet.api.Context.get_stamped_event`)."""

    event: Event
    """The core's event, as the core made it."""
    clock: float
    """mrcd's ``time.monotonic()`` in the loop pass that made the event."""


class _Codec:
    """One registered type's fields, and how each field's value travels."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.name = cls.__name__
        self.names = tuple(f.name for f in dataclasses.fields(cls))
        self.values: Callable[[Any], tuple[Any, ...]] = operator.attrgetter(*self.names)
        hints = typing.get_type_hints(cls)
        # The fields whose value travels as an enum's value: (index, value -> member).
        # A dict, not the enum's constructor: a wc push rebuilds hundreds at a time.
        self.enums: tuple[tuple[int, dict[Any, enum.Enum]], ...] = tuple(
            (i, {m.value: m for m in e}) for i, e in
            ((i, _enum_of(hints[n])) for i, n in enumerate(self.names)) if e is not None)

    def encode_values(self, obj: Any) -> list[Any]:
        if not self.enums:
            return list(self.values(obj))
        return [v.value if isinstance(v, enum.Enum) else v for v in self.values(obj)]

    def decode_values(self, row: Iterable[Any]) -> Any:
        values = list(row)
        if len(values) != len(self.names):
            raise ValueError(f"{len(values)} values for the {len(self.names)} fields of "
                             f"{self.name}")
        for i, members in self.enums:
            v = values[i]
            if v is not None:
                try:
                    values[i] = members[v]
                except (KeyError, TypeError):
                    raise ValueError(f"{self.names[i]} {v!r} is not a known value") \
                        from None
        return self.cls(*values)


def _enum_of(hint: Any) -> type[enum.Enum] | None:
    """The enum of a field typed ``E`` or ``E | None``, else None."""
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint
    if isinstance(hint, types.UnionType):
        found = [a for a in typing.get_args(hint)
                 if isinstance(a, type) and issubclass(a, enum.Enum)]
        return found[0] if len(found) == 1 else None
    return None


_CODECS: Final[dict[type, _Codec]] = {cls: _Codec(cls) for cls in TYPES.values()}
_BY_NAME: Final[dict[str, _Codec]] = {c.name: c for c in _CODECS.values()}
_COMPLETION: Final = _CODECS[Completion]


def encode(obj: Any) -> dict[str, Any]:
    """A registered dataclass as a JSON object: ``{"type": <class name>, <field>: ...}``."""
    codec = _CODECS[type(obj)]
    return {"type": codec.name, **dict(zip(codec.names, codec.encode_values(obj),
                                           strict=True))}


def decode(body: dict[str, Any]) -> Any:
    """:func:`encode`'s object back as its dataclass (:class:`ProtocolError` if the type is
    not registered or a field is missing or wrong)."""
    codec = _BY_NAME.get(str(body.get("type")))
    if codec is None:
        raise ProtocolError(f"unknown event type {body.get('type')!r} from mrcd")
    try:
        return codec.decode_values(body[n] for n in codec.names)
    except (KeyError, TypeError, ValueError) as e:
        raise ProtocolError(f"malformed {codec.name} from mrcd: {e}") from None


def event_push(ev: Event, clock: float) -> dict[str, Any]:
    """The push message of one event, stamped with mrcd's ``clock``."""
    return {"push": "event", "event": encode(ev), "clock": clock}


def stamped_event(msg: dict[str, Any]) -> StampedEvent:
    """An event push (:func:`event_push`) as the client keeps it."""
    return StampedEvent(decode(msg["event"]), float(msg["clock"]))


def completions_push(handle: int, wcs: Iterable[Completion]) -> dict[str, Any]:
    """The push message of completions of CQ ``handle``."""
    encode_values = _COMPLETION.encode_values
    return {"push": "wc", "cq": handle, "wcs": [encode_values(c) for c in wcs]}


def decode_completions(rows: Iterable[Iterable[Any]],
                       build: Callable[[Completion], D]) -> list[D]:
    """The completions of a wc push, each given to ``build`` (the client's type)."""
    decode_values = _COMPLETION.decode_values
    try:
        return [build(decode_values(row)) for row in rows]
    except (TypeError, ValueError) as e:
        raise ProtocolError(f"malformed completion from mrcd: {e}") from None


# --- what the verbs client library (mrcnet.api.client) hands the application ------

@dataclass(frozen=True)
class RemoteRegion:
    """A peer's memory region this QP may write into (learnt when connecting)."""

    addr: int
    length: int
    rkey: int


@dataclass(frozen=True)
class PeerInfo:
    """The other end of a connected QP."""

    host: str
    qpn: int
    regions: tuple[RemoteRegion, ...]
    private: Any
    max_imm_outstanding: int


@dataclass(frozen=True)
class WorkCompletion:
    """One completion (verbs ``ibv_wc``): ``status`` is ``"SUCCESS"`` or an error name."""

    status: str
    wr_id: int
    opcode: str  #: "RDMA_WRITE" (requester) or "RECV_RDMA_WITH_IMM" (responder)
    byte_len: int
    imm: int | None
    qpn: int

    @property
    def ok(self) -> bool:
        """True for a successful completion."""
        return self.status == "SUCCESS"

    @classmethod
    def of(cls, c: Completion) -> WorkCompletion:
        """The core's completion as the application sees it (status and opcode by name)."""
        return cls(c.status.value, c.wr_id, c.opcode.value, c.byte_len, c.imm, c.qpn)


#: WorkCompletion's fields in order (a row's: :data:`~mrcnet.api.shmclient.Row`).
WC_FIELDS: Final = tuple(f.name for f in dataclasses.fields(WorkCompletion))


def peer_info(r: dict[str, Any]) -> PeerInfo:
    """The peer of a ``connect`` answer or a ``connected`` push."""
    return PeerInfo(
        host=r["peer"], qpn=r["peer_qpn"],
        regions=tuple(RemoteRegion(m["addr"], m["length"], m["rkey"]) for m in r["mrs"]),
        private=r.get("private"), max_imm_outstanding=r.get("max_imm", 0),
    )
