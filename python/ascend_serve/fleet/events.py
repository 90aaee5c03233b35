"""Following a run through ansible-runner's events: plays, tasks, per-host counters, failures.

:class:`Tracker` turns each event into what the caller shows (:data:`Notice`); a ``no_log`` task's
text is cut from the event before the runner writes it (:func:`censor_event_stdout`);
:func:`stats_line` renders a host's counters as Ansible's PLAY RECAP line.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# What the runner's callback puts in place of a no_log task's result.
CENSORED = ("the output has been hidden due to the fact that 'no_log: true' was specified for "
            "this result")
STAT_FIELDS = ("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored")
# playbook_on_stats keys -> our field names
_STATS_KEYS = {"ok": "ok", "changed": "changed", "failures": "failed", "dark": "unreachable",
               "skipped": "skipped", "rescued": "rescued", "ignored": "ignored"}
TAIL_LINES = 25
# Terminal escapes in what ansible-playbook printed.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


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
            text = ANSI.sub("", str(event.get("stdout") or ""))
            self.output_tail = (self.output_tail + [ln for ln in text.splitlines()])[-TAIL_LINES:]
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
            text = ANSI.sub("", str(event.get("stdout") or "")).replace("\r", "").strip("\n")
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


def stats_line(host: str, stats: HostStats) -> str:
    """A host's line in Ansible's PLAY RECAP format (what CI logs and greps expect)."""
    fields = " ".join(f"{name}={getattr(stats, name):<4}" for name in
                      ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored"))
    return f"{host:<26} : {fields}".rstrip()
