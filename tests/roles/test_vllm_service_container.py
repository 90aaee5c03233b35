"""The vllm_service role's container runtime, rendered by Ansible without a node: the unit's
``podman run`` passes vllm-ascend's device files and driver mounts
(``data/ascend-container.yml``) for an NPU profile and none for a CPU one, runs the launcher as
the service user in the image, never pulls at start, and keeps the key off the command line;
the launcher it mounts is the one ``ascend-serve k8s render`` puts in a pod (the image's
``vllm`` and ``set_env`` scripts), apart from the line naming who rendered it.

The live path (podman on a node, the image from a registry, vLLM serving) is molecule
``container``.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml
from ansible_run import ansible_playbook, render_with_role_vars
from paths import DATA, ROLES, TEMPLATES
from typer.testing import CliRunner

from ascend_serve.cli.k8s import k8s_app
from ascend_serve.serving.profiles import load_profiles

runner = CliRunner()
ROLE = ROLES / "vllm_service"
FACTS = yaml.safe_load((DATA / "ascend-container.yml").read_text())
IMAGE = "registry.example:5000/ascend/vllm-ascend:v0.13.0"
UID, GID, NPU_GID = 990, 991, 1000


def _render(tmp_path: Path, profile: str, api_key: str) -> tuple[list[str], str]:
    """(ExecStart's argv, the launcher) as the role renders them for a container runtime."""
    out = tmp_path / "out"
    out.mkdir()
    task = {
        "name": "Render the unit and the launcher",
        "ansible.builtin.template": {"src": "{{ item.src }}",
                                     "dest": f"{out}/{{{{ item.dest }}}}", "mode": "0644"},
        "loop": [{"src": f"{ROLE}/templates/{{{{ _vllm_service_unit_template }}}}",
                  "dest": "unit"},
                 {"src": str(TEMPLATES / "vllm-launch.sh.j2"), "dest": "launch.sh"}],
        "vars": {
            "_ctx": (
                "{{ _vllm_service_profile | ascend_serve.fleet.vllm_launch_context("
                "model_path=_vllm_service_model_dir, vllm=_vllm_service_vllm, "
                "state_dir=vllm_service_state_dir, rank=0, head_address=none, "
                "set_env=_vllm_service_set_env_list, env_files=vllm_service_env_files, "
                "rendered_by='the vllm_service role') }}"),
            "profile": "{{ _ctx.profile }}",
            "node": "{{ _ctx.node }}",
            "launch": "{{ _ctx.launch }}",
        },
    }
    extra: dict[str, Any] = {
        "role_path": str(ROLE),
        "vllm_service_profile": profile,
        "vllm_service_runtime": "container",
        "vllm_service_image": IMAGE,
        "vllm_service_api_key": api_key,
        "vllm_service_supplementary_groups": ["HwHiAiUser"],
        "_vllm_service_rank": 0,
        "_vllm_service_profile": (
            "{{ vllm_service_profile | ascend_serve.fleet.serving_profile("
            "vllm_service_overrides, vllm_service_profile_files) }}"),
        "_vllm_service_model_dir": (
            "{{ '/var/lib/ascend-serve/models/' ~ _vllm_service_profile.model.name }}"),
        # As tasks/validate.yml sets it for a container runtime: the image's set_env scripts.
        "_vllm_service_set_env_list": (
            "{{ _vllm_service_container_spec.image.set_env "
            "if _vllm_service_profile.device == 'npu' else [] }}"),
        # What vllm_service_state read on a node that has the user and the image.
        "_vllm_service_state": {
            "user": {"exists": True, "uid": UID, "gid": GID},
            "group_ids": {"HwHiAiUser": NPU_GID},
            "image": {"engine": True, "present": True, "id": "ab" * 32},
        },
    }
    render_with_role_vars(tmp_path, "vllm_service",
                          "Render the vllm_service container unit and launcher", task, extra)
    unit = (out / "unit").read_text()
    assert "# Image ID: " + "ab" * 32 in unit
    return _exec_start(unit), (out / "launch.sh").read_text()


def _exec_start(unit: str) -> list[str]:
    """ExecStart's argv, its continuation lines joined as systemd joins them."""
    lines = unit.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ExecStart="))
    parts = []
    for line in lines[start:]:
        parts.append(line.removeprefix("ExecStart=").rstrip().removesuffix("\\"))
        if not line.rstrip().endswith("\\"):
            break
    return shlex.split(" ".join(parts))


def _options(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


def _without_rendered_by(script: str) -> str:
    return "\n".join(line for line in script.splitlines()
                     if not line.startswith("# Rendered from the vllm_service role's"))


def test_npu_profile_gets_vllm_ascends_devices_and_mounts(tmp_path: Path) -> None:
    argv, launch = _render(tmp_path, "deepseek-r1-distill-qwen-32b", api_key="k-1")
    assert argv[:2] == ["/usr/bin/podman", "run"]
    chips = load_profiles()["deepseek-r1-distill-qwen-32b"].chips_per_node
    assert chips > 1
    assert _options(argv, "--device") == [
        *(f"/dev/davinci{i}" for i in range(chips)),
        "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    volumes = _options(argv, "--volume")
    for mount in FACTS["host_mounts"]:
        assert f"{mount['path']}:{mount['path']}:ro" in volumes
    assert "/var/lib/ascend-serve/vllm:/var/lib/ascend-serve/vllm:rw" in volumes
    assert "/etc/ascend-serve/vllm/launch.sh:/etc/ascend-serve/vllm/launch.sh:ro" in volumes
    assert _options(argv, "--network") == ["host"]
    assert _options(argv, "--shm-size") == ["1g"]
    assert _options(argv, "--pull") == ["never"]
    assert _options(argv, "--user") == [f"{UID}:{GID}"]
    assert _options(argv, "--group-add") == [str(NPU_GID)]
    assert _options(argv, "--entrypoint") == ["/etc/ascend-serve/vllm/launch.sh"]
    # The key reaches the container from its root-only file, never on the command line.
    assert _options(argv, "--env-file") == ["/etc/ascend-serve/vllm/api-key.env"]
    assert "k-1" not in " ".join(argv)
    assert argv[-1] == IMAGE
    # The launcher sources the image's CANN scripts and runs the image's vllm.
    assert "source /usr/local/Ascend/ascend-toolkit/set_env.sh" in launch
    assert "\nexec vllm serve /var/lib/ascend-serve/models/" in launch
    # ... as the pod of `ascend-serve k8s render` runs it.
    result = runner.invoke(k8s_app, ["render", "deepseek-r1-distill-qwen-32b",
                                     "--env-file", "/etc/ascend-serve/hccl.env"])
    assert result.exit_code == 0, result.stderr
    configmap = next(yaml.safe_load_all(result.stdout))
    assert configmap["metadata"]["name"].endswith("-launch")
    assert _without_rendered_by(configmap["data"]["launch-0.sh"]) == _without_rendered_by(launch)


def test_cpu_profile_passes_no_npu_devices(tmp_path: Path) -> None:
    argv, launch = _render(tmp_path, "tiny-deepseek-v3", api_key="")
    assert _options(argv, "--device") == []
    volumes = _options(argv, "--volume")
    assert not [v for v in volumes if v.startswith("/usr/local/Ascend")]
    assert _options(argv, "--env-file") == []
    assert "set_env.sh" not in launch


def test_serving_env_leaves_out_the_python_env_of_a_container_host(tmp_path: Path) -> None:
    """The serving_env play (site.yml's, and upgrade.yml's the same way) skips python_env on a
    host whose server runs in a container: the image brings vLLM. Check mode on localhost with
    ``--tags env``; the venv runtime, for contrast, runs the role (its dependency ascend_stack
    resolves the set and, with no set chosen here, stops)."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"ascend_nodes": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    ran: dict[str, tuple[int, str, dict[str, int]]] = {}
    for runtime in ("container", "venv"):
        counts = tmp_path / f"counts-{runtime}.jsonl"
        proc = ansible_playbook(
            "-i", str(inventory), "--check", "--tags", "env", "-e",
            f"vllm_service_runtime={runtime}", "ascend_serve.fleet.serving_env", timeout=300,
            env={"ANSIBLE_CALLBACKS_ENABLED": "ascend_serve.fleet.run_counts",
                 "ASCEND_SERVE_RUN_COUNTS": str(counts)})
        ran[runtime] = (proc.returncode, proc.stdout,
                        json.loads(counts.read_text().splitlines()[-1])["hosts"]["localhost"])
    rc, out, counted = ran["container"]
    assert rc == 0, out
    # fact gathering and the play's one read, which is not asked to settle python_env
    assert counted["failed"] == 0 and counted["fact_gatherings"] == 1
    assert counted["module_runs"] == 2, counted
    include = "TASK [The serving Python environment]"
    assert include in out
    assert out.split(include, 1)[1].lstrip("* \n").startswith("skipping: [localhost]"), out
    # python_env's first task: its dependency ascend_stack's resolution of the set.
    resolve = "ascend_stack : Resolve the version sets once"
    assert resolve not in out
    rc, out, counted = ran["venv"]
    assert rc != 0 and counted["failed"] == 1, out
    assert f"TASK [ascend_serve.fleet.{resolve}" in out
    assert "fatal: [localhost]" in out.split(resolve, 1)[1]
