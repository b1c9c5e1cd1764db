"""The switch egress BPF program: compile it (cached) and talk to its maps.

The C source is ``bpf/mrc_switch.c``. It is compiled with clang when a fabric comes up,
into a cache keyed by the hash of everything that goes into the object (source, flags,
clang version), so the second fabric reuses the first one's object.

tc attaches one instance per link end; each instance owns three single-entry maps
(config, virtual queue, per-CPU counters). We reach them by id through the bpf(2)
syscall (ctypes; bpftool is not installed on these machines and one process per map
read would make ``status`` slow): prog id (from ``tc -j filter show``) -> map ids.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from mrcnet.constants import MRC_UDP_PORT
from mrcnet.fabric.errors import FabricError, ToolMissing
from mrcnet.fabric.nsutil import require_tool
from mrcnet.wire.dscp import DEFAULT_DSCP, DscpClasses

SOURCE_NAME = "mrc_switch.c"
EGRESS_SECTION = "tc"
INGRESS_SECTION = "classifier/host_ingress"

# Flags of struct link_cfg (keep in sync with mrc_switch.c).
F_ECN = 1
F_BLACKHOLE = 2
F_TRIM = 4
F_LASTHOP = 8  # a leaf's port to a host: trims are marked TRIMMED_LASTHOP

CFG_FMT = "<QIIIIII"  # rate_Bps trim_thresh ecn_thresh drop_thresh trim_size loss_ppm flags
VQ_FMT = "<QQ"  # backlog (at the last frame) busy_ns (when the virtual queue empties)
CNT_FMT = "<5Q"  # pkts bytes drops trims ce
CNT_FIELDS = ("pkts", "bytes", "drops", "trims", "ce")

_NR_BPF = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "ppc64le": 361, "s390x": 351}
_BPF_MAP_LOOKUP_ELEM = 1
_BPF_MAP_UPDATE_ELEM = 2
_BPF_PROG_GET_FD_BY_ID = 13
_BPF_MAP_GET_FD_BY_ID = 14
_BPF_OBJ_GET_INFO_BY_FD = 15

_libc = ctypes.CDLL(None, use_errno=True)


def cache_dir() -> Path:
    """Where compiled objects live (env MRC_FABRIC_BPF_CACHE overrides)."""
    env = os.environ.get("MRC_FABRIC_BPF_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mrcnet" / "bpf"


def _source() -> bytes:
    return resources.files("mrcnet.fabric").joinpath("bpf").joinpath(SOURCE_NAME).read_bytes()


def compile_object(dscp: DscpClasses = DEFAULT_DSCP) -> Path:
    """Compile ``mrc_switch.c`` with clang for the fabric's DSCP classes (or reuse the
    cached object); return its path."""
    clang = require_tool("clang", "clang")
    src = _source()
    defines = [
        f"-DMRC_DSCP_TRIMMED={dscp.trimmed}",
        f"-DMRC_DSCP_TRIMMED_LASTHOP={dscp.trimmed_lasthop}",
        f"-DMRC_DSCP_NO_TRIM={dscp.no_trim}",
        f"-DMRC_DSCP_CONTROL={dscp.control}",
        f"-DMRC_UDP_PORT={MRC_UDP_PORT}",
    ]
    multiarch = Path(f"/usr/include/{platform.machine()}-linux-gnu")
    includes = [f"-I{multiarch}"] if multiarch.is_dir() else []
    flags = ["-target", "bpf", "-O2", "-g", *defines, *includes]
    version = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256(src + "\0".join([*flags, version]).encode()).hexdigest()[:16]
    out = cache_dir() / f"mrc_switch-{key}.o"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mrcbpf") as tmp:
        c_file = Path(tmp) / SOURCE_NAME
        c_file.write_bytes(src)
        tmp_obj = Path(tmp) / "out.o"
        p = subprocess.run(
            [clang, *flags, "-c", str(c_file), "-o", str(tmp_obj)], capture_output=True, text=True
        )
        if p.returncode != 0:
            hint = ""
            if "bpf/bpf_helpers.h" in p.stderr:
                hint = " (install libbpf-dev)"
            raise ToolMissing(f"clang could not compile {SOURCE_NAME}{hint}: {p.stderr.strip()}")
        # Rename within the cache dir: concurrent compilers never see a partial object.
        staged = out.with_suffix(f".{os.getpid()}.tmp")
        staged.write_bytes(tmp_obj.read_bytes())
        os.replace(staged, out)
    return out


# --- bpf(2) -------------------------------------------------------------------------------
def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    nr = _NR_BPF.get(platform.machine())
    if nr is None:
        raise FabricError(f"bpf syscall number unknown on {platform.machine()}")
    ret = int(_libc.syscall(nr, cmd, ctypes.byref(attr), ctypes.sizeof(attr)))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def _attr(payload: bytes) -> ctypes.Array[ctypes.c_char]:
    buf = ctypes.create_string_buffer(128)
    ctypes.memmove(buf, payload, len(payload))
    return buf


def _fd_by_id(cmd: int, obj_id: int) -> int:
    return _bpf(cmd, _attr(struct.pack("<III", obj_id, 0, 0)))


def _info(fd: int, size: int, prefill: bytes = b"") -> bytes:
    info = ctypes.create_string_buffer(size)
    ctypes.memmove(info, prefill, len(prefill))
    _bpf(_BPF_OBJ_GET_INFO_BY_FD, _attr(struct.pack("<IIQ", fd, size, ctypes.addressof(info))))
    return info.raw


def prog_map_ids(prog_id: int) -> list[int]:
    """The ids of the maps a loaded program uses."""
    fd = _fd_by_id(_BPF_PROG_GET_FD_BY_ID, prog_id)
    try:
        ids = (ctypes.c_uint32 * 8)()
        # struct bpf_prog_info: nr_map_ids at offset 52, map_ids pointer at 56.
        pre = bytearray(64)
        struct.pack_into("<IQ", pre, 52, 8, ctypes.addressof(ids))
        raw = _info(fd, 256, bytes(pre))
        n = struct.unpack_from("<I", raw, 52)[0]
        return [int(ids[i]) for i in range(min(n, 8))]
    finally:
        os.close(fd)


def map_name(map_id: int) -> tuple[str, int]:
    """(name, value_size) of a map."""
    fd = _fd_by_id(_BPF_MAP_GET_FD_BY_ID, map_id)
    try:
        raw = _info(fd, 128)
        value_size = struct.unpack_from("<I", raw, 12)[0]
        name = raw[24:40].split(b"\0", 1)[0].decode()
        return name, value_size
    finally:
        os.close(fd)


def _possible_cpus() -> int:
    text = Path("/sys/devices/system/cpu/possible").read_text().strip()
    count = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        count += int(hi or lo) - int(lo) + 1
    return count


def _lookup(map_id: int, value_len: int) -> bytes:
    fd = _fd_by_id(_BPF_MAP_GET_FD_BY_ID, map_id)
    try:
        key = ctypes.c_uint32(0)
        val = ctypes.create_string_buffer(value_len)
        _bpf(
            _BPF_MAP_LOOKUP_ELEM,
            _attr(struct.pack("<IIQQQ", fd, 0, ctypes.addressof(key), ctypes.addressof(val), 0)),
        )
        return val.raw
    finally:
        os.close(fd)


def _update(map_id: int, value: bytes) -> None:
    fd = _fd_by_id(_BPF_MAP_GET_FD_BY_ID, map_id)
    try:
        key = ctypes.c_uint32(0)
        val = ctypes.create_string_buffer(value, len(value))
        _bpf(
            _BPF_MAP_UPDATE_ELEM,
            _attr(struct.pack("<IIQQQ", fd, 0, ctypes.addressof(key), ctypes.addressof(val), 0)),
        )
    finally:
        os.close(fd)


@dataclass
class LinkConfig:
    """What one link end's egress program does (struct link_cfg)."""

    rate_Bps: int = 0
    trim_thresh: int = 0
    ecn_thresh: int = 0
    drop_thresh: int = 0
    trim_size: int = 256
    loss_ppm: int = 0
    flags: int = 0

    def pack(self) -> bytes:
        """The map value bytes."""
        return struct.pack(
            CFG_FMT,
            self.rate_Bps,
            self.trim_thresh,
            self.ecn_thresh,
            self.drop_thresh,
            self.trim_size,
            self.loss_ppm,
            self.flags,
        )

    @classmethod
    def unpack(cls, raw: bytes) -> LinkConfig:
        """Inverse of :meth:`pack`."""
        return cls(*struct.unpack_from(CFG_FMT, raw))


@dataclass(frozen=True)
class LinkMaps:
    """Map ids of one attached egress program."""

    prog_id: int
    cfg: int
    vq: int
    cnt: int

    @classmethod
    def from_prog(cls, prog_id: int, counters_only: bool = False) -> LinkMaps:
        """Find the program's maps by name (the host ingress program has only counters)."""
        found: dict[str, int] = {}
        for mid in prog_map_ids(prog_id):
            name, _ = map_name(mid)
            found[name] = mid
        try:
            if counters_only:
                return cls(prog_id, 0, 0, found["mrc_cnt"])
            return cls(prog_id, found["mrc_cfg"], found["mrc_vq"], found["mrc_cnt"])
        except KeyError as e:
            raise FabricError(f"bpf program {prog_id} lacks map {e}") from e

    def read_config(self) -> LinkConfig:
        """Current configuration."""
        return LinkConfig.unpack(_lookup(self.cfg, struct.calcsize(CFG_FMT)))

    def write_config(self, cfg: LinkConfig) -> None:
        """Replace the configuration (takes effect on the next frame)."""
        _update(self.cfg, cfg.pack())

    def read_counters(self) -> dict[str, int]:
        """Counters summed over CPUs."""
        size = struct.calcsize(CNT_FMT)
        stride = (size + 7) & ~7
        ncpu = _possible_cpus()
        raw = _lookup(self.cnt, stride * ncpu)
        total = [0] * len(CNT_FIELDS)
        for cpu in range(ncpu):
            for i, v in enumerate(struct.unpack_from(CNT_FMT, raw, cpu * stride)):
                total[i] += v
        return dict(zip(CNT_FIELDS, total, strict=True))

    def read_backlog(self) -> int:
        """Virtual queue backlog in bytes at the last frame."""
        return int(struct.unpack_from(VQ_FMT, _lookup(self.vq, struct.calcsize(VQ_FMT)))[0])
