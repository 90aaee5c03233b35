"""Run a playbook through ansible-runner and follow it: the model behind ``ascend-serve deploy``.

Nothing here writes to the terminal. :func:`prepare` checks the operator's input (playbook,
inventory, extra vars, vault password files) before anything runs; :func:`run` starts
``ansible-playbook`` through ansible-runner with the project's ``ansible.cfg`` in force, feeds each
event to a :class:`Tracker` (plays, tasks, per-host counters, failures) and to the caller, and
keeps ansible-runner's artifacts plus ``summary.json`` in the run directory.

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
import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from ascend_serve.exitcodes import EXIT_CANCELED as EXIT_CANCELED  # cancelled: 128 + SIGINT
from ascend_serve.exitcodes import EXIT_CHECK_FAILED, EXIT_FAILED, EXIT_OK
from ascend_serve.resources import COLLECTION, collection_dir, collections_path

# After a cancel request, how long ansible-playbook gets to stop its workers (SIGINT, as at a
# terminal) before it and they are killed.
CANCEL_GRACE_S = 20.0

DEFAULT_PLAYBOOK = "site.yml"
DEFAULT_INVENTORY = Path("inventories/local/hosts.yml")  # under the project
DEFAULT_RUNS_DIR = Path(".ascend-serve/runs")  # under the current directory
# Ansible's own default collections path, kept after the packaged collection (project-less runs).
ANSIBLE_DEFAULT_COLLECTIONS = ("~/.ansible/collections", "/usr/share/ansible/collections")
SUMMARY_FILE = "summary.json"
PROJECT_ENV = "ASCEND_SERVE_PROJECT"
# What the runner's callback puts in place of a no_log task's result.
CENSORED = ("the output has been hidden due to the fact that 'no_log: true' was specified for "
            "this result")
STAT_FIELDS = ("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored")
# playbook_on_stats keys -> our field names
_STATS_KEYS = {"ok": "ok", "changed": "changed", "failures": "failed", "dark": "unreachable",
               "skipped": "skipped", "rescued": "rescued", "ignored": "ignored"}
_TAIL_LINES = 25
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Environment kept in the runner's ``command`` artifact: Ansible's and the runner's own settings.
_KEPT_ENV = re.compile(r"^(ANSIBLE_|AWX_|RUNNER_)|^(PATH|PYTHONPATH|HOME|LANG|LC_ALL|PWD)$")
_SECRET_ENV = re.compile(r"PASS|TOKEN|SECRET|CREDENTIAL|PRIVATE|AUTH|(?<!HOST_)KEY(?!_CHECKING)")


class DeployInputError(ValueError):
    """The operator's input is wrong; nothing was started (exit 2)."""


# --- input ---------------------------------------------------------------------------------------


def _is_project(path: Path) -> bool:
    return (path / "ansible.cfg").is_file() and (path / DEFAULT_PLAYBOOK).is_file()


def find_project(cwd: Path | None = None) -> Path | None:
    """The project whose ``ansible.cfg``, roles and collections the run uses; None for none.

    ``$ASCEND_SERVE_PROJECT``, else the current directory or the nearest parent holding
    ``ansible.cfg`` and ``site.yml``, else the checkout this package runs from (an editable
    install: its packaged collection is the checkout's ``collections/``). None from an installed
    wheel anywhere else: the run then uses the collection the package ships.
    """
    env = os.environ.get(PROJECT_ENV)
    if env:
        path = Path(env).expanduser().resolve()
        if not (path / "ansible.cfg").is_file():
            raise DeployInputError(f"{PROJECT_ENV}={env} has no ansible.cfg")
        return path
    here = (cwd or Path.cwd()).resolve()
    for candidate in (here, *here.parents, collections_path().resolve().parent):
        if _is_project(candidate):
            return candidate
    return None


def resolve_playbook(name: str, project: Path | None, cwd: Path) -> Path:
    """A path as given (relative to ``cwd``), else one in the project, else a playbook of the
    ``ascend_serve.fleet`` collection by name (``network``, ``network.yml`` or
    ``ascend_serve.fleet.network``)."""
    given = Path(name).expanduser()
    candidates = [given if given.is_absolute() else cwd / given]
    playbooks = collection_dir() / "playbooks"
    if not given.is_absolute():
        if project is not None:
            candidates.append(project / given)
        if len(given.parts) == 1:
            stem = given.name.removeprefix(f"{COLLECTION}.")
            candidates += [playbooks / stem]
            if given.suffix not in (".yml", ".yaml"):
                candidates += [playbooks / f"{stem}.yml", playbooks / f"{stem}.yaml"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    names = sorted(p.stem for p in playbooks.glob("*.yml"))
    raise DeployInputError(
        f"no playbook {name!r} (a file, a playbook of the project, or one of the collection's "
        f"playbooks: {', '.join(names) or 'none'})")


def resolve_inventories(values: list[str], project: Path | None, cwd: Path) -> list[str]:
    """Absolute inventory sources (ansible runs in the project directory, not here).

    A ``host1,host2,`` list is passed on as it is. Without ``-i`` the project's default
    (``inventories/local/hosts.yml``) is used; without a project, ``-i`` is required.
    """
    if not values:
        if project is None:
            raise DeployInputError(
                f"no inventory given (-i), and no project here to take its {DEFAULT_INVENTORY} "
                f"from (a checkout with ansible.cfg and {DEFAULT_PLAYBOOK}, or {PROJECT_ENV})")
        default = project / DEFAULT_INVENTORY
        if not default.exists():
            raise DeployInputError(f"no inventory given (-i) and no default {default}")
        return [str(default)]
    resolved = []
    for value in values:
        path = Path(value).expanduser()
        path = path if path.is_absolute() else cwd / path
        if path.exists():
            resolved.append(str(path.resolve()))
        elif "," in value:
            resolved.append(value)  # an inline host list
        else:
            raise DeployInputError(f"inventory {value} does not exist")
    return resolved


class _TolerantLoader(yaml.SafeLoader):
    """Safe YAML that accepts Ansible's tags (``!vault``, ``!unsafe``) as plain values."""


def _any_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    return None


_TolerantLoader.add_multi_constructor("!", _any_tag)


def _load_mapping(text: str, what: str) -> dict[str, Any]:
    try:
        data = yaml.load(text, Loader=_TolerantLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise DeployInputError(f"{what} is not valid YAML/JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise DeployInputError(f"{what} is not a mapping of variables")
    return data


def _parse_kv(text: str) -> dict[str, Any]:
    from ansible.parsing.splitter import parse_kv  # type: ignore[import-untyped]

    try:
        data: dict[str, Any] = dict(parse_kv(text))
    except Exception as exc:  # ansible raises its own parser errors
        raise DeployInputError(f"-e {text!r}: {exc}") from exc
    raw = data.pop("_raw_params", None)
    if raw is not None or not data:
        raise DeployInputError(
            f"-e {text!r}: expected key=value pairs, YAML/JSON ({{...}}) or @FILE")
    return data


@dataclass(frozen=True)
class ExtraVars:
    """One ``-e``: a file of the operator's (``path``), or inline text kept out of the run dir."""

    given: str
    path: Path | None = None
    text: str | None = None  # YAML/JSON to hand over in a temporary file
    keys: tuple[str, ...] = ()

    def describe(self) -> str:
        """For summaries: the file, or the names set (values are never recorded)."""
        if self.path is not None:
            return f"@{self.path}"
        return "inline: " + ", ".join(self.keys)


def parse_extra_vars(value: str, cwd: Path) -> ExtraVars:
    """Check one ``-e`` the way ansible-playbook reads it (key=value, YAML/JSON, @FILE)."""
    if not value:
        raise DeployInputError("-e needs a value")
    if value.startswith("@"):
        path = Path(value[1:]).expanduser()
        path = path if path.is_absolute() else cwd / path
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise DeployInputError(f"-e {value}: cannot read {path}: {exc.strerror}") from exc
        if not text.lstrip().startswith("$ANSIBLE_VAULT"):  # ansible decrypts it
            keys = tuple(_load_mapping(text, f"-e {value}"))
        else:
            keys = ()
        return ExtraVars(value, path=path.resolve(), keys=keys)
    if value[0] in "/.":
        raise DeployInputError(f"-e {value}: a file of variables is given as @{value}")
    if value[0] in "[{":
        data = _load_mapping(value, f"-e {value!r}")
        return ExtraVars(value, text=value, keys=tuple(str(k) for k in data))
    data = _parse_kv(value)
    bad = [k for k in data if not str(k).isidentifier()]
    if bad:
        raise DeployInputError(f"-e {value!r}: not a variable name: {', '.join(map(str, bad))}")
    return ExtraVars(value, text=json.dumps(data), keys=tuple(data))


@dataclass(frozen=True)
class DeployRequest:
    """Everything one run needs, checked."""

    project: Path | None  # None: the packaged collection and the operator's Ansible settings
    playbook: Path
    inventories: list[str]
    limit: str | None = None
    tags: list[str] = field(default_factory=list)
    skip_tags: list[str] = field(default_factory=list)
    check: bool = False
    diff: bool = False
    extra_vars: list[ExtraVars] = field(default_factory=list)
    vault_password_files: list[Path] = field(default_factory=list)
    forks: int | None = None

    @property
    def name(self) -> str:
        """The playbook as the operator knows it: a collection playbook by its FQCN, else relative
        to the project when inside it."""
        if self.in_collection:
            return f"{COLLECTION}.{self.playbook.stem}"
        if self.project is None:
            return str(self.playbook)
        try:
            return str(self.playbook.relative_to(self.project))
        except ValueError:
            return str(self.playbook)

    @property
    def in_collection(self) -> bool:
        """The playbook is one of the ``ascend_serve.fleet`` collection's."""
        return self.playbook.parent == (collection_dir() / "playbooks").resolve()

    @property
    def playbook_arg(self) -> str:
        """What ansible-playbook is given: a path, or (without a project) a collection playbook
        by name, found on the collections path."""
        return self.name if self.project is None and self.in_collection else str(self.playbook)


def _split_list(values: list[str]) -> list[str]:
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def prepare(
    playbook: str = DEFAULT_PLAYBOOK,
    inventories: list[str] | None = None,
    *,
    limit: str | None = None,
    tags: list[str] | None = None,
    skip_tags: list[str] | None = None,
    check: bool = False,
    diff: bool = False,
    extra_vars: list[str] | None = None,
    vault_password_files: list[str] | None = None,
    forks: int | None = None,
    cwd: Path | None = None,
) -> DeployRequest:
    """Check the operator's input; raises :class:`DeployInputError` (nothing runs)."""
    here = (cwd or Path.cwd()).resolve()
    project = find_project(here)
    vault_files = []
    for value in vault_password_files or []:
        path = Path(value).expanduser()
        path = path if path.is_absolute() else here / path
        if not path.is_file():
            raise DeployInputError(f"vault password file {value} does not exist")
        vault_files.append(path.resolve())
    if forks is not None and forks < 1:
        raise DeployInputError("--forks must be at least 1")
    if limit is not None and not limit.strip():
        raise DeployInputError("--limit needs a host pattern")
    return DeployRequest(
        project=project,
        playbook=resolve_playbook(playbook, project, here),
        inventories=resolve_inventories(list(inventories or []), project, here),
        limit=limit,
        tags=_split_list(tags or []),
        skip_tags=_split_list(skip_tags or []),
        check=check,
        diff=diff,
        extra_vars=[parse_extra_vars(v, here) for v in extra_vars or []],
        vault_password_files=vault_files,
        forks=forks,
    )


def count_plays(playbook: Path, _seen: frozenset[Path] = frozenset()) -> int | None:
    """Plays in a playbook, following ``import_playbook``; None when that is not knowable."""
    if playbook in _seen:
        return None
    try:
        data = yaml.load(playbook.read_text(encoding="utf-8"), Loader=_TolerantLoader)  # noqa: S506
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(data, list):
        return None
    total = 0
    for entry in data:
        if not isinstance(entry, dict):
            return None
        imported = entry.get("ansible.builtin.import_playbook", entry.get("import_playbook"))
        if imported is None:
            total += 1
            continue
        if not isinstance(imported, str) or "{{" in imported:
            return None
        if imported.startswith(f"{COLLECTION}."):  # a playbook of the collection, by FQCN
            stem = imported.removeprefix(f"{COLLECTION}.")
            target = collection_dir() / "playbooks" / f"{stem}.yml"
        else:
            target = Path(imported)
            target = target if target.is_absolute() else playbook.parent / target
        sub = count_plays(target.resolve(), _seen | {playbook})
        if sub is None:
            return None
        total += sub
    return total


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


# --- events --------------------------------------------------------------------------------------


@dataclass
class HostStats:
    """Ansible's recap counters of one host."""

    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0
    task: str | None = None  # the task running on the host now
    done: bool = False  # not in the play any more (failed, unreachable, or the run ended)

    @property
    def bad(self) -> bool:
        return self.failed > 0 or self.unreachable > 0

    def counters(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in STAT_FIELDS}


@dataclass(frozen=True)
class Failure:
    """Why a host failed: the task and the message Ansible gave."""

    host: str
    kind: str  # failed | unreachable
    play: str
    task: str
    role: str | None
    action: str | None
    message: str


@dataclass(frozen=True)
class PlayStarted:
    number: int
    total: int | None
    name: str
    pattern: str


@dataclass(frozen=True)
class TaskStarted:
    play: str
    name: str
    role: str | None
    number: int  # tasks started so far in the whole run
    handler: bool = False


@dataclass(frozen=True)
class HostResult:
    """A task finished on a host."""

    host: str
    status: str  # ok | changed | failed | unreachable | skipped | ignored
    play: str
    task: str
    role: str | None
    message: str | None = None  # failed / unreachable / ignored


@dataclass(frozen=True)
class Note:
    """Something Ansible said that is no task result (no hosts left, a diff)."""

    text: str
    kind: str = "note"  # note | diff


Notice = PlayStarted | TaskStarted | HostResult | Note


def _lines(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [line for item in value for line in _lines(item)]
    text = value if isinstance(value, str) else json.dumps(value)
    return [line.rstrip() for line in text.strip().splitlines() if line.strip()]


def result_message(res: Any) -> str:
    """The message of a failed or unreachable result, as Ansible shows it (never more).

    ``msg`` (a string or a list of lines, e.g. the assert's ``fail_msg``), with the tail of
    ``stderr`` / ``module_stderr`` when the module left one, and the first failed item of a loop.
    A ``no_log`` result is the runner's censored text.
    """
    if not isinstance(res, Mapping):
        return str(res) if res else ""
    if "censored" in res:
        return str(res["censored"])
    lines = _lines(res.get("msg"))
    for key in ("stderr", "module_stderr"):
        tail = _lines(res.get(key))[-8:]
        if tail and tail != lines[-len(tail):]:
            lines += [f"{key}: {tail[0]}", *tail[1:]] if len(tail) == 1 else [f"{key}:", *tail]
            break
    if "rc" in res and res.get("rc") not in (None, 0) and not any("rc" in ln for ln in lines):
        lines.append(f"rc: {res['rc']}")
    results = res.get("results")
    if isinstance(results, list):
        for item in results:
            if isinstance(item, Mapping) and (item.get("failed") or "censored" in item):
                label = item.get("_ansible_item_label", item.get("item"))
                sub = result_message(item)
                if sub and sub not in lines:
                    prefix = f"item {json.dumps(label)}: " if label is not None else ""
                    lines.append(prefix + sub)
                break
    return "\n".join(lines) or "(no message)"


class Tracker:
    """Follows ansible-runner events: plays, tasks, per-host counters and failures."""

    def __init__(self, total_plays: int | None = None) -> None:
        self.total_plays = total_plays
        self.plays: list[str] = []
        self.play: str | None = None
        self.task: str | None = None
        self.role: str | None = None
        self.tasks_started = 0
        self.tasks_in_play = 0
        self.hosts: dict[str, HostStats] = {}
        self.failures: list[Failure] = []
        self.stats_seen = False
        self.output_tail: list[str] = []  # what ansible printed outside task results (errors)
        self.events = 0
        self.lock = threading.RLock()  # a display reads the model from its refresh thread

    def host(self, name: str) -> HostStats:
        if name not in self.hosts:
            self.hosts[name] = HostStats()
        return self.hosts[name]

    def handle(self, event: Mapping[str, Any]) -> list[Notice]:
        """Update the model from one runner event; return what a display should show."""
        with self.lock:
            return self._handle(event)

    def _handle(self, event: Mapping[str, Any]) -> list[Notice]:
        self.events += 1
        kind = str(event.get("event", ""))
        data: Mapping[str, Any] = event.get("event_data") or {}
        if kind == "verbose":
            text = _ANSI.sub("", str(event.get("stdout") or ""))
            self.output_tail = (self.output_tail + [ln for ln in text.splitlines()])[-_TAIL_LINES:]
            return []
        if kind == "playbook_on_play_start":
            return [self._play_start(data)]
        if kind == "playbook_on_task_start":
            return [self._task_start(data)]
        if kind in ("playbook_on_no_hosts_matched", "playbook_on_no_hosts_remaining"):
            text = ("skipping: no hosts matched" if kind.endswith("matched")
                    else "no hosts remaining in this play")
            return [Note(f"{self.play or 'play'}: {text}")]
        if kind == "runner_on_start":
            self.host(str(data.get("host"))).task = str(data.get("task") or "")
            return []
        if kind == "runner_on_file_diff":  # Ansible's own rendering of the diff
            text = _ANSI.sub("", str(event.get("stdout") or "")).replace("\r", "").strip("\n")
            where = f"[{data.get('host')}] {data.get('task') or self.task or ''}"
            return [Note(f"diff {where}:\n{text}", kind="diff")] if text.strip() else []
        if kind in ("runner_on_ok", "runner_on_failed", "runner_on_skipped",
                    "runner_on_unreachable"):
            return [self._result(kind, data)]
        if kind == "playbook_on_stats":
            self._stats(data)
        return []

    def _play_start(self, data: Mapping[str, Any]) -> PlayStarted:
        name = str(data.get("play") or data.get("name") or data.get("play_pattern") or "")
        self.plays.append(name)
        self.play, self.task, self.role = name, None, None
        self.tasks_in_play = 0
        for stats in self.hosts.values():
            stats.task = None
        return PlayStarted(len(self.plays), self.total_plays, name,
                           str(data.get("play_pattern") or ""))

    def _task_start(self, data: Mapping[str, Any]) -> TaskStarted:
        self.tasks_started += 1
        self.tasks_in_play += 1
        self.task = str(data.get("task") or data.get("name") or "")
        self.role = str(data["role"]) if data.get("role") else None
        return TaskStarted(self.play or "", self.task, self.role, self.tasks_started,
                           handler=bool(data.get("is_handler")))

    def _result(self, kind: str, data: Mapping[str, Any]) -> HostResult:
        name = str(data.get("host") or "")
        stats = self.host(name)
        stats.task = None
        res = data.get("res") or {}
        task = str(data.get("task") or self.task or "")
        role = str(data["role"]) if data.get("role") else None
        play = str(data.get("play") or self.play or "")
        message = None
        if kind == "runner_on_ok":
            changed = isinstance(res, Mapping) and bool(res.get("changed"))
            stats.ok += 1
            stats.changed += int(changed)
            status = "changed" if changed else "ok"
        elif kind == "runner_on_skipped":
            stats.skipped += 1
            status = "skipped"
        else:
            message = result_message(res)
            if kind == "runner_on_unreachable":
                stats.unreachable += 1
                status = "unreachable"
                stats.done = True
            elif data.get("ignore_errors"):
                stats.ok += 1
                stats.ignored += 1
                status = "ignored"
            else:
                stats.failed += 1
                status = "failed"
                stats.done = True
            if status != "ignored":
                self.failures.append(Failure(name, status, play, task, role,
                                             str(data.get("task_action") or "") or None,
                                             message))
        return HostResult(name, status, play, task, role, message)

    def _stats(self, data: Mapping[str, Any]) -> None:
        """The recap: Ansible's own counters replace ours (rescued failures, handlers)."""
        self.stats_seen = True
        names = set(self.hosts)
        for key in (*_STATS_KEYS, "processed"):
            counts = data.get(key)
            if isinstance(counts, Mapping):
                names.update(str(h) for h in counts)
        for name in names:
            stats = self.host(name)
            for key, attr in _STATS_KEYS.items():
                counts = data.get(key) or {}
                setattr(stats, attr, int(counts.get(name, 0)))
            stats.task, stats.done = None, True

    # --- the outcome ---

    def failures_by_host(self) -> dict[str, Failure]:
        """The failure that stopped each host that ended failed or unreachable."""
        last: dict[str, Failure] = {}
        for failure in self.failures:
            if self.hosts.get(failure.host, HostStats()).bad:
                last[failure.host] = failure
        return dict(sorted(last.items()))

    @property
    def any_bad(self) -> bool:
        return any(stats.bad for stats in self.hosts.values())


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


def _redact_command_artifact(run_dir: Path) -> None:
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


_RESULT_LINE = re.compile(r"^(fatal|failed|ok|changed|skipping): \[")


def censor_event_stdout(event: dict[str, Any]) -> None:
    """Keep a no_log task's error text out of the artifacts.

    ansible-core 2.19 prints a failing ``no_log`` action's message (``[ERROR]: Task failed:
    Action failed: ...``) above the censored result. The runner writes the event's ``stdout`` to
    ``job_events/`` and ``stdout`` after the event handler has seen it, so it is cut here.
    """
    data = event.get("event_data") or {}
    res = data.get("res")
    if not isinstance(res, Mapping) or "censored" not in res:
        return
    lines = str(event.get("stdout") or "").splitlines()
    for n, line in enumerate(lines):
        if _RESULT_LINE.match(line):
            if n:
                event["stdout"] = "\r\n".join(
                    ["[ERROR]: Task failed (the message is hidden: no_log)", *lines[n:]])
            return
    event["stdout"] = CENSORED


def output_tail(run_dir: Path, lines: int = _TAIL_LINES) -> list[str]:
    """The last lines ansible-playbook printed (stdout and stderr share the runner's pty)."""
    try:
        text = (run_dir / "stdout").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    cleaned = [_ANSI.sub("", ln).rstrip() for ln in text.replace("\r", "").splitlines()]
    while cleaned and not cleaned[-1]:
        cleaned.pop()
    return cleaned[-lines:]


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
    _redact_command_artifact(run_dir)
    result = DeployResult(request, run_dir, tracker, status, rc, started, finished,
                          canceled=canceled)
    if error is not None:
        result.error = error
    elif result.outcome == "ansible_failed":
        result.error = "\n".join(output_tail(run_dir) or tracker.output_tail)
    write_summary(result)
    return result


def stats_line(host: str, stats: HostStats) -> str:
    """A host's line in Ansible's PLAY RECAP format (what CI logs and greps expect)."""
    fields = " ".join(f"{name}={getattr(stats, name):<4}" for name in
                      ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored"))
    return f"{host:<26} : {fields}".rstrip()
