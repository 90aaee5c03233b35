"""The upgrade's batches come from the inventory's ``ascend_upgrade_batches``.

Ansible templates a play's ``serial`` with the play's and the extra variables only, never the
inventory's: ``ascend-serve deploy`` reads the value through Ansible's inventory code and hands it
over as an extra variable, and ``playbooks/upgrade.yml``'s first play stops a plain
ansible-playbook run whose batches differ from it before anything changes. Four local-connection
hosts, ``[2]`` in the group's variables; the upgrade runs in check mode with only its always-run
steps (the roles' tags and preflight skipped), so the counts are of batches, not of the roles.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from ansible_run import BIN, ansible_playbook
from paths import PLAYBOOKS
from typer.testing import CliRunner

from ascend_serve.cli.console import EXIT_BAD_INPUT, EXIT_OK
from ascend_serve.cli.deploy import deploy
from ascend_serve.fleet import request as rq

UPGRADE = PLAYBOOKS / "upgrade.yml"
HOSTS = ("h1", "h2", "h3", "h4")
# Only the steps tagged always (the batch check, the breaker, the drain and resume includes):
# no role's task, no preflight.
ONLY_BATCHES = ["--check", "--tags", "ascend-none",
                "--skip-tags", "preflight,os,driver,cann,tuning,swap,env,models,serve"]
REFUSAL = "Ansible templates a play's serial without inventory variables"

app = typer.Typer()
app.command()(deploy)
runner = CliRunner()


def _inventory(tmp_path: Path, batches: Any = (2,), **host_batches: Any) -> Path:
    group: dict[str, Any] = {"ansible_connection": "local",
                             "ansible_python_interpreter": sys.executable,
                             "ascend_stack_set": "vllm-ascend-0.13.0",
                             "ascend_stack_chip": "910B"}
    if batches is not None:
        group["ascend_upgrade_batches"] = list(batches)
    hosts = {h: ({"ascend_upgrade_batches": host_batches[h]} if h in host_batches else {})
             for h in HOSTS}
    path = tmp_path / "inventory"
    (path / "group_vars").mkdir(parents=True)
    (path / "hosts.yml").write_text(yaml.safe_dump(
        {"all": {"children": {"ascend_nodes": {"hosts": hosts}}}}))
    (path / "group_vars" / "ascend_nodes.yml").write_text(yaml.safe_dump(group))
    return path


def _batches(run_dir: Path, play: str) -> list[list[str]]:
    """The hosts of each batch of ``play``: Ansible starts the play once per batch; the hosts
    are those with a result before the next start."""
    events = sorted((json.loads(p.read_text()) for p in (run_dir / "job_events").glob("*.json")),
                    key=lambda e: e["counter"])
    batches: list[list[str]] = []
    current: list[str] | None = None
    for event in events:
        data = event.get("event_data") or {}
        if event["event"] == "playbook_on_play_start":
            current = [] if data.get("play") == play else None
            if current is not None:
                batches.append(current)
        elif (current is not None and event["event"].startswith("runner_on_")
              and data.get("host") not in current):
            current.append(data["host"])
    return batches


def test_deploy_plays_the_inventory_batches(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = _inventory(tmp_path)
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    result = runner.invoke(app, [str(UPGRADE), "-i", str(inventory), "--run-dir", str(run_dir),
                                 *ONLY_BATCHES], catch_exceptions=False)
    assert result.exit_code == EXIT_OK, result.output
    assert 'batches from the inventory: -e {"ascend_upgrade_batches": [2]}' in result.output
    assert _batches(run_dir, "Upgrade in batches") == [["h1", "h2"], ["h3", "h4"]]
    # The batch check (run once per batch, on its first host) ran in the same two batches.
    assert _batches(run_dir, "Check the upgrade batches") == [["h1"], ["h3"]]


def test_plain_ansible_playbook_is_refused_before_any_change(tmp_path: Path) -> None:
    proc = ansible_playbook("-i", str(_inventory(tmp_path)), *ONLY_BATCHES, str(UPGRADE))
    text = " ".join(proc.stdout.split())
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert REFUSAL in text
    assert """-e '{"ascend_upgrade_batches": [2]}'""" in text
    # The first play, its first batch (h1 alone: the default batches): no other play started.
    assert proc.stdout.count("PLAY [") == 1
    assert "PLAY [Preflight checks]" not in proc.stdout
    assert "PLAY [Upgrade in batches]" not in proc.stdout
    assert re.findall(r"^(\S+) +: ok=1 +changed=0 +unreachable=0 +failed=1", proc.stdout,
                      re.M) == ["h1"]


def test_plain_ansible_playbook_with_the_extra_var_passes(tmp_path: Path) -> None:
    proc = ansible_playbook("-i", str(_inventory(tmp_path)), *ONLY_BATCHES,
                            "-e", json.dumps({"ascend_upgrade_batches": [2]}), str(UPGRADE))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert proc.stdout.count("PLAY [Upgrade in batches]") == 2
    assert REFUSAL not in proc.stdout


def test_a_difference_after_the_first_batch_is_refused_too(tmp_path: Path) -> None:
    """['1', '50%'] of 4 hosts is 1, 2, 1; the default is 1, 1, 1, 1: the first batches agree,
    the second does not."""
    proc = ansible_playbook("-i", str(_inventory(tmp_path, ["1", "50%"])), *ONLY_BATCHES,
                            str(UPGRADE))
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert REFUSAL in " ".join(proc.stdout.split())
    assert "PLAY [Preflight checks]" not in proc.stdout


def test_hosts_that_disagree_are_refused_by_the_playbook(tmp_path: Path) -> None:
    proc = ansible_playbook("-i", str(_inventory(tmp_path, h3=[1])), *ONLY_BATCHES,
                            "-e", json.dumps({"ascend_rollout_batches": [2]}), str(UPGRADE))
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "The hosts disagree about ascend_upgrade_batches" in " ".join(proc.stdout.split())


# --- the request, without running anything ------------------------------------------------------


def test_the_playbooks_serial_variables() -> None:
    assert rq.serial_variables(UPGRADE) == {"ascend_upgrade_batches": "ascend_nodes"}
    for name in ("stack", "network", "k8s_node", "serving_env"):
        assert rq.serial_variables(PLAYBOOKS / f"{name}.yml") == {
            "ascend_rollout_batches": "ascend_nodes"}, name


@pytest.mark.parametrize("batches", [[2], ["1", "20%"], [1, "50%", 3]])
def test_the_value_round_trips_as_an_extra_var(tmp_path: Path, batches: list[Any]) -> None:
    request = rq.prepare(str(UPGRADE), [str(_inventory(tmp_path, batches))], cwd=tmp_path)
    (passed,) = request.extra_vars
    assert passed.keys == ("ascend_upgrade_batches",)
    assert yaml.safe_load(passed.text or "") == {"ascend_upgrade_batches": batches}
    assert request.serial_from_inventory == {"ascend_upgrade_batches": batches}


def test_an_operator_extra_var_wins_and_nothing_is_added(tmp_path: Path) -> None:
    request = rq.prepare(str(UPGRADE), [str(_inventory(tmp_path))], cwd=tmp_path,
                         extra_vars=['{"ascend_upgrade_batches": ["100%"]}'])
    assert [ev.keys for ev in request.extra_vars] == [("ascend_upgrade_batches",)]
    assert request.serial_from_inventory == {}


def test_nothing_is_added_where_the_inventory_leaves_it_unset(tmp_path: Path) -> None:
    request = rq.prepare(str(UPGRADE), [str(_inventory(tmp_path, None))], cwd=tmp_path)
    assert request.extra_vars == []


def test_deploy_refuses_hosts_that_disagree(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = _inventory(tmp_path, h3=[1], h4=["50%"])
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, [str(UPGRADE), "-i", str(inventory)], catch_exceptions=False)
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    text = " ".join(result.output.split())
    assert "disagree about ascend_upgrade_batches" in text
    assert "h1, h2: [2]" in text and "h3: [1]" in text and 'h4: ["50%"]' in text
    assert not (tmp_path / ".ascend-serve").exists()  # nothing ran


def test_a_vault_encrypted_inventory_is_read_with_the_password_file(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path)
    password = tmp_path / "vault-pass"
    password.write_text("not-a-real-password\n")
    proc = subprocess.run(
        [str(BIN / "ansible-vault"), "encrypt", "--vault-password-file", str(password),
         str(inventory / "group_vars" / "ascend_nodes.yml")],
        capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    request = rq.prepare(str(UPGRADE), [str(inventory)], cwd=tmp_path,
                         vault_password_files=[str(password)])
    assert request.serial_from_inventory == {"ascend_upgrade_batches": [2]}
    with pytest.raises(rq.DeployInputError, match="no vault secrets"):
        rq.prepare(str(UPGRADE), [str(inventory)], cwd=tmp_path)
