"""Turn a :class:`FabricDescription` into iproute2 / tc commands and BPF configurations.

Pure functions (no side effects) so the exact commands can be read, tested and re-applied:
``device_lines`` is re-run after a link comes back up, because an admin-down interface
loses its link-local address, static neighbours and routes.
"""

from __future__ import annotations

from collections import defaultdict

from mrcnet.fabric.bpfmap import (
    EGRESS_SECTION,
    F_ECN,
    F_LASTHOP,
    F_TRIM,
    INGRESS_SECTION,
    LinkConfig,
)
from mrcnet.topology.description import FabricDescription, Link, LinkEnd, usid_address

#: Device carrying each switch's seg6local route. Not lo (IPv6 turns a seg6local route on
#: lo into a reject route) and not dummy (this kernel has no dummy driver): an ifb device
#: is always up, never transmits and needs no peer.
SID_DEV = "sid0"
SID_DEV_KIND = "ifb"
LL_PREFIXLEN = 64

#: tbf burst: at least this many full frames, and at least this long at the rate.
BURST_FRAMES = 2
BURST_S = 250e-6


def _sid_prefix(desc: FabricDescription, usid: int) -> str:
    return f"{usid_address(desc.block, [usid])}/{desc.lblen + desc.nflen}"


def node_ends(desc: FabricDescription, node: str) -> list[tuple[Link, LinkEnd, LinkEnd]]:
    """(link, this end, peer end) for every link of ``node``."""
    return [(ln, ln.end(node), ln.peer(node)) for ln in desc.links_of(node)]


def switch_routes(desc: FabricDescription, name: str) -> dict[str, list[str]]:
    """Static routes of a switch: ifname -> prefixes routed out of it (no ECMP, ever)."""
    sw = desc.switch(name)
    plane = desc.planes[sw.plane]
    ctl = f"s{desc.options.get('control_plane_spine', 0)}"
    routes: dict[str, list[str]] = defaultdict(list)
    if sw.role == "leaf":
        for sp in plane.spines:
            routes[f"s{sp.index}"].append(_sid_prefix(desc, sp.usid))
        for lf in plane.leaves:
            if lf is not sw:
                routes[ctl].append(_sid_prefix(desc, lf.usid))
        for h in desc.hosts:
            if h.leaf_index == sw.index:
                routes[h.name].append(_sid_prefix(desc, h.usid))
                routes[h.name].append(f"{h.port(sw.plane).address}/128")
            else:
                routes[ctl].append(_sid_prefix(desc, h.usid))
        # Plain IPv6 (control traffic) to hosts on other leaves goes via the control spine.
        routes[ctl].append(plane.host_prefix)
    else:
        for lf in plane.leaves:
            routes[f"l{lf.index}"].append(_sid_prefix(desc, lf.usid))
        for h in desc.hosts:
            dev = f"l{h.leaf_index}"
            routes[dev].append(_sid_prefix(desc, h.usid))
            routes[dev].append(f"{h.port(sw.plane).address}/128")
    return dict(routes)


def seg6local_line(desc: FabricDescription, usid: int) -> str:
    """The End (uSID: NEXT-C-SID flavour) route of a switch locator."""
    action = "End"
    if desc.srv6 == "usid":
        action += f" flavors next-csid lblen {desc.lblen} nflen {desc.nflen}"
    return f"route replace {_sid_prefix(desc, usid)} encap seg6local action {action} dev {SID_DEV}"


def expected_seg6local(desc: FabricDescription, usid: int) -> tuple[str, str]:
    """(prefix, text that ``ip -6 route show`` must print on that prefix's line)."""
    text = "encap seg6local action End"
    if desc.srv6 == "usid":
        text += f" flavors next-csid lblen {desc.lblen} nflen {desc.nflen}"
    return _sid_prefix(desc, usid), text


def is_host(desc: FabricDescription, node: str) -> bool:
    """True for host nodes."""
    return any(h.name == node for h in desc.hosts)


def base_lines(desc: FabricDescription, node: str) -> list[str]:
    """Node-wide ``ip -6 -batch`` lines, run once at bring-up before the device lines."""
    lines = ["link set lo up"]
    # No kernel-made link-local addresses (and so no DAD, RS or random addresses): every
    # address is static, so the fabric is deterministic.
    lines += [f"link set {end.ifname} addrgenmode none" for _, end, _ in node_ends(desc, node)]
    # Bound the real queue of shaped ports before their qdiscs exist (tc_lines runs after
    # this batch): pfifo_fast reads txqueuelen only when it is created.
    qlen = txqueuelen(desc)
    if qlen is not None and shaped(desc, node):
        lines += [f"link set {end.ifname} txqueuelen {qlen}"
                  for ln, end, _ in node_ends(desc, node) if ln.rate_bps]
    if not is_host(desc, node):
        sw = desc.switch(node)
        lines += [
            f"link add {SID_DEV} type {SID_DEV_KIND}",
            f"link set {SID_DEV} up",
            seg6local_line(desc, sw.usid),
        ]
    return lines


def device_lines(desc: FabricDescription, node: str, ifname: str) -> list[str]:
    """Bring one interface up with its address, static neighbour and routes (idempotent)."""
    found = [(ln, e, p) for ln, e, p in node_ends(desc, node) if e.ifname == ifname]
    if not found:
        raise ValueError(f"{node} has no interface {ifname}")
    ln, end, peer = found[0]
    lines = [
        f"link set {ifname} up",
        f"addr replace {end.ll}/{LL_PREFIXLEN} dev {ifname} nodad",
        f"neigh replace {peer.ll} lladdr {peer.mac} dev {ifname} nud permanent",
    ]
    if is_host(desc, node):
        port = desc.host(node).port(ln.plane)
        lines += [
            f"addr replace {port.address}/128 dev {ifname} nodad",
            f"route replace {desc.planes[ln.plane].host_prefix} via {peer.ll} dev {ifname}",
        ]
    else:
        for prefix in switch_routes(desc, node).get(ifname, []):
            lines.append(f"route replace {prefix} via {peer.ll} dev {ifname}")
    return lines


def node_lines(desc: FabricDescription, node: str) -> list[str]:
    """The full bring-up batch of a node."""
    lines = base_lines(desc, node)
    for _, end, _ in node_ends(desc, node):
        lines += device_lines(desc, node, end.ifname)
    return lines


def node_sysctls(desc: FabricDescription, node: str) -> dict[str, str]:
    """Sysctls written in the node's netns before its batch runs."""
    values = {
        # Keep static global addresses across a link flap (link-local ones are re-added).
        "net.ipv6.conf.all.keep_addr_on_down": "1",
    }
    ifnames = [end.ifname for _, end, _ in node_ends(desc, node)]
    for ifn in ifnames:
        values[f"net.ipv6.conf.{ifn}.accept_ra"] = "0"
        values[f"net.ipv6.conf.{ifn}.router_solicitations"] = "0"
        values[f"net.ipv6.conf.{ifn}.accept_dad"] = "0"
    if not is_host(desc, node):
        values["net.ipv6.conf.all.forwarding"] = "1"
        values["net.ipv6.conf.all.seg6_enabled"] = "1"
        for ifn in ifnames:
            values[f"net.ipv6.conf.{ifn}.seg6_enabled"] = "1"
    return values


def _burst(desc: FabricDescription, rate_bps: int) -> int:
    """tbf burst of a shaped port: the ``burst`` option, else the larger of
    ``BURST_FRAMES`` full frames and ``BURST_S`` at the rate.

    Small, so that the real queue behind the shaper looks like the BPF virtual queue
    (which has no burst allowance) and trimmed headers visibly overtake queued data;
    large enough that the hrtimer watchdog does not wake per frame at high rates.
    """
    given = int(desc.options.get("burst", -1))
    if given > 0:
        return given
    return max(BURST_FRAMES * (desc.mtu + 14), int(rate_bps * BURST_S) // 8)


def txqueuelen(desc: FabricDescription) -> int | None:
    """Device txqueuelen of shaped ports (frames per pfifo_fast band), or None to leave
    the kernel's (1000).

    pfifo_fast, the child under the shaper, sizes each of its bands' rings from it when
    it is created, and the tbf's ``limit`` does not apply to a child it did not create:
    the ``txqueuelen`` option is what bounds the real queue. Not bounded by default: the
    bands count frames, not bytes, so a band small enough to bound the data (a few
    frames above the drop threshold) is as small for trimmed headers, and the queue
    drops the headers of a host's unshaped burst trimmed whole (measured in
    docs/INCAST.md); the shaper's size table (:func:`_tbf_lines`) keeps the real queue
    within the virtual one instead.
    """
    given = int(desc.options.get("txqueuelen", 0))
    return given if given > 0 else None


def shaped(desc: FabricDescription, node: str) -> bool:
    """True when the node's egress is rate limited (switches; hosts only if asked)."""
    return not is_host(desc, node) or bool(desc.options.get("host_shaping"))


def _tbf_lines(desc: FabricDescription, dev: str, rate_bps: int) -> list[str]:
    """The shaper of a port: tbf at the rate over a pfifo_fast."""
    burst = _burst(desc, rate_bps)
    limit = max(4 * int(desc.options.get("drop_thresh", 0)), 64 * (desc.mtu + 14))
    return [
        # stab: the qdiscs charge a frame the length it has when it reaches them. Without
        # it they charge what __dev_queue_xmit measured before the tc egress hook, i.e.
        # a trimmed header costs the shaper as much link time as the full frame it was
        # (measured: 150 x 1500-byte frames, 142 trimmed, took 225 KB of tbf time for
        # 48.5 KB on the wire), and the real queue outgrows the virtual one whenever
        # the program trims.
        f"qdisc replace dev {dev} root handle 1: stab overhead 0 linklayer ethernet "
        f"tbf rate {rate_bps}bit burst {burst} limit {limit}",
        # Strict priority under the shaper: band 0 (skb->priority 6, set by the BPF
        # program for trimmed headers and control DSCP) overtakes data in band 1.
        # pfifo_fast, not prio: this kernel has no sch_prio; pfifo_fast's fixed
        # priomap sends priority 6 to band 0 and priority 0 to band 1.
        f"qdisc replace dev {dev} parent 1:1 handle 10: pfifo_fast",
    ]


def tc_lines(desc: FabricDescription, node: str, obj: str) -> tuple[list[str], list[str]]:
    """(tc batch lines, [ifname/direction per 'filter show' line]) for a node."""
    lines: list[str] = []
    shows: list[str] = []
    host = is_host(desc, node)
    for ln, end, _ in node_ends(desc, node):
        dev = end.ifname
        if ln.rate_bps and shaped(desc, node):
            lines += _tbf_lines(desc, dev, ln.rate_bps)
        lines.append(f"qdisc replace dev {dev} clsact")
        lines.append(f"filter replace dev {dev} egress pref 1 handle 1 bpf da obj {obj} "
                     f"sec {EGRESS_SECTION}")
        shows.append(f"{dev}/egress")
        if host and desc.options.get("host_drop", True):
            lines.append(f"filter replace dev {dev} ingress pref 1 handle 1 bpf da obj {obj} "
                         f"sec {INGRESS_SECTION}")
            shows.append(f"{dev}/ingress")
    for s in shows:
        dev, direction = s.split("/")
        lines.append(f"filter show dev {dev} {direction}")
    return lines, shows


def default_config(desc: FabricDescription, node: str, ifname: str) -> LinkConfig:
    """The egress program configuration of a link end with no failure set."""
    o = desc.options
    if is_host(desc, node):
        # A NIC does not trim or mark; the program is there for counters and failures.
        return LinkConfig(trim_size=int(o["trim_size"]))
    link = next(ln for ln, end, _ in node_ends(desc, node) if end.ifname == ifname)
    if not link.rate_bps:
        return LinkConfig(trim_size=int(o["trim_size"]))
    last_hop = link.kind == "host-leaf"
    flags = F_TRIM if o["trim_thresh"] else 0
    if last_hop and flags:
        flags |= F_LASTHOP  # the leaf's port to the host: an incast, not a path
    if o["ecn_thresh"] and (not last_hop or o.get("ecn_last_hop")):
        flags |= F_ECN
    # vq_drain < 1 drains the virtual queue slower than the link: a margin for a tbf
    # that falls behind its nominal rate when the CPUs are busy, so the trimming decision
    # does not believe a backlog gone that the real queue still holds (docs/FABRIC.md).
    drain = float(o.get("vq_drain", 1.0))
    return LinkConfig(
        rate_Bps=int(link.rate_bps * drain) // 8,
        trim_thresh=int(o["trim_thresh"]),
        ecn_thresh=int(o["ecn_thresh"]),
        drop_thresh=int(o["drop_thresh"]),
        trim_size=int(o["trim_size"]),
        flags=flags,
    )


def root_lines(desc: FabricDescription) -> list[str]:
    """Root-namespace batch: create every netns and every veth directly inside them.

    The veth ends never exist in the root namespace, so their names cannot collide with
    anything else on the machine.
    """
    lines = [f"netns add {ns}" for ns in all_netns(desc)]
    for ln in desc.links:
        a, b = ln.a, ln.b
        lines.append(
            f"link add {a.ifname} address {a.mac} mtu {desc.mtu} netns {a.netns} type veth "
            f"peer {b.ifname} address {b.mac} mtu {desc.mtu} netns {b.netns}"
        )
    return lines


def all_netns(desc: FabricDescription) -> list[str]:
    """Every namespace of the fabric, hosts first."""
    return [h.netns for h in desc.hosts] + [s.netns for s in desc.switches()]
