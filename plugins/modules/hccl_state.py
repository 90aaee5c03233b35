#!/usr/bin/python
"""Read, in one round trip, the host NICs the hccl role chooses from and the files it writes."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hccl_state
short_description: Read the host's NICs, their IPv4 addresses and the hccl role's files
description:
  - The one remote read of the C(ascend_serve.fleet.hccl) role, in place of a fact gathering of
    the network subset. It lists the host's network interfaces (C(/sys/class/net)), the primary
    IPv4 address of each (the first of C(ip -4 -o addr show), as Ansible's network facts take
    it) and the interface of the default IPv4 route (C(ip -4 route get), as Ansible's
    C(default_ipv4) does, falling back on C(/proc/net/route)).
  - It also returns the state of the files the role writes, so that the role rewrites a file
    only where its rendered text differs.
version_added: 0.4.0
options:
  files:
    description: Files whose state (sha1, mode, owner, group) is returned.
    type: list
    elements: path
    default: []
  route_probe:
    description: The address whose route gives the default interface (no packet is sent).
    type: str
    default: 8.8.8.8
  ip:
    description: The C(ip) program (iproute2), looked up on C(PATH), in C(/sbin), C(/usr/sbin).
    type: str
    default: ip
  sysfs_net:
    description: The kernel's network class directory.
    type: path
    default: /sys/class/net
extends_documentation_fragment:
  - ascend_serve.fleet.common
  - ascend_serve.fleet.common.read_only
"""

EXAMPLES = r"""
- name: Read the host's NICs and the HCCL env file
  ascend_serve.fleet.hccl_state:
    files: [/etc/ascend-serve/hccl.env]
  register: _hccl_state
"""

RETURN = r"""
interfaces:
  description: Every network interface, by name, with its primary IPv4 address (null for none).
  returned: always
  type: dict
  sample: {lo: {ipv4: 127.0.0.1}, eth0: {ipv4: 192.0.2.11}, npu0: {ipv4: null}}
default_interface:
  description: The interface of the default IPv4 route; empty when there is none.
  returned: always
  type: str
  sample: eth0
files:
  description:
    - State of each of O(files), by path; null for a path that does not exist.
    - Its C(sha1), C(mode) (such as C(0644)), C(owner), C(group), C(isdir) and C(islnk).
  returned: always
  type: dict
"""

import os
import re
import subprocess
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.file_state import file_state
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main

# "2: eth0    inet 192.0.2.11/24 brd 192.0.2.255 scope global eth0\       valid_lft ..."
_ADDR = re.compile(r"^\d+:\s+(\S+?)(?:@\S+)?\s+inet\s+([0-9.]+)/")
_DEV = re.compile(r"\bdev\s+(\S+)")


def _ip(ip: str, *args: str) -> str:
    try:
        done = subprocess.run([ip, *args], capture_output=True, text=True, check=False,
                              timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def addresses(text: str) -> dict[str, str]:
    """Interface -> its first IPv4 address, from ``ip -4 -o addr show``."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _ADDR.match(line)
        if match:
            found.setdefault(match.group(1), match.group(2))
    return found


def default_interface(route_get: str, proc_route: str = "/proc/net/route") -> str:
    """The device of ``ip -4 route get`` output; else the default route of /proc/net/route."""
    match = _DEV.search(route_get)
    if match:
        return match.group(1)
    try:
        with open(proc_route, encoding="ascii") as fh:
            for line in fh.read().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 7 and fields[1] == "00000000" and fields[7] == "00000000":
                    return fields[0]
    except OSError:
        pass
    return ""


def run(module: Any) -> dict[str, Any]:
    params = module.params
    try:
        names = sorted(os.listdir(params["sysfs_net"]))
    except OSError:
        names = []
    ip = module.get_bin_path(params["ip"], opt_dirs=["/sbin", "/usr/sbin"]) or params["ip"]
    ipv4 = addresses(_ip(ip, "-4", "-o", "addr", "show"))
    names = sorted(set(names) | set(ipv4))
    return {
        "changed": False,
        "interfaces": {name: {"ipv4": ipv4.get(name)} for name in names},
        "default_interface": default_interface(_ip(ip, "-4", "route", "get",
                                                   params["route_probe"])),
        "files": {path: file_state(path) for path in params["files"]},
    }


def main() -> None:
    result_main(
        {
            "files": {"type": "list", "elements": "path", "default": []},
            "route_probe": {"type": "str", "default": "8.8.8.8"},
            "ip": {"type": "str", "default": "ip"},
            "sysfs_net": {"type": "path", "default": "/sys/class/net"},
        },
        run,
    )


if __name__ == "__main__":
    main()
