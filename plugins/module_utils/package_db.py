"""Which OS packages are installed, read from the package database (the package manager is not
started): the dpkg status file on Debian and Ubuntu, ``rpm --query`` on the RedHat family.
Used by the state modules of the roles that install OS packages (os_base, host_tuning,
python_env, rdma), so that a converged host starts no apt or dnf.

Runs on managed nodes inside the modules' payloads: standard library only, Python 3.8+
(annotations are not evaluated).
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from typing import Any

#: The dpkg status database (what dpkg-query reads).
DPKG_STATUS = "/var/lib/dpkg/status"
#: Choices of a module's ``package_manager`` option: auto picks dpkg where its database exists.
MANAGERS = ["auto", "apt", "dnf"]

# The options of the doc fragment ascend_serve.fleet.common.packages.
PACKAGES_ARGS: dict[str, dict[str, Any]] = {
    "packages": {"type": "list", "elements": "str", "default": []},
    "package_manager": {"type": "str", "choices": MANAGERS, "default": "auto"},
    "dpkg_status": {"type": "path", "default": DPKG_STATUS},
}

_NO_PROVIDER = re.compile(r"^no package provides (\S+)", re.MULTILINE)


class PackageDbError(Exception):
    """The package database could not be read."""


def dpkg_packages(path: str = DPKG_STATUS) -> dict[str, dict[str, Any]]:
    """The installed packages of the dpkg status file: name -> version, arch, provides, held."""
    try:
        with open(path, encoding="utf-8", errors="replace") as status:
            text = status.read()
    except OSError as exc:
        raise PackageDbError(f"cannot read {path}: {exc}") from exc
    packages: dict[str, dict[str, Any]] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] not in (" ", "\t"):
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        name, status = fields.get("Package"), fields.get("Status", "")
        if not name or not status.endswith(" ok installed"):
            continue
        provides = [p.split("(")[0].strip() for p in fields.get("Provides", "").split(",")]
        packages[name] = {
            "version": fields.get("Version", ""),
            "arch": fields.get("Architecture", ""),
            "provides": [p for p in provides if p],
            "held": status.startswith("hold "),
        }
    return packages


def dpkg_installed(path: str = DPKG_STATUS) -> set[str]:
    """Names of the installed packages of the dpkg status file, with what they provide."""
    packages = dpkg_packages(path)
    names = set(packages)
    for package in packages.values():
        names.update(package["provides"])
    return names


def apt_installed(spec: str, packages: dict[str, dict[str, Any]]) -> bool:
    """Whether an apt package spec (NAME, NAME=VERSION (glob), NAME:ARCH) is installed."""
    name, _, version = spec.partition("=")
    name, _, arch = name.partition(":")
    found = packages.get(name)
    if found is None:
        if version or arch:
            return False
        return any(name in p["provides"] for p in packages.values())
    return ((not version or fnmatch.fnmatch(found["version"], version))
            and (not arch or found["arch"] == arch))


def rpm_packages(rpm: str = "rpm") -> list[dict[str, Any]]:
    """The installed rpm packages (name, epoch, version, release, arch, provides): one
    ``rpm --query --all``."""
    fmt = "%{NAME}\\t%{EPOCHNUM}\\t%{VERSION}\\t%{RELEASE}\\t%{ARCH}\\t[%{PROVIDENAME},]\\n"
    try:
        out = subprocess.run([rpm, "--query", "--all", "--queryformat", fmt],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise PackageDbError(f"{rpm} --query --all failed: {exc}") from exc
    packages = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 6:
            name, epoch, version, release, arch, provides = parts
            packages.append({"name": name, "epoch": epoch, "version": version,
                             "release": release, "arch": arch,
                             "provides": [p for p in provides.split(",") if p]})
    return packages


def rpm_installed(spec: str, packages: list[dict[str, Any]]) -> bool:
    """Whether a package spec (NAME, NAME.ARCH, NAME-VERSION[-RELEASE[.ARCH]] or a capability)
    is installed."""
    for p in packages:
        nv = f"{p['name']}-{p['version']}"
        nvr = f"{nv}-{p['release']}"
        if spec in (p["name"], nv, nvr, f"{nvr}.{p['arch']}", f"{p['name']}.{p['arch']}"):
            return True
        if spec in p["provides"]:
            return True
    return False


def rpm_missing(names: list[str], rpm: str = "rpm") -> list[str]:
    """Of ``names`` (package names or capabilities), those no installed package provides."""
    if not names:
        return []
    try:
        done = subprocess.run([rpm, "--query", "--whatprovides", *names], capture_output=True,
                              text=True, check=False)
    except OSError as exc:
        raise PackageDbError(f"cannot run {rpm}: {exc}") from exc
    absent = set(_NO_PROVIDER.findall(done.stdout + done.stderr))
    if done.returncode != 0 and not absent:
        raise PackageDbError(f"{rpm} --query --whatprovides failed with rc {done.returncode}: "
                             f"{done.stderr.strip()}")
    return [name for name in names if name in absent]


def manager(choice: str = "auto", dpkg_status: str = DPKG_STATUS) -> str:
    """apt or dnf: ``choice``, or for auto apt where the dpkg database exists."""
    if choice != "auto":
        return choice
    return "apt" if os.path.isfile(dpkg_status) else "dnf"


def missing_packages(names: list[str], choice: str = "auto",
                     dpkg_status: str = DPKG_STATUS) -> list[str]:
    """Of ``names``, in their order, the packages that are not installed."""
    if not names:
        return []
    if manager(choice, dpkg_status) == "apt":
        packages = dpkg_packages(dpkg_status)
        return [name for name in names if not apt_installed(name, packages)]
    return rpm_missing(names)
