"""``ascend-serve deploy``: run site.yml (or one playbook) with live progress and a summary."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Annotated, Any

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from ascend_serve.cli.console import console, err_console, fail
from ascend_serve.cli.options import Inventory, Limit, RunDir, json_option
from ascend_serve.fleet import deploy as d
from ascend_serve.fleet import events as ev
from ascend_serve.fleet import request as rq
from ascend_serve.fleet import rundir as rd

_STATUS_STYLE = {"ok": "green", "changed": "yellow", "failed": "red", "unreachable": "red",
                 "skipped": "cyan", "ignored": "magenta"}
_MAX_LINE = 400


def _task_label(role: str | None, task: str) -> str:
    return f"{role} : {task}" if role else task


def _one_line(message: str | None) -> str:
    text = " / ".join(line.strip() for line in (message or "").splitlines() if line.strip())
    return text if len(text) <= _MAX_LINE else text[: _MAX_LINE - 3] + "..."


def _play_line(notice: ev.PlayStarted) -> str:
    count = f"{notice.number}/{notice.total}" if notice.total else str(notice.number)
    return f"PLAY [{count}] {notice.name}"


class _Lines:
    """--quiet / not a terminal: one line per play and per finished task per host (CI logs)."""

    def notice(self, notice: ev.Notice) -> None:
        if isinstance(notice, ev.PlayStarted):
            console.print(_play_line(notice), highlight=False, markup=False, soft_wrap=True)
        elif isinstance(notice, ev.HostResult):
            label = _task_label(notice.role, notice.task)
            line = f"{notice.status + ':':<13}[{notice.host}] {label}"
            if notice.message and notice.status != "skipped":
                line += f" -- {_one_line(notice.message)}"
            console.print(Text(line, style=_STATUS_STYLE.get(notice.status, "")),
                          highlight=False, soft_wrap=True)
        elif isinstance(notice, ev.Note):
            console.print(notice.text, highlight=False, markup=False, soft_wrap=True)


class _LiveView:
    """A terminal: the current play and task, a bar over the plays, per-host counters."""

    def __init__(self, tracker: ev.Tracker, out: Console) -> None:
        self.lock = threading.RLock()
        self.tracker = tracker
        self.console = out
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=30),
            TextColumn("{task.fields[plays]}"),
            TimeElapsedColumn(),
            console=out,
        )
        self.bar: TaskID = self.progress.add_task("starting ansible-playbook", total=None,
                                                  plays="")

    def notice(self, notice: ev.Notice) -> None:
        with self.lock:
            if isinstance(notice, ev.PlayStarted):
                self.console.print(Text(_play_line(notice), style="bold"), highlight=False)
                self.progress.update(
                    self.bar, description=escape(notice.name), total=notice.total,
                    completed=notice.number - 1,
                    plays=f"play {notice.number}/{notice.total}" if notice.total
                    else f"play {notice.number}")
            elif isinstance(notice, ev.HostResult) and notice.status in ("failed", "unreachable"):
                line = (f"{notice.status}: [{notice.host}] {_task_label(notice.role, notice.task)}"
                        f" -- {_one_line(notice.message)}")
                self.console.print(Text(line, style="red"), highlight=False, soft_wrap=True)
            elif isinstance(notice, ev.Note):
                self.console.print(notice.text, highlight=False, markup=False, soft_wrap=True)

    def finish(self, tracker: ev.Tracker) -> None:
        with self.lock:
            total = tracker.total_plays or len(tracker.plays) or 1
            self.progress.update(self.bar, total=total, completed=total)

    def __rich__(self) -> RenderableType:
        tracker = self.tracker
        with self.lock, tracker.lock:
            task = tracker.task
            label = (f"task {tracker.tasks_in_play} of this play ({tracker.tasks_started} in all): "
                     f"{_task_label(tracker.role, task)}" if task else "waiting for the first task")
            table = Table(box=None, pad_edge=False, show_edge=False)
            table.add_column("host")
            for name in ("ok", "changed", "failed", "unreachable", "skipped"):
                table.add_column(name, justify="right")
            table.add_column("now", overflow="ellipsis", no_wrap=True, max_width=60)
            for host in sorted(tracker.hosts):
                stats = tracker.hosts[host]
                if stats.bad:
                    now = "[red]failed[/red]" if stats.failed else "[red]unreachable[/red]"
                else:
                    now = escape(stats.task) if stats.task else ("done" if stats.done else "")
                table.add_row(escape(host), str(stats.ok), str(stats.changed),
                              f"[red]{stats.failed}[/red]" if stats.failed else "0",
                              f"[red]{stats.unreachable}[/red]" if stats.unreachable else "0",
                              str(stats.skipped), now)
            return Group(self.progress, Text("  " + label, overflow="ellipsis", no_wrap=True),
                         table)


class _Cancel:
    """Ctrl-C / SIGTERM stop the run: the first lets ansible-playbook stop its workers, a second
    one kills them (ansible-runner's cancel callback)."""

    def __init__(self) -> None:
        self.requests = 0

    def __call__(self) -> int:
        return self.requests

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.requests += 1
        if self.requests == 1:
            err_console.print("[yellow]cancelling the run: ansible-playbook is stopping its "
                              "tasks (again to kill it now)[/yellow]")
        elif self.requests == 2:
            err_console.print("[yellow]killing ansible-playbook[/yellow]")

    @contextmanager
    def installed(self) -> Iterator[None]:
        previous: dict[signal.Signals, Any] = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, self._on_signal)
        except ValueError:  # not the main thread: the caller handles interruption
            pass
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _summary_table(result: d.DeployResult) -> Table:
    tracker = result.tracker
    verdicts = {"ok": "[green]all hosts ok[/green]",
                "hosts_failed": "[red]{n} of {total} host(s) failed[/red]",
                "ansible_failed": f"[red]ansible-playbook failed (rc {result.rc})[/red]",
                "canceled": "[yellow]cancelled[/yellow]"}
    bad = sum(1 for s in tracker.hosts.values() if s.bad)
    verdict = verdicts[result.outcome].format(n=bad, total=len(tracker.hosts))
    mode = " (check mode)" if result.request.check else ""
    table = Table(title=f"deploy {escape(result.request.name)}{mode}: {verdict}",
                  title_justify="left")
    table.add_column("host")
    for name in ev.STAT_FIELDS:
        table.add_column(name, justify="right")
    for host in sorted(tracker.hosts):
        stats = tracker.hosts[host]
        style = "red" if stats.bad else ("yellow" if stats.changed else "green")
        table.add_row(f"[{style}]{escape(host)}[/{style}]",
                      *(str(getattr(stats, name)) for name in ev.STAT_FIELDS))
    return table


def _print_summary(result: d.DeployResult, recap: bool) -> None:
    tracker = result.tracker
    if recap and tracker.hosts:  # Ansible's own recap lines, for logs and greps
        console.print("PLAY RECAP", highlight=False, markup=False)
        for host in sorted(tracker.hosts):
            console.print(ev.stats_line(host, tracker.hosts[host]), highlight=False,
                          markup=False, soft_wrap=True)
    if tracker.hosts:
        console.print(_summary_table(result))
    for host, failure in tracker.failures_by_host().items():
        where = _task_label(failure.role, failure.task)
        console.print(f"[red]{escape(failure.kind.upper())}[/red] [bold]{escape(host)}[/bold]: "
                      f"task [bold]{escape(where)}[/bold] (play {escape(failure.play)})",
                      highlight=False, soft_wrap=True)
        for line in failure.message.splitlines():
            console.print(Text("    " + line), highlight=False, soft_wrap=True)
    total, started = tracker.total_plays, len(tracker.plays)
    if result.outcome == "hosts_failed" and total and 0 < started < total:
        console.print(f"the run stopped in play {started} of {total} "
                      f"({escape(tracker.plays[-1])}): the hosts without a failure went no further",
                      highlight=False, soft_wrap=True)
    if result.outcome == "ansible_failed":
        err_console.print(f"[red]ansible-playbook failed (rc {result.rc}, status "
                          f"{escape(result.status)}) without a host failure:[/red]")
        for line in (result.error or "(no output)").splitlines():
            err_console.print(Text(line), highlight=False)
    elif result.outcome == "canceled":
        err_console.print("[yellow]the run was cancelled; the counts above are partial[/yellow]")
    console.print(f"run directory: {escape(str(result.run_dir))} (status {escape(result.status)}, "
                  f"rc {result.rc}, {result.finished - result.started:.1f} s)",
                  highlight=False, soft_wrap=True)


def deploy(
    playbook: Annotated[
        str,
        typer.Argument(help="site.yml (default: the project's, else the collection's), a "
                            "playbook of the ascend_serve.fleet collection by name (network or "
                            "ascend_serve.fleet.network), or a path."),
    ] = rq.DEFAULT_PLAYBOOK,
    inventory: Inventory = None,
    limit: Limit = None,
    tags: Annotated[
        list[str] | None, typer.Option("-t", "--tags", help="Only tasks with these tags; "
                                                          "repeatable or comma-separated.")
    ] = None,
    skip_tags: Annotated[
        list[str] | None, typer.Option("--skip-tags", help="Skip tasks with these tags.")
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", "-C", help="Ansible's check mode: change nothing.")
    ] = False,
    diff: Annotated[
        bool, typer.Option("--diff", "-D", help="Show the changes made to files (or that would "
                                                "be, with --check).")
    ] = False,
    extra_vars: Annotated[
        list[str] | None,
        typer.Option("-e", "--extra-vars", metavar="VARS",
                     help="key=value pairs, YAML/JSON, or @FILE; repeatable. Values given "
                          "inline are not kept in the run directory. A variable a play's "
                          "serial reads (ascend_upgrade_batches, ascend_rollout_batches) is "
                          "passed from the inventory unless given here."),
    ] = None,
    vault_password_file: Annotated[
        list[str] | None,
        typer.Option("--vault-password-file", metavar="FILE",
                     help="Vault password file (or script); repeatable."),
    ] = None,
    forks: Annotated[
        int | None, typer.Option("-f", "--forks", min=1,
                                 help="Parallel hosts (default: ansible.cfg's).")
    ] = None,
    run_dir: RunDir = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="One line per finished task per host instead "
                                                 "of the live display (the default when the "
                                                 "output is not a terminal).")
    ] = False,
    as_json: Annotated[bool, json_option("Print only the run's summary as JSON.")] = False,
) -> None:
    """Run site.yml (or one playbook) with ansible-runner; exit 0 all hosts ok, 1 a host failed
    or was unreachable, 2 bad input, 3 ansible-playbook itself failed, 130 cancelled."""
    try:
        request = rq.prepare(playbook, inventory, limit=limit, tags=tags, skip_tags=skip_tags,
                            check=check, diff=diff, extra_vars=extra_vars,
                            vault_password_files=vault_password_file, forks=forks)
        target = (rd.check_run_dir(run_dir) if run_dir is not None
                  else rd.new_run_dir(request.playbook))
    except rq.DeployInputError as exc:
        raise fail(str(exc)) from exc

    # The live display needs a terminal (rich's TTY_INTERACTIVE=1 asks for it elsewhere); a log
    # (CI, a pipe, FORCE_COLOR) gets lines.
    interactive = sys.stdout.isatty() or os.environ.get("TTY_INTERACTIVE") == "1"
    live_mode = (not (quiet or as_json) and interactive and console.is_terminal
                 and not console.is_dumb_terminal)
    tracker = ev.Tracker(rq.count_plays(request.playbook))
    view: _LiveView | _Lines | None
    if as_json:
        view = None
    elif live_mode:
        # Its own console: the shared one decided at import whether output is interactive.
        view = _LiveView(tracker, Console(force_terminal=True, force_interactive=True))
    else:
        view = _Lines()
    if view is not None:
        what = f"{request.name} on {', '.join(request.inventories)}"
        console.print(f"deploy {what} (run directory {target})", highlight=False,
                      markup=False, soft_wrap=True)
        for name, value in request.serial_from_inventory.items():
            console.print(f"batches from the inventory: -e {json.dumps({name: value})}",
                          highlight=False, markup=False, soft_wrap=True)

    def on_notice(notice: ev.Notice) -> None:
        if view is not None:
            view.notice(notice)

    cancel = _Cancel()
    with cancel.installed():
        if isinstance(view, _LiveView):
            live = Live(view, console=view.console, refresh_per_second=4, transient=True,
                        redirect_stdout=False, redirect_stderr=False)
            with live:
                result = d.run(request, target, tracker=tracker, on_notice=on_notice,
                               cancel=cancel)
                view.finish(result.tracker)
        else:
            result = d.run(request, target, tracker=tracker, on_notice=on_notice, cancel=cancel)

    if as_json:
        typer.echo(json.dumps(result.summary(), indent=2))
    else:
        _print_summary(result, recap=not live_mode)
    raise typer.Exit(result.exit_code)


if __name__ == "__main__":  # python -m ascend_serve.cli.deploy (before it is a subcommand)
    typer.run(deploy)
