#!/usr/bin/python
"""Read the installed NPU driver, the chips' firmware, the driver role's ledger and its run user
and group in one call."""

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
  - Reads the driver's run user O(user) and run group O(group) as the user and group databases
    (NSS, as C(getent) does) have them, and who holds the uid O(uid) and the gid O(gid), so that
    the role decides on the controller whether to create or change them.
  - One round trip per host instead of one per file.
version_added: 0.1.0
options:
  ledger_path:
    description: The npu_driver role's state ledger (local facts file).
    type: path
    default: /etc/ansible/facts.d/ascend_npu_driver.fact
  user:
    description: The run user to report (C(run_user)); not read when unset.
    type: str
    version_added: 0.4.0
  group:
    description: The run group to report (C(run_group)); not read when unset.
    type: str
    version_added: 0.4.0
  uid:
    description: A uid to report the owner of (C(uid_owner)), e.g. a new run user's.
    type: int
    version_added: 0.4.0
  gid:
    description: A gid to report the owner of (C(gid_owner)), e.g. a new run group's.
    type: int
    version_added: 0.4.0
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

- name: Also read the run user and group, and who holds uid and gid 1000
  ascend_serve.fleet.npu_driver_facts:
    user: HwHiAiUser
    group: HwHiAiUser
    uid: 1000
    gid: 1000

- name: Say whether the run user is there
  ansible.builtin.debug:
    msg: "{{ ansible_facts['ascend_npu_driver_state'].run_user.exists }}"
"""

RETURN = r"""
ansible_facts:
  description: >-
    Sets C(ascend_npu_driver_state), the driver and firmware installed under O(install_path),
    the npu_driver role's ledger, the boot id, and the run user and group.
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
        - C(run_user), only when O(user) is set, the user O(user) - C(name), C(exists), and
          for a user that exists (null or C('') otherwise) C(uid), C(gid) (of its primary
          group), C(group) (that group's name, C('') when the gid has no group), C(comment)
          (the GECOS field), C(shell), C(home) and C(home_exists) (whether the home directory
          is there).
        - C(run_group), only when O(group) is set, the group O(group) - C(name), C(exists) and
          C(gid) (null when it does not exist).
        - C(uid_owner), only when O(uid) is set, the name of the user holding that uid, and
          C(gid_owner), only when O(gid) is set, the name of the group holding that gid
          (C('') when none does).
      type: dict
      sample:
        driver_version: 25.5.0
        firmware_versions: [7.8.0.2.212]
        firmware_unreadable_chips: 0
        upgrade_tool: true
        ledger: {reboot_pending: true}
        boot_id: 5b0c9f0e-...
        run_user: {name: HwHiAiUser, exists: true, uid: 1000, gid: 1000, group: HwHiAiUser,
                   comment: Ascend NPU run user, shell: /usr/sbin/nologin,
                   home: /home/HwHiAiUser, home_exists: true}
        run_group: {name: HwHiAiUser, exists: true, gid: 1000}
        uid_owner: HwHiAiUser
        gid_owner: HwHiAiUser
"""

import grp
import json
import os
import pwd
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


def user_state(name: str) -> dict[str, object]:
    """The user as the user database (NSS) has it, with its primary group's name."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return {"name": name, "exists": False, "uid": None, "gid": None, "group": "",
                "comment": "", "shell": "", "home": "", "home_exists": False}
    try:
        group = grp.getgrgid(entry.pw_gid).gr_name
    except KeyError:
        group = ""
    return {"name": name, "exists": True, "uid": entry.pw_uid, "gid": entry.pw_gid,
            "group": group, "comment": entry.pw_gecos, "shell": entry.pw_shell,
            "home": entry.pw_dir, "home_exists": os.path.exists(entry.pw_dir)}


def group_state(name: str) -> dict[str, object]:
    try:
        return {"name": name, "exists": True, "gid": grp.getgrnam(name).gr_gid}
    except KeyError:
        return {"name": name, "exists": False, "gid": None}


def uid_owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def gid_owner(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return ""


def accounts(params: dict[str, Any]) -> dict[str, object]:
    """What the options ask about the run user and group; nothing for an option left unset."""
    found: dict[str, object] = {}
    if params.get("user") is not None:
        found["run_user"] = user_state(params["user"])
    if params.get("group") is not None:
        found["run_group"] = group_state(params["group"])
    if params.get("uid") is not None:
        found["uid_owner"] = uid_owner(params["uid"])
    if params.get("gid") is not None:
        found["gid_owner"] = gid_owner(params["gid"])
    return found


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
        **accounts(module.params),
    }


def main() -> None:
    facts_main("ascend_npu_driver_state", read_state, {
        **INSTALL_PATH_ARG,
        "ledger_path": {"type": "path", "default": "/etc/ansible/facts.d/ascend_npu_driver.fact"},
        "user": {"type": "str"},
        "group": {"type": "str"},
        "uid": {"type": "int"},
        "gid": {"type": "int"},
    })


if __name__ == "__main__":
    main()
