"""The shipped inventories parse, carry what the roles require, and the playbooks pass syntax."""

from __future__ import annotations

import json
import subprocess

import pytest
from ansible_run import BIN, ansible_playbook
from paths import PLAYBOOKS, ROOT


def _inventory(name: str) -> dict[str, dict[str, object]]:
    out = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", f"inventories/{name}/hosts.yml", "--list"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    hostvars: dict[str, dict[str, object]] = json.loads(out)["_meta"]["hostvars"]
    return hostvars


@pytest.mark.parametrize("name", ["local", "prod"])
def test_inventory_sets_required_variables(name: str) -> None:
    hostvars = _inventory(name)
    assert hostvars, f"inventories/{name} has no hosts"
    for host, hvars in hostvars.items():
        # The firmware version comes from the set (stack-matrix.yml), not the inventory.
        for required in ("preflight_expected_npu_count", "preflight_expected_npu_chip",
                         "ascend_stack_set"):
            assert required in hvars, f"{host} in inventories/{name} lacks {required}"


@pytest.mark.parametrize("name", ["local", "prod"])
def test_site_syntax(name: str) -> None:
    proc = ansible_playbook("--syntax-check", "-i", f"inventories/{name}/hosts.yml", "site.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_step_playbook_checks_from_the_checkout() -> None:
    """The design card's ``playbooks/``: each step by its path, as an operator runs it."""
    steps = sorted(str(p.relative_to(ROOT)) for p in PLAYBOOKS.glob("*.yml"))
    assert "playbooks/site.yml" in steps and len(steps) >= 8
    proc = ansible_playbook("--syntax-check", "-i", "inventories/prod", *steps)
    assert proc.returncode == 0, proc.stdout + proc.stderr
