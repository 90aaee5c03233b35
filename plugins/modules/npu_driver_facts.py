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

from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import facts_main
from ansible_collections.ascend_serve.fleet.plugins.module_utils.npu_driver_read import (
    ARGUMENT_SPEC,
    FACT,
    read,
)


def main() -> None:
    facts_main(FACT, read, ARGUMENT_SPEC)


if __name__ == "__main__":
    main()
