"""The classic BPF program that lets only MRC frames reach a packet socket.

A packet socket bound to ETH_P_IPV6 would otherwise copy every IPv6 frame of the port
(neighbour discovery, MLD, the host's own TCP control channel...) into Python. The filter
runs in the kernel for each frame and accepts exactly the frames that look like MRC:

    EtherType IPv6
    outer next header  17 (UDP)                  -> UDP destination port 4791
                       41 (inner IPv6)           -> inner next header 17, UDP port 4791
                       43 (routing header, SRH)  -> skip it ((hdrlen + 1) * 8 bytes), then
                                                    17 or 41 as above

Only these three layouts exist in MRC's SRv6 mode (see mrcnet/wire/frame.py). Anything
else (other extension headers, fragments) is dropped. The filter is a pre-filter:
:func:`mrcnet.wire.frame.parse_frame` still checks every frame strictly.

:func:`mrc_filter` returns the program as ``(code, jt, jf, k)`` tuples;
:func:`attach_filter` installs it with SO_ATTACH_FILTER. The same program can be given
to ``tc filter ... bpf bytecode`` (:func:`tc_bytecode`).
"""

from __future__ import annotations

import ctypes
import socket
import struct
from typing import Final

from mrcnet.constants import (
    ETH_HEADER_LEN,
    ETH_P_IPV6,
    IPPROTO_IPV6,
    IPPROTO_ROUTING,
    IPPROTO_UDP,
    IPV6_HEADER_LEN,
    MRC_UDP_PORT,
)

__all__ = ["Insn", "attach_filter", "detach_filter", "mrc_filter", "tc_bytecode"]

#: One classic BPF instruction: (code, jt, jf, k), as ``struct sock_filter``.
Insn = tuple[int, int, int, int]

# <linux/filter.h> opcodes used here.
_LD_H_ABS: Final = 0x28  # A = u16 at [k]
_LD_B_ABS: Final = 0x30  # A = u8 at [k]
_LD_B_IND: Final = 0x50  # A = u8 at [X + k]
_LD_H_IND: Final = 0x48  # A = u16 at [X + k]
_LDX_IMM: Final = 0x01  # X = k
_ALU_ADD_K: Final = 0x04  # A += k
_ALU_LSH_K: Final = 0x64  # A <<= k
_TAX: Final = 0x07  # X = A
_JEQ_K: Final = 0x15  # jump if A == k
_RET_K: Final = 0x06  # return k

# <asm-generic/socket.h>
SO_ATTACH_FILTER: Final = 26
SO_DETACH_FILTER: Final = 27
SO_LOCK_FILTER: Final = 44

#: Bytes of an accepted frame to keep: all of it (more than any MTU).
ACCEPT_LEN: Final = 0x40000

_ETHERTYPE_OFF: Final = 12
_IP6_NH_OFF: Final = 6  # next header field within an IPv6 header
_OUTER_NH: Final = ETH_HEADER_LEN + _IP6_NH_OFF
_AFTER_OUTER: Final = ETH_HEADER_LEN + IPV6_HEADER_LEN  # 54: first byte after outer IPv6
_UDP_DPORT_OFF: Final = 2


_JA: Final = 0x05  # jump always by k


def _assemble(lines: list[tuple[str, int, str, str, int] | str]) -> list[Insn]:
    """Resolve labels: each line is ``"label:"`` or (name, code, jt_label, jf_label, k).

    Jumps are relative (instructions skipped), forward only, as classic BPF requires.
    """
    pos: dict[str, int] = {}
    insns: list[tuple[int, str, str, int]] = []
    for line in lines:
        if isinstance(line, str):
            pos[line.rstrip(":")] = len(insns)
        else:
            _name, code, jt, jf, k = line
            insns.append((code, jt, jf, k))
    prog: list[Insn] = []
    for i, (code, jt, jf, k) in enumerate(insns):
        jt_off = pos[jt] - i - 1 if jt else 0
        jf_off = pos[jf] - i - 1 if jf else 0
        if code == _JA:
            k, jt_off = pos[jt] - i - 1, 0
        prog.append((code, jt_off, jf_off, k))
    return prog


def mrc_filter(port: int = MRC_UDP_PORT) -> list[Insn]:
    """The filter program: accept MRC frames (UDP destination ``port``), drop the rest.

    Register X holds the length of the SRH (0 without one), so one tail checks UDP or
    inner IPv6 at ``54 + X``.
    """
    return _assemble([
        ("ethertype", _LD_H_ABS, "", "", _ETHERTYPE_OFF),
        ("is ipv6", _JEQ_K, "", "reject", ETH_P_IPV6),
        ("no srh", _LDX_IMM, "", "", 0),
        ("outer nh", _LD_B_ABS, "", "", _OUTER_NH),
        ("srh?", _JEQ_K, "", "dispatch", IPPROTO_ROUTING),
        # X = (SRH hdr ext len + 1) * 8; A = the SRH's next header
        ("srh len", _LD_B_ABS, "", "", _AFTER_OUTER + 1),
        ("+1", _ALU_ADD_K, "", "", 1),
        ("*8", _ALU_LSH_K, "", "", 3),
        ("X=len", _TAX, "", "", 0),  # then A = the SRH next header (its first byte)
        ("srh nh", _LD_B_ABS, "", "", _AFTER_OUTER),
        "dispatch:",  # A = next header of the header at 54 + X
        ("udp?", _JEQ_K, "udp", "", IPPROTO_UDP),
        ("inner?", _JEQ_K, "", "reject", IPPROTO_IPV6),
        ("inner nh", _LD_B_IND, "", "", _AFTER_OUTER + _IP6_NH_OFF),
        ("inner udp?", _JEQ_K, "", "reject", IPPROTO_UDP),
        ("inner dport", _LD_H_IND, "", "", _AFTER_OUTER + IPV6_HEADER_LEN + _UDP_DPORT_OFF),
        ("to check", _JA, "check", "", 0),
        "udp:",
        ("dport", _LD_H_IND, "", "", _AFTER_OUTER + _UDP_DPORT_OFF),
        "check:",
        ("mrc port?", _JEQ_K, "", "reject", port),
        ("accept", _RET_K, "", "", ACCEPT_LEN),
        "reject:",
        ("reject", _RET_K, "", "", 0),
    ])


def _fprog(prog: list[Insn]) -> tuple[bytes, ctypes.Array[ctypes.c_char]]:
    code = b"".join(struct.pack("HBBI", *insn) for insn in prog)
    buf = ctypes.create_string_buffer(code, len(code))
    # struct sock_fprog { unsigned short len; struct sock_filter *filter; }
    fprog = struct.pack("HL", len(prog), ctypes.addressof(buf))
    return fprog, buf  # the caller keeps buf alive until setsockopt copied it


def attach_filter(sock: socket.socket, prog: list[Insn] | None = None, *,
                  lock: bool = False) -> None:
    """Install ``prog`` (default: :func:`mrc_filter`) on ``sock`` with SO_ATTACH_FILTER.

    With ``lock`` the filter can no longer be changed (SO_LOCK_FILTER).
    """
    fprog, buf = _fprog(prog if prog is not None else mrc_filter())
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    del buf
    if lock:
        sock.setsockopt(socket.SOL_SOCKET, SO_LOCK_FILTER, 1)


def detach_filter(sock: socket.socket) -> None:
    """Remove the socket's filter (every frame of the bound protocol passes again)."""
    sock.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)


def tc_bytecode(prog: list[Insn] | None = None) -> str:
    """The program in ``tc filter ... bpf bytecode '<n>,<code jt jf k>,...'`` syntax."""
    p = prog if prog is not None else mrc_filter()
    return ",".join([str(len(p))] + [f"{c} {t} {f} {k}" for c, t, f, k in p])


def run_filter(prog: list[Insn], frame: bytes) -> int:
    """Interpret ``prog`` on ``frame`` in Python (for tests): the kernel's return value.

    Out-of-bounds loads return 0 (drop), as the kernel does.
    """
    a = x = 0
    pc = 0
    n = len(frame)
    while True:
        code, jt, jf, k = prog[pc]
        pc += 1
        if code in (_LD_H_ABS, _LD_H_IND, _LD_B_ABS, _LD_B_IND):
            off = k + (x if code in (_LD_H_IND, _LD_B_IND) else 0)
            size = 2 if code in (_LD_H_ABS, _LD_H_IND) else 1
            if off + size > n:
                return 0
            a = int.from_bytes(frame[off : off + size], "big")
        elif code == _LDX_IMM:
            x = k
        elif code == _ALU_ADD_K:
            a = (a + k) & 0xFFFFFFFF
        elif code == _ALU_LSH_K:
            a = (a << k) & 0xFFFFFFFF
        elif code == _TAX:
            x = a
        elif code == _JA:
            pc += k
        elif code == _JEQ_K:
            pc += jt if a == k else jf
        elif code == _RET_K:
            return k
        else:
            raise ValueError(f"unsupported BPF opcode {code:#x}")
