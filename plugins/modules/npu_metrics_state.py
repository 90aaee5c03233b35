#!/usr/bin/python
"""Read, in one round trip, what the npu_metrics role decides from on a node."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: npu_metrics_state
short_description: Read the NPU metrics writer's package, account, files, link and units
description:
  - The one remote read of the node side of the C(ascend_serve.fleet.npu_metrics) role. It
    returns which OS packages are missing (read from the package database, without starting
    apt or dnf), the writer's user (primary group, supplementary groups, shell, home) and group,
    the state of each file and directory the role writes (sha1, mode, owner, group), the target
    of each link it makes, and whether each systemd unit is active and enabled.
  - The role compares this with what it wants and runs only the tasks that change something.
version_added: 0.5.0
options:
  user:
    description: The account whose state is returned (C(user)).
    type: str
  group:
    description: The group whose existence is returned (C(group)).
    type: str
  files:
    description: Files and directories whose state (sha1, mode, owner, group) is returned.
    type: list
    elements: path
    default: []
  links:
    description: Paths whose link target is returned (C(links)).
    type: list
    elements: path
    default: []
  units:
    description: systemd units (with their suffix, such as C(.timer)) whose state is returned.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - ascend_serve.fleet.common
  - ascend_serve.fleet.common.read_only
  - ascend_serve.fleet.common.packages
"""

EXAMPLES = r"""
- name: Read what the npu_metrics role manages on a node
  ascend_serve.fleet.npu_metrics_state:
    packages: [prometheus-node-exporter]
    user: ascend-npu-metrics
    group: ascend-npu-metrics
    files: [/etc/systemd/system/ascend-npu-metrics.service]
    links: [/var/lib/prometheus/node-exporter/ascend_npu.prom]
    units: [prometheus-node-exporter.service, ascend-npu-metrics.timer]
  register: _npu_metrics_state
"""

RETURN = r"""
package_manager:
  description: The package database read for O(packages) (C(apt) or C(dnf)).
  returned: always
  type: str
  sample: apt
missing_packages:
  description: The packages of O(packages) that are not installed, in their order.
  returned: always
  type: list
  elements: str
user:
  description:
    - The account O(user); C(exists) false when there is none (or O(user) is not given).
    - Else its primary C(group), its supplementary C(groups) (sorted), C(shell) and C(home).
  returned: always
  type: dict
  sample: {exists: true, group: ascend-npu-metrics, groups: [], shell: /usr/sbin/nologin,
           home: /var/lib/ascend-serve/npu-metrics}
group:
  description: Whether the group O(group) exists (C(exists)).
  returned: always
  type: dict
  sample: {exists: true}
files:
  description:
    - State of each of O(files), by path; null for a path that does not exist.
    - Its C(sha1) (regular files), C(mode) (such as C(0644)), C(owner), C(group), C(isdir) and
      C(islnk); a link is followed.
  returned: always
  type: dict
links:
  description: The target of each of O(links), by path; null where the path is not a link.
  returned: always
  type: dict
  sample: {/textfile/ascend_npu.prom: /var/lib/ascend-serve/npu-metrics/ascend_npu.prom}
units:
  description:
    - Each of O(units), by name, with C(active) (C(systemctl is-active)) and C(enabled)
      (C(systemctl is-enabled)); both false where systemd does not know the unit or there is
      no systemctl.
  returned: always
  type: dict
  sample: {ascend-npu-metrics.timer: {active: true, enabled: true}}
"""

import os
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.account_state import (
    group_state,
    user_state,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.file_state import file_state
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main
from ansible_collections.ascend_serve.fleet.plugins.module_utils.package_db import (
    PACKAGES_ARGS,
    PackageDbError,
    manager,
    missing_packages,
)


def link_target(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:  # missing, or not a link
        return None


def unit_state(module: Any, name: str) -> dict[str, bool]:
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return {"active": False, "enabled": False}
    active, _, _ = module.run_command([systemctl, "is-active", "--quiet", name])
    enabled, _, _ = module.run_command([systemctl, "is-enabled", "--quiet", name])
    return {"active": active == 0, "enabled": enabled == 0}


def run(module: Any) -> dict[str, Any]:
    params = module.params
    return {
        "changed": False,
        "package_manager": manager(params["package_manager"], params["dpkg_status"]),
        "missing_packages": missing_packages(params["packages"], params["package_manager"],
                                             params["dpkg_status"]),
        "user": user_state(params["user"]),
        "group": group_state(params["group"]),
        "files": {path: file_state(path) for path in params["files"]},
        "links": {path: link_target(path) for path in params["links"]},
        "units": {name: unit_state(module, name) for name in params["units"]},
    }


def main() -> None:
    result_main(
        {
            **PACKAGES_ARGS,
            "user": {"type": "str"},
            "group": {"type": "str"},
            "files": {"type": "list", "elements": "path", "default": []},
            "links": {"type": "list", "elements": "path", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
        },
        run,
        errors=(PackageDbError,),
    )


if __name__ == "__main__":
    main()
