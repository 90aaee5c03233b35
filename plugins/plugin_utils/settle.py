"""Which roles of a play (``stack.yml``, ``serving_env.yml``) a host needs entered: a role is
settled on a host when a full run left it there with the same inputs, and its read of the host
answers what it answered then.

A role's *fingerprint* on a host is one digest of everything its decisions on a converged host
depend on:

- the collection's code it runs: the files of the role and of its dependencies, the collection's
  plugins, the version matrix and the ``ascend_serve.stack`` package that resolves it, and the
  data it reads (python_env's locks) (:func:`content_digest`);
- its inputs: the host's variables with the role's or a dependency's prefix, the other variables
  its files name (:data:`NAMES`), and every variable those values name in turn (an inventory's
  ``cann_version: "{{ my_cann }}"`` brings ``my_cann`` in), as written, not templated: the same
  text in the play's first task and in its last one;
- the facts its files read (:data:`FACT_KEYS`) and its ledger (``ansible_local``);
- the answers of its state reads (``stack_state``'s, for the arguments given).

At the end of a full run (not in check mode, not limited by tags) the play records the roles'
fingerprints in the ledger ``ascend_stack_settled``, read again after every change of the run.
The next run computes them again from its one read: a role whose fingerprint is the recorded one
has, by the role's idempotence, nothing to do, and the play skips its include. Anything else
(a changed input, a changed host, a new collection, no record) enters the role, which decides as
it always did. ``tests/collection/test_settle.py`` checks that every variable the roles' files
name is an input here.

Controller-only code (``plugin_utils``), used by the action of ``stack_state``
(``state_cache.py``); pure functions, for the tests.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jinja2 import Environment, nodes
from jinja2.exceptions import TemplateSyntaxError

#: The ledger the play records the fingerprints in (plugins/module_utils/ledger.py).
LEDGER = "ascend_stack_settled"

#: Per role a play can skip: its dependencies (whose files and inputs are its own too), its state
#: reads (by module name), its ledger, the collection's data it reads besides the version matrix,
#: and the variables whose presence leaves it never settled (a path outside the collection whose
#: content it reads: python_env_lock_dir).
ROLES: dict[str, dict[str, Any]] = {
    # stack.yml
    "os_base": {"dependencies": ["ledger"], "reads": ["os_base_state"],
                "ledger": "ascend_os_base"},
    "npu_driver": {"dependencies": ["ascend_stack", "ledger"],
                   "reads": ["npu_driver_facts", "host_runtime_facts"],
                   "ledger": "ascend_npu_driver"},
    "cann": {"dependencies": ["ascend_stack", "ledger"],
             "reads": ["cann_facts", "host_runtime_facts"], "ledger": "ascend_cann"},
    # serving_env.yml
    "host_tuning": {"dependencies": ["ledger"], "reads": ["host_tuning_state"],
                    "ledger": "ascend_host_tuning"},
    "python_env": {"dependencies": ["ascend_stack", "ledger"],
                   "reads": ["python_env_state", "host_runtime_facts"],
                   "ledger": "ascend_python_env", "data": ["locks"],
                   "unsettled_by": ["python_env_lock_dir"]},
}

#: The variables a role's files name that have no prefix of that role: inputs of every role that
#: is or depends on it.
NAMES: dict[str, list[str]] = {
    "ascend_stack": ["python_env_manager", "python_env_python", "python_env_set",
                     "vllm_service_runtime"],
    "python_env": ["vllm_service_runtime", "cann_env_file"],
}

#: The facts the roles' files read (gathered with subset ``min``, or by a role itself).
FACT_KEYS = ("architecture", "distribution", "distribution_major_version",
             "distribution_version", "kernel", "os_family", "service_mgr")

#: Variables with a role's prefix that a run sets (set_fact), not inputs: what they are made of is.
DERIVED = frozenset({"ascend_stack_resolved", "ascend_stack_settle"})

# Parsed only, never rendered: no output to escape.
_JINJA = Environment(autoescape=False)  # noqa: S701


def prefixes(role: str) -> tuple[str, ...]:
    return tuple(name + "_" for name in [role, *ROLES[role]["dependencies"]])


def names(role: str) -> set[str]:
    """The variables without a prefix of its own that the role's files, or its dependencies',
    name."""
    return {name for part in [role, *ROLES[role]["dependencies"]] for name in NAMES.get(part, [])}


def _names_in(value: Any) -> set[str]:
    """Every variable a value's templates name (loop variables and locals included: too many is
    safe, too few is not)."""
    found: set[str] = set()
    if isinstance(value, Mapping):
        for item in value.values():
            found |= _names_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            found |= _names_in(item)
    elif isinstance(value, str) and ("{{" in value or "{%" in value):
        try:
            tree = _JINJA.parse(value)
        except TemplateSyntaxError:
            return found  # templated as text; the text itself is in the digest
        found |= {node.name for node in tree.find_all(nodes.Name)}
    return found


def inputs(role: str, variables: Mapping[str, Any]) -> dict[str, Any]:
    """The role's inputs among ``variables`` (a host's, as written): by prefix and by name, then
    what their templates name, transitively; derived and private variables left out."""
    start = {name for name in variables
             if name.startswith(prefixes(role)) or name in names(role)}
    chosen: dict[str, Any] = {}
    todo = sorted(start - DERIVED)
    while todo:
        name = todo.pop()
        if name in chosen or name in DERIVED or name not in variables:
            continue
        chosen[name] = variables[name]
        todo.extend(sorted(_names_in(variables[name]) - set(chosen)))
    return chosen


def _files(root: Path) -> Iterable[Path]:
    if root.is_file():
        yield root
        return
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path


def content_digest(role: str, collection: Path | None = None) -> str:
    """The digest of the code a role's run depends on: its files and its dependencies', the
    collection's plugins, the version matrix and the package that resolves it."""
    root = collection or Path(__file__).resolve().parents[2]
    sources = [root / "roles" / name for name in [role, *ROLES[role]["dependencies"]]]
    sources.append(root / "plugins")
    matrix = os.environ.get("ASCEND_SERVE_MATRIX")
    sources.append(Path(matrix) if matrix else root / "data" / "stack-matrix.yml")
    sources += [root / "data" / name for name in ROLES[role].get("data", [])]
    spec = importlib.util.find_spec("ascend_serve")
    for location in (spec.submodule_search_locations or []) if spec else []:
        sources.append(Path(location) / "stack")
    digest = hashlib.sha256()
    for source in sources:
        for path in _files(source):
            digest.update(str(path.relative_to(source.parent)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def fingerprint(role: str, content: str, variables: Mapping[str, Any],
                facts: Mapping[str, Any], answers: Mapping[str, Any]) -> str | None:
    """The role's fingerprint; None when a read it needs has no answer (nothing to compare), or
    a variable that leaves it unsettled is set."""
    if any(name in variables for name in ROLES[role].get("unsettled_by", [])):
        return None
    reads = {}
    for name in ROLES[role]["reads"]:
        answer = answers.get(name)
        if not isinstance(answer, Mapping) or answer.get("failed"):
            return None
        reads[name] = {"request": answer.get("request"), "result": answer.get("result")}
    local = facts.get("ansible_local") or {}
    document = {
        "role": role,
        "content": content,
        "inputs": inputs(role, variables),
        "facts": {key: facts.get(key) for key in FACT_KEYS},
        "ledger": local.get(ROLES[role]["ledger"]) if isinstance(local, Mapping) else None,
        "reads": reads,
    }
    return hashlib.sha256(_canonical(document).encode()).hexdigest()


#: The ledger each role's read records its arguments in (``read``), by the read's module.
READ_LEDGERS = {"os_base_state": "ascend_os_base", "npu_driver_facts": "ascend_npu_driver",
                "cann_facts": "ascend_cann", "host_tuning_state": "ascend_host_tuning",
                "python_env_state": "ascend_python_env"}
#: The read without a ledger of its own (ascend_stack's) and the fact that carries its arguments.
HOST_RUNTIME, HOST_RUNTIME_FACT = "host_runtime_facts", "ascend_host_runtime"


def reads(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The reads to do: each role's with the arguments its ledger recorded it was read with, and
    ascend_stack's with the arguments of its read in this run, else those the last record of
    settled roles holds. A read with no recorded arguments is left out (the role reads alone)."""
    local = facts.get("ansible_local") or {}
    found: dict[str, Any] = {}
    for name, ledger in READ_LEDGERS.items():
        record = local.get(ledger)
        if isinstance(record, Mapping) and isinstance(record.get("read"), Mapping):
            found[name] = record["read"]
    runtime = facts.get(HOST_RUNTIME_FACT)
    settled = local.get(LEDGER)
    if isinstance(runtime, Mapping) and isinstance(runtime.get("request"), Mapping):
        found[HOST_RUNTIME] = runtime["request"]
    elif isinstance(settled, Mapping) and isinstance(settled.get("reads"), Mapping) \
            and isinstance(settled["reads"].get(HOST_RUNTIME), Mapping):
        found[HOST_RUNTIME] = settled["reads"][HOST_RUNTIME]
    return found


def to_enter(recorded: Any, fingerprints: Mapping[str, str | None]) -> list[str]:
    """The roles whose fingerprint is not the recorded one (in the order of ``fingerprints``)."""
    roles = recorded.get("roles") if isinstance(recorded, Mapping) else None
    roles = roles if isinstance(roles, Mapping) else {}
    return [role for role, print_ in fingerprints.items()
            if print_ is None or roles.get(role) != print_]


def settled_record(recorded: Any, fingerprints: Mapping[str, str | None], entered: Iterable[str],
                   requests: Mapping[str, Any]) -> dict[str, Any]:
    """The ledger's new record at the end of a full run: a role entered in it is settled with
    its fingerprint now; a role not entered keeps its record only while its fingerprint is still
    the recorded one (another role's change to what it reads unsettles it)."""
    record = recorded if isinstance(recorded, Mapping) else {}
    before = record.get("roles") if isinstance(record.get("roles"), Mapping) else {}
    went_in = set(entered)
    # Another play's roles keep their record.
    roles = {role: print_ for role, print_ in before.items() if role not in fingerprints}
    roles.update({role: print_ for role, print_ in fingerprints.items()
                  if print_ is not None and (role in went_in or before.get(role) == print_)})
    reads = dict(record.get("reads")) if isinstance(record.get("reads"), Mapping) else {}
    reads.update({name: request for name, request in requests.items() if request is not None})
    return {"roles": dict(sorted(roles.items())), "reads": dict(sorted(reads.items()))}
