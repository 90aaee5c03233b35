"""The swap and host_tuning roles: static checks, input validation, and their molecule scenario."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import ROLES

ROOT = Path(__file__).resolve().parents[2]
ROLE_DIRS = {name: ROLES / name for name in ("swap", "host_tuning", "rollout")}
SPEC_TYPES: dict[str, type | tuple[type, ...]] = {
    "list": list, "bool": bool, "int": int, "str": str, "dict": dict, "path": str,
}
BIN = Path(sys.executable).parent


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _options(role: str) -> dict[str, dict[str, Any]]:
    """The options of every entry point (main, or tasks_from ones such as rollout's drain)."""
    options: dict[str, dict[str, Any]] = {}
    for entry in _load(ROLE_DIRS[role] / "meta/argument_specs.yml")["argument_specs"].values():
        options.update(entry["options"])
    return options


def _tail(path: Path, lines: int = 80) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@pytest.mark.parametrize("role", sorted(ROLE_DIRS))
def test_defaults_match_argument_specs(role: str) -> None:
    defaults = _load(ROLE_DIRS[role] / "defaults/main.yml")
    options = _options(role)
    assert set(defaults) == set(options)
    for name, spec in options.items():
        assert name.startswith(f"{role}_"), name
        assert defaults[name] == spec.get("default"), name
        if defaults[name] is not None:
            assert isinstance(defaults[name], SPEC_TYPES[spec["type"]]), name
        assert spec.get("description"), name


@pytest.mark.parametrize("role", sorted(ROLE_DIRS))
def test_every_variable_is_declared_or_private(role: str) -> None:
    """Public names used in the role are declared; registered and vars-file names are private."""
    path_text = {p: p.read_text() for p in ROLE_DIRS[role].rglob("*") if p.suffix in {".yml", ".j2"}}
    text = "\n".join(path_text.values())
    used = set(re.findall(rf"(?<![\w.])({role}_\w+)", text))
    assert used <= set(_options(role)), used - set(_options(role))
    registered = set(re.findall(r"register: (\w+)", text))
    assert all(r.startswith(f"_{role}_") for r in registered), registered
    for path in (ROLE_DIRS[role] / "vars").glob("*.yml"):
        assert all(k.startswith(f"_{role}_") for k in _load(path)), path.name


@pytest.mark.parametrize("role", sorted(ROLE_DIRS))
def test_role_knows_nothing_of_its_tests(role: str) -> None:
    """Tasks, vars, defaults, handlers, templates and meta never refer to the test setup."""
    pattern = re.compile(r"ascend_sim|simulat|molecule|pytest|podman|\btests?\b|/srv/",
                         re.IGNORECASE)
    for path in ROLE_DIRS[role].rglob("*"):
        if path.suffix in {".yml", ".j2"}:
            hits = [line for line in path.read_text().splitlines() if pattern.search(line)]
            assert not hits, f"{path.relative_to(ROLE_DIRS[role])}: {hits}"


def test_no_fixed_architecture_in_host_tuning() -> None:
    """Production hosts are aarch64: no architecture is written into the role's values."""
    for path in ROLE_DIRS["host_tuning"].rglob("*.yml"):
        code = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
        assert not re.search(r"x86_64|aarch64|amd64|arm64", "\n".join(code)), path.name


def _host_tuning_vars_file(distribution: str, version: str, family: str) -> Path:
    """The file host_tuning's first_found chain picks (tasks/main.yml), resolved in Python."""
    slug = distribution.replace(" ", "_")
    major = version.split(".")[0]
    for name in (f"{slug}-{version}.yml", f"{slug}-{major}.yml", f"{slug}.yml", f"{family}.yml"):
        if (ROLE_DIRS["host_tuning"] / "vars" / name).is_file():
            return ROLE_DIRS["host_tuning"] / "vars" / name
    raise AssertionError(f"no vars file for {distribution} {version}")


def test_first_found_chain_lists_specific_to_general() -> None:
    tasks = _load(ROLE_DIRS["host_tuning"] / "tasks/main.yml")
    load = next(t for t in tasks if "ansible.builtin.include_vars" in t)
    assert load["vars"]["_host_tuning_vars_candidates"]["files"] == [
        "{{ _host_tuning_distribution }}-{{ ansible_facts['distribution_version'] }}.yml",
        "{{ _host_tuning_distribution }}-{{ ansible_facts['distribution_major_version'] }}.yml",
        "{{ _host_tuning_distribution }}.yml",
        "{{ ansible_facts['os_family'] }}.yml",
    ]


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
    data = _load(_host_tuning_vars_file(distribution, version, family))
    assert data["_host_tuning_package_manager"] == manager
    assert data["_host_tuning_jemalloc_package"] == package
    assert data["_host_tuning_jemalloc_path"] == library


def test_guide_defaults() -> None:
    """The vllm-ascend guide's values, and no swap file unless asked for (README)."""
    tuning = _load(ROLE_DIRS["host_tuning"] / "defaults/main.yml")
    assert tuning["host_tuning_sysctl"] == {
        "vm.swappiness": 0, "kernel.numa_balancing": 0, "kernel.sched_migration_cost_ns": 50000,
    }
    assert tuning["host_tuning_cpu_governor"] == "performance"
    assert _load(ROLE_DIRS["swap"] / "defaults/main.yml")["swap_size_gb"] == 0


def _run_role(tmp_path: Path, role: str,
              variables: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Run the role against localhost in check mode; only for inputs it must refuse up front."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Refuse bad input", "hosts": "localhost", "gather_facts": False,
        "roles": [{"role": f"ascend_serve.fleet.{role}", "vars": variables}],
    }]))
    env = dict(os.environ, PY_COLORS="0", ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "--check",
         str(playbook)],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=120,
    )


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
    proc = _run_role(tmp_path, role, variables)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert message in out, out
    # Validation (argument spec, then the role's own assert) fails before any task reaches the host.
    assert "ok=1" in out or "ok=0" in out, out
    assert "changed=0" in out, out
