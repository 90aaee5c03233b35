"""Running one role on this machine in a mount namespace of its own (the npu_driver and cann role
tests): whether namespaces work here, and a callback that records every task result, so a test
can count the module runs a role made on the host (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest


def namespaces_work() -> bool:
    """Root with ``unshare -m`` available: the role's /etc and /var can be overlaid."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return probe.returncode == 0


NEEDS_NAMESPACES = pytest.mark.skipif(not namespaces_work(),
                                      reason="needs root and mount namespaces (unshare -m)")

# Records every task result of a run as a JSON line: role, task, action, status, changed, msg.
RECORDER = '''
import json, os
from ansible.plugins.callback import CallbackBase

class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_record"
    CALLBACK_NEEDS_ENABLED = True

    def _write(self, result, status):
        task = result._task
        role = task._role.get_name(include_role_fqcn=False) if task._role else ""
        line = {"role": role, "task": task.get_name(), "action": task.action, "status": status,
                "changed": bool(result._result.get("changed")),
                "msg": str(result._result.get("msg", ""))}
        with open(os.environ["TASK_RECORD"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\\n")

    def v2_runner_on_ok(self, result):
        self._write(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._write(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._write(result, "skipped")
'''

# Actions that run on the controller only: they cost no round trip.
CONTROLLER = {"set_fact", "assert", "debug", "fail", "include_tasks", "import_tasks",
              "include_role", "meta", "validate_argument_spec", "include_vars"}


def write_recorder(directory: Path) -> None:
    """The recorder as ``directory/callbacks/task_record.py`` (give ``directory/callbacks`` to
    ``ANSIBLE_CALLBACK_PLUGINS`` and the record file to ``TASK_RECORD``)."""
    (directory / "callbacks").mkdir()
    (directory / "callbacks" / "task_record.py").write_text(RECORDER)


def remote_actions(records: list[dict[str, Any]], role: str) -> list[str]:
    """The role's module runs on the host: its tasks that ran and are not controller-only."""
    actions = [r["action"].rsplit(".", 1)[-1] for r in records
               if r["role"] == role and r["status"] != "skipped"]
    return [a for a in actions if a not in CONTROLLER]
