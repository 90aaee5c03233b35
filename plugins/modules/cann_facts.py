#!/usr/bin/python
"""Read the installed CANN toolkit(s), kernels/ops, NNAL, the driver version, the environment
the set_env.sh scripts export and the state of the files made from it, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cann_facts
short_description: Installed Ascend CANN toolkit, kernels/ops and NNAL, and their environment
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
  - With O(set_env), the environment those scripts export, resolved as the C(cann) role's
    profile script gives it to a login shell - in order, in a clean C(bash --noprofile --norc)
    with only a fixed C(PATH) - and with O(files), the state of those files; so a converged host
    is read in this one round trip.
version_added: 0.1.0
options:
  set_env:
    description:
      - Scripts (the toolkit's and ATB's C(set_env.sh)) to source in this order, then read the
        environment they export. Nothing else runs; the vendor's scripts only set variables.
      - Where a script does not exist (before a first install), none is sourced and no
        environment is read; C(environment_error) names the missing ones.
    type: list
    elements: path
    default: []
  files:
    description: Files and directories whose state (sha1, mode, owner, group) is reported.
    type: list
    elements: path
    default: []
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

- name: Read CANN, the environment its set_env.sh scripts export and the files derived from it
  ascend_serve.fleet.cann_facts:
    set_env: [/usr/local/Ascend/cann-8.5.0/set_env.sh, /usr/local/Ascend/nnal/atb/set_env.sh]
    files: [/etc/profile.d/ascend-cann.sh, /etc/ascend-serve/cann.env, /etc/ascend-serve]
"""

RETURN = r"""
ansible_facts:
  description: Sets C(ascend_cann_state), what the version files under O(install_path) say, the
    environment of O(set_env) and the state of O(files).
  returned: always
  type: dict
  contains:
    ascend_cann_state:
      description:
        - C(driver_version) and C(nnal_version), C('') where that component is not installed.
        - C(toolkits), one entry per CANN toolkit sorted by C(root), with its C(version) and the
          C(kernels_version) of its kernels/ops (C('') without them); empty without any.
        - C(environment), every variable exported after sourcing O(set_env) (C(PATH) and what
          bash itself exports, such as C(PWD) and C(SHLVL), included; a value holding a newline
          left out); empty without O(set_env) or when C(environment_error) is not empty.
        - C(environment_error), why no environment was read (a script of O(set_env) missing, or
          sourcing them failed, with its exit status and error output); C('') otherwise.
        - C(files), the state of each of O(files), by path - null for a path that does not
          exist, else its C(sha1) (null for a directory), C(mode) (such as C(0644)), C(owner),
          C(group), C(isdir) and C(islnk) (a link is followed, as the template module does).
      type: dict
      sample:
        driver_version: 25.5.0
        toolkits: [{version: 8.5.0, root: /usr/local/Ascend/cann-8.5.0, kernels_version: 8.5.0}]
        nnal_version: 8.5.0
        environment:
          ASCEND_TOOLKIT_HOME: /usr/local/Ascend/cann-8.5.0
          PATH: /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
        environment_error: ""
        files:
          /etc/ascend-serve/cann.env: {sha1: 0b2e81d5bbd2e8a1b8c0a6e1fa1e7c4b58a5e2f7, mode: "0644",
                                       owner: root, group: root, isdir: false, islnk: false}
          /etc/ascend-serve: {sha1: null, mode: "0755", owner: root, group: root, isdir: true,
                              islnk: false}
"""

from ansible_collections.ascend_serve.fleet.plugins.module_utils.cann_read import (
    ARGUMENT_SPEC,
    CLEAN_PATH,
    ERRORS,
    FACT,
    FAILURE,
    cann_state,
    parse_environment,
    read,
    resolve_script,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import facts_main

# The readers the tests call through this module's name.
__all__ = ["CLEAN_PATH", "cann_state", "parse_environment", "resolve_script"]


def main() -> None:
    facts_main(FACT, read, ARGUMENT_SPEC, FAILURE, ERRORS)


if __name__ == "__main__":
    main()
