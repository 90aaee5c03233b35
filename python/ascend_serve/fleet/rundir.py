"""A deploy's run directory: where it goes, and what ``ascend-serve deploy`` keeps in it
(ansible-runner's artifacts with the environment cut down, ``summary.json``, the output's tail).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

from ascend_serve.fleet.events import ANSI, TAIL_LINES
from ascend_serve.fleet.request import DeployInputError

DEFAULT_RUNS_DIR = Path(".ascend-serve/runs")  # under the current directory
SUMMARY_FILE = "summary.json"
# Environment kept in the runner's ``command`` artifact: Ansible's and the runner's own settings.
_KEPT_ENV = re.compile(r"^(ANSIBLE_|AWX_|RUNNER_)|^(PATH|PYTHONPATH|HOME|LANG|LC_ALL|PWD)$")
_SECRET_ENV = re.compile(r"PASS|TOKEN|SECRET|CREDENTIAL|PRIVATE|AUTH|(?<!HOST_)KEY(?!_CHECKING)")


def new_run_dir(playbook: Path, base: Path | None = None, now: datetime | None = None) -> Path:
    """``.ascend-serve/runs/<UTC timestamp>-<playbook>`` (made unique), not yet created."""
    base = base if base is not None else Path.cwd() / DEFAULT_RUNS_DIR
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    candidate = base / f"{stamp}-{playbook.stem}"
    n = 2
    while candidate.exists():
        candidate = base / f"{stamp}-{playbook.stem}-{n}"
        n += 1
    return candidate


def check_run_dir(path: Path) -> Path:
    """An operator's ``--run-dir``: new, or an empty directory."""
    path = path.expanduser().resolve()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise DeployInputError(f"run directory {path} exists and is not empty")
    return path


def redact_command_artifact(run_dir: Path) -> None:
    """ansible-runner saves the whole environment in ``command``: keep Ansible's settings only."""
    path = run_dir / "command"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    env = data.get("env")
    if isinstance(env, dict):
        data["env"] = {
            k: ("<redacted>" if _SECRET_ENV.search(k) else v)
            for k, v in sorted(env.items()) if _KEPT_ENV.search(k)
        }
        data["env_note"] = "cut down by ascend-serve deploy to Ansible's and the runner's settings"
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def output_tail(run_dir: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last lines ansible-playbook printed (stdout and stderr share the runner's pty)."""
    try:
        text = (run_dir / "stdout").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    cleaned = [ANSI.sub("", ln).rstrip() for ln in text.replace("\r", "").splitlines()]
    while cleaned and not cleaned[-1]:
        cleaned.pop()
    return cleaned[-lines:]
