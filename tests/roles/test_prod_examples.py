"""The shipped production examples: they load as shipped, resolve what preflight reads, take
their versions from the version set, keep replicas whole in batches, and the openEuler example's
preflight passes on an openEuler 22.03 host (Python 3.9, glibc 2.34) where the example it
replaced was refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import BIN, ansible_playbook
from paths import COLLECTION, PLAYBOOKS, ROOT

from ascend_serve.fleet import request as rq
from ascend_serve.mirror.inventory import HostVars, InventoryError, read_hosts, resolved_sets
from ascend_serve.stack.matrix import load_matrix

EXAMPLES = ["prod", "prod-ubuntu", "prod-4x2"]
# openEuler 22.03 LTS: Python 3.9.9 and glibc 2.34 (its OS repository's python3 and glibc
# packages), kernel 5.10.
OPENEULER_2203 = {"glibc": "2.34", "kernel": "5.10.0-182.0.0.95.oe2203sp3.aarch64",
                  "python": "3.9"}


def _hosts(name: str) -> list[HostVars]:
    return read_hosts(ROOT / "inventories" / name / "hosts.yml")


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_loads_as_shipped(name: str) -> None:
    out = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", f"inventories/{name}/hosts.yml", "--list"],
        cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["_meta"]["hostvars"], f"inventories/{name} has no host"
    proc = ansible_playbook("--syntax-check", "-i", f"inventories/{name}/hosts.yml", "site.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_resolves_preflight_and_the_set_for_every_host(name: str) -> None:
    matrix = load_matrix()
    for host in _hosts(name):
        facts = resolved_sets(host, matrix)
        names = [v for v in host.variables
                 if v.startswith("preflight_") or v.startswith("ascend_stack_")]
        assert "preflight_expected_npu_count" in names and "ascend_stack_set" in names
        for variable in names:  # as the role sees it; raises InventoryError when unresolved
            role = "preflight" if variable.startswith("preflight_") else "ascend_stack"
            host.with_vars(role_path=str(COLLECTION / "roles" / role),
                           ascend_stack_resolved=facts).get(variable)
        assert host.get("preflight_expected_npu_count") == 8
        # Driver and firmware follow from the set: the installers the role asks for are the
        # ones the example pins (no version typed beside the set).
        assert facts["firmware"], f"{facts['name']} names no firmware"
        wanted = {host.role_file("npu_driver", v, "aarch64", facts)
                  for v in ("npu_driver_driver_file", "npu_driver_firmware_file")}
        assert wanted == {f"Ascend-hdk-910b-npu-driver_{facts['hdk']}_linux-aarch64.run",
                          f"Ascend-hdk-910b-npu-firmware_{facts['firmware']}.run"}
        assert wanted <= set(host.get("npu_driver_sha256")), (host.name, wanted)
        assert "npu_driver_firmware_version" not in _group_vars(name), \
            f"inventories/{name} types the firmware version beside the set"


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_keeps_the_key_in_a_vault_file(name: str) -> None:
    vault = ROOT / "inventories" / name / "group_vars" / "ascend_nodes" / "vault.yml"
    assert "vault_vllm_service_api_key" in yaml.safe_load(vault.read_text())
    host = _hosts(name)[0]
    assert host.variables["vllm_service_api_key"] == "{{ vault_vllm_service_api_key }}"
    # Unfilled, the key does not resolve, and says what to do.
    with pytest.raises(InventoryError, match="ansible-vault encrypt"):
        host.get("vllm_service_api_key")


def _group_vars(name: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for path in sorted((ROOT / "inventories" / name / "group_vars").rglob("*.yml")):
        merged.update(yaml.safe_load(path.read_text()) or {})
    return merged


def _batches(hosts: list[str], serial: list[int]) -> list[list[str]]:
    out, i, step = [], 0, 0
    while i < len(hosts):
        size = serial[min(step, len(serial) - 1)]
        out.append(hosts[i:i + size])
        i, step = i + size, step + 1
    return out


def test_four_host_example_batches_never_split_a_replica() -> None:
    hosts = _hosts("prod-4x2")
    groups: dict[str, list[str]] = {}
    for host in hosts:
        groups.setdefault(str(host.get("vllm_service_nodes_group")), []).append(host.name)
    assert sorted(groups) == ["replica_a", "replica_b"]
    profiles = yaml.safe_load((COLLECTION / "data" / "serving-profiles.yml").read_text())
    wanted = {str(h.get("vllm_service_profile")) for h in hosts}
    assert len(wanted) == 1
    nodes = next(p["nodes"] for p in profiles["profiles"] if p["name"] in wanted)
    assert all(len(members) == nodes for members in groups.values()), groups
    order = [h.name for h in hosts]  # the order a play of ascend_nodes meets them
    replicas = sorted(sorted(m) for m in groups.values())
    # The batches a play gets: an inventory's value never reaches a play's serial (Ansible
    # templates it with play and extra variables only); `ascend-serve deploy` hands it over as
    # an extra variable, and this is the value it hands over for each playbook.
    inventory = [str(ROOT / "inventories" / "prod-4x2" / "hosts.yml")]
    for playbook, variable in (("site", "ascend_rollout_batches"),
                               ("upgrade", "ascend_upgrade_batches")):
        passed = rq.inventory_batches(PLAYBOOKS / f"{playbook}.yml", inventory, None, set())
        assert list(passed) == [variable], (playbook, passed)
        batches = _batches(order, [int(s) for s in passed[variable]])
        assert sorted(sorted(b) for b in batches) == replicas, (variable, batches)


def _stand_in(tmp_path: Path, host: dict[str, str]) -> Path:
    """The host's interpreter as ascend_stack reads it: a script that reports the numbers."""
    python = tmp_path / "python3"
    python.write_text(f"#!/bin/sh\necho '{json.dumps(host)}'\n")
    python.chmod(0o755)
    return python


def _play_preflight(tmp_path: Path, inventory: Path, python: Path) -> str:
    """The version-set preflight (ascend_stack) of the inventory's first host, played on this
    machine: the inventory's own variables, its host reached by a local connection."""
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Version-set preflight of the example", "hosts": "ascend_nodes",
        "gather_facts": True, "roles": [{"role": "ascend_serve.fleet.ascend_stack"}]}]))
    proc = ansible_playbook(
        "-i", str(inventory / "hosts.yml"), "--limit", "a2-node-01",
        "-e", "ansible_connection=local", "-e", "ansible_become=false",
        "-e", f"ansible_python_interpreter={sys.executable}",
        "-e", f"ascend_stack_python={python}", str(playbook), timeout=180)
    out = proc.stdout + proc.stderr
    return ("ok: " if proc.returncode == 0 else "failed: ") + out


def test_openeuler_example_passes_preflight_where_the_old_one_was_refused(
        tmp_path: Path) -> None:
    python = _stand_in(tmp_path, OPENEULER_2203)
    example = ROOT / "inventories" / "prod"
    out = _play_preflight(tmp_path, example, python)
    assert out.startswith("ok: "), out
    assert "vllm-ascend-0.13.0: HDK 25.5.0" in out, out

    # The example this one replaced: a venv of /usr/bin/python3 with Python 3.11 asked for.
    old = tmp_path / "old"
    shutil.copytree(example, old)
    main = old / "group_vars" / "ascend_nodes" / "main.yml"
    values = yaml.safe_load(main.read_text())
    for key in ("vllm_service_runtime", "vllm_service_image"):
        values.pop(key)
    values |= {"python_env_manager": "venv", "python_env_python_version": "3.11",
               "python_env_index_url": "https://pypi.example.internal/simple"}
    main.write_text(yaml.safe_dump(values))
    out = _play_preflight(tmp_path, old, python)
    assert out.startswith("failed: "), out
    assert "ascend_stack on a2-node-01: nothing was changed:" in out, out
    assert "is Python 3.9; set vllm-ascend-0.13.0 needs 3.10 or 3.11 (at least 3.10)" in out, out
    # The refusal names the fixes.
    for fix in ("vllm_service_runtime: container", "python_env_conda_channel",
                "set python_env_python"):
        assert fix in out, (fix, out)
