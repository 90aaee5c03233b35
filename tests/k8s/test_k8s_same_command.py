"""The container runs the systemd unit's command: for the same profile, node rank and inputs,
the launcher ``k8s render`` puts in its ConfigMap and the one the vllm_service role renders for
the unit's ``ExecStart`` (the role's filter ``vllm_launch_context`` and its template, through
Ansible) have the same ``exec vllm serve ...`` line, and are the same script apart from the
line naming who rendered it.

The head address is an input of both: the role gives the head's HCCL_IF_IP, the pod LWS's
leader address; the test gives the role the address the LeaderWorkerSet gets.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import render_with_role_vars
from paths import ROLES, TEMPLATES
from typer.testing import CliRunner

from ascend_serve.cli.k8s import k8s_app
from ascend_serve.k8s.ascend import leader_address
from ascend_serve.serving import launcher

runner = CliRunner()
ROLE = ROLES / "vllm_service"
PREFIX = "/opt/ascend-serve/env"  # the serving environment the unit's launcher runs vllm from
# Two Atlas 800 A2 servers (device IP plan + host addresses) for the two-node profile.
PLAN = {"subnets": ["192.168.100.0/24"],
        "hosts": [{"name": "node-a", "chip": "910B"}, {"name": "node-b", "chip": "910B"}],
        "servers": {"node-a": "10.0.0.11", "node-b": "10.0.0.12"}}
# (profile, overrides) rendered both ways; a hostile env value checks the quoting too.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("deepseek-r1-distill-qwen-32b", {"env": {"QUOTED": "x y'z $(HOME)"}}),
    ("deepseek-r1-w8a8-2xa2", {}),
]


def _role_launchers(tmp_path: Path, name: str, overrides: dict[str, Any], nodes: int,
                    head: str) -> dict[int, str]:
    """The unit's launcher of every node rank, rendered by Ansible as the role renders it:
    the role's defaults and vars, its expressions for the model directory and the set_env list
    (tasks/validate.yml), its context filter and template (tasks/main.yml)."""
    out = tmp_path / f"role-{name}"
    out.mkdir()
    task = {
        "name": "Render the launcher of each node rank",
        "ansible.builtin.template": {
            "src": str(TEMPLATES / launcher.LAUNCHER_TEMPLATE),
            "dest": f"{out}/launch-{{{{ item }}}}.sh", "mode": "0644"},
        "loop": list(range(nodes)),
        "vars": {
            "_ctx": (
                "{{ _vllm_service_profile | ascend_serve.fleet.vllm_launch_context("
                "model_path=_vllm_service_model_dir, vllm=vllm_service_env_prefix ~ "
                "'/bin/vllm', state_dir=vllm_service_state_dir, rank=item, "
                "head_address=(" + json.dumps(head) + " if nodes > 1 else none), "
                "set_env=_vllm_service_set_env_list, env_files=vllm_service_env_files, "
                "rendered_by='the vllm_service role') }}"),
            "nodes": nodes,
            "profile": "{{ _ctx.profile }}",
            "node": "{{ _ctx.node }}",
            "launch": "{{ _ctx.launch }}",
        },
    }
    extra = {
        "vllm_service_profile": name,
        "vllm_service_overrides": overrides,
        "vllm_service_env_prefix": PREFIX,
        "_vllm_service_profile": (
            "{{ vllm_service_profile | ascend_serve.fleet.serving_profile("
            "vllm_service_overrides, vllm_service_profile_files) }}"),
        "_vllm_service_model_dir": (
            "{{ vllm_service_model_dir or ('/var/lib/ascend-serve/models/' ~ "
            "_vllm_service_profile.model.name) }}"),
        "_vllm_service_set_env_list": (
            "{{ vllm_service_set_env if vllm_service_set_env is not none else "
            "(_vllm_service_ascend_set_env if _vllm_service_profile.device == 'npu' "
            "else []) }}"),
    }
    # Extra variables: above the role's defaults, read as the play's vars_files.
    render_with_role_vars(tmp_path, "vllm_service", f"Render the vllm_service launchers {name}",
                          task, extra)
    return {rank: (out / f"launch-{rank}.sh").read_text() for rank in range(nodes)}


def _k8s_launchers(name: str, overrides: dict[str, Any], plan_file: Path) -> dict[int, str]:
    args = ["render", name, "--vllm", f"{PREFIX}/bin/vllm",
            "--env-file", "/etc/ascend-serve/hccl.env"]
    if "2xa2" in name:  # a two-node profile: its rank table
        args += ["--ranktable-plan", str(plan_file)]
    for key, value in overrides.get("env", {}).items():
        args += ["--set", f"env.{key}={json.dumps(value)}"]
    result = runner.invoke(k8s_app, args)
    assert result.exit_code == 0, result.stderr
    configmap = next(yaml.safe_load_all(result.stdout))
    assert configmap["metadata"]["name"].endswith("-launch")
    return {int(key.removeprefix("launch-").removesuffix(".sh")): text
            for key, text in configmap["data"].items()}


def _without_rendered_by(script: str) -> str:
    return "\n".join(line for line in script.splitlines()
                     if not line.startswith("# Rendered from the vllm_service role's"))


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=[c[0] for c in CASES])
def test_container_command_is_the_units_command(
        tmp_path: Path, name: str, overrides: dict[str, Any]) -> None:
    plan_file = tmp_path / "plan.yml"
    plan_file.write_text(yaml.safe_dump(PLAN))
    pod = _k8s_launchers(name, overrides, plan_file)
    nodes = len(pod)
    head = leader_address(name.replace(".", "-"), "default")
    unit = _role_launchers(tmp_path, name, overrides, nodes, head)
    assert sorted(unit) == sorted(pod) == list(range(nodes))
    for rank in range(nodes):
        command = launcher.command_line(pod[rank])
        assert command == launcher.command_line(unit[rank])
        argv = shlex.split(command)
        assert argv[:3] == [f"{PREFIX}/bin/vllm", "serve",
                            f"/var/lib/ascend-serve/models/{argv[2].rsplit('/', 1)[-1]}"]
        assert ("--headless" in argv) == (rank > 0)
        assert _without_rendered_by(pod[rank]) == _without_rendered_by(unit[rank])
        assert pod[rank] != unit[rank]  # only the "rendered by" line differs
    if nodes > 1:
        assert f"--data-parallel-address {head}" in launcher.command_line(pod[1])
    else:
        assert "QUOTED='x y'\"'\"'z $(HOME)'" in pod[0]


def test_default_image_vllm_differs_only_in_the_executable(tmp_path: Path) -> None:
    """Without --vllm the pod runs the image's vllm from its PATH; the rest is the same."""
    result = runner.invoke(k8s_app, ["render", "deepseek-r1-distill-qwen-7b"])
    assert result.exit_code == 0
    default = launcher.command_line(next(yaml.safe_load_all(result.stdout))["data"]["launch-0.sh"])
    custom = runner.invoke(k8s_app, ["render", "deepseek-r1-distill-qwen-7b", "--vllm",
                                     f"{PREFIX}/bin/vllm"])
    other = launcher.command_line(next(yaml.safe_load_all(custom.stdout))["data"]["launch-0.sh"])
    assert shlex.split(default)[0] == "vllm"
    assert shlex.split(default)[1:] == shlex.split(other)[1:]
