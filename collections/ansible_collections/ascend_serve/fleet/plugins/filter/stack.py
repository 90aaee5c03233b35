"""``stack_resolve``: pick the one locked version set an inventory asks for.

The logic lives in the ``ascend_serve`` Python package (``ascend_serve.matrix``), installed on the
controller next to Ansible, so the roles and the ``ascend-serve matrix`` command cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError


def _plain(value: Any) -> Any:
    """Plain dicts/lists: Ansible hands filters lazily templated containers."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def stack_resolve(
    matrix: Any, name: str | None = None, pins: Any = None, chip: str | None = None
) -> dict[str, Any]:
    try:
        from ascend_serve.matrix import MatrixError, parse_matrix, resolve
    except ImportError as exc:  # pragma: no cover - depends on the controller's environment
        raise AnsibleFilterError(
            "stack_resolve needs the ascend_serve package on the controller "
            f"(pip install -e . in the project): {exc}"
        ) from exc
    try:
        selected = resolve(
            parse_matrix(_plain(matrix)), name or None, _plain(pins or {}), chip or None
        )
    except MatrixError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return selected.as_facts()


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"stack_resolve": stack_resolve}
