"""``stack_resolve``: pick the one locked version set an inventory asks for.

The logic lives in the ``ascend_serve`` Python package (``ascend_serve.matrix``), installed on the
controller next to Ansible, so the roles and the ``ascend-serve matrix`` command cannot disagree.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.ascend_serve.fleet.plugins.module_utils.controller_package import (
    package,
    plain,
)


def stack_resolve(
    matrix: Any, name: str | None = None, pins: Any = None, chip: str | None = None
) -> dict[str, Any]:
    m = package("matrix", "stack_resolve")
    try:
        selected = m.resolve(
            m.parse_matrix(plain(matrix)), name or None, plain(pins or {}), chip or None
        )
    except m.MatrixError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    facts: dict[str, Any] = selected.as_facts()
    return facts


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"stack_resolve": stack_resolve}
