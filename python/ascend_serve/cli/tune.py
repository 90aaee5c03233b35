"""``ascend-serve tune``: sweep a profile's batch settings and the client concurrency."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from ascend_serve.bench import slo as slos
from ascend_serve.bench import tune_search
from ascend_serve.bench.runner import BenchConfig, BenchConfigError
from ascend_serve.bench.tune import (
    OBJECTIVES,
    ProfileServer,
    Setting,
    Trial,
    TuneError,
    bench_measure,
    grid,
    pick,
    sweep,
    tuned_profile,
    write_outputs,
)
from ascend_serve.cli.console import (
    EXIT_CHECK_FAILED,
    EXIT_FAILED,
    EXIT_OK,
    console,
    err_console,
    fail,
)
from ascend_serve.cli.options import (
    ApiEndpoint,
    Cards,
    HealthTimeout,
    InputLen,
    ListenHost,
    ListenPort,
    ModelDir,
    NpuSmi,
    NumPrompts,
    ProfileFiles,
    ProfileName,
    ProfileSet,
    ServingEnv,
    Telemetry,
    Warmup,
    int_list,
    json_option,
)
from ascend_serve.serving.launcher import DEFAULT_MODELS_DIR
from ascend_serve.serving.nodecheck import NO_SERVING_ENV, read_env_fact, serving_env
from ascend_serve.serving.profiles import ProfileError, parse_assignments, with_extra_files
from ascend_serve.serving.profiles import resolve as resolve_profile

DEFAULT_SLO = {"cpu": "tiny-cpu", "npu": "interactive"}


def _table(trials: list[Trial], winner: Trial | None, objective: str) -> Table:
    table = Table(title=f"tune: {objective}, SLO met?")
    for col in ("setting", "concurrency", "req/s", "out tok/s", "p99 TTFT ms", "p99 TPOT ms",
                "SLO", "note"):
        table.add_column(col, overflow="fold")
    for t in trials:
        m = t.measurement.metrics if t.measurement else {}

        def cell(key: str, m: dict[str, float] = m) -> str:
            return f"{m[key]:.2f}" if key in m else "-"

        slo_cell = ("[green]pass[/green]" if t.meets_slo else
                    "[red]fail[/red]" if t.ok else "[red]error[/red]")
        note = (t.error or "").splitlines()[0] if t.error else ""
        if t.measurement and not t.measurement.slo_ok:
            note = "; ".join(t.measurement.slo_detail)
        name = f"[bold]{t.setting.label} (winner)[/bold]" if t is winner else t.setting.label
        table.add_row(name, str(t.concurrency or "-"), cell("request_throughput"),
                      cell("output_throughput"), cell("p99_ttft_ms"), cell("p99_tpot_ms"),
                      slo_cell, escape(note))
    return table


def _search(name: str, space: tune_search.Space, concurrencies: list[int],
            server: ProfileServer, base: BenchConfig, out_dir: Path, kept: dict[str, Any],
            files: list[Path] | None, slo_name: str, as_json: bool, *, trials: int,
            study_db: Path | None, study_name: str, sampler: str, seed: int | None) -> None:
    """``tune --search``: the optuna study, its report and the tuned profile; exits."""
    storage = tune_search.sqlite_url(study_db or out_dir / "study.db")

    def notify(event: str, trial: tune_search.SearchTrial | None, detail: str) -> None:
        if trial is None:
            return
        where = f"trial {trial.number}: {trial.setting.label}"
        text = {"starting": f"{where}: starting vLLM",
                "measured": f"{where}: goodput {trial.value:.3f} req/s",
                "reused": f"{where}: measured before ({detail}), no restart"}[event]
        err_console.print(f"[dim]{datetime.now():%H:%M:%S}[/dim] {escape(text)}",
                          highlight=False)

    err_console.print(f"tune {name} --search: {trials} trial(s) of study {study_name} "
                      f"({sampler}) over {tune_search.space_size(space)} settings, "
                      f"concurrency {','.join(map(str, concurrencies))}, SLO {slo_name}; "
                      f"reports in {out_dir}")
    try:
        outcome = tune_search.search(
            space, concurrencies, server, bench_measure(base, out_dir / "trials"),
            n_trials=trials, storage=storage, study_name=study_name, sampler=sampler,
            seed=seed, notify=notify)
    except TuneError as exc:
        raise fail(str(exc)) from exc
    best = outcome.best
    winner = best.best if best is not None else None
    runs = [r for t in outcome.trials for r in t.runs]
    tuned = tuned_profile(files, name, kept, winner) if winner is not None else None
    report = {"study": study_name, "storage": storage, "sampler": sampler, "seed": seed,
              "space": space, "previous_trials": outcome.previous,
              "server_starts": outcome.restarts,
              "best": best.to_dict() if best is not None else None,
              "trials": [t.to_dict() for t in outcome.trials]}
    paths = write_outputs(out_dir, name=name, trials=runs, winner=winner,
                          objective="request_goodput", slo=slo_name, tuned=tuned, search=report)
    if as_json:
        data = json.loads(paths["json"].read_text(encoding="utf-8"))
        typer.echo(json.dumps({**data, "files": {k: str(v) for k, v in paths.items()}},
                              indent=2))
    else:
        console.print(_table(runs, winner, "request_goodput"))
        console.print(f"{len(outcome.trials)} trial(s), {outcome.restarts} server start(s); "
                      f"study {study_name} in {storage} ({outcome.previous + len(outcome.trials)}"
                      " trials)", highlight=False)
        for kind, path in paths.items():
            console.print(f"{kind}: {path}")
        if winner is not None and best is not None:
            earlier = " (an earlier run's trial)" if best in outcome.earlier else ""
            console.print(f"winner: {winner.setting.label} at concurrency {winner.concurrency}: "
                          f"goodput {best.value:.3f} req/s, trial {best.number}{earlier} (use: "
                          f"--profiles {paths['profile']} {name}-tuned)")
    if winner is not None:
        raise typer.Exit(EXIT_OK)
    if not any(r.ok for r in runs) and outcome.restarts:
        raise fail("no setting could be measured (see the notes above)", EXIT_FAILED)
    raise fail(f"no setting of study {study_name} met the SLO {slo_name}", EXIT_CHECK_FAILED)


def tune(
    name: ProfileName,
    max_num_seqs: Annotated[str | None, typer.Option(
        help="max-num-seqs values to try, e.g. 8,16,32 (default: the profile's value, its "
        "half and its double).")] = None,
    max_num_batched_tokens: Annotated[str, typer.Option(
        help="max-num-batched-tokens values to try (default: the profile's).")] = "",
    concurrency: Annotated[str, typer.Option(
        help="Client concurrencies measured against each setting.")] = "1,4,8",
    slo: Annotated[list[str] | None, typer.Option(
        help="SLO the winner must meet: preset, YAML file or expressions, as for bench "
        f"(default: {DEFAULT_SLO['cpu']} for cpu profiles, {DEFAULT_SLO['npu']} for npu)."
    )] = None,
    objective: Annotated[str, typer.Option(
        help=f"What to maximise: {', '.join(OBJECTIVES)}.")] = "output_throughput",
    num_prompts: NumPrompts = 32,
    input_len: InputLen = 64,
    output_len: Annotated[int, typer.Option(min=1, help="Output tokens.")] = 32,
    endpoint: ApiEndpoint = "completions",
    warmup: Warmup = 1,
    model_dir: ModelDir = None,
    venv: ServingEnv = None,
    assignments: ProfileSet = None,
    profile_files: ProfileFiles = None,
    host: ListenHost = None,
    port: ListenPort = None,
    cards: Cards = 1,
    telemetry: Telemetry = True,
    npu_smi: NpuSmi = None,
    out: Annotated[Path | None, typer.Option(
        help="Report directory (default ./tune-<profile>-<UTC time>).")] = None,
    timeout: HealthTimeout = None,
    as_json: Annotated[bool, json_option(
        "Print tune.json (every trial and the winner) and the written files' paths instead "
        "of the table.")] = False,
    search: Annotated[bool, typer.Option(
        "--search", help="Search the knobs with optuna (TPE) for the highest goodput under "
        "the SLO instead of measuring the whole grid.")] = False,
    space: Annotated[list[str] | None, typer.Option(
        metavar="KNOB=V1,V2", help="With --search: values of a knob (repeatable): "
        f"{', '.join(tune_search.KNOBS)} (default: around the profile's values).")] = None,
    n_trials: Annotated[int, typer.Option(
        "--trials", help="With --search: trials to run now (a resumed study adds them).")] = 10,
    study_db: Annotated[Path | None, typer.Option(
        metavar="FILE", help="With --search: the SQLite file of the study (default "
        "<out>/study.db); an existing study of --study-name is resumed.")] = None,
    study_name: Annotated[str | None, typer.Option(
        help="With --search: the study's name (default tune-<profile>).")] = None,
    sampler: Annotated[str, typer.Option(
        help=f"With --search: {' or '.join(tune_search.SAMPLERS)}.")] = "tpe",
    seed: Annotated[int | None, typer.Option(
        help="With --search: the sampler's seed.")] = None,
) -> None:
    """Find the batch settings with the highest throughput that meets an SLO, by experiment.

    For each setting (max-num-seqs x max-num-batched-tokens) the server is started from the
    profile's launcher, benchmarked at each client concurrency, then stopped. Writes tune.json,
    tune.md, a profile file <profile>-tuned.yml (use with --profiles) and
    inventory-overrides.yml (vllm_service_overrides); --set overrides are kept in the tuned
    profile, --host and --port are not. With --search, optuna's TPE sampler picks each trial's
    setting from --space (max-num-seqs, max-num-batched-tokens, gpu-memory-utilization,
    enable-chunked-prefill): one server start per trial, none for a setting already measured;
    the study is kept in SQLite (--study-db, --study-name) and resumed. Exit codes: 0 a winner,
    1 no setting met the SLO, 2 bad arguments, 3 no setting could be measured.
    """
    try:
        kept: dict[str, Any] = parse_assignments(assignments or [])  # go into the tuned profile
        overrides = dict(kept)  # where the experiment listens does not
        if host is not None:
            overrides["host"] = host
        if port is not None:
            overrides["port"] = port
        files = with_extra_files(profile_files)
        profile = resolve_profile(name, overrides, files)
    except ProfileError as exc:
        raise fail(str(exc)) from exc
    if profile.nodes != 1:
        raise fail(f"tune starts one server; profile {name} spans {profile.nodes} nodes")
    seqs_default = int(profile.vllm.get("max-num-seqs", 16))
    try:
        settings = grid(
            int_list(max_num_seqs, "--max-num-seqs") if max_num_seqs is not None
            else sorted({max(1, seqs_default // 2), seqs_default, seqs_default * 2}),
            int_list(max_num_batched_tokens, "--max-num-batched-tokens")
            if max_num_batched_tokens.strip() else [])
        concurrencies = int_list(concurrency, "--concurrency")
        pick([], objective)  # checks the objective's name
        target = slos.resolve(slo or [DEFAULT_SLO[profile.device]])
        search_space = tune_search.parse_space(space or [], tune_search.default_space(
            profile.vllm, [s.max_num_seqs for s in settings] if max_num_seqs else None,
            [s.max_num_batched_tokens for s in settings if s.max_num_batched_tokens]))
        if space and not search:
            raise TuneError("--space is for --search")
        if search and n_trials < 1:
            raise TuneError(f"--trials must be at least 1, not {n_trials}")
        if sampler not in tune_search.SAMPLERS:
            raise TuneError(f"--sampler must be {' or '.join(tune_search.SAMPLERS)}, "
                            f"not {sampler!r}")
    except (TuneError, slos.SloError) as exc:
        raise fail(str(exc)) from exc
    assert target is not None
    env_dir = serving_env(venv, read_env_fact())
    if env_dir is None:
        raise fail(NO_SERVING_ENV)
    if not (env_dir / "bin" / "vllm").exists():
        raise fail(f"{env_dir / 'bin' / 'vllm'} does not exist: is {env_dir} a vLLM environment?")
    model = (model_dir or DEFAULT_MODELS_DIR / profile.model.name).absolute()
    if not (model / "config.json").is_file():
        raise fail(f"{model} has no config.json: pass --model-dir (a staged model)")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = (out or Path(f"tune-{name}-{stamp}")).absolute()
    server = ProfileServer(name, overrides=overrides, profile_files=files, model_dir=model,
                           env_dir=env_dir, run_dir=out_dir / "servers", timeout=timeout)
    base = BenchConfig(url="http://127.0.0.1", model=profile.model.served_name,
                       endpoint=endpoint,  # type: ignore[arg-type]
                       num_prompts=num_prompts, input_len=input_len, output_len=output_len,
                       tokenizer=str(model), warmup=warmup, slo=target, cards=cards,
                       telemetry=telemetry, npu_smi=npu_smi, request_rate=math.inf)
    try:
        base.check()
    except BenchConfigError as exc:
        raise fail(str(exc)) from exc

    def notify(event: str, setting: Setting, concurrency: int | None, detail: str) -> None:
        where = setting.label + (f" at concurrency {concurrency}" if concurrency else "")
        text = {"starting": f"starting vLLM with {where}",
                "ready": f"{where}: healthy at {detail}",
                "measuring": f"benchmarking {where}",
                "measured": f"{where}: done",
                "failed": f"{where}: FAILED: {detail}"}[event]
        err_console.print(f"[dim]{datetime.now():%H:%M:%S}[/dim] {escape(text)}",
                          highlight=False)

    if search:
        _search(name, search_space, concurrencies, server, base, out_dir, kept, files,
                target.name, as_json, trials=n_trials, study_db=study_db,
                study_name=study_name or f"tune-{name}", sampler=sampler, seed=seed)
    err_console.print(f"tune {name}: {len(settings)} setting(s) x {len(concurrencies)} "
                      f"concurrenc{'y' if len(concurrencies) == 1 else 'ies'}, SLO "
                      f"{target.name}; reports in {out_dir}")
    trials = sweep(settings, concurrencies, server, bench_measure(base, out_dir / "trials"),
                   notify)
    winner = pick(trials, objective)
    tuned = tuned_profile(files, name, kept, winner) if winner is not None else None
    paths = write_outputs(out_dir, name=name, trials=trials, winner=winner, objective=objective,
                          slo=target.name, tuned=tuned)
    if as_json:
        report = json.loads(paths["json"].read_text(encoding="utf-8"))
        typer.echo(json.dumps({**report, "files": {k: str(v) for k, v in paths.items()}},
                              indent=2))
    else:
        console.print(_table(trials, winner, objective))
        for kind, path in paths.items():
            console.print(f"{kind}: {path}")
        if winner is not None:
            console.print(f"winner: {winner.setting.label} at concurrency {winner.concurrency} "
                          f"(use: --profiles {paths['profile']} {name}-tuned)")
    if winner is not None:
        raise typer.Exit(EXIT_OK)
    if not any(t.ok for t in trials):
        raise fail("no setting could be measured (see the notes above)", EXIT_FAILED)
    raise fail(f"no setting met the SLO {target.name}", EXIT_CHECK_FAILED)
