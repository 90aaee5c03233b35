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

import configparser
import fnmatch
import os
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main
from ansible_collections.ascend_serve.fleet.plugins.module_utils.package_db import (
    PackageDbError,
    apt_installed,
    dpkg_packages,
    rpm_installed,
    rpm_packages,
)


def versionlock_entries(path: str) -> set[str]:
    try:
        with open(path, encoding="utf-8") as locks:
            return {line.strip() for line in locks
                    if line.strip() and not line.lstrip().startswith("#")}
    except FileNotFoundError:
        return set()
    except OSError as exc:
        raise PackageDbError(f"cannot read {path}: {exc}") from exc


def apt_source_lines(directory: str) -> set[str]:
    files = [os.path.join(directory, "sources.list")]
    listdir = os.path.join(directory, "sources.list.d")
    if os.path.isdir(listdir):
        files += [os.path.join(listdir, f) for f in sorted(os.listdir(listdir))
                  if f.endswith(".list")]
    lines = set()
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as sources:
                for line in sources:
                    line = line.split("#", 1)[0].strip()
                    if line:
                        lines.add(" ".join(line.split()))
        except FileNotFoundError:
            continue
    return lines


def _ini_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)


def dnf_repository_differs(directory: str, repo: dict[str, Any]) -> bool:
    """Whether /etc/yum.repos.d/NAME.repo lacks what yum_repository would write for repo."""
    parser = configparser.RawConfigParser()
    try:
        if not parser.read(os.path.join(directory, f"{repo['name']}.repo"), encoding="utf-8"):
            return True
    except configparser.Error:
        return True
    if not parser.has_section(repo["name"]):
        return True
    wanted = {
        "name": repo.get("description") or repo["name"],
        "baseurl": repo.get("baseurl", []),
        "gpgcheck": repo.get("gpgcheck", True),
        "enabled": True,
    }
    if repo.get("gpgkey"):
        wanted["gpgkey"] = repo["gpgkey"]
    section = parser[repo["name"]]
    return any(" ".join(section.get(key, "").split()) != _ini_value(value)
               for key, value in wanted.items())


def sources_to_disable(sources: list[dict[str, Any]], managed: list[str]) -> list[str]:
    found = []
    for source in sources:
        directory = source["path"]
        if not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if (name not in managed and os.path.isfile(path)
                    and any(fnmatch.fnmatch(name, p) for p in source.get("patterns", []))):
                found.append(path)
    return found


def run(module: Any) -> dict[str, Any]:
    params = module.params
    if params["package_manager"] == "apt":
        packages = dpkg_packages(params["dpkg_status"])
        missing = [p for p in params["packages"] if not apt_installed(p, packages)]
        installed_hold = [p for p in params["hold"] if p in packages]
        unheld = [p for p in installed_hold if not packages[p]["held"]]
        lines = apt_source_lines(params["apt_sources"])
        to_write = [r["name"] for r in params["apt_repositories"]
                    if " ".join(str(r["repo"]).split()) not in lines]
    else:
        rpms = rpm_packages()
        missing = [p for p in params["packages"] if not rpm_installed(p, rpms)]
        locks = versionlock_entries(params["versionlock_list"])
        installed_hold, unheld = [], []
        for name in params["hold"]:
            versions = [p for p in rpms if p["name"] == name]
            if not versions:
                continue
            installed_hold.append(name)
            if any(f"{name}-{p['epoch']}:{p['version']}-{p['release']}.*" not in locks
                   for p in versions):
                unheld.append(name)
        to_write = [r["name"] for r in params["dnf_repositories"]
                    if dnf_repository_differs(params["yum_repos_dir"], r)]
    disable = sources_to_disable(params["disable_sources"], params["managed_files"])
    return {
        "changed": False,
        "missing_packages": missing,
        "installed_hold": installed_hold,
        "unheld": unheld,
        "repositories_to_write": to_write,
        "sources_to_disable": disable,
        "converged": not (missing or unheld or to_write or disable),
    }


def main() -> None:
    result_main(
        {
            "package_manager": {"type": "str", "choices": ["apt", "dnf"], "required": True},
            "packages": {"type": "list", "elements": "str", "default": []},
            "hold": {"type": "list", "elements": "str", "default": []},
            "apt_repositories": {"type": "list", "elements": "dict", "default": []},
            "dnf_repositories": {"type": "list", "elements": "dict", "default": []},
            "disable_sources": {"type": "list", "elements": "dict", "default": []},
            "managed_files": {"type": "list", "elements": "str", "default": []},
            "dpkg_status": {"type": "path", "default": "/var/lib/dpkg/status"},
            "apt_sources": {"type": "path", "default": "/etc/apt"},
            "yum_repos_dir": {"type": "path", "default": "/etc/yum.repos.d"},
            "versionlock_list": {"type": "path", "default": "/etc/dnf/plugins/versionlock.list"},
        },
        run,
        errors=(PackageDbError,),
    )


if __name__ == "__main__":
    main()
