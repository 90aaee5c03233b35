"""A converged role costs a skipped include, not its tasks (issue 33): in the roles that decide
from one state read, every task that can change the node is in ``tasks/apply.yml``, which
``tasks/main.yml`` includes only when the plan (the filter ``state_plan``'s verdict) names
something to do."""

from __future__ import annotations

from typing import Any

import pytest
import role_files
from paths import ROLES

# Modules that only read, decide or report (no change on the node), and the ledger, whose own
# condition compares the record with the node's fact.
NOT_CHANGING = {
    "ansible.builtin.set_fact", "ansible.builtin.debug", "ansible.builtin.assert",
    "ansible.builtin.include_tasks", "ansible.builtin.import_tasks", "ansible.builtin.setup",
    "ansible.builtin.include_vars", "ascend_serve.fleet.ledger",
}
CHANGING = {
    "ansible.builtin.package", "ansible.builtin.apt", "ansible.builtin.command",
    "ansible.builtin.group", "ansible.builtin.user", "ansible.builtin.file",
    "ansible.builtin.copy", "ansible.builtin.template", "ansible.builtin.systemd_service",
}
GATED = {"vllm_service": "_vllm_service_plan", "npu_metrics": "_npu_metrics_plan"}


def _flat(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for task in tasks or []:
        out += _flat(task["block"]) if "block" in task else [task]
    return out


def _module(task: dict[str, Any]) -> str:
    return next(k for k in task if k.startswith(("ansible.", "ascend_serve.", "community.")))


@pytest.mark.parametrize("role", sorted(GATED))
def test_changing_tasks_are_only_in_the_plan_gated_apply_file(role: str) -> None:
    main = _flat(role_files.load(ROLES / role / "tasks" / "main.yml"))
    apply = _flat(role_files.load(ROLES / role / "tasks" / "apply.yml"))
    includes = [t for t in main if t.get("ansible.builtin.include_tasks") == "apply.yml"]
    assert len(includes) == 1
    assert includes[0]["when"] == f"{GATED[role]} | length > 0"
    # Outside apply.yml (and the files main.yml brings in for its checks), nothing changes the node.
    assert {_module(t) for t in main} <= NOT_CHANGING | {f"ascend_serve.fleet.{role}_state"}, role
    changing = [t["name"] for t in apply if _module(t) in CHANGING]
    assert len(changing) >= 5, changing  # the role's writes are there, not vacuously none
