"""Documentation every module of ascend_serve.fleet shares (``ascend_serve.fleet.common``)."""

from __future__ import annotations


class ModuleDocFragment:
    # Every module: its authors and the attributes it declares (a module says its own check and
    # diff mode support, or takes them from READ_ONLY).
    DOCUMENTATION = r"""
author:
  - ascend-serve developers
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying
      the target.
  diff_mode:
    description: Will return details on what has changed (or would change in check mode) when
      in diff mode.
  platform:
    description: Target OS families that can be operated against.
    support: full
    platforms: posix
"""

    # ascend_serve.fleet.common.read_only: a module that only reads the host.
    READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    details: It only reads, so it runs in check mode as it does without it.
  diff_mode:
    support: none
notes:
  - Changes nothing on the host.
"""

    # ascend_serve.fleet.common.install_path: where the vendor's installers put the NPU driver,
    # its tools and CANN.
    INSTALL_PATH = r"""
options:
  install_path:
    description: The Ascend install path, where the NPU driver and CANN are installed.
    type: path
    default: /usr/local/Ascend
"""

    # ascend_serve.fleet.common.packages: OS packages whose absence a state module reports, read
    # from the package database (module_utils/package_db.py, PACKAGES_ARGS), never the manager.
    PACKAGES = r"""
options:
  packages:
    description: OS packages that must be installed; those that are not are returned.
    type: list
    elements: str
    default: []
  package_manager:
    description: The package database of O(packages); C(auto) reads dpkg's where it exists.
    type: str
    choices: [auto, apt, dnf]
    default: auto
  dpkg_status:
    description: The dpkg status database.
    type: path
    default: /var/lib/dpkg/status
"""
