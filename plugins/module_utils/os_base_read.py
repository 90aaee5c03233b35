"""What the os_base role reads of a host in one round trip: repositories, packages, kernel
holds, and what would have to change. The module ``os_base_state`` runs it alone, and
``stack_state`` with the other roles' reads. Runs on managed nodes."""

from __future__ import annotations

import configparser
import fnmatch
import os
from typing import Any

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


def read(module: Any) -> dict[str, Any]:
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


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
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
}
# A result module: what read() returns is the task's whole result.
FACT = ""
ERRORS = (PackageDbError,)
