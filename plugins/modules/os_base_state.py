#!/usr/bin/python
"""Read, in one round trip, what os_base manages: repositories, packages, kernel holds."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: os_base_state
short_description: Read the repositories, packages and kernel holds os_base manages, as a plan
description:
  - The one remote read of the C(ascend_serve.fleet.os_base) role. It reads the host's package
    database and repository files (no package manager is started, nothing is written) and returns
    what the role would have to do; a converged host returns an empty plan and the role's apply
    tasks are skipped.
  - "apt: the installed packages, their versions and C(Provides) and the holds come from
    C(/var/lib/dpkg/status) (the file C(dpkg-query) reads); a repository is present when one
    active line of C(/etc/apt/sources.list) or C(/etc/apt/sources.list.d/*.list) equals its
    line, whitespace aside (as C(ansible.builtin.apt_repository) decides)."
  - "dnf: the installed packages come from one C(rpm --query --all) (name, epoch, version,
    release, arch and provides); a kernel package is held when the versionlock plugin's lock
    list has C(NAME-EPOCH:VERSION-RELEASE.*) for each installed version of it (the entries
    C(community.general.dnf_versionlock) writes); a repository is present when
    C(/etc/yum.repos.d/NAME.repo) has the section with the values
    C(ansible.builtin.yum_repository) writes."
  - A package name matches an installed package by name, by C(Provides), or (dnf) as
    NAME-VERSION, NAME-VERSION-RELEASE or NAME-VERSION-RELEASE.ARCH; an apt name may carry
    C(=VERSION) or C(:ARCH), which must match too.
version_added: 0.4.0
options:
  package_manager:
    description: Which package database and repository format to read.
    type: str
    choices: [apt, dnf]
    required: true
  packages:
    description: The packages that must be installed.
    type: list
    elements: str
    default: []
  hold:
    description: Kernel packages to hold when installed (apt-mark hold, dnf versionlock).
    type: list
    elements: str
    default: []
  apt_repositories:
    description: apt repositories, as C(os_base_apt_repositories) gives them.
    type: list
    elements: dict
    default: []
  dnf_repositories:
    description: dnf repositories, as C(os_base_dnf_repositories) gives them.
    type: list
    elements: dict
    default: []
  disable_sources:
    description:
      - Directories and file patterns of repository definitions to disable, without the files
        of I(managed_files). Empty when default repositories stay enabled.
    type: list
    elements: dict
    default: []
  managed_files:
    description: File names (no directory) of the repository definitions the role writes.
    type: list
    elements: str
    default: []
  dpkg_status:
    description: The dpkg status database.
    type: path
    default: /var/lib/dpkg/status
  apt_sources:
    description: Directory of apt's source lists.
    type: path
    default: /etc/apt
  yum_repos_dir:
    description: Directory of dnf's repository files.
    type: path
    default: /etc/yum.repos.d
  versionlock_list:
    description: The versionlock plugin's lock list.
    type: path
    default: /etc/dnf/plugins/versionlock.list
extends_documentation_fragment:
  - ascend_serve.fleet.common
  - ascend_serve.fleet.common.read_only
"""

EXAMPLES = r"""
- name: Read what os_base manages
  ascend_serve.fleet.os_base_state:
    package_manager: apt
    packages: [gcc, "linux-headers-{{ ansible_facts['kernel'] }}"]
    hold: ["linux-image-{{ ansible_facts['kernel'] }}"]
    apt_repositories:
      - name: internal
        repo: deb [trusted=yes] file:/srv/mirror ./
  register: _os_base_state
"""

RETURN = r"""
missing_packages:
  description: Packages of I(packages) that are not installed, in the given order.
  returned: always
  type: list
  elements: str
installed_hold:
  description: Packages of I(hold) that are installed.
  returned: always
  type: list
  elements: str
unheld:
  description: Packages of I(installed_hold) that are not held.
  returned: always
  type: list
  elements: str
repositories_to_write:
  description: Names of the repositories whose definition is missing or differs.
  returned: always
  type: list
  elements: str
sources_to_disable:
  description: Repository definition files to disable (rename to C(<file>.disabled)).
  returned: always
  type: list
  elements: str
converged:
  description: True when nothing of the above is to do.
  returned: always
  type: bool
"""

from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main
from ansible_collections.ascend_serve.fleet.plugins.module_utils.os_base_read import (
    ARGUMENT_SPEC,
    ERRORS,
    read,
)


def main() -> None:
    result_main(ARGUMENT_SPEC, read, errors=ERRORS)


if __name__ == "__main__":
    main()
