"""A fake ``/sys/bus/pci/devices`` tree for a simulated node, and its ``/sys/class/infiniband``.

Bind-mounted read-only over the container's own ``/sys/bus/pci/devices``, it shows the node's
NPUs exactly where the vendor's fact scripts look (``vendor``, ``device``, ``class`` files per
PCI function), among ordinary host devices that a detector must skip. The RDMA tree shows the
node's RoCE NIC the way the kernel does (device, ports, link state, GID table).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from .models import HUAWEI_PCI_VENDOR, PCI_CLASS_PROCESSING_ACCELERATOR, Node

# Devices every Kunpeng server has besides NPUs: a host bridge, a Hi1822 NIC, a SAS controller.
OTHER_DEVICES = [
    ("0000:00:00.0", "0x19e5", "0xa120", "0x060400"),
    ("0000:7d:00.0", "0x19e5", "0xa222", "0x020000"),
    ("0000:74:02.0", "0x19e5", "0xa230", "0x010700"),
    ("0000:03:00.0", "0x15b3", "0x1017", "0x020000"),
]


def write_pci_tree(node: Node, root: Path) -> Path:
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    entries = [
        (chip.bus_id.lower(), HUAWEI_PCI_VENDOR, node.spec.pci_device,
         PCI_CLASS_PROCESSING_ACCELERATOR)
        for chip in node.chips
    ] + OTHER_DEVICES
    for address, vendor, device, klass in entries:
        d = root / address
        d.mkdir()
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text(device + "\n")
        (d / "class").write_text(klass + "\n")
        (d / "subsystem_vendor").write_text(vendor + "\n")
        (d / "numa_node").write_text("0\n" if address < "0000:80" else "1\n")
    return root


# --- /sys/class/infiniband ----------------------------------------------------------------------
# The RDMA devices of the ConnectX-5 in OTHER_DEVICES (0000:03:00.0), a dual-port 100 GbE card in
# RoCE mode: one mlx5 device per PCI function (port). Each: name, PCI function, netdev, MAC, and
# the host address its IPv4 GIDs carry (TEST-NET-1). The second function (03:00.1) is not in the
# PCI tree, which lists one function per card.
RDMA_DEVICES = [
    ("mlx5_0", "0000:03:00.0", "enp3s0f0np0", "b8:59:9f:d4:1a:2e", "192.0.2.11"),
    ("mlx5_1", "0000:03:00.1", "enp3s0f1np1", "b8:59:9f:d4:1a:2f", "192.0.2.12"),
]
RDMA_FW_VER = "16.35.2000"
RDMA_RATE = "100 Gb/sec (4X EDR)"
RDMA_GID_SLOTS = 8  # a real mlx5 RoCE table has 255 slots; the unused ones read all zeros
PORT_ACTIVE = ("4: ACTIVE", "5: LinkUp")
PORT_DOWN = ("1: DOWN", "3: Disabled")
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def _node_guid(mac: str) -> str:
    """An mlx5 node GUID: the MAC with ``03:00`` in the middle (b859:9f03:00d4:1a2e)."""
    b = mac.split(":")
    return f"{b[0]}{b[1]}:{b[2]}03:00{b[3]}:{b[4]}{b[5]}"


def _link_local_gid(mac: str) -> str:
    """The RoCE link-local GID: fe80::/64 and the MAC's modified EUI-64 (U/L bit flipped)."""
    b = [int(x, 16) for x in mac.split(":")]
    eui = [b[0] ^ 0x02, b[1], b[2], 0xFF, 0xFE, b[3], b[4], b[5]]
    return "fe80:0000:0000:0000:" + ":".join(
        f"{eui[i]:02x}{eui[i + 1]:02x}" for i in range(0, 8, 2)
    )


def _ipv4_gid(address: str) -> str:
    """The RoCE GID of an IPv4 address: the IPv4-mapped IPv6 form ::ffff:a.b.c.d."""
    a, b, c, d = (int(x) for x in address.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a * 256 + b:04x}:{c * 256 + d:04x}"


def write_infiniband_tree(node: Node, root: Path, down: Iterable[str] = ()) -> Path:
    """Write a fake ``/sys/class/infiniband`` for ``node``; return ``root``.

    Every simulated server carries the same RoCE NIC (see OTHER_DEVICES), so the tree does not
    depend on the model. ``down`` names devices whose port 1 is down (``"1: DOWN"``,
    ``"3: Disabled"``), for fault tests; set_rdma_port_state changes a port of a written tree.
    Each port has the kernel's files: ``state``, ``phys_state``, ``link_layer``, ``rate`` and a
    GID table: index 0/1 the link-local GID as RoCE v1 and v2, 2/3 the IPv4 GID as v1 and v2, the
    rest all zeros (the kernel gives such slots no readable type or netdev, so none is written).
    ``<device>/device`` links to the PCI function the way sysfs does, relative to
    ``/sys/class/infiniband/<device>``.
    """
    del node  # same NIC on every model; taken to match write_pci_tree
    wanted_down = set(down)
    unknown = wanted_down - {name for name, *_ in RDMA_DEVICES}
    if unknown:
        raise ValueError(f"no RDMA device {', '.join(sorted(unknown))}")
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for name, address, netdev, mac, ipv4 in RDMA_DEVICES:
        d = root / name
        d.mkdir()
        (d / "node_type").write_text("1: CA\n")
        (d / "fw_ver").write_text(RDMA_FW_VER + "\n")
        (d / "node_guid").write_text(_node_guid(mac) + "\n")
        (d / "sys_image_guid").write_text(_node_guid(RDMA_DEVICES[0][3]) + "\n")
        (d / "hca_type").write_text("MT4119\n")
        (d / "device").symlink_to(f"../../../bus/pci/devices/{address}")
        port = d / "ports" / "1"
        for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
            (port / sub).mkdir(parents=True)
        (port / "link_layer").write_text("Ethernet\n")
        (port / "rate").write_text(RDMA_RATE + "\n")
        (port / "lid").write_text("0x0\n")
        entries = [
            (_link_local_gid(mac), "IB/RoCE v1"),
            (_link_local_gid(mac), "RoCE v2"),
            (_ipv4_gid(ipv4), "IB/RoCE v1"),
            (_ipv4_gid(ipv4), "RoCE v2"),
        ]
        for index in range(RDMA_GID_SLOTS):
            if index < len(entries):
                gid, gid_type = entries[index]
                (port / "gid_attrs/types" / str(index)).write_text(gid_type + "\n")
                (port / "gid_attrs/ndevs" / str(index)).write_text(netdev + "\n")
            else:
                gid = ZERO_GID
            (port / "gids" / str(index)).write_text(gid + "\n")
        set_rdma_port_state(root, name, 1, active=name not in wanted_down)
    return root


def set_rdma_port_state(root: Path, device: str, port: int, *, active: bool) -> None:
    """Bring a port of a written tree up (ACTIVE, LinkUp) or down (DOWN, Disabled)."""
    port_dir = root / device / "ports" / str(port)
    if not port_dir.is_dir():
        raise ValueError(f"no port {port} on RDMA device {device} under {root}")
    state, phys_state = PORT_ACTIVE if active else PORT_DOWN
    (port_dir / "state").write_text(state + "\n")
    (port_dir / "phys_state").write_text(phys_state + "\n")
