"""The security pass, as rules over every role and playbook: no shell, commands as argument
lists, secrets only in no_log tasks, SSH host keys checked."""

from __future__ import annotations

import configparser
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import role_files
from paths import PLAYBOOKS, ROLES, ROOT

from ascend_serve.serving import launcher
from ascend_serve.serving.profiles import ProfileError, resolve

TASK_FILES = sorted(
    [*ROLES.glob("*/tasks/*.yml"), *ROLES.glob("*/handlers/*.yml"),
     *PLAYBOOKS.glob("*.yml"), ROOT / "site.yml"])
# A secret's value in use: a variable named like the API key, a password, a token or a secret,
# not only asked for its length (whether one is set).
SECRET = re.compile(r"\b\w*(?:api_key|password|token|secret)\b(?!\s*\|\s*length)")
JINJA = re.compile(r"\{[{%](.*?)[}%]\}", re.S)  # what Ansible evaluates
SHELL_MODULES = {"ansible.builtin.shell", "ansible.builtin.raw", "ansible.builtin.script",
                 "shell", "raw", "script"}
COMMAND_MODULES = {"ansible.builtin.command", "command"}


def _all_tasks() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in TASK_FILES:
        for task in role_files.tasks(role_files.load(path) or []):
            yield f"{path.relative_to(ROOT)}: {task.get('name', '?')}", task


def test_the_rules_see_the_tasks() -> None:
    names = [name for name, _ in _all_tasks()]
    assert len(names) > 200  # every role's tasks are read, not an empty walk
    assert any("Write the API key" in n or "API key" in n for n in names), names[:20]


def test_no_shell_and_commands_are_argument_lists() -> None:
    """Nothing reaches a shell: a value from the inventory is one argv item, never re-parsed."""
    offenders = []
    for name, task in _all_tasks():
        if SHELL_MODULES & set(task):
            offenders.append(f"{name}: uses a shell module")
        for module in COMMAND_MODULES & set(task):
            args = task[module]
            if not (isinstance(args, dict) and "argv" in args and "cmd" not in args):
                offenders.append(f"{name}: {module} without argv")
    assert not offenders, "\n".join(offenders)


def test_tasks_that_touch_secrets_are_no_log() -> None:
    offenders = []
    for name, task in _all_tasks():
        if any(key in task for key in role_files.BLOCK_KEYS) or "hosts" in task:
            continue  # a block or play: its tasks are checked one by one
        body = {k: v for k, v in task.items() if k not in ("name", "when", "tags", "no_log")}
        uses = [e for e in JINJA.findall(json.dumps(body)) if SECRET.search(e)]
        if uses and task.get("no_log") is not True:
            offenders.append(f"{name}: {uses}")
    assert not offenders, "tasks that use a secret without no_log: true:\n" + "\n".join(offenders)


def test_ssh_host_keys_are_checked() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    assert cfg.getboolean("defaults", "host_key_checking")
    for path in ROOT.rglob("*.yml"):
        if ".venv" in path.parts or ".cache" in path.parts:
            continue
        text = path.read_text(errors="replace")
        assert "StrictHostKeyChecking=no" not in text, path
        assert not re.search(r"host_key_checking\s*[:=]\s*(false|False|no)", text), path


@pytest.mark.parametrize("hostile", ["x; rm -rf /", "$(reboot)", "`id`", "a b\nc", "'\"|&>"])
def test_hostile_profile_values_stay_one_word_in_the_launcher(hostile: str,
                                                              tmp_path: Path) -> None:

    # Names that become flags or identifiers are refused outright ...
    with pytest.raises(ProfileError, match="use lower-case letters"):
        resolve("tiny-qwen2", {"model": {"served_name": hostile}})
    # ... free-form values (paths, environment, flag values) are quoted as one word each.
    profile = resolve("tiny-qwen2", {"env": {"HOSTILE": hostile},
                                      "vllm": {"max-model-len": 256, "hostile-flag": hostile}})
    script = launcher.render(launcher.context(
        profile, model_path=f"/models/{hostile}", vllm="/env/bin/vllm",
        state_dir=str(tmp_path / "state")))
    done = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    # Each hostile value is one shell word: bash hands them to the program unchanged.
    printed = subprocess.run(
        ["bash", "-c", script.replace("exec ", "printf '%s\\0' ", 1)],
        text=True, capture_output=True, check=False, env={"PATH": "/usr/bin:/bin"})
    assert printed.returncode == 0, printed.stderr
    words = printed.stdout.split("\0")
    assert f"/models/{hostile}" in words and hostile in words, printed.stdout
    assert "--hostile-flag" in words and not (tmp_path / "pwned").exists()
