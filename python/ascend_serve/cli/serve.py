"""``ascend-serve serve``: start vLLM from a named serving profile on this node."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

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
from ascend_serve.node.vllm_log import PHASES_TOTAL, describe
from ascend_serve.serving import launcher
from ascend_serve.serving.fit import FitError
from ascend_serve.serving.nodecheck import (
    NO_SERVING_ENV,
    Finding,
    ascend_set_env,
    fit_report,
    node_findings,
    read_env_fact,
    serving_env,
)
from ascend_serve.serving.profiles import ProfileError, resolve_options
from ascend_serve.serving.server import ServerError, ServerProcess, last_line, log_tail
from ascend_serve.stack.matrix import MatrixError


class _StopRequestedError(Exception):
    """SIGTERM / SIGINT received while serving."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise _StopRequestedError(signal.Signals(signum).name)


def _findings_table(findings: list[Finding]) -> Table:
    table = Table(title="node checks", show_lines=False)
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for f in findings:
        table.add_row(f.name, "[green]ok[/green]" if f.ok else "[red]FAIL[/red]",
                      escape(f.detail))
    return table


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
        profile = resolve_options(name, assignments or [], profile_files, host=host, port=port)
    except ProfileError as exc:
        raise fail(str(exc)) from exc
    if node_rank >= profile.nodes:
        raise fail(f"--node-rank {node_rank}: profile {name} runs on {profile.nodes} node(s)")
    if profile.nodes > 1 and not head_address:
        raise fail(f"profile {name} spans {profile.nodes} nodes: --head-address is required")
    fact = read_env_fact()
    env_dir = serving_env(venv, fact)
    if env_dir is None:
        raise fail(NO_SERVING_ENV)
    model = (model_dir or launcher.DEFAULT_MODELS_DIR / profile.model.name).absolute()
    state = (run_dir or launcher.default_state_dir(profile.name)).absolute()
    scripts = list(set_env) if set_env is not None else (
        ascend_set_env() if profile.device == "npu" else [])
    api_key: str | None = None
    if api_key_file is not None:
        try:
            api_key = api_key_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise fail(f"cannot read the API key file {api_key_file}: {exc.strerror}") from exc
        if not api_key:
            raise fail(f"the API key file {api_key_file} is empty")
    try:
        ctx = launcher.context(
            profile, model_path=str(model), vllm=str(env_dir / "bin" / "vllm"),
            state_dir=str(state), rank=node_rank, head_address=head_address, set_env=scripts,
            env_files=[str(p) for p in env_files or []], rendered_by="ascend-serve serve",
        )
    except ProfileError as exc:
        raise fail(str(exc)) from exc
    script = launcher.render(ctx)
    command = launcher.command_line(script)

    if dry_run:
        if as_json:
            report = None
            try:
                report = fit_report(profile, model if model.is_dir() else None)
            except FitError:
                report = None
            typer.echo(json.dumps({"profile": profile.as_dict(), "node": ctx["node"],
                                   "command": command, "launcher": script,
                                   "fit": report.model_dump() if report else None}, indent=2))
        else:
            typer.echo(command)
            err_console.print(f"[dim]launcher ({launcher.LAUNCHER_TEMPLATE}):[/dim]")
            err_console.print(escape(script), highlight=False)
        raise typer.Exit(EXIT_OK)

    def emit(event: str, **fields: Any) -> None:
        if as_json:
            typer.echo(json.dumps({"event": event, **fields}), nl=True)
            sys.stdout.flush()

    if not skip_checks:
        set_name = stack_set or (fact or {}).get("stack_set")
        try:
            findings = node_findings(profile, model_dir=model, env_dir=env_dir, set_env=scripts,
                                     stack_set=str(set_name) if set_name else None,
                                     npu_smi=npu_smi, hashes=check_hashes)
        except MatrixError as exc:
            raise fail(str(exc)) from exc
        emit("checks", checks=[f.as_dict() for f in findings])
        if not as_json:
            err_console.print(_findings_table(findings))
        if not all(f.ok for f in findings):
            failed = ", ".join(f.name for f in findings if not f.ok)
            raise fail(f"node checks failed ({failed}): nothing was started", EXIT_CHECK_FAILED)

    server = ServerProcess.in_run_dir(script, state, api_key)
    log_path = server.log_path
    url = launcher.health_url(profile)
    wait = float(timeout or profile.health_timeout_s)

    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.start()
        emit("started", pid=server.pid, log=str(log_path), command=command)
        if not as_json:
            err_console.print(f"started vLLM (pid {server.pid}), log {log_path}")
        if ctx["node"]["role"] == "head":
            with Progress(SpinnerColumn(), TextColumn("[progress.description]{task.description}"),
                          BarColumn(bar_width=12), TextColumn("{task.completed}/{task.total}"),
                          TimeElapsedColumn(), console=err_console, transient=True,
                          disable=as_json) as progress:
                task = progress.add_task(f"waiting for {url}/health (up to {wait:.0f} s)",
                                         total=PHASES_TOTAL)

                def on_phase(entry: dict[str, Any]) -> None:
                    emit("phase", phase=entry["phase"], title=entry["title"],
                         index=entry["index"], total=PHASES_TOTAL, seconds=entry["seconds"],
                         stamp=entry["stamp"], summary=entry["summary"])
                    progress.update(task, completed=entry["index"] + 1)

                def tick(elapsed: float) -> None:
                    reading = server.follower.reading()
                    where = (describe(reading) if reading["phase"] else
                             f"waiting for {url}/health")
                    if reading["progress"] is None:  # no bar of vLLM's: its last line
                        where += f" · {last_line(log_path)[:60]}"
                    progress.update(task, description=escape(where))

                took = server.wait_healthy(f"{url}/health", wait, tick, on_phase=on_phase)
            emit("ready", url=url, served_name=profile.model.served_name, seconds=round(took, 1),
                 phases=server.follower.reached, facts=server.follower.reading()["facts"])
            if not as_json:
                console.print(f"serving {profile.model.served_name} at {url} "
                              f"(healthy after {took:.0f} s); Ctrl-C stops it")
        else:
            emit("ready", role="headless", head=head_address)
            if not as_json:
                console.print(f"headless node {node_rank} running; the API is served by the "
                              f"head node {head_address}. Ctrl-C stops it")
        assert server.proc is not None
        code = server.proc.wait()
        emit("exited", status=code)
        raise fail(f"vLLM exited with status {code}:\n{log_tail(log_path)}", EXIT_FAILED)
    except ServerError as exc:
        server.stop()
        emit("failed", error=str(exc), log_tail=exc.log_tail, phase=exc.phase,
             phase_seconds=exc.phase_seconds, cause=exc.cause, fix=exc.fix,
             timed_out=exc.timed_out)
        one_run = ("; for one run: --set health_timeout_s=SECONDS"
                   if exc.timed_out and exc.phase != "ready" else "")
        raise fail(f"{exc}{one_run}\nlast lines of {log_path}:\n{exc.log_tail}",
                   EXIT_FAILED) from exc
    except _StopRequestedError as stop:
        status = server.stop()
        left = server.group_alive()
        emit("stopped", signal=str(stop), status=status, orphans=left)
        if not as_json:
            err_console.print(f"stopped vLLM ({stop}; exit status {status})")
        raise typer.Exit(EXIT_FAILED if left else EXIT_OK) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if server.running():
            server.stop()

