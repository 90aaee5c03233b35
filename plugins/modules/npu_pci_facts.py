#!/usr/bin/python
"""Detect Ascend NPUs on the PCI bus from sysfs, before any driver is installed."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: npu_pci_facts
short_description: Detect Huawei Ascend NPUs on the PCI bus
description:
  - Reads C(vendor), C(device), C(class) and C(numa_node) of every PCI function under
    O(sysfs_pci_path), the way the vendor's own fact scripts do, so NPUs are found before any
    driver exists.
  - An NPU is a function of vendor C(0x19e5) (Huawei) and class C(0x1200xx) (processing
    accelerator). Device IDs name the chip family.
version_added: 0.1.0
options:
  sysfs_pci_path:
    description: Directory holding one entry per PCI function.
    type: path
    default: /sys/bus/pci/devices
extends_documentation_fragment:
  - ascend_serve.fleet.facts
"""

EXAMPLES = r"""
- name: Detect NPUs
  ascend_serve.fleet.npu_pci_facts:

- name: Show them
  ansible.builtin.debug:
    var: ascend_pci_npus
"""

RETURN = r"""
ansible_facts:
  description: Sets C(ascend_pci_npus), the NPU functions found under O(sysfs_pci_path).
  returned: always
  type: dict
  contains:
    ascend_pci_npus:
      description:
        - One entry per NPU PCI function, sorted by address; empty without any (or without
          O(sysfs_pci_path)).
        - C(chip_family) from the device ID, C(unknown(<device>)) for an ID it does not know;
          C(numa_node) -1 where the kernel does not say.
      type: list
      elements: dict
      sample:
        - address: "0000:c1:00.0"
          device: "0xd802"
          chip_family: "910B"
          numa_node: 1
"""

import os

from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import facts_main

HUAWEI_VENDOR = "0x19e5"
ACCELERATOR_CLASS_PREFIX = "0x1200"
CHIP_FAMILIES = {
    "0xd801": "910",
    "0xd802": "910B",
    "0xd803": "910C",
    "0xd500": "310P",
}


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip().lower()
    except (OSError, UnicodeDecodeError):
        return ""


def scan(pci_path: str) -> list[dict[str, object]]:
    """Return the NPU functions found under ``pci_path`` (empty when there are none)."""
    found: list[dict[str, object]] = []
    try:
        entries = sorted(os.listdir(pci_path))
    except FileNotFoundError:
        return found
    for address in entries:
        base = os.path.join(pci_path, address)
        if _read(os.path.join(base, "vendor")) != HUAWEI_VENDOR:
            continue
        if not _read(os.path.join(base, "class")).startswith(ACCELERATOR_CLASS_PREFIX):
            continue
        device = _read(os.path.join(base, "device"))
        numa = _read(os.path.join(base, "numa_node"))
        found.append(
            {
                "address": address.lower(),
                "device": device,
                "chip_family": CHIP_FAMILIES.get(device, f"unknown({device})"),
                "numa_node": int(numa) if numa.lstrip("-").isdigit() else -1,
            }
        )
    return found


def main() -> None:
    facts_main("ascend_pci_npus", lambda module: scan(module.params["sysfs_pci_path"]),
               {"sysfs_pci_path": {"type": "path", "default": "/sys/bus/pci/devices"}})


if __name__ == "__main__":
    main()
