"""``ascend-serve serve``: start vLLM from a named serving profile on this node.

The orchestration is :mod:`ascend_serve.serving.service`'s; this command parses the options and
prints what happens.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
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

from ansible_collections.ascend_serve.fleet.plugins.module_utils.vllm_log import PHASES_TOTAL
from ascend_serve.cli.console import (
    EXIT_CHECK_FAILED,
    EXIT_FAILED,
    EXIT_OK,
    console,
    err_console,
    fail,
)
from ascend_serve.cli.options import (
    HealthTimeout,
    ListenHost,
    ListenPort,
    ModelDir,
    NpuSmi,
    ProfileFiles,
    ProfileName,
    ProfileSet,
    ServingEnv,
    json_option,
)
from ascend_serve.serving import launcher, service
from ascend_serve.serving.nodecheck import Finding
from ascend_serve.serving.server import log_tail


def _findings_table(findings: list[Finding]) -> Table:
    table = Table(title="node checks", show_lines=False)
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for f in findings:
        table.add_row(f.name, "[green]ok[/green]" if f.ok else "[red]FAIL[/red]",
                      escape(f.detail))
    return table


class _Printer:
    """What :func:`ascend_serve.serving.service.run` reports, on the terminal: a progress bar and
    lines, or (``--json``) one JSON line per event."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def emit(self, event: str, **fields: Any) -> None:
        if self.as_json:
            typer.echo(json.dumps({"event": event, **fields}), nl=True)
            sys.stdout.flush()

    def started(self, pid: int, log: Path, command: str) -> None:
        self.emit("started", pid=pid, log=str(log), command=command)
        if not self.as_json:
            err_console.print(f"started vLLM (pid {pid}), log {log}")

    @contextmanager
    def waiting(self, url: str, wait: float) -> Iterator[object]:
        with Progress(SpinnerColumn(), TextColumn("[progress.description]{task.description}"),
                      BarColumn(bar_width=12), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=err_console, transient=True,
                      disable=self.as_json) as progress:
            self._progress = progress
            self._task = progress.add_task(f"waiting for {url}/health (up to {wait:.0f} s)",
                                           total=PHASES_TOTAL)
            try:
                yield progress
            finally:
                self._progress, self._task = None, None

    def phase(self, entry: dict[str, Any]) -> None:
        self.emit("phase", phase=entry["phase"], title=entry["title"], index=entry["index"],
                  total=PHASES_TOTAL, seconds=entry["seconds"], stamp=entry["stamp"],
                  summary=entry["summary"])
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=entry["index"] + 1)

    def progress(self, where: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=escape(where))

    def ready(self, url: str, served_name: str, seconds: float, phases: dict[str, float],
              facts: dict[str, Any]) -> None:
        self.emit("ready", url=url, served_name=served_name, seconds=round(seconds, 1),
                  phases=phases, facts=facts)
        if not self.as_json:
            console.print(f"serving {served_name} at {url} "
                          f"(healthy after {seconds:.0f} s); Ctrl-C stops it")

    def headless(self, rank: int, head: str | None) -> None:
        self.emit("ready", role="headless", head=head)
        if not self.as_json:
            console.print(f"headless node {rank} running; the API is served by the "
                          f"head node {head}. Ctrl-C stops it")


def serve(
    name: ProfileName,
    model_dir: ModelDir = None,
    assignments: ProfileSet = None,
    profile_files: ProfileFiles = None,
    host: ListenHost = None,
    port: ListenPort = None,
    venv: ServingEnv = None,
    stack_set: Annotated[str | None, typer.Option(
        help="Version set the environment must hold (default: the local fact's).")] = None,
    node_rank: Annotated[int, typer.Option(
        min=0, help="This node's rank in a multi-node profile (0 = head).")] = 0,
    head_address: Annotated[str | None, typer.Option(
        help="The head node's address (multi-node profiles).")] = None,
    env_files: Annotated[list[Path] | None, typer.Option(
        "--env-file", help="KEY=value file the launcher loads, e.g. /etc/ascend-serve/hccl.env; "
        "repeatable.")] = None,
    set_env: Annotated[list[str] | None, typer.Option(
        "--set-env", help="Shell script the launcher sources (default for NPU profiles: the CANN "
        "toolkit's and ATB's set_env.sh); repeatable.")] = None,
    api_key_file: Annotated[Path | None, typer.Option(
        help="File holding the API key (passed to vLLM as VLLM_API_KEY, never on its command "
        "line).")] = None,
    run_dir: Annotated[Path | None, typer.Option(
        help="Where the launcher, the log and vLLM's caches go "
        "(default $XDG_STATE_HOME/ascend-serve/<profile>).")] = None,
    npu_smi: NpuSmi = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the command and the launcher, start nothing.")] = False,
    skip_checks: Annotated[bool, typer.Option(
        "--skip-checks", help="Start without the node checks (NPUs, env, versions, model).")
    ] = False,
    check_hashes: Annotated[bool, typer.Option(
        help="Check the model's SHA-256 against its manifest too (slow for big models).")
    ] = False,
    timeout: HealthTimeout = None,
    as_json: Annotated[bool, json_option(
        "Machine output: the plan (dry run) or one JSON line per event.")] = False,
) -> None:
    """Start vLLM from a serving profile: check the node, render the launcher, wait for /health.

    Runs in the foreground until Ctrl-C or SIGTERM, which stop vLLM and every process it
    started. Exit codes: 0 stopped by the operator (or a dry run), 1 a node check or the memory
    fit failed, 2 bad arguments, 3 vLLM died or never became healthy (the phase its start was in,
    for how long, the fix and the log's last lines are printed).

    While vLLM starts, the progress bar shows its startup phase read from its log (engine
    starting, loading weights with vLLM's per-shard progress, weights loaded, torch.compile, KV
    cache, graph capture, engine ready, API server, startup complete); ``--json`` prints one
    ``phase`` event per phase reached.
    """
    try:
        plan = service.plan(name, model_dir=model_dir, assignments=assignments or [],
                            profile_files=profile_files, host=host, port=port, venv=venv,
                            node_rank=node_rank, head_address=head_address,
                            env_files=env_files or [], set_env=set_env,
                            api_key_file=api_key_file, run_dir=run_dir)
    except service.ServeInputError as exc:
        raise fail(str(exc)) from exc

    if dry_run:
        if as_json:
            typer.echo(json.dumps(service.dry_run_report(plan), indent=2))
        else:
            typer.echo(plan.command)
            err_console.print(f"[dim]launcher ({launcher.LAUNCHER_TEMPLATE}):[/dim]")
            err_console.print(escape(plan.script), highlight=False)
        raise typer.Exit(EXIT_OK)

    out = _Printer(as_json)
    if not skip_checks:
        try:
            findings = service.check(plan, stack_set=stack_set, npu_smi=npu_smi,
                                     hashes=check_hashes)
        except service.ServeInputError as exc:
            raise fail(str(exc)) from exc
        out.emit("checks", checks=[f.as_dict() for f in findings])
        if not as_json:
            err_console.print(_findings_table(findings))
        if not all(f.ok for f in findings):
            failed = ", ".join(f.name for f in findings if not f.ok)
            raise fail(f"node checks failed ({failed}): nothing was started", EXIT_CHECK_FAILED)

    outcome = service.run(plan, float(timeout or plan.profile.health_timeout_s), out)
    if outcome.kind == "exited":
        out.emit("exited", status=outcome.status)
        raise fail(f"vLLM exited with status {outcome.status}:\n{log_tail(outcome.log)}",
                   EXIT_FAILED)
    if outcome.kind == "failed":
        error = outcome.error
        assert error is not None
        out.emit("failed", error=str(error), log_tail=error.log_tail, phase=error.phase,
                 phase_seconds=error.phase_seconds, cause=error.cause, fix=error.fix,
                 timed_out=error.timed_out)
        one_run = ("; for one run: --set health_timeout_s=SECONDS"
                   if error.timed_out and error.phase != "ready" else "")
        raise fail(f"{error}{one_run}\nlast lines of {outcome.log}:\n{error.log_tail}",
                   EXIT_FAILED)
    out.emit("stopped", signal=outcome.signal, status=outcome.status, orphans=outcome.orphans)
    if not as_json:
        err_console.print(f"stopped vLLM ({outcome.signal}; exit status {outcome.status})")
    raise typer.Exit(EXIT_FAILED if outcome.orphans else EXIT_OK)
