"""The version sets are resolved once (issue 30): one fact, ``ascend_stack_resolved``, set by the
``ascend_stack`` role alone, once per host and run, and the same fact ``ascend-serve mirror``
computes for the example inventories (both call ``matrix.resolve_for_host``)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import ansible_playbook
from paths import PLAYBOOKS, PLUGINS, ROLES, ROOT

from ascend_serve.mirror.inventory import read_hosts, resolved_sets

INVENTORIES = ["prod", "prod-ubuntu", "prod-4x2", "local"]
# The names the set went by before issue 30, and the second matrix-path variable.
RETIRED = ("ascend_stack_env_resolved", "_python_env_stack", "_python_env_matrix",
           "python_env_matrix_file", "ascend_stack_matrix_file", "_mirror_set", "stack_of")
RESOLVE_TASK = ("TASK [ascend_serve.fleet.ascend_stack : "
                "Resolve the locked version set and the serving")
INCLUDE_TASK = "TASK [ascend_serve.fleet.ascend_stack : Resolve the version sets once"


def _strings(node: Any) -> Iterator[str]:
    """Every string of a parsed YAML document (keys and values; comments are gone)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)
    elif isinstance(node, str):
        yield node


def _yaml_files() -> list[Path]:
    return sorted([*ROLES.rglob("*.yml"), *PLAYBOOKS.glob("*.yml"), ROOT / "site.yml"])


def test_only_ascend_stack_resolves_and_nothing_reads_the_matrix() -> None:
    """stack_resolve is called in one task of one role; no role or playbook names the matrix in
    a template, a file argument or a variable (the filter reads the CLI's matrix)."""
    callers: dict[str, int] = {}
    readers: list[str] = []
    for path in _yaml_files():
        for text in _strings(yaml.safe_load(path.read_text(encoding="utf-8"))):
            name = str(path.relative_to(ROOT))
            calls = len(re.findall(r"\bstack_resolve\b", text)) if "{{" in text else 0
            if calls:
                callers[name] = callers.get(name, 0) + calls
            # A lookup or query of the matrix, a matrix-path variable, or a file argument naming
            # it (a message that names stack-matrix.yml reads nothing).
            if re.search(r"\b(lookup|query)\([^)]*matrix|matrix_file", text) or \
                    re.fullmatch(r"\S*stack-matrix\.yml", text.strip()):
                readers.append(f"{name}: {text.strip()[:80]}")
    assert callers == {"roles/ascend_stack/tasks/resolve.yml": 1}
    assert readers == []


def test_the_retired_names_are_gone() -> None:
    sources = [*_yaml_files(), *PLUGINS.rglob("*.py"), *PLUGINS.rglob("*.yml"),
               *(ROOT / "python" / "ascend_serve").rglob("*.py")]
    found = [f"{p.relative_to(ROOT)}: {n}" for p in sources
             for n in RETIRED if re.search(rf"\b{n}\b", p.read_text(encoding="utf-8"))]
    assert found == []


def _play(tmp_path: Path, inventory: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """Three plays over the inventory's hosts, by a local connection: the role (as preflight
    plays it), the role again (as the stack play meets it through npu_driver's dependency) with
    the fact written out, and the role after a play chose another set (as an upgrade test does).
    Returns the output and each host's fact after the second play."""
    python = tmp_path / "python3"  # the host's interpreter as the role reads it: its numbers
    python.write_text("#!/bin/sh\necho '"
                      + json.dumps({"glibc": "2.36", "kernel": "6.1.0", "python": "3.11"})
                      + "'\n")
    python.chmod(0o755)
    out_dir = tmp_path / "facts"
    out_dir.mkdir()
    role = {"role": "ascend_serve.fleet.ascend_stack"}
    playbook = tmp_path / "resolve.yml"
    playbook.write_text(yaml.safe_dump([
        {"name": "Preflight", "hosts": "ascend_nodes", "gather_facts": False, "roles": [role]},
        {"name": "Stack", "hosts": "ascend_nodes", "gather_facts": False, "roles": [role],
         "tasks": [{"name": "Write the fact", "delegate_to": "localhost",
                    "ansible.builtin.copy": {
                        "content": "{{ ascend_stack_resolved | to_json }}",
                        "dest": f"{out_dir}/{{{{ inventory_hostname }}}}.json",
                        "mode": "0644"}}]},
        {"name": "Another set", "hosts": "ascend_nodes", "gather_facts": False,
         "pre_tasks": [{"name": "Choose another set", "ansible.builtin.set_fact": {
             "ascend_stack_set": "vllm-ascend-0.18.0"}}],
         "roles": [role]},
    ], sort_keys=False))
    proc = ansible_playbook(
        "-i", str(ROOT / "inventories" / inventory / "hosts.yml"),
        "-e", "ansible_connection=local", "-e", "ansible_become=false",
        "-e", f"ansible_python_interpreter={sys.executable}",
        "-e", f"ascend_stack_python={python}", "-e", "ascend_stack_check_python=false",
        str(playbook), timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    facts = {p.stem: json.loads(p.read_text()) for p in out_dir.glob("*.json")}
    return out, facts


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_the_role_resolves_once_per_host_and_as_mirror_does(tmp_path: Path,
                                                             inventory: str) -> None:
    out, facts = _play(tmp_path, inventory)
    # Three plays meet the role; the resolution runs in the first, is skipped in the second (the
    # same choice), and runs again in the third (another set).
    assert out.count(INCLUDE_TASK) == 3, out[-4000:]
    assert out.count(RESOLVE_TASK) == 2, out[-4000:]
    assert re.search(r"Stack\].*?" + re.escape(INCLUDE_TASK) + r".*?\n(skipping: \[[^\]]+\]\n)+",
                     out, re.S), out[-4000:]
    hosts = read_hosts(ROOT / "inventories" / inventory / "hosts.yml")
    assert sorted(facts) == sorted(h.name for h in hosts)
    for host in hosts:
        assert facts[host.name] == resolved_sets(host), host.name
        serving = str(host.get("python_env_set", "") or "") or facts[host.name]["name"]
        assert facts[host.name]["serving"]["name"] == serving
