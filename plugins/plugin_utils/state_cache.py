"""The play's one state read on the controller side: the ``stack_state`` task stamps its answers
with the play, and each role's read task takes its answer from them instead of running its module
on the host, when the arguments are the same.

Controller-only code (``plugin_utils``): the action plugins of ``stack_state`` and of the reads it
can stand in for (``os_base_state``, ``npu_driver_facts``, ``cann_facts``,
``host_runtime_facts``). What a read is and how its arguments are checked is
``module_utils/state_reads.py``, shared with the module on the host.
"""

from __future__ import annotations

import copy
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.ascend_serve.fleet.plugins.module_utils.state_reads import (
    READS,
    ReadRefusedError,
    checked_arguments,
)
from ansible_collections.ascend_serve.fleet.plugins.plugin_utils import settle
from ansible_collections.ascend_serve.fleet.plugins.plugin_utils.controller_package import plain

CACHE = "ascend_state_cache"


def play_id(task: Any) -> str:
    """The id of the play the task runs in (its blocks carry the play)."""
    parent = getattr(task, "_parent", None)
    while parent is not None:
        play = getattr(parent, "_play", None)
        if play is not None:
            return str(play._uuid)
        parent = getattr(parent, "_parent", None)
    return ""


def _short(action: str) -> str:
    return action.rsplit(".", 1)[-1]


def take(cache: Any, play: str, name: str,
         request: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(answer, the cache without it) when ``cache`` holds this play's answer to this read with
    these arguments; otherwise None. Pure, for the tests."""
    if not isinstance(cache, dict) or not play or cache.get("play") != play:
        return None
    reads = cache.get("reads") or {}
    entry = reads.get(name)
    if not isinstance(entry, dict):
        return None
    try:
        if checked_arguments(name, entry.get("request") or {}) != request:
            return None
    except ReadRefusedError:
        return None
    rest = {key: value for key, value in reads.items() if key != name}
    return copy.deepcopy(entry["result"]), {"play": play, "reads": rest}


def with_request(name: str, answer: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The answer carrying the arguments it answers (in the fact, or in the result of a module
    that sets none): what a role records in its ledger as ``read``."""
    fact = READS[name].FACT
    if answer.get("failed"):
        return answer
    if fact and isinstance(answer.get("ansible_facts", {}).get(fact), dict):
        answer["ansible_facts"][fact]["request"] = request
    elif not fact:
        answer["request"] = request
    return answer


class StateReadAction(ActionBase):
    """A role's read: the play's answer when it has one for these arguments, else the module."""

    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        name = _short(self._task.action)
        args = plain(dict(self._task.args))
        try:
            request: dict[str, Any] | None = checked_arguments(name, args)
        except ReadRefusedError:
            request = None  # the module refuses them, with its own message
        cache = plain((task_vars.get("ansible_facts") or {}).get(CACHE))
        taken = take(cache, play_id(self._task), name, request) if request is not None else None
        if taken is not None:
            answer, rest = taken
            answer.setdefault("ansible_facts", {})[CACHE] = rest
            answer["read_from"] = "play"
        else:
            answer = self._execute_module(module_args=args, task_vars=task_vars)
            answer["read_from"] = "host"
        result.update(with_request(name, answer, request) if request is not None else answer)
        return result


class StackStateAction(ActionBase):
    """The play's one read: the module's answers, stamped with this play; with ``settle``, the
    roles' fingerprints from those answers (``settle.py``): in the play's first task which of
    those roles to enter (the fact ``ascend_stack_settle``), and with ``entered`` (the
    ``stack_settle`` role, at the end of a full run) the ledger record of the settled ones."""

    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = plain(dict(self._task.args))
        roles = args.pop("settle", None)
        entered = args.pop("entered", None)
        unknown = [role for role in roles or [] if role not in settle.ROLES]
        if unknown:
            result.update(failed=True, msg=f"settle names roles stack_state does not know: "
                          f"{', '.join(map(str, unknown))}; known: {', '.join(settle.ROLES)}")
            return result
        facts = plain(task_vars.get("ansible_facts") or {})
        if args.get("reads") is None:
            if not roles:
                result.update(failed=True, msg="stack_state needs reads, or settle")
                return result
            args["reads"] = settle.reads(facts)
        answer = self._execute_module(module_args=args, task_vars=task_vars)
        cache = answer.get("ansible_facts", {}).get(CACHE)
        if isinstance(cache, dict):
            cache["play"] = play_id(self._task)
        if roles and not answer.get("failed") and isinstance(cache, dict):
            answers = cache.get("reads") or {}
            prints = {role: settle.fingerprint(role, settle.content_digest(role), task_vars,
                                               facts, answers)
                      for role in roles}
            recorded = (facts.get("ansible_local") or {}).get(settle.LEDGER)
            answer["fingerprints"] = prints
            if entered is None:
                enter = settle.to_enter(recorded, prints)
                # A run that asks for verification (--tags verify) verifies every role, and one
                # with ascend_settle false decides every role again.
                settling = boolean(self._templar.template(task_vars.get("ascend_settle", True)),
                                   strict=False)
                if "verify" in (task_vars.get("ansible_run_tags") or []) or not settling:
                    enter = list(roles)
                answer["ansible_facts"]["ascend_stack_settle"] = {"roles": list(roles),
                                                                  "enter": enter}
            else:
                requests = {name: entry.get("request") for name, entry in answers.items()}
                answer["settled"] = settle.settled_record(recorded, prints, entered, requests)
                del answer["ansible_facts"]
        result.update(answer)
        return result
