"""The swap and host_tuning roles: their per-OS values, the guide's defaults, and input they
refuse before any change (the contract every role keeps: test_role_contract.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import role_files
from ansible_run import play_role


@pytest.mark.parametrize(
    ("distribution", "version", "family", "manager", "package", "library"),
    [
        ("Debian", "12.12", "Debian", "apt", "libjemalloc2",
         "/usr/lib/{{ ansible_facts['architecture'] }}-linux-gnu/libjemalloc.so.2"),
        ("Ubuntu", "22.04", "Debian", "apt", "libjemalloc2",
         "/usr/lib/{{ ansible_facts['architecture'] }}-linux-gnu/libjemalloc.so.2"),
        ("openEuler", "22.03", "RedHat", "dnf", "jemalloc", "/usr/lib64/libjemalloc.so.2"),
        ("openEuler", "24.03", "RedHat", "dnf", "jemalloc", "/usr/lib64/libjemalloc.so.2"),
        ("EulerOS", "2.0", "RedHat", "dnf", "jemalloc", "/usr/lib64/libjemalloc.so.2"),
        ("Kylin Linux Advanced Server", "V10", "RedHat", "dnf", "jemalloc",
         "/usr/lib64/libjemalloc.so.2"),
    ],
)
def test_host_tuning_per_os_values(distribution: str, version: str, family: str, manager: str,
                                   package: str, library: str) -> None:
    data = role_files.load(role_files.os_vars_file("host_tuning", distribution, version, family))
    assert data["_host_tuning_package_manager"] == manager
    assert data["_host_tuning_jemalloc_package"] == package
    assert data["_host_tuning_jemalloc_path"] == library


def test_guide_defaults() -> None:
    """The vllm-ascend guide's values, and no swap file unless asked for (README)."""
    tuning = role_files.defaults("host_tuning")
    assert tuning["host_tuning_sysctl"] == {
        "vm.swappiness": 0, "kernel.numa_balancing": 0, "kernel.sched_migration_cost_ns": 50000,
    }
    assert tuning["host_tuning_cpu_governor"] == "performance"
    assert role_files.defaults("swap")["swap_size_gb"] == 0


@pytest.mark.parametrize(
    ("role", "variables", "message"),
    [
        ("swap", {"swap_size_gb": -4}, "swap_size_gb must be 0 or more"),
        ("swap", {"swap_size_gb": "lots"}, "swap_size_gb"),
        ("host_tuning", {"host_tuning_cpu_governor": "turbo"}, "host_tuning_cpu_governor"),
    ],
)
def test_bad_input_is_refused_before_any_change(tmp_path: Path, role: str,
                                                variables: dict[str, Any], message: str) -> None:
    # Check mode: only for inputs the role must refuse up front.
    proc = play_role(tmp_path, role, variables, "--check", name="Refuse bad input", timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert message in out, out
    # Validation (argument spec, then the role's own assert) fails before any task reaches the host.
    assert "ok=1" in out or "ok=0" in out, out
    assert "changed=0" in out, out
