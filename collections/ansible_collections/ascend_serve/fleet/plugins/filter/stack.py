"""``stack_resolve``: pick the one locked version set an inventory asks for.

The logic lives in the ``ascend_serve`` Python package (``ascend_serve.stack.matrix`` and
``ascend_serve.stack.lock``), installed on the controller next to Ansible, so the roles and the
``ascend-serve matrix`` command cannot disagree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.ascend_serve.fleet.plugins.plugin_utils.controller_package import (
    filters_by_name,
    package,
    plain,
)


def stack_resolve(
    matrix: Any, name: str | None = None, pins: Any = None, chip: str | None = None
) -> dict[str, Any]:
    m = package("stack.matrix", "stack_resolve")
    try:
        selected = m.resolve(
            m.parse_matrix(plain(matrix)), name or None, plain(pins or {}), chip or None
        )
    except m.MatrixError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    facts: dict[str, Any] = selected.as_facts()
    return facts


def stack_lock_problems(matrix: Any, name: str, arch: str, lock_root: str) -> list[str]:
    """Why the set's locks for ``arch`` cannot install it (stale, missing, pins that differ
    from the matrix); empty when every Python's lock is usable."""
    m = package("stack.matrix", "stack_lock_problems")
    lock = package("stack.lock", "stack_lock_problems")
    try:
        stack = m.resolve(m.parse_matrix(plain(matrix)), name)
    except m.MatrixError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    if arch not in stack.lock_architectures():
        return [f"set {stack.name} is locked for {', '.join(stack.lock_architectures())} only, "
                f"not {arch}"]
    problems: list[str] = []
    for target in lock.targets(stack):
        if target.arch == arch:
            problems += lock.lock_problems(
                stack, target, lock.lock_dir(Path(lock_root), stack.name, target))
    return problems


def hdk_accepts(version: Any, supported: Any) -> bool:
    """Whether an installed driver version is on one of a set's supported HDK lines."""
    m = package("stack.matrix", "hdk_accepts")
    accepted: bool = m.hdk_accepts([str(v) for v in plain(supported)], str(version or ""))
    return accepted


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters_by_name(stack_resolve, stack_lock_problems, hdk_accepts)
