"""Which roles stack.yml enters (plugins/plugin_utils/settle.py): a role's fingerprint moves with
each thing its decisions rest on and with nothing else, a role is entered unless its fingerprint
is the one a full run recorded, and the record keeps only what is still true. The fingerprint's
inputs cover every variable the roles' files name."""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2 import Environment, nodes
from paths import COLLECTION, PLAYBOOKS, ROLES

from ansible_collections.ascend_serve.fleet.plugins.plugin_utils import settle

VARIABLES: dict[str, Any] = {
    "cann_version": "{{ ascend_stack_resolved.cann }}",
    "cann_artifact_url": "{{ mirror }}/cann",
    "mirror": "http://{{ mirror_host }}:8080",
    "mirror_host": "10.0.0.9",
    "npu_driver_reboot": "on-change",
    "os_base_extra_packages": ["numactl"],
    "ascend_stack_set": "vllm-ascend-0.13.0",
    "python_env_set": "",
    "ascend_stack_resolved": {"cann": "8.5.0"},
    "unrelated": "anything",
    "_cann_private": "x",
}
FACTS: dict[str, Any] = {
    "architecture": "aarch64", "distribution": "openEuler", "distribution_major_version": "22",
    "distribution_version": "22.03", "kernel": "5.10.0-182", "os_family": "RedHat",
    "date_time": {"epoch": "1"},
    "ansible_local": {"ascend_cann": {"version": "8.5.0"}, "ascend_os_base": {"held": []},
                      "ascend_npu_driver": {"driver_version": "25.5.0"},
                      settle.LEDGER: {"roles": {}}},
}
ANSWERS: dict[str, Any] = {
    "os_base_state": {"request": {"packages": ["make"]}, "result": {"converged": True}},
    "npu_driver_facts": {"request": {"install_path": "/usr/local/Ascend"},
                         "result": {"ansible_facts": {"ascend_npu_driver_state": {}}}},
    "cann_facts": {"request": {"install_path": "/usr/local/Ascend"},
                   "result": {"ansible_facts": {"ascend_cann_state": {"toolkits": []}}}},
    "host_runtime_facts": {"request": {"python": "/usr/bin/python3"},
                           "result": {"ansible_facts": {"ascend_host_runtime": {}}}},
}


def _print(role: str, content: str = "c", variables: dict[str, Any] | None = None,
           facts: dict[str, Any] | None = None,
           answers: dict[str, Any] | None = None) -> str | None:
    return settle.fingerprint(role, content, VARIABLES if variables is None else variables,
                              FACTS if facts is None else facts,
                              ANSWERS if answers is None else answers)


def _with(base: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(base)
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return changed


def test_inputs_are_the_prefixed_and_named_variables_and_what_they_name() -> None:
    cann = settle.inputs("cann", VARIABLES)
    # cann_artifact_url names mirror, which names mirror_host; the resolved set is derived
    assert set(cann) == {"cann_version", "cann_artifact_url", "mirror", "mirror_host",
                         "ascend_stack_set", "python_env_set"}
    assert cann["cann_version"] == "{{ ascend_stack_resolved.cann }}"  # as written
    assert set(settle.inputs("os_base", VARIABLES)) == {"os_base_extra_packages"}


@pytest.mark.parametrize(("role", "change", "moves"), [
    ("cann", lambda: _print("cann", variables=_with(VARIABLES, ["cann_version"], "8.3.RC1")), True),
    ("cann", lambda: _print("cann", variables=_with(VARIABLES, ["mirror_host"], "10.0.0.8")), True),
    ("cann", lambda: _print("cann", variables=_with(VARIABLES, ["ascend_stack_set"], "x")), True),
    ("cann", lambda: _print("cann", content="d"), True),
    ("cann", lambda: _print("cann", facts=_with(FACTS, ["kernel"], "6.6.0")), True),
    ("cann", lambda: _print("cann", facts=_with(FACTS, ["ansible_local", "ascend_cann",
                                                        "version"], "8.3.RC1")), True),
    ("cann", lambda: _print("cann", answers=_with(ANSWERS, ["cann_facts", "result",
                                                            "ansible_facts"], {})), True),
    ("cann", lambda: _print("cann", answers=_with(ANSWERS, ["host_runtime_facts", "request",
                                                            "python"], "/opt/py")), True),
    # what cann does not rest on
    ("cann", lambda: _print("cann", variables=_with(VARIABLES, ["unrelated"], "other")), False),
    ("cann", lambda: _print("cann", variables=_with(VARIABLES, ["npu_driver_reboot"], "never")),
     False),
    ("cann", lambda: _print("cann", variables=_with(VARIABLES, ["ascend_stack_resolved"], {})),
     False),
    ("cann", lambda: _print("cann", facts=_with(FACTS, ["date_time", "epoch"], "2")), False),
    ("cann", lambda: _print("cann", facts=_with(FACTS, ["ansible_local", settle.LEDGER],
                                                {"roles": {"cann": "x"}})), False),
    ("cann", lambda: _print("cann", answers=_with(ANSWERS, ["os_base_state", "result",
                                                            "converged"], False)), False),
    ("os_base", lambda: _print("os_base", variables=_with(VARIABLES, ["npu_driver_reboot"], "x")),
     False),
    ("os_base", lambda: _print("os_base", answers=_with(ANSWERS, ["host_runtime_facts"], None)),
     False),
    ("npu_driver", lambda: _print("npu_driver", variables=_with(VARIABLES, ["npu_driver_reboot"],
                                                                "never")), True),
])
def test_a_fingerprint_moves_with_what_the_role_rests_on_and_nothing_else(
        role: str, change: Any, moves: bool) -> None:
    before = _print(role)
    assert before is not None
    assert (change() != before) is moves


def test_no_fingerprint_without_the_answers_a_role_needs() -> None:
    assert _print("cann", answers=_with(ANSWERS, ["host_runtime_facts"], None)) is None
    failed = _with(ANSWERS, ["cann_facts"], {"request": {}, "result": {}, "failed": True})
    assert _print("cann", answers=failed) is None
    assert _print("os_base", answers={"os_base_state": ANSWERS["os_base_state"]}) is not None


def test_a_role_is_entered_unless_its_recorded_fingerprint_is_the_same() -> None:
    prints: dict[str, str | None] = {"os_base": "a", "npu_driver": "b", "cann": None}
    assert settle.to_enter(None, prints) == ["os_base", "npu_driver", "cann"]
    assert settle.to_enter({"roles": "damaged"}, prints) == ["os_base", "npu_driver", "cann"]
    recorded = {"roles": {"os_base": "a", "npu_driver": "old", "cann": None}}
    assert settle.to_enter(recorded, prints) == ["npu_driver", "cann"]
    assert settle.to_enter({"roles": {"os_base": "a", "npu_driver": "b"}},
                           {"os_base": "a", "npu_driver": "b"}) == []


def test_the_record_keeps_what_this_run_settled_and_what_is_still_true() -> None:
    recorded = {"roles": {"os_base": "a", "npu_driver": "b", "cann": "c"}}
    prints: dict[str, str | None] = {"os_base": "a2", "npu_driver": "b", "cann": "c2"}
    requests: dict[str, Any] = {"os_base_state": {"packages": []}, "host_runtime_facts": None}
    record = settle.settled_record(recorded, prints, ["cann"], requests)
    # cann entered: settled with its print now; npu_driver not entered, unchanged: kept;
    # os_base not entered, but another role's change moved its print: dropped
    assert record == {"roles": {"cann": "c2", "npu_driver": "b"},
                      "reads": {"os_base_state": {"packages": []}}}
    # a role without a fingerprint (a read refused) is not recorded, even when entered
    assert settle.settled_record(None, {"cann": None}, ["cann"], {})["roles"] == {}
    # another play's roles and reads are kept: its first task compares them with a fresh read
    other = {"roles": {"host_tuning": "h", "cann": "c"},
             "reads": {"host_tuning_state": {"sysctl": []}}}
    assert settle.settled_record(other, {"cann": "c2"}, ["cann"],
                                 {"cann_facts": {"install_path": "/x"}}) == {
        "roles": {"cann": "c2", "host_tuning": "h"},
        "reads": {"cann_facts": {"install_path": "/x"}, "host_tuning_state": {"sysctl": []}}}


def test_the_reads_are_those_the_roles_recorded() -> None:
    facts: dict[str, Any] = {"ansible_local": {
        "ascend_os_base": {"read": {"packages": ["make"]}},
        "ascend_cann": {"version": "8.5.0"},  # recorded before reads were: left to the role
        settle.LEDGER: {"reads": {"host_runtime_facts": {"python": "/usr/bin/python3"}}}}}
    assert settle.reads(facts) == {"os_base_state": {"packages": ["make"]},
                                   "host_runtime_facts": {"python": "/usr/bin/python3"}}
    # this run's host runtime read (the fact's request) before the recorded one
    facts["ascend_host_runtime"] = {"request": {"python": "/opt/py"}}
    assert settle.reads(facts)["host_runtime_facts"] == {"python": "/opt/py"}
    assert settle.reads({}) == {}


def test_the_content_digest_covers_the_role_its_dependencies_and_the_plugins(
        tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    for part in ("roles/cann", "roles/ascend_stack", "roles/ledger", "roles/os_base", "plugins"):
        shutil.copytree(COLLECTION / part, root / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (root / "data").mkdir()
    shutil.copy(COLLECTION / "data" / "stack-matrix.yml", root / "data")
    before = settle.content_digest("cann", root)
    assert before == settle.content_digest("cann", root)
    os_base = settle.content_digest("os_base", root)
    for path in ("roles/cann/defaults/main.yml", "roles/ascend_stack/tasks/main.yml",
                 "plugins/modules/cann_facts.py", "data/stack-matrix.yml"):
        target = root / path
        kept = target.read_bytes()
        target.write_bytes(kept + b"\n")
        assert settle.content_digest("cann", root) != before, path
        target.write_bytes(kept)
    (root / "roles/os_base/defaults/main.yml").write_text("---\n{}\n")
    assert settle.content_digest("cann", root) == before  # not cann's
    assert settle.content_digest("os_base", root) != os_base


# --- every variable the roles' files name is an input ---------------------------------------

# Named by the files, not inputs: Ansible's own (magic) variables and the facts (FACT_KEYS and
# the ledgers are the fingerprint's), what the tasks set or loop over, and Jinja's own names.
MAGIC = {"ansible_check_mode", "ansible_facts", "ansible_local", "ansible_managed",
         "ansible_run_tags", "inventory_hostname", "omit", "role_path", "item", "lookup", "query",
         "true", "false", "none", "True", "False", "None", "range", "loop", "namespace"}


def _strings(node: Any, conditions: bool = False) -> list[str]:
    if isinstance(node, dict):
        found = []
        for key, value in node.items():
            bare = key in ("when", "that", "changed_when", "failed_when", "until")
            found += _strings(value, bare)
        return found
    if isinstance(node, list):
        return [s for item in node for s in _strings(item, conditions)]
    if isinstance(node, str):
        return ["{{ " + node + " }}" if conditions else node]
    return []


def _named(text: str) -> set[str]:
    tree = Environment(autoescape=False).parse(text)  # noqa: S701 - parsed, never rendered
    loaded = {n.name for n in tree.find_all(nodes.Name) if n.ctx == "load"}
    stored = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
    return loaded - stored


def _names_in_role(role: str) -> tuple[set[str], set[str]]:
    """(variables, ansible_facts keys) the role's files name, with what they define removed."""
    named: set[str] = set()
    facts: set[str] = set()
    defined: set[str] = set()
    for path in sorted((ROLES / role).rglob("*")):
        if path.suffix in (".yml", ".yaml") and path.parent.name != "meta":
            data = yaml.safe_load(path.read_text())
            texts = _strings(data)
            if path.parent.name in ("vars", "defaults") and isinstance(data, dict):
                defined |= set(data)
            for text in texts:
                named |= _named(text)
            _defined_by_tasks(data, defined)
        elif path.suffix == ".j2":
            texts = [path.read_text()]
            named |= _named(texts[0])
        else:
            continue
        for text in texts:
            facts |= set(_fact_keys(text))
    return named - defined, facts


def _defined_by_tasks(node: Any, defined: set[str]) -> None:
    if isinstance(node, dict):
        for key in ("register",):
            if isinstance(node.get(key), str):
                defined.add(node[key])
        for key in ("ansible.builtin.set_fact", "vars"):
            if isinstance(node.get(key), dict):
                defined |= set(node[key])
        loop_var = (node.get("loop_control") or {}).get("loop_var")
        if loop_var:
            defined.add(loop_var)
        for value in node.values():
            _defined_by_tasks(value, defined)
    elif isinstance(node, list):
        for item in node:
            _defined_by_tasks(item, defined)


FACT_KEY = re.compile(r"ansible_facts(?:\[['\"](\w+)['\"]\]|\.(\w+))")


def _fact_keys(text: str) -> list[str]:
    return [a or b for a, b in FACT_KEY.findall(text)]


@pytest.mark.parametrize("role", sorted(settle.ROLES))
def test_every_variable_a_role_names_is_one_of_its_inputs(role: str) -> None:
    named: set[str] = set()
    facts: set[str] = set()
    for part in [role, *settle.ROLES[role]["dependencies"]]:
        more, keys = _names_in_role(part)
        named |= more
        facts |= keys
    covered = {name for name in named
               if name.startswith(settle.prefixes(role)) or name in settle.names(role)}
    assert named - covered - MAGIC - settle.DERIVED == set(), "not a fingerprint input"
    # the facts a role reads: those of FACT_KEYS, or those the roles' reads set (their answers)
    assert {key for key in facts if not key.startswith("ascend_")} <= set(settle.FACT_KEYS)


@pytest.mark.parametrize(("playbook", "roles"), [
    ("stack.yml", ["os_base", "npu_driver", "cann"]),
    ("serving_env.yml", ["host_tuning", "python_env"]),
])
def test_a_play_enters_by_the_verdict_the_roles_it_settles(playbook: str,
                                                          roles: list[str]) -> None:
    play = yaml.safe_load((PLAYBOOKS / playbook).read_text())[0]
    read = [task for task in play["pre_tasks"] if "ascend_serve.fleet.stack_state" in task]
    assert len(read) == 1
    gated = {task["ansible.builtin.include_role"]["name"].rsplit(".", 1)[-1]: task["when"]
             for task in play["tasks"] if "ascend_stack_settle" in str(task.get("when"))}
    assert sorted(gated) == sorted(roles)
    assert set(roles) <= set(settle.ROLES)
    for role, when in gated.items():
        assert when == f"'{role}' in ansible_facts['ascend_stack_settle']['enter']"
    record = play["post_tasks"][-1]
    assert record["ansible.builtin.include_role"]["name"] == "ascend_serve.fleet.stack_settle"
    assert "not ansible_check_mode" in record["when"]
