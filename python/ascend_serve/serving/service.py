"""Serving one profile on this node: the orchestration behind ``ascend-serve serve``.

:func:`plan` resolves the profile and everything the launcher needs (the serving environment,
the model and state directories, the set_env scripts, the API key) and renders the launcher;
bad input is a :class:`ServeInputError` before anything starts. :func:`check` runs the node
checks, :func:`run` starts vLLM in the foreground, follows its start, and returns how it ended:
it exited, it failed to start, or the operator stopped it (SIGTERM / SIGINT).

Nothing here writes to the terminal: a :class:`ServeObserver` (the CLI) is told what happens and
renders it.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Literal, Protocol

from ansible_collections.ascend_serve.fleet.plugins.module_utils.vllm_log import describe
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
from ascend_serve.serving.profiles import Profile, ProfileError, resolve_options
from ascend_serve.serving.server import ServerError, ServerProcess, last_line
from ascend_serve.stack.matrix import MatrixError


class ServeInputError(ValueError):
    """The operator's input cannot be served; nothing was started (exit 2)."""


@dataclass(frozen=True)
class ServePlan:
    """What :func:`run` starts: the resolved profile and the rendered launcher."""

    profile: Profile
    ctx: dict[str, Any]
    script: str
    command: str
    model: Path
    state: Path
    env_dir: Path
    set_env: list[str]
    api_key: str | None
    fact: dict[str, Any] | None
    node_rank: int
    head_address: str | None

    @property
    def is_head(self) -> bool:
        return bool(self.ctx["node"]["role"] == "head")

    @property
    def url(self) -> str:
        return launcher.health_url(self.profile)


def plan(
    name: str,
    *,
    model_dir: Path | None = None,
    assignments: Sequence[str] = (),
    profile_files: list[Path] | None = None,
    host: str | None = None,
    port: int | None = None,
    venv: Path | None = None,
    node_rank: int = 0,
    head_address: str | None = None,
    env_files: Sequence[Path] = (),
    set_env: Sequence[str] | None = None,
    api_key_file: Path | None = None,
    run_dir: Path | None = None,
) -> ServePlan:
    """The profile resolved and its launcher rendered; ServeInputError names what is wrong."""
    try:
        profile = resolve_options(name, list(assignments), profile_files, host=host, port=port)
    except ProfileError as exc:
        raise ServeInputError(str(exc)) from exc
    if node_rank >= profile.nodes:
        raise ServeInputError(
            f"--node-rank {node_rank}: profile {name} runs on {profile.nodes} node(s)")
    if profile.nodes > 1 and not head_address:
        raise ServeInputError(
            f"profile {name} spans {profile.nodes} nodes: --head-address is required")
    fact = read_env_fact()
    env_dir = serving_env(venv, fact)
    if env_dir is None:
        raise ServeInputError(NO_SERVING_ENV)
    model = (model_dir or launcher.DEFAULT_MODELS_DIR / profile.model.name).absolute()
    state = (run_dir or launcher.default_state_dir(profile.name)).absolute()
    scripts = list(set_env) if set_env is not None else (
        ascend_set_env() if profile.device == "npu" else [])
    api_key: str | None = None
    if api_key_file is not None:
        try:
            api_key = api_key_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ServeInputError(
                f"cannot read the API key file {api_key_file}: {exc.strerror}") from exc
        if not api_key:
            raise ServeInputError(f"the API key file {api_key_file} is empty")
    try:
        ctx = launcher.context(
            profile, model_path=str(model), vllm=str(env_dir / "bin" / "vllm"),
            state_dir=str(state), rank=node_rank, head_address=head_address, set_env=scripts,
            env_files=[str(p) for p in env_files], rendered_by="ascend-serve serve",
        )
    except ProfileError as exc:
        raise ServeInputError(str(exc)) from exc
    script = launcher.render(ctx)
    return ServePlan(profile=profile, ctx=ctx, script=script,
                     command=launcher.command_line(script), model=model, state=state,
                     env_dir=env_dir, set_env=scripts, api_key=api_key, fact=fact,
                     node_rank=node_rank, head_address=head_address)


def dry_run_report(serve_plan: ServePlan) -> dict[str, Any]:
    """The plan as data (``serve --dry-run --json``): profile, node, command, launcher, fit."""
    model = serve_plan.model
    try:
        report = fit_report(serve_plan.profile, model if model.is_dir() else None)
    except FitError:
        report = None
    return {"profile": serve_plan.profile.as_dict(), "node": serve_plan.ctx["node"],
            "command": serve_plan.command, "launcher": serve_plan.script,
            "fit": report.model_dump() if report else None}


def check(serve_plan: ServePlan, *, stack_set: str | None = None, npu_smi: str | None = None,
          hashes: bool = False) -> list[Finding]:
    """The node checks before starting (NPUs, environment, versions, model, memory fit).

    ``stack_set`` defaults to the python_env role's fact; an unknown set is a ServeInputError.
    """
    set_name = stack_set or (serve_plan.fact or {}).get("stack_set")
    try:
        return node_findings(serve_plan.profile, model_dir=serve_plan.model,
                             env_dir=serve_plan.env_dir, set_env=serve_plan.set_env,
                             stack_set=str(set_name) if set_name else None, npu_smi=npu_smi,
                             hashes=hashes)
    except MatrixError as exc:
        raise ServeInputError(str(exc)) from exc


class ServeObserver(Protocol):
    """What :func:`run` tells its caller while vLLM starts and serves."""

    def started(self, pid: int, log: Path, command: str) -> None: ...

    def waiting(self, url: str, wait: float) -> AbstractContextManager[object]:
        """Spans the wait for /health (head node only)."""
        ...

    def phase(self, entry: dict[str, Any]) -> None:
        """A startup phase reached (vLLM's log)."""
        ...

    def progress(self, where: str) -> None:
        """Where the start stands now (about once a second)."""
        ...

    def ready(self, url: str, served_name: str, seconds: float, phases: dict[str, float],
              facts: dict[str, Any]) -> None: ...

    def headless(self, rank: int, head: str | None) -> None: ...


@dataclass(frozen=True)
class ServeOutcome:
    """How a foreground run ended."""

    kind: Literal["exited", "failed", "stopped"]
    log: Path
    status: int | None = None  # vLLM's exit status (exited, stopped)
    error: ServerError | None = None  # failed
    signal: str | None = None  # stopped: SIGTERM or SIGINT
    orphans: bool = False  # stopped: processes of its group outlived it


class _StopRequestedError(Exception):
    """SIGTERM / SIGINT received while serving."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise _StopRequestedError(signal.Signals(signum).name)


def run(serve_plan: ServePlan, wait: float, observer: ServeObserver) -> ServeOutcome:
    """Start vLLM, wait for /health (head node), serve until it exits or SIGTERM / SIGINT.

    Every process the launcher started is stopped before this returns.
    """
    server = ServerProcess.in_run_dir(serve_plan.script, serve_plan.state, serve_plan.api_key)
    log_path = server.log_path
    url = serve_plan.url
    handler: Callable[[int, FrameType | None], None] = _on_signal
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.start()
        observer.started(server.pid, log_path, serve_plan.command)
        if serve_plan.is_head:
            with observer.waiting(url, wait):

                def tick(elapsed: float) -> None:
                    reading = server.follower.reading()
                    where = (describe(reading) if reading["phase"] else
                             f"waiting for {url}/health")
                    if reading["progress"] is None:  # no bar of vLLM's: its last line
                        where += f" · {last_line(log_path)[:60]}"
                    observer.progress(where)

                took = server.wait_healthy(f"{url}/health", wait, tick,
                                           on_phase=observer.phase)
            observer.ready(url, serve_plan.profile.model.served_name, took,
                           server.follower.reached, server.follower.reading()["facts"])
        else:
            observer.headless(serve_plan.node_rank, serve_plan.head_address)
        assert server.proc is not None
        return ServeOutcome("exited", log_path, status=server.proc.wait())
    except ServerError as exc:
        server.stop()
        return ServeOutcome("failed", log_path, error=exc)
    except _StopRequestedError as stop:
        status = server.stop()
        return ServeOutcome("stopped", log_path, status=status, signal=str(stop),
                            orphans=server.group_alive())
    finally:
        for sig, previous_handler in previous.items():
            signal.signal(sig, previous_handler)
        if server.running():
            server.stop()
