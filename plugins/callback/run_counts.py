"""Count, per host, what a playbook run cost: tasks, module runs, fact gatherings, package-manager
runs, changes. Deterministic figures for benchmarks and for tests that bound a no-op re-run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: run_counts
type: aggregate
short_description: Count tasks, module runs, fact gatherings and package-manager runs per host
description:
  - Counts, for every host of a playbook run, what the run cost in work the host had to do,
    as deterministic numbers (no times), for C(bench/scale.py) and for tests that put ceilings
    on a no-op re-run.
  - C(tasks) counts the tasks started for the host (a loop counts once), C(skipped) the ones
    skipped, C(changed) the changed results.
  - C(module_runs) counts the executions of a module on the host. A task whose action runs on the
    controller only (C(set_fact), C(assert), C(debug), C(include_*), C(meta), ...) counts none, and
    neither does a state read answered from the play's one read (its result says
    C(read_from=play); see the C(stack_state) module); a loop counts one run per item that was not
    skipped.
  - C(fact_gatherings) counts the module runs of C(ansible.builtin.setup) and
    C(ansible.builtin.gather_facts) (a play's implicit fact gathering included).
  - C(package_manager_runs) counts the module runs that start the package manager (the apt, dnf,
    yum, package, package_facts and dnf_versionlock modules, C(apt_repository) with
    C(update_cache), and C(command)/C(shell) tasks whose program is apt, apt-get, dnf, yum,
    microdnf or zypper). Queries of the package database through C(dpkg-query) or C(rpm -q) are
    not package-manager runs.
  - At the end of the run the counts are appended as one JSON line to I(file)
    (an object with the keys C(playbook), C(check) (a C(--check) run) and C(hosts)), or,
    without I(file), printed one line per host.
requirements:
  - enable in C(callbacks_enabled) (C(ANSIBLE_CALLBACKS_ENABLED=ascend_serve.fleet.run_counts))
options:
  file:
    description: JSON-lines file the counts of each run are appended to.
    type: path
    env:
      - name: ASCEND_SERVE_RUN_COUNTS
    ini:
      - section: callback_run_counts
        key: file
"""

import json
import os
import shlex
from collections import defaultdict
from typing import Any

from ansible import context
from ansible.plugins.callback import CallbackBase

CONTROLLER_ONLY = frozenset({
    "add_host", "assert", "debug", "fail", "group_by", "import_playbook", "import_role",
    "import_tasks", "include_role", "include_tasks", "include_vars", "meta", "pause",
    "set_fact", "set_stats", "validate_argument_spec", "include",
})
FACTS = frozenset({"setup", "gather_facts"})
PACKAGE_MODULES = frozenset({
    "ansible.builtin.apt", "ansible.builtin.dnf", "ansible.builtin.dnf5", "ansible.builtin.yum",
    "ansible.builtin.package", "ansible.builtin.package_facts",
    "community.general.dnf_versionlock", "community.general.zypper",
})
PACKAGE_PROGRAMS = frozenset({"apt", "apt-get", "dnf", "dnf5", "yum", "microdnf", "zypper"})
FIELDS = ("tasks", "skipped", "changed", "failed", "module_runs", "fact_gatherings",
          "package_manager_runs")


def _short(action: str) -> str:
    return action.rsplit(".", 1)[-1]


def _program(args: dict[str, Any]) -> str:
    argv = args.get("argv")
    if isinstance(argv, list) and argv:
        first = str(argv[0])
    else:
        words = shlex.split(str(args.get("_raw_params") or args.get("cmd") or ""))
        first = words[0] if words else ""
    return os.path.basename(first)


class CallbackModule(CallbackBase):
    """Per-host counts, written at the end of the run."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "ascend_serve.fleet.run_counts"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(FIELDS, 0))
        self._playbook = ""

    def v2_playbook_on_start(self, playbook: Any) -> None:
        self._playbook = os.path.basename(getattr(playbook, "_file_name", "") or "")

    def v2_runner_on_start(self, host: Any, task: Any) -> None:
        self._counts[host.get_name()]["tasks"] += 1

    def _record(self, result: Any, *, skipped: bool = False, failed: bool = False) -> None:
        counts = self._counts[result._host.get_name()]
        task = result._task
        if skipped:
            counts["skipped"] += 1
            return
        res = result._result
        counts["changed"] += bool(res.get("changed"))
        counts["failed"] += failed
        action = getattr(task, "resolved_action", None) or task.action
        short = _short(action)
        if short in CONTROLLER_ONLY or res.get("read_from") == "play":
            return
        items = res.get("results")
        if isinstance(items, list) and task.loop is not None:
            runs = sum(1 for item in items
                       if isinstance(item, dict) and not item.get("skipped"))
        else:
            runs = 1
        counts["module_runs"] += runs
        args = task.args or {}
        if short in FACTS:
            counts["fact_gatherings"] += runs
        elif (action in PACKAGE_MODULES
              or (short == "apt_repository" and args.get("update_cache", True))
              or (short in ("command", "shell") and _program(args) in PACKAGE_PROGRAMS)):
            counts["package_manager_runs"] += runs

    def v2_runner_on_ok(self, result: Any) -> None:
        self._record(result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._record(result, failed=True)

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._record(result, skipped=True)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._record(result, failed=True)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        report = {"playbook": self._playbook, "check": bool(context.CLIARGS.get("check")),
                  "hosts": dict(sorted(self._counts.items()))}
        path = self.get_option("file")
        if path:
            with open(path, "a", encoding="utf-8") as out:
                out.write(json.dumps(report, sort_keys=True) + "\n")
            return
        self._display.banner("RUN COUNTS")
        for host, counts in report["hosts"].items():
            self._display.display(
                f"{host}: " + " ".join(f"{k}={counts[k]}" for k in FIELDS))
