#!/usr/bin/python
"""Read the installed NPU driver, the chips' firmware and the driver role's ledger in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: npu_driver_facts
short_description: Installed Ascend NPU driver and firmware versions
description:
  - Reads C(<install_path>/driver/version.info) (C(Version=); a file in a layout it cannot read
    fails the task, naming the file and the line), runs the driver's
    C(upgrade-tool --device_index -1 --system_version) for the firmware of every chip when the
    driver is there, reads the state ledger of an earlier run and the kernel's boot id.
  - One round trip per host instead of one per file.
version_added: 0.1.0
options:
  ledger_path:
    description: The npu_driver role's state ledger (local facts file).
    type: path
    default: /etc/ansible/facts.d/ascend_npu_driver.fact
extends_documentation_fragment:
  - ascend_serve.fleet.facts
  - ascend_serve.fleet.common.install_path
"""

EXAMPLES = r"""
- name: Read what is installed
  ascend_serve.fleet.npu_driver_facts:

- name: Say whether an earlier install waits for a reboot
  ansible.builtin.debug:
    msg: "{{ ansible_facts['ascend_npu_driver_state'].ledger.reboot_pending | default(false) }}"
"""

RETURN = r"""
ansible_facts:
  description: >-
    Sets C(ascend_npu_driver_state), the driver and firmware installed under O(install_path),
    the npu_driver role's ledger and the boot id.
  returned: always
  type: dict
  contains:
    ascend_npu_driver_state:
      description:
        - C(driver_version), C('') without a driver.
        - C(upgrade_tool), whether the driver's C(upgrade-tool) is there to run;
          C(firmware_versions), the distinct firmware versions it reports for the chips, sorted,
          and C(firmware_unreadable_chips), how many chips it reports no version for (none of
          either without the tool).
        - C(ledger), the record at O(ledger_path) (empty when it is missing or not JSON), and
          C(boot_id), the kernel's boot id.
      type: dict
      sample:
        driver_version: 25.5.0
        firmware_versions: [7.8.0.2.212]
        firmware_unreadable_chips: 0
        upgrade_tool: true
        ledger: {reboot_pending: true}
        boot_id: 5b0c9f0e-...
"""

import json
import os
import re
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.ascend_files import (
    AscendFileError,
    read_driver_info,
    read_file,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import (
    INSTALL_PATH_ARG,
    facts_main,
)

FIRMWARE_RE = re.compile(r'"version":"([^"]+)"')


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


def read_state(module: Any) -> dict[str, object]:
    base = module.params["install_path"]
    try:
        driver = read_file(read_driver_info, os.path.join(base, "driver", "version.info"))
    except (AscendFileError, OSError) as exc:
        module.fail_json(msg=f"cannot read the installed driver: {exc}")
    tool = os.path.join(base, "driver", "tools", "upgrade-tool")
    firmware: list[str] = []
    unreadable = 0
    if os.access(tool, os.X_OK):
        rc, out, err = module.run_command([tool, "--device_index", "-1", "--system_version"])
        if rc != 0:
            module.fail_json(msg=f"{tool} failed with rc {rc}: {err.strip()}")
        found = FIRMWARE_RE.findall(out)
        unreadable = sum(1 for v in found if v == "NA")
        firmware = sorted({v for v in found if v != "NA"})
    ledger_text = _read(module.params["ledger_path"])
    try:
        ledger = json.loads(ledger_text) if ledger_text else {}
    except ValueError:
        ledger = {}  # a damaged ledger is rewritten by the role
    return {
        "driver_version": driver["version"] if driver else "",
        "firmware_versions": firmware,
        "firmware_unreadable_chips": unreadable,
        "upgrade_tool": os.access(tool, os.X_OK),
        "ledger": ledger,
        "boot_id": _read("/proc/sys/kernel/random/boot_id").strip(),
    }


def main() -> None:
    facts_main("ascend_npu_driver_state", read_state, {
        **INSTALL_PATH_ARG,
        "ledger_path": {"type": "path", "default": "/etc/ansible/facts.d/ascend_npu_driver.fact"},
    })


if __name__ == "__main__":
    main()
