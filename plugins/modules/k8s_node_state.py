#!/usr/bin/python
"""Read what the k8s_node role manages in one call: the Ascend Docker Runtime install, the
containerd packages and service, containerd's and kubelet's files, and the role's ledger."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_node_state
short_description: State of a Kubernetes worker node's Ascend container runtime
description:
  - Reads the Ascend Docker Runtime's install record
    C(<install_path>/Ascend-Docker-Runtime/ascend_docker_runtime_install.info) (the C(key=value)
    lines the vendor installer writes; C(version=v26.0.0) is reported as C(26.0.0)) and which of
    its programs are there.
  - Reads which of O(packages) are not installed, from the package database (the package
    manager is not started), whether the O(service) unit is active and enabled, the state
    (sha1 of the content, mode, owner, group) of each of O(files), and the role's ledger.
  - One round trip per host; nothing is changed.
version_added: 0.5.0
options:
  packages:
    description: OS packages whose absence is reported (C(missing_packages)).
    type: list
    elements: str
    default: []
  package_manager:
    description: Package database to read; auto reads dpkg's where it exists, else rpm.
    type: str
    choices: [auto, apt, dnf]
    default: auto
  service:
    description: systemd unit whose state is reported (C(service)).
    type: str
    default: containerd
  files:
    description: Files whose state is reported (C(files)).
    type: list
    elements: path
    default: []
  ledger_path:
    description: The k8s_node role's state ledger (local facts file).
    type: path
    default: /etc/ansible/facts.d/ascend_k8s_node.fact
extends_documentation_fragment:
  - ascend_serve.fleet.facts
  - ascend_serve.fleet.common.install_path
"""

EXAMPLES = r"""
- name: Read the runtime, containerd and the kubelet's environment file
  ascend_serve.fleet.k8s_node_state:
    packages: [containerd]
    files: [/etc/containerd/config.toml, /etc/default/kubelet]

- name: Say which Ascend Docker Runtime is installed
  ansible.builtin.debug:
    msg: "{{ ansible_facts['ascend_k8s_node_state'].runtime.version or 'none' }}"
"""

RETURN = r"""
ansible_facts:
  description: Sets C(ascend_k8s_node_state).
  returned: always
  type: dict
  contains:
    ascend_k8s_node_state:
      description:
        - C(runtime) - C(dir) (O(install_path)/Ascend-Docker-Runtime), C(info) (the install
          record's keys, empty without one), C(version) (its C(version) without the leading
          C(v), C('') without a record) and C(missing_programs) (the vendor's programs that
          are not in C(dir)).
        - C(missing_packages), those of O(packages) not installed, in their order.
        - C(service) - C(name), C(active) and C(enabled) (false where systemd does not know it).
        - C(files), per path of O(files) its C(sha1), C(mode), C(owner), C(group), C(isdir) and
          C(islnk) (null for a missing file).
        - C(ledger), the record at O(ledger_path) (empty when missing or not JSON).
      type: dict
      sample:
        runtime:
          dir: /usr/local/Ascend/Ascend-Docker-Runtime
          version: 26.0.0
          info: {version: v26.0.0, install-scene: containerd}
          missing_programs: []
        missing_packages: []
        service: {name: containerd, active: true, enabled: true}
        files:
          /etc/containerd/config.toml: {sha1: 0f1e..., mode: "0600", owner: root, group: root,
                                        isdir: false, islnk: false}
        ledger: {runtime_version: 26.0.0}
"""

import json
import os
import shutil
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.file_state import file_state
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import (
    INSTALL_PATH_ARG,
    facts_main,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.package_db import (
    MANAGERS,
    PackageDbError,
    missing_packages,
)

#: The directory the installer appends to --install-path, its install record and programs
#: (Ascend/mind-cluster component/ascend-docker-runtime/build/scripts/run_main.sh at v26.0.0,
#: 2fa1c4f06738892c2cb8f9262bd30fb03405ffcd: INSTALL_PATH, save_install_args, install()).
RUNTIME_DIR = "Ascend-Docker-Runtime"
INSTALL_INFO = "ascend_docker_runtime_install.info"
PROGRAMS = ("ascend-docker-runtime", "ascend-docker-hook", "ascend-docker-cli",
            "ascend-docker-plugin-install-helper", "ascend-docker-destroy")


def read_install_info(text: str) -> dict[str, str]:
    """The install record's ``key=value`` lines (a line without ``=`` is skipped)."""
    info: dict[str, str] = {}
    for line in text.splitlines():
        key, found, value = line.partition("=")
        if found and key.strip():
            info[key.strip()] = value.strip()
    return info


def runtime_state(install_path: str) -> dict[str, Any]:
    directory = os.path.join(install_path, RUNTIME_DIR)
    try:
        with open(os.path.join(directory, INSTALL_INFO), encoding="utf-8") as fh:
            info = read_install_info(fh.read())
    except FileNotFoundError:
        info = {}
    version = info.get("version", "")
    return {
        "dir": directory,
        "info": info,
        "version": version[1:] if version.startswith("v") else version,
        "missing_programs": [p for p in PROGRAMS
                             if not os.access(os.path.join(directory, p), os.X_OK)],
    }


def service_state(module: Any, name: str) -> dict[str, Any]:
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return {"name": name, "active": False, "enabled": False}
    active, _, _ = module.run_command([systemctl, "is-active", "--quiet", name])
    enabled, _, _ = module.run_command([systemctl, "is-enabled", "--quiet", name])
    return {"name": name, "active": active == 0, "enabled": enabled == 0}


def read_ledger(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            found = json.load(fh)
    except (OSError, ValueError):
        return {}  # missing or damaged: the role writes it again
    return found if isinstance(found, dict) else {}


def read_state(module: Any) -> dict[str, Any]:
    params = module.params
    return {
        "runtime": runtime_state(params["install_path"]),
        "missing_packages": missing_packages(params["packages"], params["package_manager"]),
        "service": service_state(module, params["service"]),
        "files": {path: file_state(path) for path in params["files"]},
        "ledger": read_ledger(params["ledger_path"]),
    }


def main() -> None:
    facts_main("ascend_k8s_node_state", read_state, {
        **INSTALL_PATH_ARG,
        "packages": {"type": "list", "elements": "str", "default": []},
        "package_manager": {"type": "str", "choices": MANAGERS, "default": "auto"},
        "service": {"type": "str", "default": "containerd"},
        "files": {"type": "list", "elements": "path", "default": []},
        "ledger_path": {"type": "path",
                        "default": "/etc/ansible/facts.d/ascend_k8s_node.fact"},
    }, failure="cannot read the package database", errors=(PackageDbError,))


if __name__ == "__main__":
    main()
