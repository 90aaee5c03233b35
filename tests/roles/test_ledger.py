"""The ledger (the roles' local facts files): one writer, one handler topic, one schema.

- The module ``ascend_serve.fleet.ledger``, run as Ansible runs it (a process with a JSON
  argument file): it writes, a second run changes nothing, check mode writes nothing, diff mode
  shows the file, a bad record is refused before anything is written.
- The handler of the role ``ascend_serve.fleet.ledger``, through ansible-playbook: two roles that
  depend on it write two ledgers and notify the topic; the local facts are read again once.
- Static checks over the collection: every ledger write goes through the module and notifies the
  topic, nothing else writes under facts.d, exactly one handler refreshes the local facts, the
  roles flush where they did, every key a role writes is in the schema, and docs/ledger.md
  carries the tables the schema renders.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import role_files
import yaml
from ansible_run import ansible_playbook
from paths import COLLECTION, COLLECTIONS, PLAYBOOKS, ROLES, ROOT

ledger = importlib.import_module(
    "ansible_collections.ascend_serve.fleet.plugins.module_utils.ledger")
MODULE_FILE = COLLECTION / "plugins" / "modules" / "ledger.py"
MODULE = "ascend_serve.fleet.ledger"
DOC = ROOT / "docs" / "ledger.md"
TOPIC = "ascend_serve ledger changed"
# Where a role flushes handlers right after its write, because the roles that follow (or its
# own next tasks) read ansible_local: as before the ledger had one handler (rollout's resume
# refreshed with a setup task of its own then).
FLUSHING = {"preflight": "main.yml", "os_base": "main.yml", "npu_driver": "state.yml",
            "cann": "main.yml", "host_tuning": "main.yml", "rdma": "main.yml",
            "swap": "main.yml", "rollout": "resume.yml"}

SWAP = {"size_gb": 2, "file": "/swapfile", "priority": 10, "active": False,
        "reason": "no CAP_SYS_ADMIN in the effective capability set"}


# --- the module --------------------------------------------------------------------------------


def run_module(tmp_path: Path, check_mode: bool = False, diff: bool = False,
               **params: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"facts_dir": str(tmp_path / "facts.d"), **params}
    args["_ansible_check_mode"] = check_mode
    args["_ansible_diff"] = diff
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, str(MODULE_FILE), str(args_file)],
                          capture_output=True, text=True, check=False, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(COLLECTIONS)})
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def swap(tmp_path: Path, record: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    return run_module(tmp_path, name="ascend_swap", role="swap",
                      record=SWAP if record is None else record, **kwargs)


def test_writes_the_file_and_its_directory(tmp_path: Path) -> None:
    result = swap(tmp_path)
    path = tmp_path / "facts.d" / "ascend_swap.fact"
    assert result["changed"] and not result.get("failed"), result
    assert result["path"] == str(path)
    assert result["record"] == SWAP and result["schema_version"] == ledger.SCHEMA_VERSION
    assert json.loads(path.read_text()) == SWAP
    # The text to_nice_json(indent=2) gives, and a newline: files the roles wrote before match.
    assert path.read_text() == json.dumps(SWAP, indent=2, sort_keys=True) + "\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert [p.name for p in path.parent.iterdir()] == ["ascend_swap.fact"]  # no temporary left


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    swap(tmp_path)
    path = tmp_path / "facts.d" / "ascend_swap.fact"
    before = path.stat()
    again = swap(tmp_path)
    assert not again["changed"], again
    assert path.stat().st_mtime_ns == before.st_mtime_ns and path.stat().st_ino == before.st_ino


def test_same_json_in_another_layout_is_left_alone(tmp_path: Path) -> None:
    """A file with the same content (compact, no final newline, as npu_network wrote it) is not
    rewritten; the same value of another JSON type (1 for true) is a change."""
    path = tmp_path / "facts.d" / "ascend_swap.fact"
    path.parent.mkdir()
    path.write_text(json.dumps(SWAP))
    path.chmod(0o644)
    assert not swap(tmp_path)["changed"]
    assert path.read_text() == json.dumps(SWAP)
    path.write_text(json.dumps({**SWAP, "active": 0}))
    result = swap(tmp_path)
    assert result["changed"], result
    assert json.loads(path.read_text())["active"] is False


def test_a_new_value_is_written_and_the_mode_put_right(tmp_path: Path) -> None:
    swap(tmp_path)
    path = tmp_path / "facts.d" / "ascend_swap.fact"
    path.chmod(0o600)
    assert swap(tmp_path)["changed"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    bigger = {**SWAP, "size_gb": 4}
    assert swap(tmp_path, bigger)["changed"]
    assert json.loads(path.read_text()) == bigger


def test_check_mode_writes_nothing(tmp_path: Path) -> None:
    result = swap(tmp_path, check_mode=True)
    assert result["changed"], result
    assert not (tmp_path / "facts.d").exists()
    swap(tmp_path)
    path = tmp_path / "facts.d" / "ascend_swap.fact"
    text = path.read_text()
    assert not swap(tmp_path, check_mode=True)["changed"]
    assert swap(tmp_path, {**SWAP, "size_gb": 8}, check_mode=True)["changed"]
    assert path.read_text() == text


def test_diff_shows_the_file_before_and_after(tmp_path: Path) -> None:
    first = swap(tmp_path, diff=True)
    path = str(tmp_path / "facts.d" / "ascend_swap.fact")
    assert first["diff"] == {"before": "", "after": ledger.dumps(SWAP),
                             "before_header": path, "after_header": path}
    bigger = {**SWAP, "size_gb": 4}
    second = swap(tmp_path, bigger, diff=True, check_mode=True)
    assert second["diff"]["before"] == ledger.dumps(SWAP)
    assert second["diff"]["after"] == ledger.dumps(bigger)
    assert "diff" not in swap(tmp_path)  # only in diff mode


@pytest.mark.parametrize(
    ("name", "role", "record", "messages"),
    [
        ("ascend_swap", "swap", {"file": "/swapfile", "active": True},
         ["missing required key(s) size_gb, priority"]),
        ("ascend_swap", "swap", {**SWAP, "size": 2}, ["unknown key(s) size"]),
        ("ascend_swap", "swap", {**SWAP, "size_gb": "2", "active": 1},
         ["ascend_swap.size_gb must be int, got str", "ascend_swap.active must be bool, got int"]),
        ("ascend_swap", "swap", {**SWAP, "size_gb": True}, ["size_gb must be int, got bool"]),
        ("ascend_rollout", "rollout", {"phase": "paused"},
         ["ascend_rollout.phase must be one of draining, upgrading, done"]),
        ("ascend_swap", "cann", SWAP, ["ledger ascend_swap is written by role swap, not 'cann'"]),
        ("ascend_nothing", "swap", SWAP, ["unknown ledger 'ascend_nothing'"]),
        ("ascend_model_store", "model_store", {"tiny": {"dir": "/m", "files": 3, "bytes": 9}},
         ["ascend_model_store.tiny: missing required key(s) complete"]),
        ("ascend_host_tuning", "host_tuning",
         {"sysctl": {"file": "/etc/sysctl.d/x.conf", "applied": {}}},
         ["ascend_host_tuning.sysctl: missing required key(s) persisted_only"]),
    ],
)
def test_a_bad_record_is_refused_and_nothing_written(
    tmp_path: Path, name: str, role: str, record: dict[str, Any], messages: list[str]
) -> None:
    result = run_module(tmp_path, name=name, role=role, record=record)
    assert result.get("failed"), result
    for message in messages:
        assert message in result["msg"], result["msg"]
    assert not (tmp_path / "facts.d").exists()


# --- the handler, through ansible-playbook ------------------------------------------------------


def _writer_role(roles: Path, role: str, name: str, record: Any) -> None:
    """A role like the collection's: depends on the ledger role, writes one ledger, notifies."""
    (roles / role / "meta").mkdir(parents=True)
    (roles / role / "tasks").mkdir()
    (roles / role / "meta" / "main.yml").write_text(yaml.safe_dump(
        {"dependencies": [{"role": MODULE}]}))
    (roles / role / "tasks" / "main.yml").write_text(yaml.safe_dump([{
        "name": f"Record {name}",
        MODULE: {"name": name, "role": role, "record": record},
        "notify": TOPIC,
    }]))


def test_two_roles_notify_the_topic_and_the_facts_are_read_once(tmp_path: Path) -> None:
    facts = tmp_path / "facts.d"
    roles = tmp_path / "roles"
    _writer_role(roles, "swap", "ascend_swap", "{{ swap_record }}")
    _writer_role(roles, "rollout", "ascend_rollout", {"phase": "done", "set": "{{ new_set }}"})
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Two ledgers", "hosts": "localhost",
        "gather_facts": True, "gather_subset": ["!all", "!min", "local"],
        "module_defaults": {MODULE: {"facts_dir": str(facts)},
                            "ansible.builtin.setup": {"fact_path": str(facts)}},
        "vars": {"swap_record": SWAP},
        "roles": ["swap", "rollout"],
        "post_tasks": [{"name": "Read both back", "ansible.builtin.assert": {"that": [
            "ansible_local.ascend_swap == swap_record",
            "ansible_local.ascend_rollout == {'phase': 'done', 'set': new_set}"]},
            "when": "not ansible_check_mode"}],
    }]))
    handler = ("RUNNING HANDLER [ascend_serve.fleet.ledger : "
               "Refresh the local facts (ascend_serve ledger)]")

    def play(*args: str) -> str:
        proc = ansible_playbook(
            "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
            *args, str(playbook), env={"ANSIBLE_ROLES_PATH": str(roles)}, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        return proc.stdout

    first = play("-e", "new_set=vllm-ascend-0.13.0")
    assert first.count(handler) == 1, first
    assert re.search(r"localhost\s*:.*changed=2\b", first), first
    assert json.loads((facts / "ascend_rollout.fact").read_text())["set"] == "vllm-ascend-0.13.0"

    again = play("-e", "new_set=vllm-ascend-0.13.0", "--check", "--diff")
    assert handler not in again and re.search(r"changed=0\b", again), again

    upgrade = play("-e", "new_set=vllm-ascend-0.14.0", "--check", "--diff")
    assert upgrade.count(handler) == 1, upgrade
    assert re.search(r'(?m)^\+\s*"set": "vllm-ascend-0\.14\.0"', upgrade), upgrade
    assert json.loads((facts / "ascend_rollout.fact").read_text())["set"] == "vllm-ascend-0.13.0"


# --- the collection uses one mechanism ----------------------------------------------------------

TASK_FILES = sorted([*ROLES.glob("*/tasks/*.yml"), *PLAYBOOKS.glob("*.yml")])
HANDLER_FILES = sorted(ROLES.glob("*/handlers/*.yml"))
KEYWORDS = {"name", "when", "tags", "vars", "notify", "register", "loop", "loop_control",
            "become", "become_user", "delegate_to", "run_once", "check_mode", "changed_when",
            "failed_when", "no_log", "listen", "block", "rescue", "always", "environment",
            "ignore_errors", "timeout", "until", "retries", "delay", "args", "diff"}


def _module(task: dict[str, Any]) -> str | None:
    actions = [k for k in task if k not in KEYWORDS]
    return actions[0] if len(actions) == 1 else None


def _all(files: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    return [(path, task) for path in files
            for task in role_files.tasks(role_files.load(path) or [])]


def _writes() -> list[tuple[Path, dict[str, Any]]]:
    return [(p, t) for p, t in _all(TASK_FILES) if _module(t) in (MODULE, "ledger")]


def _role_of(path: Path) -> str:
    return path.relative_to(ROLES).parts[0]


def test_the_rules_see_the_writes() -> None:
    roles = {_role_of(p) for p, _ in _writes()}
    assert {ledger.LEDGERS[n]["role"] for n in ledger.LEDGERS} == roles
    assert len(_writes()) == len(ledger.LEDGERS) + 2  # rollout writes three phases


def test_every_write_names_its_ledger_and_role_and_notifies_the_topic() -> None:
    for path, task in _writes():
        args = task[_module(task) or ""]
        role = _role_of(path)
        assert _module(task) == MODULE, f"{path}: {task['name']}: use the FQCN"
        assert args["role"] == role, f"{path}: {task['name']}"
        assert ledger.LEDGERS[args["name"]]["role"] == role, f"{path}: {task['name']}"
        assert task.get("notify") == TOPIC, f"{path}: {task['name']}"
        assert "facts_dir" not in args, f"{path}: {task['name']}: Ansible reads the default"


def test_every_writing_role_depends_on_the_ledger_role() -> None:
    for role in {_role_of(p) for p, _ in _writes()}:
        meta = role_files.load(ROLES / role / "meta" / "main.yml")
        deps = [d["role"] if isinstance(d, dict) else d for d in meta.get("dependencies") or []]
        assert MODULE in deps, role


def test_nothing_else_writes_under_facts_d() -> None:
    """Only the module knows the path: no task, var or template of a role or playbook names
    facts.d or a .fact file (the readers are the roles' ansible_local and npu_driver_facts)."""
    offenders = []
    for path in sorted([*ROLES.rglob("*"), *PLAYBOOKS.rglob("*")]):
        if path.suffix not in (".yml", ".j2", ".py", ".sh") or path.name == "argument_specs.yml":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"facts\.d|\.fact\b|fact_path", line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
    for path, task in _all(TASK_FILES + HANDLER_FILES):
        if _module(task) in ("ansible.builtin.setup", "setup"):
            assert "fact_path" not in (task[_module(task) or ""] or {}), path


def test_exactly_one_handler_refreshes_the_local_facts_and_listens_on_the_topic() -> None:
    handlers = [(p, t) for p, t in _all(HANDLER_FILES)]
    for play in role_files.tasks([role_files.load(p) for p in PLAYBOOKS.glob("*.yml")]):
        handlers += [(Path("playbook"), h) for h in play.get("handlers") or []]
    refreshing = [(p, t) for p, t in handlers
                  if _module(t) in ("ansible.builtin.setup", "setup")
                  or re.search(r"local facts|ledger", str(t.get("name")), re.IGNORECASE)]
    assert len(refreshing) == 1, refreshing
    path, handler = refreshing[0]
    assert path == ROLES / "ledger" / "handlers" / "main.yml"
    assert handler["listen"] == TOPIC == ledger.TOPIC
    assert handler["ansible.builtin.setup"] == {"gather_subset": ["!all", "!min", "local"],
                                                "filter": "ansible_local"}


def test_no_setup_task_stands_in_for_the_handler() -> None:
    """Tasks that gather facts gather what they need; none reads only ansible_local again
    (playbook fleet_status, which only reads, aside)."""
    for path, task in _all(sorted(ROLES.glob("*/tasks/*.yml"))):
        if _module(task) in ("ansible.builtin.setup", "setup"):
            assert (task[_module(task) or ""] or {}).get("filter") != "ansible_local", path


def test_every_notify_about_facts_is_the_topic() -> None:
    for path, task in _all(TASK_FILES):
        notify = task.get("notify")
        names = notify if isinstance(notify, list) else [notify] if notify else []
        for name in names:
            if re.search(r"fact|ledger", name, re.IGNORECASE):
                assert name == TOPIC, f"{path}: {task.get('name')}: notify {name}"


@pytest.mark.parametrize("role", sorted(FLUSHING))
def test_roles_flush_right_after_the_write_where_they_did(role: str) -> None:
    """The task after the write (or after the block holding it) flushes handlers."""
    top = role_files.load(ROLES / role / "tasks" / FLUSHING[role])
    writes = [i for i, task in enumerate(top)
              if any(_module(t) == MODULE for t in role_files.tasks(task))]
    assert writes, role
    following = top[writes[-1] + 1] if writes[-1] + 1 < len(top) else {}
    assert following.get("ansible.builtin.meta") == "flush_handlers", (role, following)


# --- every written key is in the schema ---------------------------------------------------------


def _resolve(value: Any, known: dict[str, Any]) -> Any:
    """A value "{{ name }}" of a variable the role defines: the variable's own value."""
    match = re.fullmatch(r"\{\{\s*(\w+)\s*\}\}", value) if isinstance(value, str) else None
    return _resolve(known[match.group(1)], known) if match and match.group(1) in known else value


def _check_keys(record: Any, documented: dict[str, Any], known: dict[str, Any],
                where: str) -> None:
    """The keys of a record as the role writes it: a mapping's keys (and, where the schema
    describes a nested object, its keys), or the quoted keys of a Jinja dict expression."""
    record = _resolve(record, known)
    if isinstance(record, dict):
        keys = set(record)
        required = {k for k, s in documented.items() if s.get("required", True)}
        assert required <= keys, (where, required - keys)
        for key in keys & set(documented):
            if documented[key].get("keys") and isinstance(_resolve(record[key], known), dict):
                _check_keys(record[key], documented[key]["keys"], known, f"{where}.{key}")
    else:
        keys = set(re.findall(r"'(\w+)'\s*:", record))
        assert keys, f"{where}: no key found in {record!r}"
    assert keys <= set(documented), (where, keys - set(documented))


def test_every_key_a_role_writes_is_in_the_schema() -> None:
    for path, task in _writes():
        name = task[MODULE]["name"]
        spec = ledger.LEDGERS[name]
        role_vars = ROLES / _role_of(path) / "vars" / "main.yml"
        known = {**(role_files.load(role_vars) if role_vars.is_file() else {}),
                 **(task.get("vars") or {})}
        documented = spec["entries"]["keys"] if "entries" in spec else spec["keys"]
        _check_keys(task[MODULE]["record"], documented, known, f"{path.name}: {task['name']}")


def test_the_schema_is_well_formed() -> None:
    for name, spec in ledger.LEDGERS.items():
        assert name.startswith("ascend_") and spec["role"] and spec["summary"], name
        assert (ROLES / spec["role"]).is_dir(), name
        assert ("keys" in spec) != ("entries" in spec), name
        for key, field in ledger.key_rows(name):
            kinds = field["type"] if isinstance(field["type"], list) else [field["type"]]
            assert set(kinds) <= set(ledger.TYPES), (name, key)
            assert field["description"].endswith("."), (name, key)
            assert "|" not in field["description"], (name, key)  # a Markdown table cell


def test_docs_carry_the_tables_the_schema_renders() -> None:
    """docs/ledger.md is the schema's documentation: regenerate the tables with
    python3 plugins/module_utils/ledger.py"""
    text = DOC.read_text()
    begin = re.search(r"<!-- BEGIN ledger schema[^>]*-->\n", text)
    end = text.find("<!-- END ledger schema -->")
    assert begin and end > begin.end(), "docs/ledger.md lost its generated-section markers"
    assert text[begin.end():end] == ledger.markdown()
    for name in ledger.LEDGERS:
        assert f"### `{name}`" in text
