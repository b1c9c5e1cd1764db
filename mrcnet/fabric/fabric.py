"""The :class:`Fabric` API: bring a fabric up, break it on purpose, observe it, remove it.

    with Fabric.up("leafspine:planes=2,spines=2,leaves=2,hosts=1", name="demo") as fab:
        fab.link("L0.0", "S0.1").blackhole()
        print(fab.status()["links"][0])
        fab.exec("h0", ["ip", "-6", "route"], check=True)

Every namespace is recorded in the state file *before* it is created; ``down`` deletes
exactly the recorded ones that exist, so it also cleans up after a builder that died.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from mrcnet.fabric import plan
from mrcnet.fabric.bpfmap import F_BLACKHOLE, LinkMaps, compile_object
from mrcnet.fabric.errors import FabricError
from mrcnet.fabric.nsutil import (
    Batch,
    check_privileges,
    delete_netns,
    in_netns,
    ip_batch,
    json_stream,
    netns_exists,
    require_tool,
    run_batches,
    tc_batch,
    write_sysctls,
)
from mrcnet.fabric.seg6nl import SEG6_LOCAL_ACTION_END, seg6local_routes
from mrcnet.fabric.spec import FabricSpec, allocate, parse_spec, resolve, validate_name
from mrcnet.fabric.state import (
    ProcRecord,
    StateRecord,
    fabric_dir,
    fabric_lock,
    global_lock,
    list_names,
    proc_start_time,
    used_fabric_ids,
)
from mrcnet.topology.description import FabricDescription, Link, load, save
from mrcnet.topology.spec import TopologySpec

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def _key(node: str, ifname: str) -> str:
    return f"{node}/{ifname}"


def _pick_fabric_id(name: str) -> int:
    used = used_fabric_ids()
    fid = zlib.crc32(name.encode()) & 0xFFFF
    for _ in range(0x10000):
        if fid and fid not in used:
            return fid
        fid = (fid + 1) & 0xFFFF
    raise FabricError("no free fabric id: remove some fabrics first")


class _TermAsInterrupt:
    """Turn SIGTERM into KeyboardInterrupt during bring-up so cleanup still runs."""

    def __enter__(self) -> None:
        self._old: Any = None
        try:
            self._old = signal.signal(signal.SIGTERM, self._handler)
        except ValueError:  # not the main thread: leave signals alone
            self._old = None

    @staticmethod
    def _handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


class Fabric:
    """A running fabric: its description, its state record, and operations on it."""

    def __init__(self, description: FabricDescription, record: StateRecord) -> None:
        self.description = description
        self.record = record

    # --- lifecycle ----------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The fabric's name."""
        return self.description.name

    @property
    def description_path(self) -> Path:
        """Path of the JSON description file mrcd reads."""
        return fabric_dir(self.name) / "description.json"

    @classmethod
    def up(
        cls,
        spec: str | FabricSpec | TopologySpec,
        name: str,
        progress: Progress | None = None,
    ) -> Fabric:
        """Build a fabric from a spec (one-line, TOML path, or a parsed spec).

        Raises :class:`FabricError` (subclasses say why) and leaves nothing behind.
        """
        say = progress or _quiet
        validate_name(name)
        if isinstance(spec, str):
            topo = parse_spec(spec)
        elif isinstance(spec, TopologySpec):
            topo = resolve(spec)
        else:
            topo = spec
        check_privileges()
        require_tool("ip", "iproute2")
        require_tool("tc", "iproute2")
        t0 = time.monotonic()
        say("compiling BPF trimming program (cached by content hash)")
        obj = compile_object(topo.dscp)  # the classes allocate() writes in the description

        with global_lock():
            d = fabric_dir(name)
            if d.is_dir() and not (d / "state.json").exists():
                # Leftover of an interrupted `down` (lock file, temp files): no record
                # means nothing of this fabric is left to protect.
                for f in d.iterdir():
                    if f.is_file() and (f.name in ("lock", "description.json")
                                        or f.name.endswith(".tmp")):
                        f.unlink()
                with contextlib.suppress(OSError):
                    d.rmdir()
            if d.exists():
                raise FabricError(
                    f"fabric name {name!r} is already in use (state in {d}); "
                    f"pick another name or run: mrc-fabric down {name}"
                )
            fid = _pick_fabric_id(name)
            desc = allocate(topo, name, fid)
            taken = [ns for ns in plan.all_netns(desc) if netns_exists(ns)]
            if taken:
                raise FabricError(
                    f"network namespace {taken[0]} already exists (not made by a recorded "
                    f"fabric {name!r}): pick another name"
                )
            me = os.getpid()
            record = StateRecord(
                name=name,
                fabric_id=fid,
                builder_pid=me,
                builder_start=proc_start_time(me) or 0,
                created=time.time(),
                netns=plan.all_netns(desc),  # intent first: down can always find them
                bpf_object=str(obj),
            )
            record.save()

        fab = cls(desc, record)
        try:
            with _TermAsInterrupt():
                fab._build(say)
        except BaseException as e:
            say("bring-up failed: removing what was made")
            with contextlib.suppress(Exception):
                fab._teardown()
            if isinstance(e, FabricError):
                raise
            if isinstance(e, KeyboardInterrupt):
                raise FabricError(f"bring-up of {name} interrupted; nothing left behind") from e
            raise FabricError(f"bring-up of {name} failed: {e!r}") from e
        say(f"fabric {name} up in {time.monotonic() - t0:.2f}s: {fab.description_path}")
        return fab

    def _build(self, say: Progress) -> None:
        desc = self.description
        # Test hook: seconds to sleep between bring-up steps, so a test can kill a builder
        # halfway and check that `down` still removes everything (docs/FABRIC.md).
        delay = float(os.environ.get("MRC_FABRIC_STEP_DELAY", "0") or 0)

        def step(msg: str) -> None:
            if delay:
                time.sleep(delay)
            say(msg)

        nodes = desc.node_names()
        step(f"creating {len(nodes)} namespaces and {len(desc.links)} links")
        run_batches([ip_batch(None, plan.root_lines(desc), "create netns and veths")])

        step("configuring sysctls")
        for node in nodes:
            write_sysctls(desc.node_netns(node), plan.node_sysctls(desc, node))

        step("installing addresses, static neighbours and static uSID routes")
        batches: list[Batch] = []
        for node in nodes:
            lines = plan.node_lines(desc, node)
            if not plan.is_host(desc, node):
                lines.append("route show")  # read back: seg6local flavors must be there
            batches.append(ip_batch(desc.node_netns(node), lines, f"ip batch for {node}"))
        outputs = run_batches(batches)
        for node, out in zip(nodes, outputs, strict=True):
            if not plan.is_host(desc, node):
                self._verify_seg6local(node, out)
                self._verify_seg6local_netlink(node)

        step("attaching shapers and BPF trim/ECN programs")
        obj = self.record.bpf_object
        tcs = []
        shows: list[list[str]] = []
        for node in nodes:
            lines, show = plan.tc_lines(desc, node, obj)
            tcs.append(tc_batch(desc.node_netns(node), lines, f"tc batch for {node}", True))
            shows.append(show)
        outputs = run_batches(tcs)
        for node, out, show in zip(nodes, outputs, shows, strict=True):
            docs = json_stream(out)
            if len(docs) != len(show):
                raise FabricError(f"tc on {node}: expected {len(show)} filter listings")
            for which, doc in zip(show, docs, strict=True):
                prog_id = _prog_id(doc)
                if prog_id is None:
                    raise FabricError(f"BPF program missing on {node} {which}")
                ifname, direction = which.split("/")
                maps = LinkMaps.from_prog(prog_id, counters_only=direction != "egress")
                key = _key(node, ifname)
                entry = {"prog_id": maps.prog_id, "cfg": maps.cfg, "vq": maps.vq, "cnt": maps.cnt}
                if direction == "egress":
                    maps.write_config(plan.default_config(desc, node, ifname))
                    self.record.maps[key] = entry
                else:
                    self.record.ingress_maps[key] = entry

        save(desc, self.description_path)
        self.record.status = "up"
        self.record.save()

    def _verify_seg6local(self, node: str, route_show: str) -> None:
        prefix, text = plan.expected_seg6local(self.description, self.description.switch(node).usid)
        for line in route_show.splitlines():
            if line.startswith(prefix + " ") and text in line:
                return
        raise FabricError(
            f"{node}: the kernel's route for {prefix} is not '{text}' after install "
            f"(got: {[ln for ln in route_show.splitlines() if ln.startswith(prefix)]}); "
            "this kernel/iproute2 lacks SRv6 NEXT-C-SID (needs Linux >= 6.1, iproute2 >= 6.1)"
        )

    def _verify_seg6local_netlink(self, node: str) -> None:
        """The same check on the kernel's netlink attributes (decoded by seg6nl)."""
        desc = self.description
        sw = desc.switch(node)
        want = ipaddress.IPv6Network(sw.locator)
        usid = desc.srv6 == "usid"
        for r in seg6local_routes(sw.netns):
            if r.dst == want:
                ok = r.action == SEG6_LOCAL_ACTION_END and r.next_csid == usid
                if usid:
                    ok = ok and (r.lblen, r.nflen) == (desc.lblen, desc.nflen)
                if ok:
                    return
                raise FabricError(f"{node}: kernel seg6local route for {want} is {r}")
        raise FabricError(f"{node}: no seg6local route for {want} in the kernel")

    @classmethod
    def load(cls, name: str) -> Fabric:
        """Attach to an existing fabric by name."""
        record = StateRecord.load(name)
        if record.status != "up":
            raise FabricError(
                f"fabric {name} is {record.status}, not up"
                + ("" if record.builder_alive() else f": run mrc-fabric down {name}")
            )
        return cls(load(fabric_dir(name) / "description.json"), record)

    def down(self) -> None:
        """Remove everything this fabric made (processes, namespaces, state).

        Idempotent: a fabric already removed (e.g. by ``mrc-fabric down``) is left alone.
        """
        if (fabric_dir(self.name) / "state.json").exists():
            down(self.name, force=True)

    def _teardown(self) -> None:
        _teardown_record(self.record)

    def __enter__(self) -> Fabric:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()

    # --- use ------------------------------------------------------------------------------
    def netns(self, node: str) -> str:
        """Netns name of a host or switch."""
        return self.description.node_netns(node)

    def exec(
        self, node: str, argv: Sequence[str], **kwargs: Any
    ) -> subprocess.CompletedProcess[Any]:
        """Run a command inside a node's netns (``subprocess.run`` keyword arguments)."""
        return subprocess.run(["ip", "netns", "exec", self.netns(node), *argv], **kwargs)

    def popen(self, node: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a command inside a node's netns; the caller owns the process."""
        return subprocess.Popen(["ip", "netns", "exec", self.netns(node), *argv], **kwargs)

    def maps(self, node: str, ifname: str) -> LinkMaps:
        """The egress BPF maps of one link end."""
        try:
            m = self.record.maps[_key(node, ifname)]
        except KeyError as e:
            raise FabricError(f"no egress program recorded on {node}/{ifname}") from e
        return LinkMaps(m["prog_id"], m["cfg"], m["vq"], m["cnt"])

    # --- failures ---------------------------------------------------------------------------
    def link(self, a: str, b: str) -> LinkControl:
        """Failure controls of the link a-b (direction a -> b for blackhole and loss)."""
        desc = self.description
        return LinkControl(self, desc.link(a, b), desc.node_name(a), desc.node_name(b))

    def node(self, switch: str) -> NodeControl:
        """Failure controls of a switch."""
        return NodeControl(self, self.description.switch(switch).name)

    def port(self, host: str, plane: int) -> PortControl:
        """Failure controls of a host NIC port."""
        self.description.host(host).port(plane)
        return PortControl(self, host, plane)

    def _edit_failure(self, key: str, edit: Callable[[dict[str, Any]], None]) -> None:
        """Change one failure entry of the state record (under the fabric lock)."""
        with fabric_lock(self.name):
            rec = StateRecord.load(self.name)
            entry = dict(rec.failures.get(key) or {})
            edit(entry)
            entry = {k: v for k, v in entry.items() if v not in (None, False, [], {})}
            if entry:
                rec.failures[key] = entry
            else:
                rec.failures.pop(key, None)
            rec.save()
            self.record = rec

    def _reload_record(self) -> None:
        self.record = StateRecord.load(self.name)

    def _apply_failures(self, ends: Sequence[tuple[str, str]]) -> None:
        """Write each end's BPF config: its default plus what the failure record says.

        Declarative on purpose: a node restore cannot undo a link blackhole (or the other
        way round) because every config is recomputed from the whole record.
        """
        desc = self.description
        failures = self.record.failures
        for node, ifname in ends:
            ln = next(x for x in desc.links_of(node) if x.end(node).ifname == ifname)
            direction = f"{node}->{ln.peer(node).node}"
            link_f = failures.get(f"link:{ln.name}") or {}
            cfg = plan.default_config(desc, node, ifname)
            if direction in link_f.get("blackhole", []) or failures.get(f"node:{node}"):
                cfg.flags |= F_BLACKHOLE
            cfg.loss_ppm = round(float(link_f.get("loss_pct", {}).get(direction, 0)) * 10_000)
            self.maps(node, ifname).write_config(cfg)

    def _set_admin(self, ends: Sequence[tuple[str, str]], up: bool) -> None:
        """Admin up/down of interfaces; on up, re-install what admin down flushed."""
        desc = self.description
        batches = []
        for node, ifname in ends:
            lines = plan.device_lines(desc, node, ifname) if up else [f"link set {ifname} down"]
            batches.append(ip_batch(desc.node_netns(node), lines, f"{node}/{ifname}"))
        run_batches(batches)

    # --- observe ---------------------------------------------------------------------------
    def counters(self) -> dict[str, dict[str, int]]:
        """BPF egress counters of every link direction, keyed ``"<from>-><to>"``.

        Cheap (a few bpf(2) calls per link, no netlink): meant for tests and tools that
        diff counters around an experiment. Counts are frames handed to the link's
        qdisc, after any trim; ``drops`` are frames the program dropped.
        """
        out = {}
        for ln in self.description.links:
            for end, peer in ((ln.a, ln.b), (ln.b, ln.a)):
                out[f"{end.node}->{peer.node}"] = self.maps(end.node, end.ifname).read_counters()
        return out

    def status(self) -> dict[str, Any]:
        """Per-link-direction counters, node netns names and failure settings."""
        self._reload_record()
        desc = self.description
        ifstats = _interface_stats(desc)
        links = []
        for ln in desc.links:
            dirs = {}
            for end, peer in ((ln.a, ln.b), (ln.b, ln.a)):
                st: dict[str, Any] = {"from": end.node, "to": peer.node, "ifname": end.ifname}
                try:
                    m = self.maps(end.node, end.ifname)
                    st.update(m.read_counters())
                    cfg = m.read_config()
                    st["blackhole"] = bool(cfg.flags & F_BLACKHOLE)
                    st["loss_pct"] = cfg.loss_ppm / 10_000
                except (FabricError, OSError) as e:
                    st["error"] = str(e)
                s = ifstats.get((end.netns, end.ifname), {})
                st["oper"] = s.get("oper", "?")
                st["tx_packets"] = s.get("tx_packets", 0)
                st["tx_bytes"] = s.get("tx_bytes", 0)
                st["qdisc_drops"] = s.get("qdisc_drops", 0)
                st["drops"] = st.get("drops", 0) + st["qdisc_drops"]
                dirs[f"{end.node}->{peer.node}"] = st
            links.append(
                {"name": ln.name, "plane": ln.plane, "kind": ln.kind, "rate_bps": ln.rate_bps,
                 "directions": dirs}
            )
        nodes = []
        for h in desc.hosts:
            drops = 0
            for p in h.ports:
                im = self.record.ingress_maps.get(_key(h.name, p.ifname))
                if im:
                    with contextlib.suppress(OSError):
                        ing = LinkMaps(im["prog_id"], im["cfg"], im["vq"], im["cnt"])
                        drops += ing.read_counters()["drops"]
            nodes.append({"name": h.name, "role": "host", "netns": h.netns, "usid": h.usid,
                          "mrc_ingress_dropped": drops})
        for sw in desc.switches():
            nodes.append({"name": sw.name, "role": sw.role, "plane": sw.plane,
                          "netns": sw.netns, "usid": sw.usid,
                          "blackhole": bool(self.record.failures.get(f"node:{sw.name}"))})
        procs = [
            {"pid": p.pid, "what": p.what, "alive": p.alive()} for p in self.record.processes
        ]
        return {
            "name": self.name,
            "status": self.record.status,
            "fabric_id": desc.fabric_id,
            "srv6": desc.srv6,
            "usid_block": desc.usid_block,
            "description": str(self.description_path),
            "nodes": nodes,
            "links": links,
            "failures": self.record.failures,
            "processes": procs,
        }


def _prog_id(doc: Any) -> int | None:
    if not isinstance(doc, list):
        return None
    for f in doc:
        prog = f.get("options", {}).get("prog")
        if prog and "id" in prog:
            return int(prog["id"])
    return None


def _interface_stats(desc: FabricDescription) -> dict[tuple[str, str], dict[str, Any]]:
    """(netns, ifname) -> tx counters, operstate and qdisc drops, via pyroute2 netlink."""
    from pyroute2 import IPRoute  # imported lazily: 0.3 s, only status needs it

    out: dict[tuple[str, str], dict[str, Any]] = {}
    for ns in plan.all_netns(desc):
        if not netns_exists(ns):
            continue
        with in_netns(ns):
            ipr = IPRoute()
        try:
            names = {}
            for link in ipr.get_links():
                ifname = str(link.get("ifname"))
                names[link["index"]] = ifname
                s = link.get("stats64") or {}
                out[(ns, ifname)] = {
                    "oper": str(link.get("operstate", "?")).lower(),
                    "tx_packets": int(s.get("tx_packets", 0)),
                    "tx_bytes": int(s.get("tx_bytes", 0)),
                    "qdisc_drops": 0,
                }
            for q in ipr.get_qdiscs():
                # Only root qdiscs: tbf's counters include its pfifo_fast child's.
                if q["parent"] != 0xFFFFFFFF:
                    continue
                qname = names.get(q["index"], "")
                st = q.get("stats2")
                queue = st.get("TCA_STATS_QUEUE") if st is not None else None
                drops = int(queue.get("drops", 0)) if queue is not None else 0
                if (ns, qname) in out:
                    out[(ns, qname)]["qdisc_drops"] += drops
        finally:
            ipr.close()
    return out


class LinkControl:
    """Failures of one link. ``a -> b`` is the direction of blackhole and loss."""

    def __init__(self, fab: Fabric, link: Link, a: str, b: str) -> None:
        self.fab, self.link_, self.a, self.b = fab, link, a, b
        self.key = f"link:{link.name}"

    def _ends(self) -> list[tuple[str, str]]:
        return [(e.node, e.ifname) for e in (self.link_.a, self.link_.b)]

    def _directions(self, both: bool) -> list[str]:
        fwd = f"{self.a}->{self.b}"
        return [fwd, f"{self.b}->{self.a}"] if both else [fwd]

    def down(self) -> None:
        """Both ends administratively down (like pulling the cable); stops a flap."""
        self._stop_flap()
        self.fab._set_admin(self._ends(), up=False)
        self.fab._edit_failure(self.key, lambda f: f.update(down=True))

    def up(self) -> None:
        """Both ends up again (addresses, neighbours, routes re-installed); stops a flap.

        Blackhole and loss settings stay; :meth:`clear` removes everything.
        """
        self._stop_flap()
        self.fab._set_admin(self._ends(), up=True)
        self.fab._edit_failure(self.key, lambda f: f.pop("down", None))

    def blackhole(self, both: bool = False) -> None:
        """Drop every frame a -> b (and b -> a with ``both``); the link stays up."""
        dirs = self._directions(both)

        def edit(f: dict[str, Any]) -> None:
            f["blackhole"] = sorted(set(f.get("blackhole", [])) | set(dirs))

        self.fab._edit_failure(self.key, edit)
        self.fab._apply_failures(self._ends())

    def loss(self, pct: float, both: bool = False) -> None:
        """Drop ``pct`` percent of frames a -> b at random (b -> a too with ``both``)."""
        if not 0 <= pct <= 100:
            raise FabricError(f"loss {pct}% is not in 0..100")
        dirs = self._directions(both)

        def edit(f: dict[str, Any]) -> None:
            loss = dict(f.get("loss_pct", {}))
            for d in dirs:
                loss[d] = pct
            f["loss_pct"] = {k: v for k, v in loss.items() if v}

        self.fab._edit_failure(self.key, edit)
        self.fab._apply_failures(self._ends())

    def flap(self, period_ms: int) -> int:
        """Toggle the link down/up every ``period_ms`` in a background process; its PID."""
        if period_ms < 10:
            raise FabricError("flap period must be at least 10 ms")
        self._stop_flap()
        p = subprocess.Popen(
            [sys.executable, "-m", "mrcnet.fabric.flap", self.fab.name, self.a, self.b,
             str(period_ms)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the caller's terminal does not hit it
            env=dict(os.environ),  # same MRC_FABRIC_STATE_DIR as ours
        )
        start = None
        for _ in range(100):
            start = proc_start_time(p.pid)
            if start is not None:
                break
            time.sleep(0.01)
        rec = ProcRecord(p.pid, start or 0, f"flap {self.link_.name} {period_ms}ms")
        with fabric_lock(self.fab.name):
            r = StateRecord.load(self.fab.name)
            r.processes.append(rec)
            r.save()
        self.fab._edit_failure(self.key, lambda f: f.update(flap_ms=period_ms, flap_pid=p.pid))
        return p.pid

    def _stop_flap(self) -> None:
        with fabric_lock(self.fab.name):
            r = StateRecord.load(self.fab.name)
            mine = [p for p in r.processes if p.what.startswith(f"flap {self.link_.name} ")]
            if not mine:
                return
            for p in mine:
                p.kill()
            r.processes = [p for p in r.processes if p not in mine]
            r.save()

        def edit(f: dict[str, Any]) -> None:
            f.pop("flap_ms", None)
            f.pop("flap_pid", None)

        self.fab._edit_failure(self.key, edit)

    def clear(self) -> None:
        """Undo every failure on this link: stop flapping, bring up, no blackhole, no loss.

        A switch blackholed as a whole (``node ... blackhole``) stays blackholed.
        """
        self._stop_flap()
        self.fab._set_admin(self._ends(), up=True)
        self.fab._edit_failure(self.key, lambda f: f.clear())
        self.fab._apply_failures(self._ends())


class NodeControl:
    """Failures of one switch."""

    def __init__(self, fab: Fabric, switch: str) -> None:
        self.fab, self.switch = fab, switch

    def _ends(self) -> list[tuple[str, str]]:
        return [
            (self.switch, ln.end(self.switch).ifname)
            for ln in self.fab.description.links_of(self.switch)
        ]

    def blackhole(self) -> None:
        """Forward nothing (every egress drops) while every link stays up."""
        self.fab._edit_failure(f"node:{self.switch}", lambda f: f.update(blackhole=True))
        self.fab._apply_failures(self._ends())

    def restore(self) -> None:
        """Forward again (link blackholes set separately stay)."""
        self.fab._edit_failure(f"node:{self.switch}", lambda f: f.clear())
        self.fab._apply_failures(self._ends())


class PortControl:
    """Failures of one host NIC port."""

    def __init__(self, fab: Fabric, host: str, plane: int) -> None:
        self.fab, self.host, self.plane = fab, host, plane
        self.ifname = fab.description.host(host).port(plane).ifname
        self.key = f"port:{host}:{plane}"

    def down(self) -> None:
        """The host's port admin down (its leaf sees the carrier go)."""
        self.fab._set_admin([(self.host, self.ifname)], up=False)
        self.fab._edit_failure(self.key, lambda f: f.update(down=True))

    def up(self) -> None:
        """The port up again, address and routes re-installed."""
        self.fab._set_admin([(self.host, self.ifname)], up=True)
        self.fab._edit_failure(self.key, lambda f: f.clear())


# --- removal ---------------------------------------------------------------------------------
def _teardown_record(record: StateRecord) -> list[str]:
    for p in record.processes:
        p.kill()
    removed = delete_netns(record.netns)
    d = fabric_dir(record.name)
    for f in ("description.json", "state.json", "lock"):
        with contextlib.suppress(FileNotFoundError):
            (d / f).unlink()
    for leftover in d.glob("*.tmp"):
        leftover.unlink()
    with contextlib.suppress(OSError):
        d.rmdir()
    return removed


def down(name: str, force: bool = False) -> list[str]:
    """Remove fabric ``name``; works when its builder died. Returns the netns deleted."""
    d = fabric_dir(name)
    if not (d / "state.json").exists():
        raise FabricError(f"no fabric named {name!r} (nothing recorded in {d})")
    # Before the record says "removing": without privileges nothing could be removed.
    check_privileges()
    with fabric_lock(name):
        record = StateRecord.load(name)
        if (
            record.status == "building"
            and record.builder_alive()
            and record.builder_pid != os.getpid()
            and not force
        ):
            raise FabricError(
                f"fabric {name} is being built by pid {record.builder_pid}; "
                "wait for it, or use --force"
            )
        record.status = "removing"
        record.save()
        return _teardown_record(record)


def down_all() -> dict[str, list[str]]:
    """Remove every fabric that has a state record."""
    done: dict[str, list[str]] = {}
    for name in list_names():
        done[name] = down(name, force=True)
    return done


def list_fabrics() -> list[dict[str, Any]]:
    """Name, status, size and description path of every recorded fabric."""
    out: list[dict[str, Any]] = []
    for name in list_names():
        try:
            rec = StateRecord.load(name)
        except FabricError as e:
            out.append({"name": name, "status": f"unreadable: {e}"})
            continue
        status = rec.status
        if status == "building" and not rec.builder_alive():
            status = "broken (builder died: run down)"
        present = sum(netns_exists(n) for n in rec.netns)
        out.append(
            {
                "name": name,
                "status": status,
                "fabric_id": rec.fabric_id,
                "netns": f"{present}/{len(rec.netns)}",
                "failures": len(rec.failures),
                "description": str(fabric_dir(name) / "description.json"),
            }
        )
    return out
