"""Running Ansible from the tests: this environment's ansible-playbook, in the repository root,
with the project's collections and without colours (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from paths import COLLECTION, COLLECTIONS, ROOT

BIN = Path(sys.executable).parent
ENV = {"PY_COLORS": "0", "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
       "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"}


def this_machine_preflight_vars(tmp_path: Path) -> dict[str, Any]:
    """The preflight role's host checks set to what this machine is (x86_64 or aarch64, no NPU on
    its PCI bus, little memory, Debian 12), for playbooks run over stand-in local hosts, with the
    report under ``tmp_path`` and the 0.13.0 set on 910B."""
    return {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "preflight_allowed_architectures": ["aarch64", "x86_64"],
        "preflight_supported_os": [{"distribution": "Debian", "versions": ["12"]},
                                   {"distribution": "Ubuntu", "versions": ["22.04", "24.04"]}],
        "preflight_expected_npu_count": 0, "preflight_expected_npu_chip": "910B",
        "preflight_min_memory_gb": 0, "preflight_require_time_sync": False,
        "preflight_disk_checks": [{"path": str(tmp_path), "min_free_gb": 0}],
        "preflight_report_path": str(tmp_path / "report" / "preflight.json"),
        "ascend_stack_set": "vllm-ascend-0.13.0", "ascend_stack_chip": "910B",
    }


def ansible_playbook(*args: str, env: Mapping[str, str] | None = None,
                     timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """ansible-playbook with those arguments; env adds to (or overrides) this process's."""
    return subprocess.run(
        [str(BIN / "ansible-playbook"), *args], cwd=ROOT, env={**os.environ, **ENV, **(env or {})},
        capture_output=True, text=True, check=False, timeout=timeout)


def play_role(tmp_path: Path, role: str, variables: dict[str, Any], *args: str, name: str,
              gather_facts: bool = False,
              timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """The role of the collection with those variables, run on localhost by a local connection
    (a play named name, in tmp_path/play.yml); args go to ansible-playbook."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": name, "hosts": "localhost", "gather_facts": gather_facts,
        "roles": [{"role": f"ascend_serve.fleet.{role}", "vars": variables}],
    }]))
    return ansible_playbook("-i", "localhost,", "-c", "local", *args, str(playbook),
                            timeout=timeout)


def render_with_role_vars(tmp_path: Path, role: str, name: str, task: dict[str, Any],
                          extra: Mapping[str, Any]) -> None:
    """One task (typically ``ansible.builtin.template``) run on localhost in a play that reads
    the role's ``defaults/main.yml`` and ``vars/main.yml`` as vars files, with ``extra`` as
    extra variables (above the role's own, as a run's facts would be): how the role renders a
    file, without a node. The play is named ``name``; a failed run fails the test."""
    root = COLLECTION / "roles" / role
    play = [{"name": name, "hosts": "localhost", "gather_facts": False,
             "vars_files": [str(root / "defaults" / "main.yml"), str(root / "vars" / "main.yml")],
             "tasks": [task]}]
    slug = "".join(c if c.isalnum() else "-" for c in name.lower())
    extra_file = tmp_path / f"extra-{slug}.json"
    extra_file.write_text(json.dumps({"ansible_python_interpreter": sys.executable, **extra}))
    playbook = tmp_path / f"play-{slug}.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    proc = ansible_playbook("-i", "localhost,", "-c", "local", "-e", f"@{extra_file}",
                            str(playbook), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def module_result(name: str, args: Mapping[str, Any], tmp_path: Path, check_mode: bool = False,
                  env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A module of the collection run as Ansible runs it on a node (its file and a JSON file of
    its arguments, the collection importable): the JSON it answers."""
    args_file = tmp_path / f"{name}-args.json"
    module_args = {**args, "_ansible_check_mode": True} if check_mode else dict(args)
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": module_args}))
    proc = subprocess.run(
        [sys.executable, str(COLLECTION / "plugins" / "modules" / f"{name}.py"), str(args_file)],
        env={**os.environ, "PYTHONPATH": str(COLLECTIONS), **(env or {})},
        capture_output=True, text=True, check=False, timeout=120)
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def ansible_doc(plugin_type: str, *args: str) -> subprocess.CompletedProcess[str]:
    """ansible-doc on plugins of that type (module, filter) of this checkout's collection."""
    return subprocess.run([str(BIN / "ansible-doc"), "-t", plugin_type, *args], cwd=ROOT,
                          env={**os.environ, **ENV}, capture_output=True, text=True,
                          check=False, timeout=120)


def rendered_docs(plugin_type: str, names: list[str]) -> dict[str, dict[str, Any]]:
    """ansible-doc's JSON reading of those plugins of the collection (fragments merged), by
    short name."""
    fqcn = "ascend_serve.fleet."
    proc = ansible_doc(plugin_type, "--json", *(fqcn + name for name in names))
    assert proc.returncode == 0, proc.stderr
    docs: dict[str, dict[str, Any]] = json.loads(proc.stdout)
    return {name.removeprefix(fqcn): doc for name, doc in docs.items()}


def bad_descriptions(node: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every description entry of a rendered doc that is not non-empty text (a stray ': ' makes
    YAML read a mapping), with where it is."""
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description":
                items = value if isinstance(value, list) else [value]
                found += [(path, i) for i in items if not isinstance(i, str) or not i.strip()]
            elif key not in ("sample", "default"):
                found += bad_descriptions(value, f"{path}.{key}")
    elif isinstance(node, list):
        for item in node:
            found += bad_descriptions(item, path)
    return found


def counted_playbook(*args: str, env: Mapping[str, str], workdir: Path,
                     addresses: Mapping[str, str] | None = None,
                     timeout: float | None = None,
                     ) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, int]]]:
    """ansible-playbook with the run_counts callback, and over SSH with bench/sshcount as its ssh,
    sftp and scp: the run and, per inventory host, its counts plus ``ssh_executions``.
    addresses maps inventory names to the addresses SSH is given (ansible_host)."""
    counts, ssh_log = workdir / "run-counts.jsonl", workdir / "ssh-count.log"
    wrapper = ROOT / "bench" / "sshcount" / "ssh"
    proc = ansible_playbook(*args, timeout=timeout, env={
        **env, "ANSIBLE_CALLBACKS_ENABLED": "ascend_serve.fleet.run_counts",
        "ASCEND_SERVE_RUN_COUNTS": str(counts), "ASCEND_SSH_COUNT_LOG": str(ssh_log),
        "ANSIBLE_SSH_EXECUTABLE": str(wrapper),
        "ANSIBLE_SFTP_EXECUTABLE": str(wrapper.with_name("sftp")),
        "ANSIBLE_SCP_EXECUTABLE": str(wrapper.with_name("scp"))})
    lines = counts.read_text().splitlines() if counts.exists() else []
    hosts: dict[str, dict[str, int]] = json.loads(lines[-1])["hosts"] if lines else {}
    names = {address: name for name, address in (addresses or {}).items()}
    calls = [names.get(line.split()[-1], line.split()[-1])
             for line in (ssh_log.read_text().splitlines() if ssh_log.exists() else [])]
    for host, counted in hosts.items():
        counted["ssh_executions"] = calls.count(host)
    counts.unlink(missing_ok=True)
    ssh_log.unlink(missing_ok=True)
    return proc, hosts
