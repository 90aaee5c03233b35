"""The run_counts callback: per-host counts of a real ansible-playbook run, as JSON lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from ansible_run import ansible_playbook

PLAY: list[dict[str, Any]] = [{
    "name": "Counted",
    "hosts": "all",
    "gather_facts": True,
    "gather_subset": ["min"],
    "tasks": [
        {"name": "Controller only", "ansible.builtin.set_fact": {"x": 1}},
        {"name": "Two of three items run", "ansible.builtin.command": {"argv": ["true"]},
         "loop": [1, 2, 3], "when": "item != 2", "changed_when": False},
        {"name": "A package-manager program", "ansible.builtin.command": {
            "argv": ["apt-get", "--version"]}, "changed_when": False},
        {"name": "A query of the package database is not one",
         "ansible.builtin.command": {"cmd": "dpkg-query --version"}, "changed_when": False},
        {"name": "Skipped", "ansible.builtin.debug": {"msg": "no"}, "when": False},
        {"name": "Gather again on one host", "ansible.builtin.setup": {"gather_subset": ["local"]},
         "when": "inventory_hostname == 'h1'"},
        {"name": "Changed on one host", "ansible.builtin.command": {"argv": ["true"]},
         "changed_when": "inventory_hostname == 'h2'"},
    ],
}]


def test_counts_per_host(tmp_path: Path) -> None:
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(PLAY, sort_keys=False))
    counts = tmp_path / "counts.jsonl"
    env = {"ANSIBLE_CALLBACKS_ENABLED": "ascend_serve.fleet.run_counts",
           "ASCEND_SERVE_RUN_COUNTS": str(counts)}
    for _ in range(2):
        proc = ansible_playbook("-i", "h1,h2,", "-c", "local", "-e",
                                "ansible_python_interpreter={{ ansible_playbook_python }}",
                                str(playbook), env=env, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = [json.loads(line) for line in counts.read_text().splitlines()]
    assert len(runs) == 2  # one line per run, appended
    assert runs[0] == runs[1]  # deterministic
    assert (runs[0]["playbook"], runs[0]["check"]) == ("play.yml", False)
    hosts = runs[0]["hosts"]
    # Gathering Facts + 7 tasks; set_fact and the skipped debug run no module; the loop runs 2.
    assert hosts["h1"] == {"tasks": 8, "skipped": 1, "changed": 0, "failed": 0,
                           "module_runs": 7, "fact_gatherings": 2, "package_manager_runs": 1}
    assert hosts["h2"] == {"tasks": 8, "skipped": 2, "changed": 1, "failed": 0,
                           "module_runs": 6, "fact_gatherings": 1, "package_manager_runs": 1}


def test_without_a_file_it_prints_one_line_per_host(tmp_path: Path) -> None:
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{**PLAY[0], "tasks": PLAY[0]["tasks"][:2]}]))
    proc = ansible_playbook("-i", "h1,", "-c", "local", "-e",
                            "ansible_python_interpreter={{ ansible_playbook_python }}",
                            str(playbook), env={"ANSIBLE_CALLBACKS_ENABLED":
                                                "ascend_serve.fleet.run_counts"}, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("h1: tasks=3 skipped=0 changed=0 failed=0 module_runs=3 fact_gatherings=1 "
            "package_manager_runs=0") in proc.stdout
