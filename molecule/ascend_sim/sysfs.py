"""A fake ``/sys/bus/pci/devices`` tree for a simulated node.

Bind-mounted read-only over the container's own ``/sys/bus/pci/devices``, it shows the node's
NPUs exactly where the vendor's fact scripts look (``vendor``, ``device``, ``class`` files per
PCI function), among ordinary host devices that a detector must skip.
"""

from __future__ import annotations

import shutil
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
