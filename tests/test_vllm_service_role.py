"""The vllm_service role without a server: its variables, and how it places the hosts of a
multi-node profile (head / headless, the head's address) or refuses a group of the wrong size."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "roles" / "vllm_service"
SPEC_TYPES: dict[str, type | tuple[type, ...]] = {
    "list": list, "bool": bool, "int": int, "str": str, "dict": dict, "path": str,
}


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_defaults_match_argument_specs() -> None:
    defaults = _load(ROLE / "defaults/main.yml")
    options = _load(ROLE / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    for name, spec in options.items():
        assert name.startswith("vllm_service_"), name
        assert defaults[name] == spec.get("default"), name
        if defaults[name] is not None:
            assert isinstance(defaults[name], SPEC_TYPES[spec["type"]]), name
        assert spec.get("description"), name
    assert options["vllm_service_api_key"].get("no_log") is True


def test_every_variable_is_declared_or_private() -> None:
    text = "\n".join(p.read_text() for p in ROLE.rglob("*") if p.suffix in {".yml", ".j2"})
    options = _load(ROLE / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    used = set(re.findall(r"(?<![\w.])(vllm_service_\w+)", text))
    assert used <= set(options), used - set(options)
    assert all(r.startswith("_vllm_service_") for r in re.findall(r"register: (\w+)", text))
    assert all(k.startswith("_vllm_service_") for k in _load(ROLE / "vars/main.yml"))


def test_tasks_touching_the_key_hide_it() -> None:
    tasks = [t for p in (ROLE / "tasks").glob("*.yml") for t in _load(p) or []]
    flat = [t for t in tasks for t in (t.get("block", [t]))]
    writing = [t for t in flat
               if "vllm_service_api_key }}" in yaml.safe_dump(t) and "content" in yaml.safe_dump(t)]
    assert writing, "no task writes the key: the check below would hold vacuously"
    for task in writing:
        assert task.get("no_log") is True, task["name"]


def _place(
    tmp_path: Path, hosts: dict[str, dict[str, Any]], profile: str
) -> subprocess.CompletedProcess[str]:
    inventory = {"all": {"children": {"ascend_nodes": {"hosts": hosts}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "vllm_service_profile": profile, "vllm_service_model_dir": str(tmp_path / "model"),
        "vllm_service_env_prefix": str(tmp_path / "env")}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "--check", "-i",
         str(tmp_path / "hosts.yml"), str(ROOT / "tests" / "playbooks" / "vllm_service_nodes.yml")],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False)


def test_two_node_profile_places_head_and_headless(tmp_path: Path) -> None:
    proc = _place(tmp_path, {"node-a": {"hccl_if_ip": "192.0.2.11"},
                             "node-b": {"hccl_if_ip": "192.0.2.12"}}, "deepseek-r1-w8a8-2xa2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    placed = sorted(re.findall(r"PLACEMENT (\S+) rank=(\d) head=(\S+) address=(\S*)", proc.stdout))
    assert placed == [("node-a", "0", "node-a", "192.0.2.11"),
                      ("node-b", "1", "node-a", "192.0.2.11")]
    # Check mode reports what the stand-in hosts lack instead of failing.
    assert "not there yet" in proc.stdout


def test_two_node_profile_refuses_a_group_of_three(tmp_path: Path) -> None:
    proc = _place(tmp_path, {f"node-{c}": {"hccl_if_ip": f"192.0.2.{i}"}
                             for i, c in enumerate("abc", 11)}, "deepseek-r1-w8a8-2xa2")
    assert proc.returncode != 0
    assert "runs on 2 nodes, but group ascend_nodes has 3 host(s) (node-a, node-b, node-c)" in (
        proc.stdout)
    assert "PLACEMENT" not in proc.stdout


def test_single_node_profile_serves_on_every_host(tmp_path: Path) -> None:
    proc = _place(tmp_path, {"node-a": {}, "node-b": {}}, "tiny-qwen2")
    assert proc.returncode == 0, proc.stdout[-3000:]
    placed = sorted(re.findall(r"PLACEMENT (\S+) rank=(\d) head=(\S+)", proc.stdout))
    assert placed == [("node-a", "0", "node-a"), ("node-b", "0", "node-b")]


def test_npu_profiles_source_what_the_cann_fact_lists(tmp_path: Path) -> None:
    # From CANN 8.5 the toolkit's set_env.sh is under cann-<version>/: the cann role's fact says
    # where; a host without that fact falls back to the classic paths.
    cann85 = ["/usr/local/Ascend/cann-8.5.0/set_env.sh", "/usr/local/Ascend/nnal/atb/set_env.sh"]
    proc = _place(tmp_path, {
        "node-a": {"hccl_if_ip": "192.0.2.11",
                   "ansible_local": {"ascend_cann": {"set_env": cann85}}},
        "node-b": {"hccl_if_ip": "192.0.2.12"}}, "deepseek-r1-w8a8-2xa2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    found = dict(re.findall(r"PLACEMENT (\S+) .*?set_env=(\S*)", proc.stdout))
    assert found == {
        "node-a": ",".join(cann85),
        "node-b": ("/usr/local/Ascend/ascend-toolkit/set_env.sh,"
                   "/usr/local/Ascend/nnal/atb/set_env.sh")}
