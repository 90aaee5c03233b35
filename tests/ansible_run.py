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
