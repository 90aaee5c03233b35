"""The os_base role's per-OS package sets (the contract every role keeps, its variable interface
among it: test_role_contract.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import role_files
from paths import ROLES

OS_VARS_KEYS = {
    "_os_base_package_manager", "_os_base_packages",
    "_os_base_kernel_dev_packages", "_os_base_hold_tool_packages",
    "_os_base_kernel_hold_packages", "_os_base_repo_sources", "_os_base_repo_file_suffix",
}
REDHAT_DEV = ["kernel-headers-{{ _os_base_kernel }}", "kernel-devel-{{ _os_base_kernel }}"]
DEBIAN_DEV = ["linux-headers-{{ _os_base_kernel }}"]


@pytest.mark.parametrize(
    "path", sorted(p for p in (ROLES / "os_base/vars").glob("*.yml") if p.name != "main.yml"),
    ids=lambda p: p.name)
def test_os_vars_files_are_complete(path: Path) -> None:
    assert set(role_files.load(path)) >= OS_VARS_KEYS


@pytest.mark.parametrize(
    ("distribution", "version", "family", "vars_file", "dev_packages", "manager"),
    [
        ("openEuler", "22.03", "RedHat", "RedHat.yml", REDHAT_DEV, "dnf"),
        ("openEuler", "24.03", "RedHat", "RedHat.yml", REDHAT_DEV, "dnf"),
        ("EulerOS", "2.0", "RedHat", "RedHat.yml", REDHAT_DEV, "dnf"),
        ("Kylin Linux Advanced Server", "V10", "RedHat", "Kylin_Linux_Advanced_Server.yml",
         ["kernel-devel"], "dnf"),
        ("Ubuntu", "22.04", "Debian", "Debian.yml", DEBIAN_DEV, "apt"),
        ("Debian", "12.12", "Debian", "Debian.yml", DEBIAN_DEV, "apt"),
    ],
)
def test_first_found_chain(distribution: str, version: str, family: str, vars_file: str,
                           dev_packages: list[str], manager: str) -> None:
    path = role_files.os_vars_file("os_base", distribution, version, family)
    data = role_files.load(path)
    assert path.name == vars_file
    assert data["_os_base_kernel_dev_packages"] == dev_packages
    assert data["_os_base_package_manager"] == manager
    # What the driver build and the vllm-ascend build need, on every OS.
    needed = {"gcc", "make", "cmake", "ninja-build", "dkms", "numactl", "pciutils", "ethtool",
              "jq", "python3"}
    needed |= {"g++", "libnuma-dev"} if manager == "apt" else {"gcc-c++", "numactl-devel"}
    assert needed <= set(data["_os_base_packages"])
