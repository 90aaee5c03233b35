#!/usr/bin/python
"""Free space for paths that may not exist yet, measured on the filesystem that will hold them."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: disk_space_facts
short_description: Free space on the filesystems that hold (or will hold) given paths
description:
  - For every path, walks up to the nearest existing directory and measures it with
    C(statvfs(2)), so a path created later by an installer is checked on the filesystem it will
    land on. Also reports that filesystem's mount point.
  - Works where C(ansible_mounts) is incomplete (containers, bind mounts).
version_added: 0.1.0
options:
  paths:
    description: Absolute paths.
    type: list
    elements: path
    required: true
extends_documentation_fragment:
  - ascend_serve.fleet.facts
"""

EXAMPLES = r"""
- name: Measure space for the CANN install path
  ascend_serve.fleet.disk_space_facts:
    paths: [/usr/local/Ascend]

- name: Stop with less than 20 GiB free there
  ansible.builtin.assert:
    that: ansible_facts['ascend_disk_space']['/usr/local/Ascend'].free_bytes >= 20 * 1024 ** 3
"""

RETURN = r"""
ansible_facts:
  description: Sets C(ascend_disk_space), the space of the filesystem holding each of O(paths).
  returned: always
  type: dict
  contains:
    ascend_disk_space:
      description:
        - One entry per path of O(paths), by that path.
        - C(measured_at), the nearest existing directory, and C(mount), the mount point of its
          filesystem; C(free_bytes), the space an unprivileged user may still take there, and
          C(total_bytes), the filesystem's size.
      type: dict
      sample:
        /usr/local/Ascend: {"measured_at": "/usr/local", "mount": "/", "free_bytes": 1048576,
                            "total_bytes": 107374182400}
"""

import os
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import facts_main


def measure(path: str) -> dict[str, object]:
    existing = os.path.abspath(path)
    while not os.path.isdir(existing):
        existing = os.path.dirname(existing)
    mount = existing
    while not os.path.ismount(mount):
        mount = os.path.dirname(mount)
    st = os.statvfs(existing)
    return {
        "measured_at": existing,
        "mount": mount,
        "free_bytes": st.f_bavail * st.f_frsize,
        "total_bytes": st.f_blocks * st.f_frsize,
    }


def read(module: Any) -> dict[str, dict[str, object]]:
    bad = [p for p in module.params["paths"] if not os.path.isabs(p)]
    if bad:
        module.fail_json(msg=f"paths must be absolute: {', '.join(bad)}")
    return {p: measure(p) for p in module.params["paths"]}


def main() -> None:
    facts_main("ascend_disk_space", read,
               {"paths": {"type": "list", "elements": "path", "required": True}})


if __name__ == "__main__":
    main()
