#!/usr/bin/python
"""Read the installed CANN toolkit(s), kernels/ops, NNAL and the driver version in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cann_facts
short_description: Installed Ascend CANN toolkit, kernels/ops and NNAL versions
description:
  - Finds every C(ascend_toolkit_install.info) under O(install_path) (C(ascend-toolkit/<ver>/)
    up to CANN 8.3, C(cann-<ver>/) from 8.5) and reads its C(version=); for each toolkit root
    the kernels/ops C(opp_kernel/version.info); NNAL's C(nnal/atb/latest/version.info); and the
    driver's C(driver/version.info). One round trip; changes nothing.
version_added: 0.1.0
options:
  install_path:
    description: CANN install path.
    type: path
    default: /usr/local/Ascend
author:
  - ascend-serve developers
"""

EXAMPLES = r"""
- name: Read the installed CANN
  ascend_serve.fleet.cann_facts:
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    ascend_cann_state:
      description: Installed versions.
      type: dict
      sample:
        driver_version: 25.5.0
        toolkits: [{version: 8.5.0, root: /usr/local/Ascend/cann-8.5.0, kernels_version: 8.5.0}]
        nnal_version: 8.5.0
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

INFO_NAME = "ascend_toolkit_install.info"
MAX_DEPTH = 4


def _value(path: str, key: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            match = re.search(rf"^{key}=(\S+)", fh.read(), re.MULTILINE)
    except FileNotFoundError:
        return ""
    return match.group(1) if match else ""


def find_toolkits(base: str) -> list[dict[str, str]]:
    found: list[dict[str, str]] = []
    start = base.rstrip("/").count("/")
    for dirpath, dirnames, filenames in os.walk(base):  # does not follow the "latest" links
        if dirpath.count("/") - start >= MAX_DEPTH:
            dirnames[:] = []
        if INFO_NAME in filenames:
            root = os.path.dirname(dirpath)
            found.append(
                {
                    "version": _value(os.path.join(dirpath, INFO_NAME), "version"),
                    "root": root,
                    "kernels_version": _value(
                        os.path.join(root, "opp_kernel", "version.info"), "Version"
                    ),
                }
            )
    return sorted(found, key=lambda t: t["root"])


def main() -> None:
    module = AnsibleModule(
        argument_spec={"install_path": {"type": "path", "default": "/usr/local/Ascend"}},
        supports_check_mode=True,
    )
    base = module.params["install_path"]
    module.exit_json(
        changed=False,
        ansible_facts={
            "ascend_cann_state": {
                "driver_version": _value(os.path.join(base, "driver", "version.info"), "Version"),
                "toolkits": find_toolkits(base) if os.path.isdir(base) else [],
                "nnal_version": _value(
                    os.path.join(base, "nnal", "atb", "latest", "version.info"), "version"
                ),
            }
        },
    )


if __name__ == "__main__":
    main()
