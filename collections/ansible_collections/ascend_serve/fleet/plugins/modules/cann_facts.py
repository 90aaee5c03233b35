#!/usr/bin/python
"""Read the installed CANN toolkit(s), kernels/ops, NNAL and the driver version in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cann_facts
short_description: Installed Ascend CANN toolkit, kernels/ops and NNAL versions
description:
  - Finds every C(ascend_toolkit_install.info) under O(install_path) (C(ascend-toolkit/<ver>/)
    up to CANN 8.3, C(cann-<ver>/) from 8.5) and reads its C(version=); C(ascend-toolkit/latest),
    a symlink or a directory of per-component symlinks, is not a toolkit of its own.
  - For each toolkit root the kernels/ops release, C(version_dir=) of C(opp_kernel/version.info)
    (up to CANN 8.3) or of C(opp/version.info) (from 8.5); its C(Version=) is a build number.
  - NNAL's release from C(nnal/atb/latest/version.info) (the value of its C(Ascend-cann-atb) line,
    in the C(key colon value) form of ATB's file) and the driver's C(Version=) from
    C(driver/version.info).
  - A version file in a layout it cannot read fails the task, naming the file and the line.
    One round trip.
version_added: 0.1.0
extends_documentation_fragment:
  - ascend_serve.fleet.facts
  - ascend_serve.fleet.common.install_path
"""

EXAMPLES = r"""
- name: Read the installed CANN
  ascend_serve.fleet.cann_facts:

- name: Show the CANN versions installed side by side
  ansible.builtin.debug:
    msg: "{{ ansible_facts['ascend_cann_state'].toolkits | map(attribute='version') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: Sets C(ascend_cann_state), what the version files under O(install_path) say.
  returned: always
  type: dict
  contains:
    ascend_cann_state:
      description:
        - C(driver_version) and C(nnal_version), C('') where that component is not installed.
        - C(toolkits), one entry per CANN toolkit sorted by C(root), with its C(version) and the
          C(kernels_version) of its kernels/ops (C('') without them); empty without any.
      type: dict
      sample:
        driver_version: 25.5.0
        toolkits: [{version: 8.5.0, root: /usr/local/Ascend/cann-8.5.0, kernels_version: 8.5.0}]
        nnal_version: 8.5.0
"""

import os
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.ascend_files import (
    AscendFileError,
    ops_version_info,
    read_component_version_info,
    read_driver_info,
    read_file,
    read_nnal_atb_info,
    read_toolkit_install_info,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import (
    INSTALL_PATH_ARG,
    facts_main,
)

INFO_NAME = "ascend_toolkit_install.info"
MAX_DEPTH = 4
# ascend-toolkit/latest is an alias of the installed toolkit: a symlink, or (CANN 8.2.x, corpus
# ls-toolkit-latest-8.2.RC2-symlinks.txt) a real directory of per-component symlinks with a real
# <arch>-linux/ directory in it. It is never a toolkit of its own.
ALIAS_NAMES = ("latest",)


def _version(reader: Any, path: str) -> str:
    info = read_file(reader, path)
    return str(info["version"]) if info else ""


def find_toolkits(base: str) -> list[dict[str, str]]:
    found: list[dict[str, str]] = []
    seen: set[str] = set()
    start = base.rstrip("/").count("/")
    for dirpath, dirnames, filenames in os.walk(base):  # does not follow symlinks
        if dirpath.count("/") - start >= MAX_DEPTH:
            dirnames[:] = []
        if os.path.basename(dirpath) == "ascend-toolkit":
            dirnames[:] = [d for d in dirnames if d not in ALIAS_NAMES]
        if INFO_NAME not in filenames:
            continue
        root = os.path.dirname(dirpath)
        if os.path.basename(root) in ALIAS_NAMES or os.path.realpath(root) in seen:
            continue
        seen.add(os.path.realpath(root))
        version = _version(read_toolkit_install_info, os.path.join(dirpath, INFO_NAME))
        found.append(
            {
                "version": version,
                "root": root,
                # the kernels/ops release: version_dir= of opp_kernel/version.info (up to
                # CANN 8.3) or opp/version.info (from 8.5); Version= there is a build number
                "kernels_version": _version(
                    read_component_version_info, os.path.join(root, ops_version_info(version))
                ),
            }
        )
    return sorted(found, key=lambda t: t["root"])


def cann_state(base: str) -> dict[str, object]:
    """What is installed under ``base``; raises AscendFileError on a file it cannot read."""
    return {
        "driver_version": _version(read_driver_info, os.path.join(base, "driver", "version.info")),
        "toolkits": find_toolkits(base) if os.path.isdir(base) else [],
        "nnal_version": _version(
            read_nnal_atb_info, os.path.join(base, "nnal", "atb", "latest", "version.info")
        ),
    }


def main() -> None:
    facts_main("ascend_cann_state", lambda module: cann_state(module.params["install_path"]),
               INSTALL_PATH_ARG, "cannot read the installed CANN", (AscendFileError, OSError))


if __name__ == "__main__":
    main()
