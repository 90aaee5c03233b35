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

from ansible_collections.ascend_serve.fleet.plugins.module_utils.host_tuning_read import (
    ARGUMENT_SPEC,
    ERRORS,
    read,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main


def main() -> None:
    result_main(ARGUMENT_SPEC, read, errors=ERRORS)


if __name__ == "__main__":
    main()
