"""Raw-socket I/O for mrcd: one AF_PACKET socket per NIC port, the kernel rule that keeps
the host stack from answering MRC frames, and next-hop neighbour resolution.

- :class:`PacketPort`: a non-blocking packet socket bound to one port, filtered in the
  kernel to MRC frames only, with batched send/receive through :mod:`mrcnet.io.batch`.
- :class:`KernelDrop`: an nftables table (unique name, owned by this process) that drops
  MRC frames on ingress after the packet-socket tap saw them.
- :func:`neighbour_mac`: the MAC of a next hop from the kernel neighbour table.
"""

from mrcnet.io.bpf import mrc_filter
from mrcnet.io.errors import CapabilityError, IOSetupError, NeighbourError
from mrcnet.io.kernel_drop import KernelDrop
from mrcnet.io.neighbour import neighbour_mac
from mrcnet.io.packet_port import PacketPort, PortStats, interface_mac, interface_mtu

__all__ = [
    "CapabilityError",
    "IOSetupError",
    "KernelDrop",
    "NeighbourError",
    "PacketPort",
    "PortStats",
    "interface_mac",
    "interface_mtu",
    "mrc_filter",
    "neighbour_mac",
]
