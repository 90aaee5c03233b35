"""``stack_resolve``: a host's locked version sets, resolved once (``ascend_stack_resolved``).

The logic lives in the ``ascend_serve`` Python package (``ascend_serve.stack.matrix`` and
``ascend_serve.stack.lock``), installed on the controller next to Ansible: ``stack_resolve`` is
``matrix.resolve_for_host``, which ``ascend-serve mirror`` calls too, and it reads the matrix the
CLI reads (``ASCEND_SERVE_MATRIX``, else the collection's ``data/stack-matrix.yml``), so the roles
and the CLI cannot disagree. The other filters take that fact (or its ``serving`` part) and read
no matrix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.ascend_serve.fleet.plugins.plugin_utils.controller_package import (
    filters_by_name,
    plain,
    require_package,
)

try:
    from ascend_serve.stack import lock
    from ascend_serve.stack import matrix as m
except ImportError as exc:  # pragma: no cover - depends on the controller
    MISSING: ImportError | None = exc
else:
    MISSING = None


def stack_resolve(choice: Any) -> dict[str, Any]:
    """``ascend_stack_resolved`` for the host whose choice variables (``ascend_stack_set``,
    ``ascend_stack_pins``, ``ascend_stack_chip``, ``python_env_set``) ``choice`` holds."""
    require_package(MISSING, "stack_resolve")
    try:
        facts: dict[str, Any] = m.resolve_for_host(plain(choice or {}))
    except m.MatrixError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return facts


def stack_lock_problems(resolved: Any, arch: str, lock_root: str) -> list[str]:
    """Why the locks of the resolved set ``resolved`` (``ascend_stack_resolved.serving``) for
    ``arch`` cannot install it (stale, missing, pins that differ from the matrix); empty when
    every Python's lock is usable."""
    require_package(MISSING, "stack_lock_problems")
    try:
        stack = m.set_of_facts(plain(resolved))
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
    require_package(MISSING, "hdk_accepts")
    accepted: bool = m.hdk_accepts([str(v) for v in plain(supported)], str(version or ""))
    return accepted


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters_by_name(stack_resolve, stack_lock_problems, hdk_accepts)
