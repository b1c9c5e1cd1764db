"""Every numeric #define of mrcnet/_csrc against the Python value of the same meaning.

A C file cannot import mrcnet.constants, so the C sources spell protocol values out; this
is the one place that checks each of them. It reads the sources (no compiled module
needed), so it runs with and without C; a new #define fails it until it is listed here,
with its Python twin or as internal to the C code. With the C module built, the
#defines cffi exposes are also read back through it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mrcnet import constants as K
from mrcnet.api import shmclient, shmqueues, shmring
from mrcnet.core import cc, evs, laneplane, recovery, responder, rxlane, sackrec, txtable
from mrcnet.core.ctrl import NO_TS
from mrcnet.core.events import WCOpcode, WCStatus
from mrcnet.core.seqnum import MSN_MASK
from mrcnet.errors import MalformedReason
from mrcnet.native import HAVE_C, C
from mrcnet.sim import net as sim_net
from mrcnet.wire import bth, icrc, seth, template
from mrcnet.wire.neth import NETH
from mrcnet.wire.parsed import PARSE_REASONS, VERIFY_ALL

CSRC = Path(__file__).resolve().parents[1] / "mrcnet" / "_csrc"
_DEFINE = re.compile(r"^#define\s+([A-Z_][A-Z0-9_]*)\s+(\S.*?)\s*(?:/\*.*)?$", re.M)

_MRC_CODES = {f"MRC_{r.name}": i for i, r in enumerate(PARSE_REASONS) if r is not None}
_MRC_CODES["MRC_OK"] = 0

#: (file, #define) -> the Python value it must equal.
PYTHON: dict[tuple[str, str], float] = {
    **{("parsed.h", n): v for n, v in _MRC_CODES.items()},
    ("parsed.h", "MRC_VERIFY_ICRC"): 1,
    ("parsed.h", "MRC_VERIFY_CHECKSUM"): 2,
    ("parsed.c", "ETH_LEN"): K.ETH_HEADER_LEN,
    ("parsed.c", "ETH_P_IPV6"): K.ETH_P_IPV6,
    ("parsed.c", "ETH_MIN_FRAME"): 60,  # mrcnet/wire/frame.py _ETH_MIN_FRAME
    ("parsed.c", "IP6_LEN"): K.IPV6_HEADER_LEN,
    ("parsed.c", "NH_ROUTING"): K.IPPROTO_ROUTING,
    ("parsed.c", "NH_IPV6"): K.IPPROTO_IPV6,
    ("parsed.c", "NH_UDP"): K.IPPROTO_UDP,
    ("parsed.c", "SRH_FIXED"): K.SRH_FIXED_LEN,
    ("parsed.c", "SRH_TYPE"): K.SRH_ROUTING_TYPE,
    ("parsed.c", "UDP_LEN"): K.UDP_HEADER_LEN,
    ("parsed.c", "UDP_PORT"): K.MRC_UDP_PORT,
    ("parsed.c", "BTH_LEN"): K.BTH_LEN,
    ("parsed.c", "ICRC_LEN"): K.ICRC_LEN,
    ("parsed.c", "DSCP_TRIMMED"): K.DSCP_TRIMMED,
    ("parsed.c", "DSCP_TRIMMED_LASTHOP"): K.DSCP_TRIMMED_LASTHOP,
    ("parsed.c", "DSCP_TRIMMABLE_RETX"): K.DSCP_TRIMMABLE_RETX,
    ("template.c", "BTH_F_RTX"): K.BTH_F_RTX,
    ("parsed.c", "ECN_CE"): K.ECN.CE,
    ("parsed.c", "ENDPOINT_QPN"): K.ENDPOINT_QPN,
    ("parsed.c", "METH_LEN"): K.METH_LEN,
    ("parsed.c", "TSETH_LEN"): K.TSETH_LEN,
    ("parsed.c", "RETH_LEN"): K.RETH_LEN,
    ("parsed.c", "IMMDT_LEN"): K.IMMDT_LEN,
    ("parsed.c", "AETH_LEN"): K.AETH_LEN,
    ("parsed.c", "SETH_LEN"): K.SETH_LEN,
    ("parsed.c", "CC_LEN"): K.CCSTATE_LEN,
    ("parsed.c", "NETH_LEN"): K.NETH_LEN,
    ("parsed.c", "PETH_LEN"): K.PETH_LEN,
    ("parsed.c", "ERTH_LEN"): K.ERTH_LEN,
    ("parsed.c", "EETH_LEN"): K.EETH_LEN,
    ("parsed.c", "SACK_MODE_MAX"): max(K.SackMode),
    ("parsed.c", "TS_TSR_BIT"): K.TS_TSR_BIT,
    ("parsed.c", "TS_FTYPE_MASK"): K.TS_FTYPE_MASK,
    ("parsed.c", "BTH_F_ACKREQ"): bth.F_ACKREQ,
    ("parsed.c", "BTH_F_R"): bth.F_R,
    ("parsed.c", "BTH_F_RTX"): bth.F_RTX,
    ("parsed.c", "BTH_F_TS"): bth.F_TS,
    ("rxlane.c", "PSN_MASK"): K.PSN_MASK,
    ("rxlane.c", "PSN_HALF"): K.PSN_MOD // 2,
    ("rxlane.c", "SACK_BITMAP_BITS"): K.SACK_BITMAP_BITS,
    ("rxlane.c", "ENDPOINT_QPN"): K.ENDPOINT_QPN,
    ("rxlane.c", "S16_MAX"): (1 << 15) - 1,
    ("rxlane.c", "EV_PLANE_SHIFT"): K.EV_PLANE_SHIFT,
    ("rxlane.c", "EV_PLANE_MASK"): K.EV_PLANE_MASK,
    ("rxlane.c", "EV_PATH_SHIFT"): K.EV_PATH_SHIFT,
    ("rxlane.c", "EV_PATH_MASK"): K.EV_PATH_MASK,
    ("rxlane.c", "BTH_LEN"): K.BTH_LEN,
    ("rxlane.c", "NETH_LEN"): NETH.LEN,
    ("rxlane.c", "NACK_TRIMMED"): K.NackReason.TRIMMED,
    ("rxlane.c", "NACK_TRIMMED_LASTHOP"): K.NackReason.TRIMMED_LASTHOP,
    ("rxlane.c", "CC_TYPE_NACK"): K.CC_TYPE_NACK,
    ("rxlane.c", "WINDOW_PENALTY_MAX"): K.WINDOW_PENALTY_MAX,
    ("rxlane.c", "PENALTY_PER_LASTHOP_TRIM"): responder._PENALTY_PER_LASTHOP_TRIM,
    ("rxlane.c", "SACK_SKIP_ONCE"): K.SackMode.SKIP_ONCE,
    ("rxlane.c", "SETH_PR"): seth.SETH_PR,
    ("rxlane.c", "OOO_COUNT_MAX"): K.OOO_COUNT_MAX,
    ("rxlane.c", "RX_NO_TS"): NO_TS,
    ("rxlane.c", "ETH_LEN"): K.ETH_HEADER_LEN,
    ("rxlane.c", "SETH_LEN"): K.SETH_LEN,
    ("rxlane.c", "CC_LEN"): K.CCSTATE_LEN,
    ("rxlane.c", "RX_LATE_WINDOW"): rxlane.RX_LATE_WINDOW,
    ("rxlane.h", "MRC_RX_UNREP_MAX"): rxlane.RX_UNREP_MAX,
    ("rxlane.h", "MRC_RX_PEERS_MAX"): rxlane.RX_PEERS_MAX,
    ("rxlane.h", "MRC_RX_PLANE_ROUTES"): laneplane.RX_PLANE_ROUTES,
    ("rxlane.h", "MRC_RX_END"): rxlane.RX_END,
    ("rxlane.h", "MRC_RX_SACK"): rxlane.RX_SACK,
    ("rxlane.h", "MRC_RX_STOP"): rxlane.RX_STOP,
    ("rxlane.h", "MRC_RX_SACKS"): rxlane.RX_SACKS,
    ("rxlane.h", "MRC_RX_ACKS"): rxlane.RX_ACKS,
    ("rxlane.h", "MRC_RX_DONE"): rxlane.RX_DONE,
    ("rxlane.h", "MRC_RX_IMM"): rxlane.RX_IMM,
    ("rxlane.h", "MRC_RX_ACKAT"): rxlane.RX_ACKAT,
    ("rxlane.h", "MRC_RX_POS_SHIFT"): rxlane.RX_POS_SHIFT,
    ("rxlane.h", "MRC_RX_IMM_HELD"): rxlane.RX_IMM_HELD,
    ("rxlane.h", "MRC_RX_IMM_ALONE"): rxlane.RX_IMM_ALONE,
    ("rxlane.h", "MRC_RX_IMM_SACKED"): rxlane.RX_IMM_SACKED,
    ("rxlane.c", "MSN_MASK"): MSN_MASK,
    ("rxlane.h", "MRC_RX_ACK_INTS"): rxlane.RX_ACK_INTS,
    ("rxlane.h", "MRC_RX_IMM_INTS"): rxlane.RX_IMM_INTS,
    ("rxlane.h", "MRC_RX_SACK_MAX"): rxlane.RX_SOUT_BYTES // rxlane.RX_SOUT_MAX,
    **{("rxlane.h", f"MRC_RX_WHY_{n}"): getattr(rxlane, f"WHY_{n}")
       for n in ("NONE", "PARSE", "OTHER", "PEER", "WINDOW", "MR_MISS", "MR_BAD", "DUP",
                 "TRIMMED", "IMM", "FULL", "DELIVER", "SHORT", "ACK")},
    ("template.h", "MRC_EXT_IMM"): template.EXT_IMM,
    ("template.h", "MRC_EXT_TSETH"): template.EXT_TSETH,
    ("template.c", "IP6_LEN"): K.IPV6_HEADER_LEN,
    ("template.c", "UDP_LEN"): K.UDP_HEADER_LEN,
    ("template.c", "METH_LEN"): K.METH_LEN,
    ("template.c", "TSETH_LEN"): K.TSETH_LEN,
    ("template.c", "RETH_LEN"): K.RETH_LEN,
    ("template.c", "IMMDT_LEN"): K.IMMDT_LEN,
    ("template.c", "TS_FORMAT_TYPE"): K.TS_FORMAT_TYPE,
    ("icrc.c", "IP6_LEN"): K.IPV6_HEADER_LEN,
    ("icrc.c", "UDP_LEN"): K.UDP_HEADER_LEN,
    ("icrc.c", "BTH_LEN"): K.BTH_LEN,
    # the CRC's raw state after the 8 bytes of 0xff (zlib's value without its inversion)
    ("icrc.c", "ICRC_PREFIX"): icrc._PREFIX_CRC ^ 0xFFFFFFFF,
    ("txtable.h", "MRC_TX_LIVE"): txtable.LIVE,
    ("txtable.h", "MRC_TX_INFL"): txtable.INFL,
    ("txtable.h", "MRC_TX_PEND"): txtable.PEND,
    ("txtable.h", "MRC_TX_LOGGED"): txtable.LOGGED,
    ("cc.c", "TARGET_FRACTION"): cc.NSCC_TARGET_FRACTION,
    ("cc.c", "TARGET_FLOOR"): cc.NSCC_TARGET_FLOOR,
    ("cc.c", "MAX_BDP"): cc.NSCC_MAX_BDP,
    ("cc.c", "ALPHA"): cc.NSCC_ALPHA,
    ("cc.c", "FI_BDP"): cc.NSCC_FI_BDP,
    ("cc.c", "GAMMA"): cc.NSCC_GAMMA,
    ("cc.c", "MD_MIN"): cc.NSCC_MD_MIN,
    ("cc.c", "QA_DELAY"): cc.NSCC_QA_DELAY,
    ("cc.c", "PENALTY_SCALE"): cc.PENALTY_SCALE,
    **{("cc.h", f"MRC_NSCC_{n}"): i
       for i, n in enumerate(("NONE", "PI", "FI", "MD", "NC", "QA"))},
    # The sender's SACK decisions (sackrec.c; mrcnet/core/recovery.py, evs.py)
    ("sackrec.c", "EV_PATH_SHIFT"): K.EV_PATH_SHIFT,
    ("sackrec.c", "SACK_ALWAYS_SKIP"): K.SackMode.ALWAYS_SKIP,
    ("sackrec.c", "OP_WRITE_LAST"): K.Opcode.WRITE_LAST,
    ("sackrec.c", "OP_WRITE_LAST_IMM"): K.Opcode.WRITE_LAST_IMM,
    ("sackrec.c", "OP_WRITE_ONLY"): K.Opcode.WRITE_ONLY,
    ("sackrec.c", "OP_WRITE_ONLY_IMM"): K.Opcode.WRITE_ONLY_IMM,
    ("sackrec.c", "RTT_ALPHA"): evs.RTT_ALPHA,
    ("sackrec.c", "RTT_BETA"): evs.RTT_BETA,
    ("sackrec.c", "REO_DECAY_BYTES"): recovery.REO_DECAY_BYTES,
    ("sackrec.c", "REO_DECAY_RTTS"): recovery.REO_DECAY_RTTS,
    ("sackrec.c", "ACK_INTS"): rxlane.RX_ACK_INTS,
    ("sackrec.c", "REO_SCALED_CAP_RTTS"): recovery.REO_SCALED_CAP_RTTS,
    **{("sackrec.h", f"MRC_SACK_{n}"): getattr(sackrec, f"SACK_{n}")
       for n in ("INDEX", "ACKED", "SKIP", "STALE", "REO", "OOM")},
    # The simulator's network (simnet.c) and its Python twin (mrcnet/sim/net.py)
    ("simnet.c", "TC_HI"): sim_net._TC_HI,
    ("simnet.c", "TC_LO"): sim_net._TC_LO,
    ("simnet.c", "NEXT_HEADER"): sim_net._NEXT_HEADER,
    ("simnet.c", "HOP_LIMIT"): sim_net._HOP_LIMIT,
    ("simnet.c", "DA"): sim_net._DA,
    ("simnet.c", "ROUTING"): K.IPPROTO_ROUTING,
    ("simnet.c", "ECN_MASK"): sim_net._ECN_MASK,
    ("simnet.c", "CE"): sim_net._CE,
    ("simnet.c", "ICRC"): sim_net._ICRC,
    ("simnet.c", "TIE"): sim_net._TIE,
    # A shared-memory ring's header (shmring.c; mrcnet/api/shmring.py)
    ("shmring.c", "OFF_HEAD"): shmring.OFF_HEAD,
    ("shmring.c", "OFF_TAIL"): shmring.OFF_TAIL,
    ("shmring.c", "OFF_ASLEEP"): shmring.OFF_ASLEEP,
    ("shmring.c", "OFF_BLOCKED"): shmring.OFF_BLOCKED,
    ("shmring.c", "RING_HEADER"): shmring.HEADER,
    # A completion's slot (shmqueues.c; mrcnet/api/shmqueues.py)
    ("shmqueues.h", "MRC_CQ_SLOT"): shmqueues.CQ_SLOT,
    ("shmqueues.h", "MRC_WC_SUCCESS"): shmqueues.STATUSES.index(WCStatus.SUCCESS),
    ("shmqueues.h", "MRC_WC_RECV_RDMA_WITH_IMM"):
        shmqueues.OPCODES.index(WCOpcode.RECV_RDMA_WITH_IMM),
    ("shmqueues.h", "MRC_WC_F_IMM"): shmqueues.F_IMM,
    ("shmqueues.h", "MRC_DOORBELL"): shmclient.DOORBELL[0],
    ("rxlane.h", "MRC_RX_IMM_WRITTEN_SHIFT"): rxlane.RX_IMM_WRITTEN_SHIFT,
    ("rxlane.h", "MRC_RX_IMM_RANG"): rxlane.RX_IMM_RANG,
    ("rxlane.h", "MRC_RX_IMM_BELL"): rxlane.RX_IMM_BELL,
}

#: #defines with no Python twin: sizes and markers internal to the C code.
C_ONLY = {
    ("template.h", "MRC_TMPL_HDR_MAX"),  # a template's header bytes (checked at use)
    ("txtable.h", "MRC_TX_NO_PATH"),  # "no path" key of the table's path slots
    ("sender.h", "MRC_SEND_MAX"),  # packets per mrc_send_run / mrc_send_msgs call
    ("template.h", "MRC_GATHER_MIN"),  # payloads sent from where they lie (read via cffi)
    ("batch.h", "MRC_SENDQ_IOV"),  # iovecs a queued frame may take (read via cffi)
    ("checksum.c", "HAVE_X86_AVX2"),
    ("crc32.c", "HAVE_X86_CLMUL"),
    ("simnet.c", "SET_LEN"),  # marks an address-set entry in the route table
    ("recvq.c", "RECVQ_FIRST"),  # slots of a new queue of posted receives
    # what stopped simnet_run (read back through cffi by mrcnet/sim/simnet.py)
    *(("simnet.h", f"SIMNET_{n}")
      for n in ("EMPTY", "PY", "HOST", "LIMIT", "BUDGET", "ERROR", "NOMEM", "WHY_MASK",
                "HPORT_SHIFT", "HPORT_MAX", "HOST_SHIFT", "HOST_MAX")),
}


def _value(text: str) -> float | None:
    """A #define's value if it is a number (or a shift of numbers), else None."""
    t = re.sub(r"(?<=[0-9a-fA-F])(?:[uU]?[lL]{0,2}|[lL]{1,2}[uU]?)\b", "", text)
    m = re.fullmatch(r"\(\s*(\w+)\s*<<\s*(\w+)\s*\)", t)
    if m:
        return int(m.group(1), 0) << int(m.group(2), 0)
    try:
        return int(t, 0)
    except ValueError:
        try:
            return float(t)
        except ValueError:
            return None


def _defines() -> dict[tuple[str, str], float]:
    out = {}
    for path in sorted([*CSRC.glob("*.c"), *CSRC.glob("*.h")]):
        for name, text in _DEFINE.findall(path.read_text()):
            v = _value(text)
            if v is not None and not name.startswith("MRCNET_"):
                out[(path.name, name)] = v
    return out


def test_every_numeric_define_has_its_python_value() -> None:
    defines = _defines()
    unknown = sorted(set(defines) - set(PYTHON) - C_ONLY)
    assert not unknown, f"#defines with no Python twin listed here: {unknown}"
    wrong = {k: (v, PYTHON[k]) for k, v in defines.items() if k in PYTHON and v != PYTHON[k]}
    assert not wrong, f"C value != Python value: {wrong}"
    gone = sorted(set(PYTHON) - set(defines))
    assert not gone, f"listed here but no longer in the C sources: {gone}"


def test_parse_reasons_cover_every_malformed_reason_once() -> None:
    reasons = [r for r in PARSE_REASONS if r is not None]
    assert PARSE_REASONS[0] is None
    assert sorted(reasons, key=lambda r: r.value) == sorted(set(reasons), key=lambda r: r.value)
    assert set(reasons) <= set(MalformedReason)
    both = int(PYTHON[("parsed.h", "MRC_VERIFY_ICRC")]) | int(
        PYTHON[("parsed.h", "MRC_VERIFY_CHECKSUM")])
    assert both == VERIFY_ALL


@pytest.mark.skipif(not HAVE_C, reason="C fast path not built")
def test_compiled_module_exposes_the_same_values() -> None:
    for (_f, name), v in PYTHON.items():
        if name.startswith("MRC_") and hasattr(C, name):
            assert getattr(C, name) == v, name
    assert C.MRC_TMPL_HDR_MAX >= 128
