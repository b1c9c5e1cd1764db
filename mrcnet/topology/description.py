"""The fabric description file: what mrcd (and anything else) needs to use a fabric.

It lives with the topology, not with mrc-fabric, because mrcd and every other reader of a
fabric need it without the namespace tooling. mrc-fabric writes it as JSON
(``description.json`` in the fabric's state directory, format documented in
docs/FABRIC.md); a real deployment can write the same file for real switches.
Load it with :func:`load` and build paths with :meth:`FabricDescription.path_container`
(uSID mode) or :meth:`FabricDescription.path_segments` (SRH mode).

Everything here is pure data: no netlink, no root needed.
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mrcnet.topology import addressing, naming
from mrcnet.topology.errors import FabricError, SpecError

#: Version of the description format; bumped on any incompatible change.
DESCRIPTION_VERSION = 1

IPv6 = ipaddress.IPv6Address


def usid_address(block: ipaddress.IPv6Network, usids: list[int]) -> IPv6:
    """The address ``<block>:<usid0>:<usid1>:...::`` (F3216 container).

    :func:`mrcnet.topology.addressing.usid_address`, raising :class:`FabricError` like the
    rest of the description.
    """
    try:
        return addressing.usid_address(block, usids)
    except SpecError as e:
        raise FabricError(str(e)) from None


@dataclass(frozen=True)
class LinkEnd:
    """One end of a link: a node's interface."""

    node: str  #: node name ("h0", "L0.1", "S1.0")
    netns: str
    ifname: str
    mac: str
    ll: str  #: link-local address of this end (static neighbour entries, no ND)


@dataclass(frozen=True)
class Link:
    """A veth cable. ``a`` is the lower tier (host or leaf), ``b`` the upper one."""

    name: str  #: "<a>-<b>", e.g. "h0-L0.0", "L0.0-S0.1"
    plane: int
    kind: str  #: "host-leaf" or "leaf-spine"
    rate_bps: int  #: shaped egress rate of switch ends, 0 = unshaped
    a: LinkEnd
    b: LinkEnd

    def end(self, node: str) -> LinkEnd:
        """The end of this link on ``node``."""
        if self.a.node == node:
            return self.a
        if self.b.node == node:
            return self.b
        raise FabricError(f"link {self.name} does not touch {node}")

    def peer(self, node: str) -> LinkEnd:
        """The end of this link that is not on ``node``."""
        return self.b if self.end(node) is self.a else self.a


@dataclass(frozen=True)
class Switch:
    """A leaf or spine: a netns forwarding uSIDs from static routes."""

    name: str
    role: str  #: "leaf" or "spine"
    plane: int
    index: int  #: index among the plane's leaves / spines
    usid: int
    netns: str
    locator: str  #: "<block>:<usid>::/48", where seg6local End sits


@dataclass(frozen=True)
class Port:
    """A host NIC port; one per plane. mrcd opens one AF_PACKET socket per port."""

    plane: int
    ifname: str
    mac: str
    address: str  #: unicast IPv6 (inner source/destination, plain-IPv6 control traffic)
    ll: str
    leaf: str  #: name of the leaf switch the port is cabled to
    neighbor_ifname: str
    neighbor_mac: str  #: destination MAC of every frame sent out of this port
    neighbor_ll: str


@dataclass(frozen=True)
class Host:
    """An endpoint: a netns with one port per plane."""

    name: str
    index: int
    usid: int
    netns: str
    leaf_index: int  #: index of its leaf in every plane
    ports: list[Port]

    def port(self, plane: int) -> Port:
        """The host's port in ``plane``."""
        for p in self.ports:
            if p.plane == plane:
                return p
        raise FabricError(f"host {self.name} has no port in plane {plane}")


@dataclass(frozen=True)
class Plane:
    """A disjoint network: its own leaves and spines."""

    index: int
    host_prefix: str  #: plain-IPv6 prefix of the host ports in this plane
    leaves: list[Switch]
    spines: list[Switch]


@dataclass
class FabricDescription:
    """A whole fabric: planes, switches, hosts, links and the addressing plan."""

    version: int
    name: str
    fabric_id: int
    srv6: str  #: "usid" (F3216 containers, no SRH) or "srh" (classic list: not MRC's form)
    usid_block: str  #: "/32" block shared by every uSID
    lblen: int
    nflen: int
    host_prefix: str
    mtu: int
    planes: list[Plane]
    hosts: list[Host]
    links: list[Link]
    options: dict[str, Any] = field(default_factory=dict)
    paths: dict[str, Any] = field(default_factory=dict)  #: how paths are built (informative)

    # --- lookups ------------------------------------------------------------------------
    @property
    def block(self) -> ipaddress.IPv6Network:
        """The uSID block as a network object."""
        return ipaddress.IPv6Network(self.usid_block)

    def host(self, ref: str | int) -> Host:
        """A host by name ("h3") or index (3)."""
        for h in self.hosts:
            if h.name == ref or h.index == ref:
                return h
        raise FabricError(f"no host {ref!r} in fabric {self.name}")

    def switches(self) -> list[Switch]:
        """Every switch, plane by plane, leaves first."""
        return [s for p in self.planes for s in (*p.leaves, *p.spines)]

    def switch(self, name: str) -> Switch:
        """A switch by name ("L0.1", "S1.0"; "p0l1" is read as "L0.1")."""
        name = self.node_name(name)
        for s in self.switches():
            if s.name == name:
                return s
        raise FabricError(f"no switch {name!r} in fabric {self.name}")

    def node_name(self, name: str) -> str:
        """``name`` as this description spells it (``p0l1`` -> ``L0.1``).

        A description written before both tools shared one naming keeps its own names.
        """
        if name in self.node_names():
            return name
        canon = naming.canonical(name)
        if canon in self.node_names():
            return canon
        compact = naming.compact(canon)
        return compact if compact in self.node_names() else name

    def node_netns(self, name: str) -> str:
        """The netns of any node (host or switch)."""
        name = self.node_name(name)
        for h in self.hosts:
            if h.name == name:
                return h.netns
        for s in self.switches():
            if s.name == name:
                return s.netns
        raise FabricError(
            f"no node {name!r} in fabric {self.name} (hosts h0..h{len(self.hosts) - 1}, "
            "switches L<plane>.<i> / S<plane>.<i>)"
        )

    def node_names(self) -> list[str]:
        """Every node name, hosts first."""
        return [h.name for h in self.hosts] + [s.name for s in self.switches()]

    def link(self, a: str, b: str) -> Link:
        """The link between nodes ``a`` and ``b`` (either order)."""
        a, b = self.node_name(a), self.node_name(b)
        for ln in self.links:
            if {ln.a.node, ln.b.node} == {a, b}:
                return ln
        raise FabricError(f"no link between {a} and {b} in fabric {self.name}")

    def links_of(self, node: str) -> list[Link]:
        """Every link touching ``node``."""
        node = self.node_name(node)
        return [ln for ln in self.links if node in (ln.a.node, ln.b.node)]

    # --- paths ---------------------------------------------------------------------------
    def path_usids(
        self, src: str | int, dst: str | int, plane: int, spine: int | None
    ) -> list[int]:
        """The uSIDs of the path src -> dst through ``spine`` of ``plane``, in travel order.

        ``[src leaf, spine, dst leaf, dst host]``; with ``spine=None`` (only allowed when
        both hosts hang off the same leaf) the direct path ``[leaf, dst host]``.
        """
        s, d = self.host(src), self.host(dst)
        pl = self.planes[plane]
        src_leaf, dst_leaf = pl.leaves[s.leaf_index], pl.leaves[d.leaf_index]
        if spine is None and src_leaf is not dst_leaf:
            raise FabricError(f"{s.name} and {d.name} are on different leaves: give a spine")
        return addressing.path_usids(src_leaf.usid, None if spine is None else
                                     pl.spines[spine].usid, dst_leaf.usid, d.usid)

    def path_container(
        self, src: str | int, dst: str | int, plane: int, spine: int | None
    ) -> ipaddress.IPv6Address:
        """Outer destination address for uSID mode: ``block:srcleaf:spine:dstleaf:dsthost::``."""
        return usid_address(self.block, self.path_usids(src, dst, plane, spine))

    def path_segments(
        self, src: str | int, dst: str | int, plane: int, spine: int | None
    ) -> list[ipaddress.IPv6Address]:
        """SIDs for SRH mode, in TRAVEL order: ``[src leaf, spine, dst leaf, dst host]``.

        Each SID is ``block:<usid>::``. The SRH stores them reversed (segment list[0] is the
        last segment, the destination host); the first outer destination is ``[0]`` here.
        """
        return [usid_address(self.block, [u]) for u in self.path_usids(src, dst, plane, spine)]

    def inner_addresses(
        self, src: str | int, dst: str | int, plane: int
    ) -> tuple[ipaddress.IPv6Address, ipaddress.IPv6Address]:
        """(source, destination) unicast addresses of the ports in ``plane``."""
        return (
            IPv6(self.host(src).port(plane).address),
            IPv6(self.host(dst).port(plane).address),
        )

    # --- (de)serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain dict, JSON-ready."""
        return asdict(self)

    def to_json(self) -> str:
        """The JSON text of the description file."""
        return json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FabricDescription:
        """Inverse of :meth:`to_dict`; checks the version."""
        version = d.get("version")
        if version != DESCRIPTION_VERSION:
            raise FabricError(
                f"fabric description version {version!r} is not supported "
                f"(this mrcnet reads version {DESCRIPTION_VERSION})"
            )
        try:
            planes = [
                Plane(
                    index=p["index"],
                    host_prefix=p["host_prefix"],
                    leaves=[Switch(**s) for s in p["leaves"]],
                    spines=[Switch(**s) for s in p["spines"]],
                )
                for p in d["planes"]
            ]
            hosts = [
                Host(**{**h, "ports": [Port(**p) for p in h["ports"]]}) for h in d["hosts"]
            ]
            links = [
                Link(**{**ln, "a": LinkEnd(**ln["a"]), "b": LinkEnd(**ln["b"])})
                for ln in d["links"]
            ]
            rest = {
                k: v for k, v in d.items() if k not in ("planes", "hosts", "links")
            }
            return cls(planes=planes, hosts=hosts, links=links, **rest)
        except (KeyError, TypeError) as e:
            raise FabricError(f"malformed fabric description: {e}") from e


def load(path: str | os.PathLike[str]) -> FabricDescription:
    """Read a fabric description file (JSON)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise FabricError(f"cannot read fabric description {path}: {e.strerror}") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise FabricError(f"fabric description {path} is not JSON: {e}") from e
    return FabricDescription.from_dict(data)


def default_path(name: str) -> Path:
    """Where mrc-fabric writes fabric ``name``'s description (honours MRC_FABRIC_STATE_DIR)."""
    root = os.environ.get("MRC_FABRIC_STATE_DIR") or "/run/mrcnet/fabrics"
    return Path(root) / name / "description.json"


def save(desc: FabricDescription, path: str | os.PathLike[str]) -> None:
    """Write atomically (readers never see half a file)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(desc.to_json())
    os.replace(tmp, p)
