"""Run a playbook through ansible-runner and follow it: the model behind ``ascend-serve deploy``.

Nothing here writes to the terminal. :func:`~ascend_serve.fleet.request.prepare` checks the
operator's input (playbook, inventory, extra vars, vault password files) before anything runs
(:mod:`ascend_serve.fleet.request`); :func:`run` starts
``ansible-playbook`` through ansible-runner with the project's ``ansible.cfg`` in force, feeds each
event to a :class:`~ascend_serve.fleet.events.Tracker` (plays, tasks, per-host counters,
failures) and to the caller, and keeps ansible-runner's artifacts plus ``summary.json`` in the run
directory (:mod:`ascend_serve.fleet.rundir`).

Without a project (an installed wheel, run away from a checkout) the run uses the
``ascend_serve.fleet`` collection the package ships: ``ANSIBLE_COLLECTIONS_PATH`` leads with it,
its playbooks are run by name (``ascend_serve.fleet.site``), and the operator's own Ansible
configuration is in force; an inventory must then be given.

Only what Ansible itself shows is kept: results of ``no_log`` tasks arrive censored from the
runner's callback, extra vars given inline travel in a temporary file outside the run directory
(never on the command line nor in ``command``), and the environment ansible-runner records in
``command`` is cut down to Ansible's own settings.
"""

from __future__ import annotations

import configparser
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ascend_serve.exitcodes import EXIT_CANCELED as EXIT_CANCELED  # cancelled: 128 + SIGINT
from ascend_serve.exitcodes import EXIT_CHECK_FAILED, EXIT_FAILED, EXIT_OK
from ascend_serve.fleet.events import Notice, Tracker, censor_event_stdout
from ascend_serve.fleet.request import DeployRequest, count_plays
from ascend_serve.fleet.rundir import SUMMARY_FILE, output_tail, redact_command_artifact
from ascend_serve.resources import collections_path

# After a cancel request, how long ansible-playbook gets to stop its workers (SIGINT, as at a
# terminal) before it and they are killed.
CANCEL_GRACE_S = 20.0
# Ansible's own default collections path, kept after the packaged collection (project-less runs).
ANSIBLE_DEFAULT_COLLECTIONS = ("~/.ansible/collections", "/usr/share/ansible/collections")


# --- the run -------------------------------------------------------------------------------------


@dataclass
class DeployResult:
    """What a finished (or cancelled) run came to."""

    request: DeployRequest
    run_dir: Path
    tracker: Tracker
    status: str  # ansible-runner's: successful | failed | canceled | timeout | error
    rc: int
    started: float
    finished: float
    canceled: bool = False
    error: str | None = None  # ansible's own output tail when it failed to run

    @property
    def outcome(self) -> str:
        if self.canceled:
            return "canceled"
        if self.tracker.any_bad:
            return "hosts_failed"
        if self.rc != 0 or self.status not in ("successful",):
            return "ansible_failed"
        return "ok"

    @property
    def exit_code(self) -> int:
        return {"ok": EXIT_OK, "hosts_failed": EXIT_CHECK_FAILED, "ansible_failed": EXIT_FAILED,
                "canceled": EXIT_CANCELED}[self.outcome]

    def summary(self) -> dict[str, Any]:
        req, tracker = self.request, self.tracker
        return {
            "playbook": req.name,
            "playbook_path": str(req.playbook),
            "project": str(req.project) if req.project is not None else None,
            "inventory": req.inventories,
            "limit": req.limit,
            "tags": req.tags,
            "skip_tags": req.skip_tags,
            "check": req.check,
            "diff": req.diff,
            "extra_vars": [ev.describe() for ev in req.extra_vars],
            "run_dir": str(self.run_dir),
            "started": datetime.fromtimestamp(self.started, timezone.utc).isoformat(),
            "finished": datetime.fromtimestamp(self.finished, timezone.utc).isoformat(),
            "duration_s": round(self.finished - self.started, 3),
            "status": self.status,
            "rc": self.rc,
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "plays": tracker.plays,
            "plays_total": tracker.total_plays,
            "tasks_started": tracker.tasks_started,
            "hosts": {name: tracker.hosts[name].counters() for name in sorted(tracker.hosts)},
            "failures": [asdict(f) for f in tracker.failures_by_host().values()],
            "error": self.error,
        }


def _host_key_checking(project: Path | None) -> str:
    """The host_key_checking Ansible would use here (ansible-runner turns it off otherwise)."""
    if "ANSIBLE_HOST_KEY_CHECKING" in os.environ:
        return os.environ["ANSIBLE_HOST_KEY_CHECKING"]
    candidates = [os.environ.get("ANSIBLE_CONFIG"),
                  str(project / "ansible.cfg") if project is not None else None,
                  str(Path.home() / ".ansible.cfg"), "/etc/ansible/ansible.cfg"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            parser = configparser.ConfigParser(interpolation=None, strict=False)
            try:
                parser.read(candidate, encoding="utf-8")
            except configparser.Error:
                break
            return parser.get("defaults", "host_key_checking", fallback="True")
    return "True"


def _environment(request: DeployRequest) -> dict[str, str]:
    env = {
        "ANSIBLE_HOST_KEY_CHECKING": _host_key_checking(request.project),
        "ANSIBLE_NOCOLOR": "True",  # the stdout artifact is read as plain text
    }
    if request.project is None:  # the packaged collection first, then the operator's or Ansible's
        rest = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.pathsep.join(
            ANSIBLE_DEFAULT_COLLECTIONS)
        env["ANSIBLE_COLLECTIONS_PATH"] = os.pathsep.join([str(collections_path()), rest])
    # The ansible-playbook next to this interpreter (a venv that is not activated).
    bindir = Path(sys.executable).parent
    path = os.environ.get("PATH", "")
    if (bindir / "ansible-playbook").exists() and path.split(os.pathsep)[0] != str(bindir):
        env["PATH"] = os.pathsep.join([str(bindir), path])
    return env


@contextmanager
def _extra_var_files(request: DeployRequest) -> Iterator[list[str]]:
    """``-e @FILE`` arguments; inline values go through a private temporary directory."""
    tmp = Path(tempfile.mkdtemp(prefix="ascend-serve-deploy-"))
    try:
        args = []
        for n, ev in enumerate(request.extra_vars):
            if ev.path is not None:
                args += ["-e", f"@{ev.path}"]
            else:
                path = tmp / f"extra-vars-{n}.yml"
                path.write_text(ev.text or "{}", encoding="utf-8")
                path.chmod(0o600)
                args += ["-e", f"@{path}"]
        yield args
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _cmdline(request: DeployRequest, extra_args: list[str]) -> str:
    args = list(extra_args)
    if request.check:
        args.append("--check")
    if request.diff:
        args.append("--diff")
    for path in request.vault_password_files:
        args += ["--vault-password-file", str(path)]
    return shlex.join(args)


def _kill_worker_sessions(pid: int) -> None:
    """Kill the sessions of ansible-playbook's workers (each calls setsid, so the runner's kill
    of ansible-playbook's process group does not reach them or the modules they run)."""
    own = os.getsid(0)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        ppid, sid = int(fields[1]), int(fields[3])
        if ppid == pid and sid not in (own, 0, 1):
            with suppress(OSError):
                os.killpg(sid, signal.SIGKILL)


def write_summary(result: DeployResult) -> Path:
    path = result.run_dir / SUMMARY_FILE
    path.write_text(json.dumps(result.summary(), indent=2) + "\n", encoding="utf-8")
    return path


def run(
    request: DeployRequest,
    run_dir: Path,
    *,
    tracker: Tracker | None = None,
    on_notice: Callable[[Notice], None] | None = None,
    cancel: Callable[[], int] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> DeployResult:
    """Run the playbook; the run directory receives the runner's artifacts and summary.json.

    ``on_event`` receives every runner event (censored like job_events/) as it arrives.
    ``cancel`` is polled about once a second: 1 (or True) asks ansible-playbook to stop the way
    Ctrl-C at a terminal does (SIGINT: it stops its workers and their modules, exit 99); 2 or
    more, or :data:`CANCEL_GRACE_S` later, kills it and its workers (ansible-runner's cancel).
    """
    import ansible_runner  # type: ignore[import-untyped]

    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if tracker is None:
        tracker = Tracker(count_plays(request.playbook))
    canceled = False
    ansible_pid: int | None = None
    requested_at: float | None = None

    def handle_event(event: dict[str, Any]) -> bool:
        nonlocal ansible_pid
        if ansible_pid is None and isinstance(event.get("pid"), int):
            ansible_pid = event["pid"]  # the callback runs in ansible-playbook's main process
        censor_event_stdout(event)
        for notice in tracker.handle(event):
            if on_notice is not None:
                on_notice(notice)
        if on_event is not None:
            on_event(event)
        return True  # keep it in job_events/

    def cancel_callback() -> bool:
        nonlocal canceled, requested_at
        level = int(cancel()) if cancel is not None else 0
        if not level:
            return False
        canceled = True
        now = time.monotonic()
        if requested_at is None:
            requested_at = now
            if ansible_pid is not None and level == 1:
                try:
                    os.kill(ansible_pid, signal.SIGINT)
                    return False
                except ProcessLookupError:
                    pass
        elif level == 1 and now - requested_at < CANCEL_GRACE_S:
            return False
        if ansible_pid is not None:
            _kill_worker_sessions(ansible_pid)
        return True  # the runner kills ansible-playbook's process group

    started = time.time()
    status, rc, error = "error", -1, None
    with _extra_var_files(request) as extra_args:
        try:
            runner = ansible_runner.run(
                private_data_dir=str(run_dir),
                artifact_dir=str(run_dir.parent),
                ident=run_dir.name,  # the artifacts land in run_dir itself
                rotate_artifacts=0,  # never prune the operator's other runs
                # ansible.cfg: roles, collections, forks; none: the run directory (no cfg there)
                project_dir=str(request.project) if request.project is not None else None,
                playbook=request.playbook_arg,
                inventory=request.inventories,
                limit=request.limit,
                tags=",".join(request.tags) or None,
                skip_tags=",".join(request.skip_tags) or None,
                forks=request.forks,
                cmdline=_cmdline(request, extra_args),
                envvars=_environment(request),
                quiet=True,
                suppress_env_files=True,  # nothing of the operator's in env/
                fact_cache_type="memory",  # Ansible's default: facts are not written to disk
                settings={"pexpect_timeout": 1},  # how often a cancel request is looked at
                event_handler=handle_event,
                cancel_callback=cancel_callback,
            )
            status, rc = str(runner.status), int(runner.rc if runner.rc is not None else -1)
            canceled = canceled or status == "canceled"
        except Exception as exc:  # the runner itself broke (not ansible)
            error = f"ansible-runner failed: {type(exc).__name__}: {exc}"
    finished = time.time()
    if canceled and status != "canceled":  # ansible-playbook stopped on its own after SIGINT
        status = "canceled"
        (run_dir / "status").write_text(status, encoding="utf-8")
    redact_command_artifact(run_dir)
    result = DeployResult(request, run_dir, tracker, status, rc, started, finished,
                          canceled=canceled)
    if error is not None:
        result.error = error
    elif result.outcome == "ansible_failed":
        result.error = "\n".join(output_tail(run_dir) or tracker.output_tail)
    write_summary(result)
    return result
