"""``ascend-serve bench``: measure a running OpenAI-compatible server (vLLM) under load."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ascend_serve.bench.metrics import RequestRecord, parse_percentiles
from ascend_serve.bench.report import latency_rows, run_label, sweep_rows, write_reports
from ascend_serve.bench.runner import (
    DEFAULT_INPUT_LEN,
    DEFAULT_NUM_PROMPTS,
    DEFAULT_OUTPUT_LEN,
    DEFAULT_TIMEOUT,
    DEFAULT_WARMUP,
    ENDPOINTS,
    Arrival,
    BenchConfig,
    BenchConfigError,
    BenchError,
    BenchResult,
    BenchUnreachableError,
    Endpoint,
    run_sweep,
)
from ascend_serve.bench.slo import PRESETS, SloError, resolve
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
    InputLen,
    NpuSmi,
    NumPrompts,
    ServerUrl,
    Telemetry,
    Warmup,
    json_option,
    positive_ints,
)
from ascend_serve.node.validate import DEFAULT_API_KEY_ENV, url_error
from ascend_serve.stack import npusmi


def parse_concurrency(text: str | None) -> list[int | None]:
    """``"1,2,4"`` → ``[1, 2, 4]``; None → ``[None]`` (no cap). Raises ``ValueError``."""
    if text is None:
        return [None]
    return list(positive_ints(text, "--concurrency"))


_TABLE_ROWS = (
    ("Successful requests", "completed", "{:.0f}"),
    ("Failed requests", "failed", "{:.0f}"),
    ("Duration (s)", "duration", "{:.2f}"),
    ("Input tokens", "total_input_tokens", "{:.0f}"),
    ("Output tokens", "total_output_tokens", "{:.0f}"),
    ("Request throughput (req/s)", "request_throughput", "{:.2f}"),
    ("Request goodput (req/s)", "request_goodput", "{:.2f}"),
    ("Output throughput (tok/s)", "output_throughput", "{:.2f}"),
    ("Total token throughput (tok/s)", "total_token_throughput", "{:.2f}"),
)


def _table(results: list[BenchResult]) -> Table:
    first = results[0]
    table = Table(title=escape(f"{first.server.model} at {first.config.url}"),
                  title_justify="left")
    table.add_column("Metric")
    for r in results:
        table.add_column(escape(run_label(r)), justify="right")
    for label, key, pattern in _TABLE_ROWS:
        cells = ["-" if r.metrics.get(key) is None else pattern.format(r.metrics[key])
                 for r in results]
        table.add_row(label, *cells)
    for label, key in latency_rows(first):
        table.add_row(label, *[f"{r.metrics.get(key, 0.0):.2f}" for r in results])
    return table


def _print_verdicts(results: list[BenchResult]) -> None:
    for r in results:
        if r.verdict is None:
            continue
        head = "[green]PASS[/green]" if r.verdict.passed else "[red]FAIL[/red]"
        console.print(f"SLO {escape(r.verdict.slo.name)} ({escape(run_label(r))}): {head}",
                      highlight=False)
        for line in r.verdict.lines():
            colour = "green" if line.startswith("PASS") else "red"
            console.print(f"  [{colour}]{escape(line)}[/{colour}]", highlight=False)


def _telemetry_line(r: BenchResult) -> str | None:
    t = r.telemetry
    if t is None:
        return None
    if not t.get("available", True):
        return f"telemetry ({run_label(r)}): {t.get('reason')}"
    tpj = t.get("tokens_per_joule")
    return (f"telemetry ({run_label(r)}): {t.get('samples')} npu-smi samples, energy "
            f"{t.get('energy_j')} J, tokens/J {'n/a' if tpj is None else f'{tpj:.3f}'}")


def bench(
    url: ServerUrl,
    model: Annotated[str | None, typer.Option(
        "--model", "--served-name",
        help="Served model name (default: the first of /v1/models).")] = None,
    endpoint: ApiEndpoint = "completions",
    concurrency: Annotated[str | None, typer.Option(
        help="Most requests in flight; a list (1,2,4,8) sweeps, one run each (default: no "
        "cap).")] = None,
    request_rate: Annotated[float, typer.Option(
        help="Requests sent per second (inf: all at once); with --concurrency also capped in "
        "flight.")] = math.inf,
    arrival: Annotated[str, typer.Option(
        help="Spacing of arrivals at a finite rate: poisson or constant.")] = "poisson",
    num_prompts: NumPrompts = DEFAULT_NUM_PROMPTS,
    input_len: InputLen = DEFAULT_INPUT_LEN,
    output_len: Annotated[int | None, typer.Option(
        help=f"Output tokens per request (default {DEFAULT_OUTPUT_LEN}; with --dataset: the "
        "length of each conversation's answer).")] = None,
    tokenizer: Annotated[Path | None, typer.Option(
        metavar="PATH",
        help="Local model directory (or tokenizer.json) to make prompts with (default: the "
        "served model's path, when the server is on this host). Nothing is downloaded.")] = None,
    dataset: Annotated[Path | None, typer.Option(
        metavar="FILE",
        help="ShareGPT-style JSON/JSONL conversations instead of random prompts.")] = None,
    warmup: Warmup = DEFAULT_WARMUP,
    seed: Annotated[int, typer.Option(help="Seed of the prompts and arrivals.")] = 0,
    ignore_eos: Annotated[bool, typer.Option(
        help="Ask vLLM to generate exactly the output length.")] = True,
    api_key: Annotated[str | None, typer.Option(
        envvar=DEFAULT_API_KEY_ENV, show_envvar=True,
        help="API key (better from the environment than the command line).")] = None,
    slo: Annotated[list[str] | None, typer.Option(
        help=f"SLO: a preset ({', '.join(PRESETS)}), a YAML file, or expressions like "
        "'ttft_ms:p99<=2000', 'request_throughput>=120/card', 'tpot_ms<=100' (per request, "
        "for goodput). Repeatable.")] = None,
    cards: Cards = 1,
    percentiles: Annotated[str, typer.Option(
        help="Latency percentiles to report.")] = "50,90,99",
    out: Annotated[Path | None, typer.Option(
        metavar="DIR", help="Write the JSON result, a markdown report and PNG plots here.")
    ] = None,
    as_json: Annotated[bool, json_option("Print the JSON result.")] = False,
    timeout: Annotated[float, typer.Option(
        help="Seconds to wait for any answer of a request.")] = DEFAULT_TIMEOUT,
    telemetry: Telemetry = True,
    npu_smi: NpuSmi = None,
) -> None:
    """Benchmark a running OpenAI-compatible vLLM server with streaming requests.

    TTFT, TPOT, ITL, E2E latency and throughput under vllm bench serve's names; goodput and a
    PASS/FAIL verdict against an SLO.

    Exit 0: done (SLO met); 1: the SLO was missed; 2: bad arguments (nothing sent);
    3: the server did not answer or every request failed.
    """
    problem = url_error(url)
    if problem:
        raise fail(problem)
    if endpoint not in ENDPOINTS:
        raise fail(f"--endpoint must be one of {', '.join(ENDPOINTS)}, not {endpoint!r}")
    if arrival not in ("poisson", "constant"):
        raise fail(f"--arrival must be poisson or constant, not {arrival!r}")
    if npu_smi is not None and telemetry and npusmi.locate(npu_smi) is None:
        raise fail(f"--npu-smi {npu_smi}: not found or not executable")
    try:
        concurrencies = parse_concurrency(concurrency)
        pcts = tuple(parse_percentiles(percentiles))
        objective = resolve(slo or [])
        config = BenchConfig(
            url=url, model=model, endpoint=cast(Endpoint, endpoint),
            max_concurrency=concurrencies[0], request_rate=request_rate,
            arrival=cast(Arrival, arrival),
            num_prompts=num_prompts, input_len=input_len, output_len=output_len,
            tokenizer=str(tokenizer) if tokenizer else None,
            dataset=str(dataset) if dataset else None, warmup=warmup, seed=seed,
            ignore_eos=ignore_eos, api_key=api_key or None, percentiles=pcts, slo=objective,
            cards=cards, timeout=timeout, telemetry=telemetry, npu_smi=npu_smi)
        config.check()
    except (ValueError, SloError, BenchConfigError) as exc:
        raise fail(str(exc)) from exc

    sweep = len(concurrencies) > 1
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task("connecting", total=num_prompts, failed=0)
        failed = 0

        def on_start(run: BenchConfig) -> None:
            nonlocal failed
            failed = 0
            c = run.max_concurrency
            progress.reset(task, total=num_prompts, failed=0,
                           description=f"concurrency {c if c is not None else 'uncapped'}")

        def on_request(record: RequestRecord) -> None:
            nonlocal failed
            failed += not record.success
            progress.update(task, advance=1, failed=failed)

        try:
            results = run_sweep(config, concurrencies, on_request, on_start)
        except BenchConfigError as exc:
            raise fail(str(exc)) from exc
        except BenchUnreachableError as exc:
            raise fail(str(exc), EXIT_FAILED) from exc
        except BenchError as exc:
            raise fail(str(exc), EXIT_FAILED) from exc

    written = write_reports(results, out, sweep=sweep) if out is not None else []
    if as_json:
        data: Any = ({"sweep": sweep_rows(results), "runs": [r.to_json_dict() for r in results]}
                     if sweep else results[0].to_json_dict())
        typer.echo(json.dumps(data, indent=1))
    else:
        console.print(_table(results))
        for r in results:
            line = _telemetry_line(r)
            if line:
                console.print(escape(line), highlight=False)
            errors = r.first_errors()
            if errors:
                console.print(f"[red]{r.failed} failed ({escape(run_label(r))}); first: "
                              f"{escape(errors[0])}[/red]", highlight=False)
        _print_verdicts(results)
        for path in written:
            console.print(f"wrote {escape(str(path))}", highlight=False)
    dead = [r for r in results if r.completed == 0]
    if dead:
        errors = dead[0].first_errors(1)
        raise fail(f"every request failed ({run_label(dead[0])}): "
                   f"{errors[0] if errors else 'no answer'}", EXIT_FAILED)
    if any(r.verdict is not None and not r.verdict.passed for r in results):
        raise typer.Exit(EXIT_CHECK_FAILED)
    raise typer.Exit(EXIT_OK)
