"""Static checks of the os_base role: its variable interface and its per-OS package sets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import ROLES

ROLE = ROLES / "os_base"
SPEC_TYPES: dict[str, type | tuple[type, ...]] = {
    "list": list, "bool": bool, "int": int, "str": str, "dict": dict,
}
OS_VARS_KEYS = {
    "_os_base_package_manager", "_os_base_installed_query", "_os_base_packages",
    "_os_base_kernel_dev_packages", "_os_base_hold_tool_packages",
    "_os_base_kernel_hold_packages", "_os_base_repo_sources", "_os_base_repo_file_suffix",
}


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _options() -> dict[str, dict[str, Any]]:
    options: dict[str, dict[str, Any]] = _load(ROLE / "meta/argument_specs.yml")[
        "argument_specs"]["main"]["options"]
    return options


def _os_vars_file(distribution: str, version: str, family: str) -> Path:
    """The file the role's first_found chain picks (tasks/main.yml), resolved in Python."""
    slug = distribution.replace(" ", "_")
    major = version.split(".")[0]
    for name in (f"{slug}-{version}.yml", f"{slug}-{major}.yml", f"{slug}.yml", f"{family}.yml"):
        if (ROLE / "vars" / name).is_file():
            return ROLE / "vars" / name
    raise AssertionError(f"no vars file for {distribution} {version}")


def test_defaults_match_argument_specs() -> None:
    defaults = _load(ROLE / "defaults/main.yml")
    options = _options()
    assert set(defaults) == set(options)
    for name, spec in options.items():
        assert name.startswith("os_base_")
        assert defaults[name] == spec.get("default"), name
        assert isinstance(defaults[name], SPEC_TYPES[spec["type"]]), name
        assert spec.get("description"), name


def test_every_variable_is_declared_or_private() -> None:
    """Public names used anywhere in the role are declared; the rest are _os_base_ private."""
    declared = set(_options())
    text = "\n".join(p.read_text() for p in ROLE.rglob("*.yml"))
    used = set(re.findall(r"(?<![\w.])(os_base_\w+)", text))
    assert used <= declared, used - declared
    registered = set(re.findall(r"register: (\w+)", text))
    assert all(r.startswith("_os_base_") for r in registered), registered
    for path in (ROLE / "vars").glob("*.yml"):
        assert all(k.startswith("_os_base_") for k in _load(path)), path.name


def test_os_vars_files_are_complete() -> None:
    for path in (ROLE / "vars").glob("*.yml"):
        if path.name != "main.yml":
            assert set(_load(path)) >= OS_VARS_KEYS, path.name


@pytest.mark.parametrize(
    ("distribution", "version", "family", "vars_file", "dev_packages", "manager"),
    [
        ("openEuler", "22.03", "RedHat", "RedHat.yml",
         ["kernel-headers-{{ _os_base_kernel }}", "kernel-devel-{{ _os_base_kernel }}"], "dnf"),
        ("openEuler", "24.03", "RedHat", "RedHat.yml",
         ["kernel-headers-{{ _os_base_kernel }}", "kernel-devel-{{ _os_base_kernel }}"], "dnf"),
        ("EulerOS", "2.0", "RedHat", "RedHat.yml",
         ["kernel-headers-{{ _os_base_kernel }}", "kernel-devel-{{ _os_base_kernel }}"], "dnf"),
        ("Kylin Linux Advanced Server", "V10", "RedHat", "Kylin_Linux_Advanced_Server.yml",
         ["kernel-devel"], "dnf"),
        ("Ubuntu", "22.04", "Debian", "Debian.yml", ["linux-headers-{{ _os_base_kernel }}"], "apt"),
        ("Debian", "12.12", "Debian", "Debian.yml", ["linux-headers-{{ _os_base_kernel }}"], "apt"),
    ],
)
def test_first_found_chain(distribution: str, version: str, family: str, vars_file: str,
                           dev_packages: list[str], manager: str) -> None:
    path = _os_vars_file(distribution, version, family)
    data = _load(path)
    assert path.name == vars_file
    assert data["_os_base_kernel_dev_packages"] == dev_packages
    assert data["_os_base_package_manager"] == manager
    # What the driver build and the vllm-ascend build need, on every OS.
    needed = {"gcc", "make", "cmake", "ninja-build", "dkms", "numactl", "pciutils", "ethtool",
              "jq", "python3"}
    needed |= {"g++", "libnuma-dev"} if manager == "apt" else {"gcc-c++", "numactl-devel"}
    assert needed <= set(data["_os_base_packages"])


def test_first_found_chain_lists_specific_to_general() -> None:
    tasks = _load(ROLE / "tasks/main.yml")
    load = next(t for t in tasks if "ansible.builtin.include_vars" in t)
    files = load["vars"]["_os_base_vars_candidates"]["files"]
    assert files == [
        "{{ _os_base_distribution }}-{{ ansible_facts['distribution_version'] }}.yml",
        "{{ _os_base_distribution }}-{{ ansible_facts['distribution_major_version'] }}.yml",
        "{{ _os_base_distribution }}.yml",
        "{{ ansible_facts['os_family'] }}.yml",
    ]


def test_role_knows_nothing_of_its_tests() -> None:
    """Tasks, vars, defaults, handlers and meta never refer to the simulator, mirror or tests."""
    pattern = re.compile(r"ascend_sim|simulat|molecule|pytest|\btests?\b|/srv/", re.IGNORECASE)
    for path in ROLE.rglob("*.yml"):
        hits = [line for line in path.read_text().splitlines() if pattern.search(line)]
        assert not hits, f"{path.relative_to(ROLE)}: {hits}"


def test_no_hard_coded_repository_hosts() -> None:
    text = "\n".join(p.read_text() for p in ROLE.rglob("*.yml")
                     if p.name != "argument_specs.yml")
    hosts = set(re.findall(r"https?://([\w.-]+)", text))
    assert hosts <= {"m.example"}, hosts  # only the documented example in defaults/main.yml
