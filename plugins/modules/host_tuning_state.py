#!/usr/bin/python
"""Read, in one round trip, what the host_tuning role decides from."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_tuning_state
short_description: Read kernel settings, CPU governors, PAM limits and packages in one round trip
description:
  - The one remote read of the C(ascend_serve.fleet.host_tuning) role. It returns, for each
    kernel setting, whether C(/proc/sys/<key>) exists, whether this process may write it and
    its running value; the settings persisted in the role's C(sysctl.d) file; the cpufreq
    policies' governors, whether they are writable and which governors the driver offers; the
    entries of the role's PAM limits file; the state of further files (sha1, mode, owner); and
    which OS packages are missing (read from the package database, without starting apt or dnf).
  - The role compares this with what it wants and runs only the tasks that change something.
version_added: 0.4.0
options:
  sysctl:
    description: Kernel settings (C(vm.swappiness)) whose C(/proc/sys) state is returned.
    type: list
    elements: str
    default: []
  sysctl_file:
    description: A C(sysctl.d) file whose C(key=value) settings are returned.
    type: path
  governor:
    description: Whether to read the cpufreq policies' governors.
    type: bool
    default: false
  cpu_dir:
    description: The kernel's CPU directory, where the cpufreq policies are.
    type: path
    default: /sys/devices/system/cpu
  limits_file:
    description: A C(limits.d) file whose entries are returned.
    type: path
  files:
    description: Further files whose state (sha1, mode, owner, group) is returned.
    type: list
    elements: path
    default: []
extends_documentation_fragment:
  - ascend_serve.fleet.common
  - ascend_serve.fleet.common.read_only
  - ascend_serve.fleet.common.packages
"""

EXAMPLES = r"""
- name: Read what host_tuning manages
  ascend_serve.fleet.host_tuning_state:
    sysctl: [vm.swappiness, kernel.numa_balancing]
    sysctl_file: /etc/sysctl.d/90-ascend-serve.conf
    governor: true
    limits_file: /etc/security/limits.d/90-ascend-serve.conf
    files: [/etc/systemd/system/ascend-serve-cpu-governor.service]
    packages: [libjemalloc2]
  register: _host_tuning_state
"""

RETURN = r"""
sysctl:
  description: Each setting of O(sysctl) as C(/proc/sys/<key>) shows it.
  returned: always
  type: dict
  sample: {vm.swappiness: {exists: true, writable: false, value: "60"}}
  contains:
    exists:
      description: Whether C(/proc/sys/<key>) exists (this kernel has the setting).
      type: bool
    writable:
      description: Whether this process may write it.
      type: bool
    value:
      description: The running value, blanks squeezed; null when it cannot be read.
      type: str
sysctl_file:
  description: The settings of O(sysctl_file), by key (empty when it does not exist).
  returned: always
  type: dict
  sample: {vm.swappiness: "0"}
governor:
  description: The cpufreq policies (empty lists without O(governor)).
  returned: always
  type: dict
  contains:
    files:
      description:
        - The policies' C(scaling_governor) files, sorted (C(cpufreq/policy*/) and, on kernels
          without policy directories, C(cpu*/cpufreq/)).
      type: list
      elements: str
    current:
      description: The governor each of them is set to, in the same order.
      type: list
      elements: str
    writable:
      description: Whether this process may write the first of them.
      type: bool
    available:
      description: The governors the driver offers (C(scaling_available_governors) of the first).
      type: list
      elements: str
limits:
  description: The entries of O(limits_file) as C([domain, type, item, value]) (comments left out).
  returned: always
  type: list
  elements: list
files:
  description:
    - State of each of O(files), by path; null for a path that does not exist.
    - Its C(sha1), C(mode) (such as C(0644)), C(owner), C(group), C(isdir) and C(islnk).
  returned: always
  type: dict
missing_packages:
  description: The packages of O(packages) that are not installed, in their order.
  returned: always
  type: list
  elements: str
"""

import glob
import os
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.file_state import file_state
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main
from ansible_collections.ascend_serve.fleet.plugins.module_utils.package_db import (
    PACKAGES_ARGS,
    PackageDbError,
    missing_packages,
)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def sysctl_state(key: str, proc: str = "/proc/sys") -> dict[str, Any]:
    path = os.path.join(proc, key.replace(".", "/"))
    if not os.path.exists(path):
        return {"exists": False, "writable": False, "value": None}
    text = _read(path)
    return {"exists": True, "writable": os.access(path, os.W_OK),
            "value": " ".join(text.split()) if text is not None else None}


def sysctl_file(path: str | None) -> dict[str, str]:
    """``key=value`` settings of a sysctl.d file, as ansible.posix.sysctl reads them."""
    settings: dict[str, str] = {}
    for line in (_read(path) or "").splitlines() if path else []:
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        settings[key.strip()] = value.strip()
    return settings


def governors(cpu_dir: str) -> dict[str, Any]:
    """The policies' scaling_governor files: policy directories, else the per-CPU ones that
    are real directories (a link to a policy is the same file)."""
    files = glob.glob(os.path.join(cpu_dir, "cpufreq", "policy*", "scaling_governor"))
    files += [f for f in glob.glob(os.path.join(cpu_dir, "cpu*", "cpufreq", "scaling_governor"))
              if not os.path.islink(os.path.dirname(f))]
    files = sorted(f for f in files if os.path.isfile(f))
    if not files:
        return {"files": [], "current": [], "writable": False, "available": []}
    offer = _read(os.path.join(os.path.dirname(files[0]), "scaling_available_governors"))
    return {"files": files, "current": [(_read(f) or "").strip() for f in files],
            "writable": os.access(files[0], os.W_OK), "available": (offer or "").split()}


def limits(path: str | None) -> list[list[str]]:
    entries = []
    for line in (_read(path) or "").splitlines() if path else []:
        fields = line.split()
        if len(fields) >= 4 and not fields[0].startswith("#"):
            entries.append(fields[:4])
    return entries


def run(module: Any) -> dict[str, Any]:
    params = module.params
    return {
        "changed": False,
        "sysctl": {key: sysctl_state(key) for key in params["sysctl"]},
        "sysctl_file": sysctl_file(params["sysctl_file"]),
        "governor": (governors(params["cpu_dir"]) if params["governor"] else
                     {"files": [], "current": [], "writable": False, "available": []}),
        "limits": limits(params["limits_file"]),
        "files": {path: file_state(path) for path in params["files"]},
        "missing_packages": missing_packages(params["packages"], params["package_manager"],
                                             params["dpkg_status"]),
    }


def main() -> None:
    result_main(
        {
            "sysctl": {"type": "list", "elements": "str", "default": []},
            "sysctl_file": {"type": "path"},
            "governor": {"type": "bool", "default": False},
            "cpu_dir": {"type": "path", "default": "/sys/devices/system/cpu"},
            "limits_file": {"type": "path"},
            "files": {"type": "list", "elements": "path", "default": []},
            **PACKAGES_ARGS,
        },
        run,
        errors=(PackageDbError,),
    )


if __name__ == "__main__":
    main()
