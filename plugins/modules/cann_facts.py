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

import os
import re
import shlex
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
from ansible_collections.ascend_serve.fleet.plugins.module_utils.file_state import file_state
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


# The environment the cann role's profile script gives a login shell, resolved without one: a
# clean environment with a fixed PATH, no profile or rc file.
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def resolve_script(scripts: list[str]) -> str:
    """The bash script that sources ``scripts`` as the profile script does (one ``.`` a line,
    so its status is the last one's), then prints the environment, NUL-separated."""
    sources = [f". {shlex.quote(path)}" for path in scripts]
    return "\n".join([*sources[:-1], f"{sources[-1]} && env -0" if sources else "env -0"])


def parse_environment(output: bytes) -> dict[str, str]:
    """``env -0`` output: the variables with a shell name and a one-line value."""
    found: dict[str, str] = {}
    for entry in output.decode("utf-8", "replace").split("\0"):
        key, sep, value = entry.partition("=")
        if sep and NAME.match(key) and "\n" not in value:
            found[key] = value
    return found


def resolve_environment(module: Any, scripts: list[str]) -> tuple[dict[str, str], str]:
    """(environment, error): what sourcing ``scripts`` in order exports, or why it is not read."""
    if not scripts:
        return {}, ""
    missing = [path for path in scripts if not os.path.isfile(path)]
    if missing:
        return {}, "not found: " + ", ".join(missing)
    argv = ["env", "-i", f"PATH={CLEAN_PATH}", "bash", "--noprofile", "--norc", "-c",
            resolve_script(scripts)]
    rc, out, err = module.run_command(argv, cwd="/", encoding=None)
    if rc != 0:
        text = err.decode("utf-8", "replace").strip() if isinstance(err, bytes) else str(err)
        return {}, f"sourcing {', '.join(scripts)} exited {rc}" + (f": {text}" if text else "")
    return parse_environment(out if isinstance(out, bytes) else out.encode()), ""


def read(module: Any) -> dict[str, object]:
    state = cann_state(module.params["install_path"])
    environment, error = resolve_environment(module, module.params["set_env"])
    state["environment"] = environment
    state["environment_error"] = error
    state["files"] = {path: file_state(path) for path in module.params["files"]}
    return state


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    **INSTALL_PATH_ARG,
    "set_env": {"type": "list", "elements": "path", "default": []},
    "files": {"type": "list", "elements": "path", "default": []},
}


def main() -> None:
    facts_main("ascend_cann_state", read, ARGUMENT_SPEC, "cannot read the installed CANN",
               (AscendFileError, OSError))


if __name__ == "__main__":
    main()
