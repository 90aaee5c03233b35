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
    needs_package,
    plain,
)


def stack_resolve(choice: Any) -> dict[str, Any]:
    """``ascend_stack_resolved`` for the host whose choice variables (``ascend_stack_set``,
    ``ascend_stack_pins``, ``ascend_stack_chip``, ``python_env_set``) ``choice`` holds."""
    with needs_package("stack_resolve"):
        from ascend_serve.stack import matrix as m
    try:
        facts: dict[str, Any] = m.resolve_for_host(plain(choice or {}))
    except m.MatrixError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return facts


def stack_lock_problems(resolved: Any, arch: str, lock_root: str) -> list[str]:
    """Why the locks of the resolved set ``resolved`` (``ascend_stack_resolved.serving``) for
    ``arch`` cannot install it (stale, missing, pins that differ from the matrix); empty when
    every Python's lock is usable."""
    with needs_package("stack_lock_problems"):
        from ascend_serve.stack import lock
        from ascend_serve.stack import matrix as m
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
    with needs_package("hdk_accepts"):
        from ascend_serve.stack import host_check
    accepted: bool = host_check.hdk_accepts([str(v) for v in plain(supported)], str(version or ""))
    return accepted


def stack_host_problems(resolved: Any, host: Any, wheels_here: bool = True,
                        check_python: bool = True, python: str = "python3") -> list[str]:
    """Why the host's glibc, kernel or serving Python (``host``, the fact
    ``ascend_host_runtime``) cannot take the resolved set ``resolved``
    (``ascend_stack_resolved``) and its serving environment's set; empty when it can."""
    with needs_package("stack_host_problems"):
        from ascend_serve.stack import host_check
    problems: list[str] = host_check.host_problems(
        plain(resolved), plain(host or {}), wheels_here=bool(wheels_here),
        check_python=bool(check_python), python=str(python))
    return problems


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters_by_name(stack_resolve, stack_lock_problems, hdk_accepts,
                               stack_host_problems)
