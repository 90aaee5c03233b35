#!/usr/bin/python
"""Report the host's RDMA devices (RoCE / InfiniBand) from the kernel's sysfs layout."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_facts
short_description: Report RDMA devices, their ports' link state, GIDs and RoCE versions
description:
  - Reads the kernel's RDMA class directory (O(sysfs_path), C(/sys/class/infiniband)), with one
    directory per device (C(mlx5_0), C(hns_0), C(rxe0), ...) with C(node_type), C(fw_ver),
    C(node_guid), the C(device) link to the PCI function, and C(ports/<n>/) with C(state),
    C(phys_state), C(link_layer), C(rate), C(gids/<i>), C(gid_attrs/types/<i>) and
    C(gid_attrs/ndevs/<i>).
  - "The kernel's C(4: ACTIVE) / C(5: LinkUp) forms are reported without the number."
  - All-zero GIDs (empty slots of the GID table) are skipped. A file that cannot be read (the
    kernel answers EINVAL for the attributes of empty GID slots) is skipped, never an error.
  - A missing O(sysfs_path) means a host without RDMA devices, an empty list, not an error.
version_added: 0.1.0
options:
  sysfs_path:
    description:
      - The kernel's RDMA class directory. Point it elsewhere to read a captured or fake tree.
    type: path
    default: /sys/class/infiniband
  packages:
    description:
      - OS packages of the RDMA user space (rdma-core, ...) whose absence RV(missing_packages)
        reports, read from the package database (the dpkg status file, or C(rpm --query
        --whatprovides)); apt or dnf is not started.
    type: list
    elements: str
    default: []
    version_added: 0.4.0
  package_manager:
    description: The package database of O(packages); C(auto) reads dpkg's where it exists.
    type: str
    choices: [auto, apt, dnf]
    default: auto
    version_added: 0.4.0
  dpkg_status:
    description: The dpkg status database.
    type: path
    default: /var/lib/dpkg/status
    version_added: 0.4.0
extends_documentation_fragment:
  - ascend_serve.fleet.facts
"""

EXAMPLES = r"""
- name: Detect RDMA devices
  ascend_serve.fleet.rdma_facts:

- name: Count the active RoCE v2 ports
  ansible.builtin.debug:
    msg: >-
      {{ rdma_devices | map(attribute='ports') | flatten | selectattr('state', 'eq', 'ACTIVE')
         | selectattr('roce_versions', 'contains', 'v2') | list | length }}
"""

RETURN = r"""
missing_packages:
  description: The packages of O(packages) that are not installed, in their order.
  returned: always
  type: list
  elements: str
  sample: [perftest]
  version_added: 0.4.0
ansible_facts:
  description: Sets C(rdma_devices), the RDMA devices the kernel lists under O(sysfs_path).
  returned: always
  type: dict
  contains:
    rdma_devices:
      description:
        - One entry per RDMA device, sorted by name; empty on a host without RDMA.
        - A value the kernel does not expose (or that cannot be read) is null.
      type: list
      elements: dict
      sample:
        - name: mlx5_0
          node_type: CA
          fw_ver: "16.35.2000"
          node_guid: "b859:9f03:00d4:1a2e"
          pci_address: "0000:03:00.0"
          ports:
            - port: 1
              state: ACTIVE
              phys_state: LinkUp
              link_layer: Ethernet
              rate: "100 Gb/sec (4X EDR)"
              rate_gbps: 100.0
              gids:
                - {index: 0, gid: "fe80:0000:0000:0000:ba59:9fff:fed4:1a2e",
                   type: "IB/RoCE v1", roce_version: v1, ndev: enp3s0f0np0}
                - {index: 1, gid: "fe80:0000:0000:0000:ba59:9fff:fed4:1a2e",
                   type: "RoCE v2", roce_version: v2, ndev: enp3s0f0np0}
              roce_versions: [v1, v2]
              netdevs: [enp3s0f0np0]
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend_serve.fleet.plugins.module_utils.package_db import (
    DPKG_STATUS,
    MANAGERS,
    PackageDbError,
    missing_packages,
)

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")


def _read(path: str) -> str | None:
    """The file's text without surrounding blanks; None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:  # missing, a directory, EINVAL from an empty GID slot, EACCES
        return None


def _entries(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _numeric(names: list[str]) -> list[int]:
    return sorted(int(n) for n in names if n.isdigit())


def strip_number(value: str | None) -> str | None:
    """``"4: ACTIVE"`` -> ``"ACTIVE"``, ``"5: LinkUp"`` -> ``"LinkUp"``, ``"1: CA"`` -> ``"CA"``."""
    if value is None:
        return None
    number, sep, text = value.partition(":")
    return text.strip() if sep and number.strip().isdigit() else value


def roce_version(gid_type: str | None) -> str | None:
    """``"RoCE v2"`` -> ``"v2"``, ``"IB/RoCE v1"`` (or ``"RoCE v1"``) -> ``"v1"``."""
    if gid_type is None:
        return None
    match = re.search(r"RoCE\s*v([12])", gid_type, re.IGNORECASE)
    return f"v{match.group(1)}" if match else None


def rate_gbps(rate: str | None) -> float | None:
    """``"100 Gb/sec (4X EDR)"`` -> ``100.0``; None when the text has no rate."""
    match = RATE.match(rate or "")
    return float(match.group(1)) if match else None


def pci_address(device_dir: str) -> str | None:
    """The PCI function behind ``<device>/device`` (a symlink), or None (rxe, siw, none)."""
    link = os.path.join(device_dir, "device")
    if not os.path.lexists(link):
        return None
    name = os.path.basename(os.path.realpath(link)).lower()
    return name if PCI_ADDRESS.match(name) else None


def read_gids(port_dir: str, ethernet: bool) -> list[dict[str, object]]:
    """The port's non-zero GIDs, by index, with their type, RoCE version and netdev."""
    gids: list[dict[str, object]] = []
    for index in _numeric(_entries(os.path.join(port_dir, "gids"))):
        gid = _read(os.path.join(port_dir, "gids", str(index)))
        if not gid or gid.lower() == ZERO_GID:
            continue
        gid_type = _read(os.path.join(port_dir, "gid_attrs", "types", str(index)))
        ndev = _read(os.path.join(port_dir, "gid_attrs", "ndevs", str(index)))
        gids.append(
            {
                "index": index,
                "gid": gid.lower(),
                "type": gid_type or None,
                "roce_version": roce_version(gid_type) if ethernet else None,
                "ndev": ndev or None,
            }
        )
    return gids


def read_port(port_dir: str, number: int) -> dict[str, object]:
    link_layer = _read(os.path.join(port_dir, "link_layer"))
    ethernet = link_layer == "Ethernet"
    rate = _read(os.path.join(port_dir, "rate"))
    gids = read_gids(port_dir, ethernet)
    return {
        "port": number,
        "state": strip_number(_read(os.path.join(port_dir, "state"))),
        "phys_state": strip_number(_read(os.path.join(port_dir, "phys_state"))),
        "link_layer": link_layer,
        "rate": rate,
        "rate_gbps": rate_gbps(rate),
        "gids": gids,
        "roce_versions": sorted({str(g["roce_version"]) for g in gids if g["roce_version"]}),
        "netdevs": sorted({str(g["ndev"]) for g in gids if g["ndev"]}),
    }


def read_device(device_dir: str) -> dict[str, object]:
    ports_dir = os.path.join(device_dir, "ports")
    return {
        "name": os.path.basename(device_dir),
        "node_type": strip_number(_read(os.path.join(device_dir, "node_type"))),
        "fw_ver": _read(os.path.join(device_dir, "fw_ver")) or None,
        "node_guid": _read(os.path.join(device_dir, "node_guid")) or None,
        "pci_address": pci_address(device_dir),
        "ports": [
            read_port(os.path.join(ports_dir, str(n)), n) for n in _numeric(_entries(ports_dir))
        ],
    }


def scan(sysfs_path: str) -> list[dict[str, object]]:
    """Every RDMA device under ``sysfs_path``, sorted by name (empty when there is none)."""
    devices = []
    for name in sorted(_entries(sysfs_path)):
        device_dir = os.path.join(sysfs_path, name)
        if os.path.isdir(device_dir):
            devices.append(read_device(device_dir))
    return devices


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sysfs_path": {"type": "path", "default": "/sys/class/infiniband"},
            "packages": {"type": "list", "elements": "str", "default": []},
            "package_manager": {"type": "str", "choices": MANAGERS, "default": "auto"},
            "dpkg_status": {"type": "path", "default": DPKG_STATUS},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        missing = missing_packages(params["packages"], params["package_manager"],
                                   params["dpkg_status"])
    except PackageDbError as exc:
        module.fail_json(msg=f"cannot read the package database: {exc}")
    module.exit_json(changed=False, ansible_facts={"rdma_devices": scan(params["sysfs_path"])},
                     missing_packages=missing)


if __name__ == "__main__":
    main()
