"""os_base_state: the one read of os_base, on fake package databases and repository trees.

The dpkg status stanzas follow dpkg's own format (Package, Status, Version, Architecture,
Provides); the rpm stand-in prints what ``rpm --query --all --queryformat`` prints for the module's
format; the lock list holds the ``NAME-EPOCH:VERSION-RELEASE.*`` entries that
community.general.dnf_versionlock writes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ansible_run import module_result

DPKG_STATUS = """\
Package: gcc
Status: install ok installed
Architecture: arm64
Version: 4:12.2.0-3

Package: linux-headers-6.1.0-9-arm64
Status: hold ok installed
Architecture: arm64
Version: 6.1.27-1

Package: linux-image-6.1.0-9-arm64
Status: install ok installed
Architecture: arm64
Version: 6.1.27-1
Description: Linux 6.1 for 64-bit ARMv8 machines (signed)
 The Linux kernel 6.1 and modules for use on ARMv8 machines.

Package: mawk
Status: install ok installed
Architecture: arm64
Version: 1.3.4.20200120-3.1
Provides: awk

Package: make
Status: deinstall ok config-files
Architecture: arm64
Version: 4.3-4.1
"""

RPM_QUERY = """\
gcc\t0\t10.3.1\t28.oe2203sp3\taarch64\tgcc,gcc(aarch-64),
kernel\t0\t5.10.0\t182.0.0.95.oe2203sp3\taarch64\tkernel,
kernel\t0\t5.10.0\t216.0.0.115.oe2203sp4\taarch64\tkernel,
kernel-devel\t0\t5.10.0\t182.0.0.95.oe2203sp3\taarch64\tkernel-devel,
python3-dnf-plugin-versionlock\t0\t4.0.9\t1\tnoarch\tpython3-dnf-plugin-versionlock,dnf-command(versionlock),
"""


def _apt(tmp_path: Path, **args: Any) -> dict[str, Any]:
    status = tmp_path / "status"
    status.write_text(DPKG_STATUS)
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    (apt / "sources.list.d" / "mirror.list").write_text(
        "# written by apt_repository\ndeb  [trusted=yes] file:/srv/ascend-mirror/apt ./\n")
    return module_result("os_base_state", {
        "package_manager": "apt", "dpkg_status": str(status), "apt_sources": str(apt), **args,
    }, tmp_path)


def test_apt_converged_host_has_an_empty_plan(tmp_path: Path) -> None:
    result = _apt(
        tmp_path,
        packages=["gcc", "awk", "linux-headers-6.1.0-9-arm64", "gcc:arm64"],
        hold=["linux-headers-6.1.0-9-arm64", "linux-image-unsigned-6.1.0-9-arm64"],
        apt_repositories=[{"name": "mirror",
                           "repo": "deb [trusted=yes] file:/srv/ascend-mirror/apt ./"}],
        managed_files=["mirror.list"])
    assert result["converged"] is True, result
    assert result["changed"] is False
    assert result["installed_hold"] == ["linux-headers-6.1.0-9-arm64"]
    assert result["unheld"] == []


def test_apt_plan_names_each_difference(tmp_path: Path) -> None:
    result = _apt(
        tmp_path,
        packages=["gcc", "make", "dkms", "gcc=4:12.2.0-3", "gcc=9*", "gcc:amd64"],
        hold=["linux-headers-6.1.0-9-arm64", "linux-image-6.1.0-9-arm64"],
        apt_repositories=[{"name": "mirror",
                           "repo": "deb [trusted=yes] file:/srv/ascend-mirror/apt ./"},
                          {"name": "other", "repo": "deb http://example.invalid/x ./"}],
        disable_sources=[{"path": str(tmp_path / "apt"), "patterns": ["sources.list"]},
                         {"path": str(tmp_path / "apt" / "sources.list.d"),
                          "patterns": ["*.list", "*.sources"]}],
        managed_files=["mirror.list", "other.list"])
    assert result["converged"] is False
    # make is only in config-files state; a version or an architecture must match too.
    assert result["missing_packages"] == ["make", "dkms", "gcc=9*", "gcc:amd64"]
    assert result["unheld"] == ["linux-image-6.1.0-9-arm64"]
    assert result["repositories_to_write"] == ["other"]
    assert result["sources_to_disable"] == [str(tmp_path / "apt" / "sources.list")]


def _dnf(tmp_path: Path, locks: str, repo_text: str, **args: Any) -> dict[str, Any]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    rpm = bin_dir / "rpm"
    (tmp_path / "rpm-out").write_text(RPM_QUERY)
    rpm.write_text(f"#!/bin/sh\ncat {tmp_path / 'rpm-out'}\n")
    rpm.chmod(0o755)
    (tmp_path / "versionlock.list").write_text(locks)
    repos = tmp_path / "yum.repos.d"
    repos.mkdir(exist_ok=True)
    (repos / "internal.repo").write_text(repo_text)
    (repos / "openEuler.repo").write_text("[OS]\nbaseurl=http://repo.openeuler.org/\n")
    return module_result("os_base_state", {
        "package_manager": "dnf", "yum_repos_dir": str(repos),
        "versionlock_list": str(tmp_path / "versionlock.list"), **args,
    }, tmp_path, env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})


REPO = {"name": "internal", "description": "Internal mirror",
        "baseurl": ["file:///srv/ascend-mirror/rpm"], "gpgcheck": False}
# As ansible.builtin.yum_repository writes it (configparser, booleans as 0/1).
REPO_TEXT = ("[internal]\nbaseurl = file:///srv/ascend-mirror/rpm\nenabled = 1\n"
             "gpgcheck = 0\nname = Internal mirror\n\n")
LOCKS = ("# Added lock on Thu Dec  4 2026\n"
         "kernel-0:5.10.0-182.0.0.95.oe2203sp3.*\n"
         "kernel-0:5.10.0-216.0.0.115.oe2203sp4.*\n"
         "kernel-devel-0:5.10.0-182.0.0.95.oe2203sp3.*\n")


def test_dnf_converged_host_has_an_empty_plan(tmp_path: Path) -> None:
    result = _dnf(
        tmp_path, LOCKS, REPO_TEXT,
        packages=["gcc", "kernel-devel-5.10.0-182.0.0.95.oe2203sp3.aarch64",
                  "dnf-command(versionlock)"],
        hold=["kernel", "kernel-devel", "kernel-headers"],
        dnf_repositories=[REPO],
        disable_sources=[{"path": str(tmp_path / "yum.repos.d"), "patterns": ["*.repo"]}],
        managed_files=["internal.repo", "openEuler.repo"])
    assert result["converged"] is True, result
    assert result["installed_hold"] == ["kernel", "kernel-devel"]


def test_dnf_plan_names_each_difference(tmp_path: Path) -> None:
    # One installed kernel lost its lock; the repository's URL changed; a default repo is left.
    locks = LOCKS.replace("kernel-0:5.10.0-216.0.0.115.oe2203sp4.*\n", "")
    result = _dnf(
        tmp_path, locks, REPO_TEXT.replace("/rpm", "/old"),
        packages=["gcc", "kernel-headers-5.10.0-182.0.0.95.oe2203sp3.aarch64", "lsof"],
        hold=["kernel", "kernel-devel"],
        dnf_repositories=[REPO],
        disable_sources=[{"path": str(tmp_path / "yum.repos.d"), "patterns": ["*.repo"]}],
        managed_files=["internal.repo"])
    assert result["missing_packages"] == [
        "kernel-headers-5.10.0-182.0.0.95.oe2203sp3.aarch64", "lsof"]
    assert result["unheld"] == ["kernel"]
    assert result["repositories_to_write"] == ["internal"]
    assert result["sources_to_disable"] == [str(tmp_path / "yum.repos.d" / "openEuler.repo")]
    assert result["converged"] is False
