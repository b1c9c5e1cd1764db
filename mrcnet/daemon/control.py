"""The out-of-band control channel between mrcd instances (TCP, JSON lines, versioned).

Connecting a QP needs the peer QP's attributes, as RoCE needs rdma_cm or a socket
exchange. mrcd does it for the application: the connecting side's mrcd opens a TCP
connection to the peer's mrcd on the hosts' plain IPv6 addresses. Four lines, so that
neither side's first packet can find the other unready::

    A -> B  {"v": 1, "type": "connect", "src": "h0", "service": 1, "qpn": 17, "psn": 4660,
             "ev_profile": "spray", "cc_profile": "nscc", "max_imm": 64,
             "mrs": [{"addr": ..., "length": ..., "rkey": ...}], "private": <any JSON>,
             "token": <32 random bits: this side's half of the endpoint token>}
    B -> A  {"v": 1, "type": "accept", ...the same fields for B's QP}     (or "reject")
            A moves its QP to RTR (it can receive)
    A -> B  {"v": 1, "type": "ready"}
            B moves its QP to RTR and RTS; whatever it sends now finds A ready
    B -> A  {"v": 1, "type": "established"}                            (or "reject")
            A moves its QP to RTS and may send

A reject carries ``"reason"``. If the exchange stops before "ready", B gives the QP
back to its listener unchanged. A version other than :data:`CONTROL_VERSION` is rejected.

The same exchange with ``"service": -1`` (``PROBE_SERVICE`` in :mod:`mrcnet.daemon.verbs`)
is the *probe hello* of ``mrcctl probe``: B learns A's routes (so it answers A's EV probes
although no QP connects them) and accepts without a QP; no application may listen on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import structlog

from mrcnet.api.protocol import nesting_exceeds
from mrcnet.errors import MrcError

__all__ = ["ACCEPT_TIMEOUT", "CONTROL_VERSION", "Acceptance", "ConnectRequest", "ControlError",
           "ControlServer", "control_request", "pair_token"]

CONTROL_VERSION: Final = 1
MAX_LINE: Final = 1 << 16
#: JSON nesting a control line may have (a connect's private data is the deep part).
MAX_DEPTH: Final = 32
#: How long a connecting mrcd waits for the accept: the peer may hold a connect while
#: its listener arms a QP (its backlog, up to listens.ACCEPT_WAIT).
ACCEPT_TIMEOUT: Final = 10.0
#: A peer that sends nothing for this long is dropped (the exchange is one line each way).
IDLE_TIMEOUT: Final = 10.0

log = structlog.get_logger("mrcd.control")


class ControlError(MrcError):
    """The control exchange failed: peer unreachable, rejected, or a bad message."""


@dataclass(frozen=True)
class ConnectRequest:
    """One side's QP attributes as they travel (both the request and the accept)."""

    src: str
    qpn: int
    psn: int
    ev_profile: str
    cc_profile: str
    max_imm: int
    mrs: tuple[dict[str, int], ...]
    private: Any = None
    service: int = 0
    #: This side's half of the endpoint token (32 random bits; 0: none): the QP pair's
    #: token is both halves XORed (:func:`pair_token`), carried in ERTH's reserved word.
    token: int = 0

    def to_msg(self, kind: str) -> dict[str, Any]:
        """The JSON object of a ``connect`` or ``accept`` line."""
        return {"v": CONTROL_VERSION, "type": kind, "src": self.src, "service": self.service,
                "qpn": self.qpn, "psn": self.psn, "ev_profile": self.ev_profile,
                "cc_profile": self.cc_profile, "max_imm": self.max_imm,
                "mrs": list(self.mrs), "private": self.private, "token": self.token}

    @classmethod
    def from_msg(cls, msg: dict[str, Any]) -> ConnectRequest:
        """Check and convert a received line (ControlError when malformed)."""
        try:
            mrs = tuple({"addr": int(m["addr"]), "length": int(m["length"]),
                         "rkey": int(m["rkey"])} for m in msg["mrs"])
            req = cls(src=str(msg["src"]), qpn=int(msg["qpn"]), psn=int(msg["psn"]),
                      ev_profile=str(msg["ev_profile"]), cc_profile=str(msg["cc_profile"]),
                      max_imm=int(msg["max_imm"]), mrs=mrs, private=msg.get("private"),
                      service=int(msg.get("service", 0)), token=int(msg.get("token", 0)))
        except (KeyError, TypeError, ValueError) as e:
            raise ControlError(f"malformed control message: {e!r}") from None
        if not (0 <= req.qpn < 1 << 24 and 0 <= req.psn < 1 << 24 and req.max_imm >= 0
                and 0 <= req.token < 1 << 32):
            raise ControlError("control message field out of range (qpn, psn, max_imm or "
                               "token)")
        return req


def pair_token(mine: int, theirs: int) -> int | None:
    """The endpoint token of a QP pair from both sides' halves (None: the peer sent no
    half, an mrcd without endpoint tokens; never 0, which means "no token" on the wire)."""
    if not theirs:
        return None
    return (mine ^ theirs) or 1


def _encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def _decode(line: bytes) -> dict[str, Any]:
    if nesting_exceeds(line, MAX_DEPTH):  # before the parser recurses that deep
        raise ControlError(f"control line nested deeper than {MAX_DEPTH} levels")
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        raise ControlError("control line is not JSON") from None
    if not isinstance(msg, dict):
        raise ControlError("control line is not a JSON object")
    if msg.get("v") != CONTROL_VERSION:
        raise ControlError(f"control protocol version {msg.get('v')!r} is not supported "
                           f"(this mrcd speaks {CONTROL_VERSION})")
    return msg


class Acceptance:
    """What a connect handler decided: the accept to send, then either ``commit`` (the
    peer is ready: finish the connection) or ``abort`` (the exchange broke off)."""

    def __init__(self, reply: ConnectRequest, commit: Callable[[], None],
                 abort: Callable[[], None]) -> None:
        self.reply = reply
        self.commit = commit
        self.abort = abort


#: Handles a ``connect``: returns the acceptance, or raises ControlError (its text becomes
#: the reject reason).
ConnectHandler = Callable[[ConnectRequest], Awaitable[Acceptance]]


class ControlServer:
    """Listens for peers' connect requests and answers through ``handler``."""

    def __init__(self, handler: ConnectHandler, addresses: Sequence[str], port: int) -> None:
        self.handler = handler
        self.addresses = list(addresses) or ["::"]
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Bind and listen (OSError if the address is taken)."""
        self._server = await asyncio.start_server(self._serve, self.addresses, self.port,
                                                  limit=MAX_LINE, reuse_address=True)

    async def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            while True:
                line = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT)
                if not line:
                    break
                await self._exchange(line, reader, writer, peer)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, ValueError):
            pass  # a silent or broken peer: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _exchange(self, line: bytes, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter, peer: object) -> None:
        """One connect: accept, wait for ready, commit, established (or reject)."""
        acc: Acceptance | None = None
        try:
            msg = _decode(line)
            if msg.get("type") != "connect":
                raise ControlError(f"unexpected control message type {msg.get('type')!r}")
            req = ConnectRequest.from_msg(msg)
            acc = await self.handler(req)
            writer.write(_encode(acc.reply.to_msg("accept")))
            await writer.drain()
            ready = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT)
            if not ready:
                raise ConnectionError("peer left before ready")
            if _decode(ready).get("type") != "ready":
                raise ControlError("expected ready")
            acc.commit()
            acc = None
            writer.write(_encode({"v": CONTROL_VERSION, "type": "established"}))
            await writer.drain()
        except ControlError as e:
            if acc is not None:
                acc.abort()
            log.info("connect rejected", peer=peer, reason=str(e))
            writer.write(_encode({"v": CONTROL_VERSION, "type": "reject", "reason": str(e)}))
            await writer.drain()
        except BaseException:
            if acc is not None:
                acc.abort()
            raise


async def control_request(address: str, port: int, req: ConnectRequest,
                          on_accept: Callable[[ConnectRequest], None] | None = None,
                          timeout: float = 5.0,
                          accept_timeout: float | None = None) -> ConnectRequest:
    """Connect to the mrcd at ``address``: send ``req``, call ``on_accept`` with the peer's
    accept (move the QP to RTR there; raising ControlError aborts), then complete the
    handshake (``timeout`` for each step; ``accept_timeout``, if given, for the accept).
    Returns the accept, or raises :class:`ControlError` (unreachable,
    rejected, malformed)."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(address, port, limit=MAX_LINE), timeout)
    except (OSError, TimeoutError) as e:
        raise ControlError(f"cannot reach mrcd at [{address}]:{port}: {e}") from None
    where = f"mrcd at [{address}]:{port}"
    try:
        writer.write(_encode(req.to_msg("connect")))
        await writer.drain()
        remote = ConnectRequest.from_msg(_expect(
            await _line(reader, accept_timeout or timeout, where), "accept", where))
        if on_accept is not None:
            on_accept(remote)
        writer.write(_encode({"v": CONTROL_VERSION, "type": "ready"}))
        await writer.drain()
        _expect(await _line(reader, timeout, where), "established", where)
        return remote
    except (OSError, TimeoutError) as e:
        raise ControlError(f"{where} did not answer: {e!r}") from None
    finally:
        writer.close()


async def _line(reader: asyncio.StreamReader, timeout: float, where: str) -> dict[str, Any]:
    line = await asyncio.wait_for(reader.readline(), timeout)
    if not line:
        raise ControlError(f"{where} closed the connection")
    return _decode(line)


def _expect(msg: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
    if msg.get("type") == "reject":
        raise ControlError(f"peer refused: {msg.get('reason', '?')}")
    if msg.get("type") != kind:
        raise ControlError(f"unexpected control reply {msg.get('type')!r} from {where} "
                           f"(wanted {kind})")
    return msg
