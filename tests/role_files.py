"""A role's files as the tests read them: its options and defaults, its tasks, and the vars file
its first_found chain picks for an OS (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from paths import ROLES

# Where a task or play holds more tasks.
BLOCK_KEYS = ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers")


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def options(role: str) -> dict[str, dict[str, Any]]:
    """The options of every entry point (main, or tasks_from ones such as rollout's drain)."""
    found: dict[str, dict[str, Any]] = {}
    for entry in load(ROLES / role / "meta/argument_specs.yml")["argument_specs"].values():
        found.update(entry.get("options") or {})
    return found


def defaults(role: str) -> dict[str, Any]:
    """defaults/main.yml (a role without options may have none)."""
    path = ROLES / role / "defaults/main.yml"
    found: dict[str, Any] = (load(path) if path.is_file() else None) or {}
    return found


def tasks(node: Any) -> Iterator[dict[str, Any]]:
    """Every task (and play, and block) mapping in a parsed task file or playbook."""
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in BLOCK_KEYS:
            if key in node:
                yield from tasks(node[key])


def os_vars_candidates(role: str) -> list[str]:
    """The first_found chain every per-OS role lists: the most specific file first."""
    distribution = f"_{role}_distribution"
    return [
        f"{{{{ {distribution} }}}}-{{{{ ansible_facts['distribution_version'] }}}}.yml",
        f"{{{{ {distribution} }}}}-{{{{ ansible_facts['distribution_major_version'] }}}}.yml",
        f"{{{{ {distribution} }}}}.yml",
        "{{ ansible_facts['os_family'] }}.yml",
    ]


def os_vars_file(role: str, distribution: str, version: str, family: str) -> Path:
    """The file the role's first_found chain (os_vars_candidates) picks, resolved in Python."""
    slug = distribution.replace(" ", "_")
    major = version.split(".")[0]
    for name in (f"{slug}-{version}.yml", f"{slug}-{major}.yml", f"{slug}.yml", f"{family}.yml"):
        if (ROLES / role / "vars" / name).is_file():
            return ROLES / role / "vars" / name
    raise AssertionError(f"{role}: no vars file for {distribution} {version}")
