"""The npu_metrics role's node exporter names per OS (its first_found chain of vars files, most
specific first: Debian.yml names them; RedHat.yml and Kylin_Linux_Advanced_Server.yml leave them
to the inventory).

The role runs on localhost (local connection) after a task that sets the OS facts a node would
report (``set_fact`` with ``cacheable``: they land in ``ansible_facts``, so the role's own fact
read is skipped, as it is after a play that gathered facts). ``npu_metrics_interval: 1`` makes
the role's option check fail right after the names are resolved: its message shows the textfile
directory the role took, and nothing after it runs (no state read, nothing changed on this
machine). The run counts (callback ascend_serve.fleet.run_counts) show no module ran on the host.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import ansible_playbook

FACTS = {
    "debian12": {"distribution": "Debian", "distribution_major_version": "12",
                 "distribution_version": "12.7", "os_family": "Debian"},
    "openeuler": {"distribution": "openEuler", "distribution_major_version": "22",
                  "distribution_version": "22.03", "os_family": "RedHat"},
    "kylin": {"distribution": "Kylin Linux Advanced Server", "distribution_major_version": "V10",
              "distribution_version": "V10", "os_family": "Kylin Linux Advanced Server"},
}
NAMES = {"npu_metrics_node_exporter_package": "site-node-exporter",
         "npu_metrics_node_exporter_service": "site-node-exporter",
         "npu_metrics_textfile_dir": "/var/lib/site-node-exporter/textfile"}


def run_role(tmp_path: Path, facts: dict[str, str], variables: dict[str, Any]
             ) -> tuple[str, dict[str, int]]:
    counts = tmp_path / "counts.jsonl"
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "npu_metrics names", "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "Facts of the OS under test", "ansible.builtin.set_fact":
             {**facts, "cacheable": True}},
            {"name": "The role", "ansible.builtin.include_role":
             {"name": "ascend_serve.fleet.npu_metrics"},
             "vars": {"npu_metrics_interval": 1, **variables}},
        ]}], sort_keys=False))
    proc = ansible_playbook(
        "-i", "localhost,", "-c", "local", str(playbook),
        env={"ANSIBLE_CALLBACKS_ENABLED": "ascend_serve.fleet.run_counts",
             "ASCEND_SERVE_RUN_COUNTS": str(counts)}, timeout=300)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-2000:]
    (line,) = counts.read_text().splitlines()
    return " ".join(proc.stdout.split()), json.loads(line)["hosts"]["localhost"]


def test_debian_takes_debians_names(tmp_path: Path) -> None:
    output, counts = run_role(tmp_path, FACTS["debian12"], {})
    assert "npu_metrics_interval must be 5 seconds or more" in output
    assert "textfile /var/lib/prometheus/node-exporter," in output
    assert "has no node exporter package" not in output
    assert counts["module_runs"] == 0 and counts["fact_gatherings"] == 0


@pytest.mark.parametrize("os_name", ["openeuler", "kylin"])
def test_an_os_without_a_cited_name_is_refused_naming_the_host(tmp_path: Path,
                                                                os_name: str) -> None:
    output, counts = run_role(tmp_path, FACTS[os_name], {})
    facts = FACTS[os_name]
    assert (f"npu_metrics on localhost: nothing was changed: the role has no node exporter "
            f"package, unit and textfile directory for {facts['distribution']} "
            f"{facts['distribution_version']}") in output
    assert "npu_metrics_node_exporter_package, npu_metrics_node_exporter_service and " \
        "npu_metrics_textfile_dir" in output
    assert "npu_metrics_interval must be" not in output  # refused before the option check
    assert counts["module_runs"] == 0


@pytest.mark.parametrize("os_name", ["openeuler", "debian12"])
def test_names_the_inventory_sets_win(tmp_path: Path, os_name: str) -> None:
    output, counts = run_role(tmp_path, FACTS[os_name], NAMES)
    assert "has no node exporter package" not in output
    assert f"textfile {NAMES['npu_metrics_textfile_dir']}," in output
    assert counts["module_runs"] == 0 and counts["fact_gatherings"] == 0
