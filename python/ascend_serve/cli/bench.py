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
from typer.core import TyperGroup

from ansible_collections.ascend_serve.fleet.plugins.module_utils.validate_wire import (
    DEFAULT_API_KEY_ENV,
    url_error,
)
from ascend_serve.bench import compare as comparing
from ascend_serve.bench.cost import (
    INVENTORY_VARIABLE,
    PriceError,
    Prices,
    cost_line,
    cost_per_mtok,
    prices_from,
    prices_of_inventory,
)
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
        return f"energy ({run_label(r)}): not measured: {t.get('reason')}"
    tpj = t.get("tokens_per_joule")
    source = f"host {t.get('meter')}" if t.get("kind") == "host" else "npu-smi"
    return (f"energy ({run_label(r)}): {t.get('samples')} {source} samples, "
            f"{t.get('energy_j')} J, tokens/J {'n/a' if tpj is None else f'{tpj:.3f}'}")


def read_prices(prices: list[str], inventory: Path | None, host: str | None) -> Prices:
    """``--price`` values over the inventory's ``ascend_serve_bench_prices`` (of ``host``, or
    the same on every host); raises ``PriceError``."""
    defaults: list[str] = []
    if inventory is not None:
        from ascend_serve.mirror.inventory import InventoryError, read_hosts

        try:
            hosts = read_hosts(inventory, host)
            found = {h.name: prices_of_inventory(h.get(INVENTORY_VARIABLE), f"host {h.name}")
                     for h in hosts}
        except InventoryError as exc:
            raise PriceError(str(exc)) from exc
        distinct = {tuple(v) for v in found.values()}
        if distinct == {()}:
            raise PriceError(f"{inventory}: no host{' ' + host if host else ''} sets "
                             f"{INVENTORY_VARIABLE}")
        if len(distinct) > 1:
            raise PriceError(f"{inventory}: the hosts' {INVENTORY_VARIABLE} differ "
                             f"({', '.join(sorted(found))}): name one with --prices-host")
        defaults = list(distinct.pop())
    elif host is not None:
        raise PriceError("--prices-host needs --prices-inventory")
    return prices_from(prices, defaults)


def add_cost(result: BenchResult, prices: Prices, servers: int) -> None:
    """The run's cost per million output tokens (``result.cost``), when there are prices."""
    tpj = (result.telemetry or {}).get("tokens_per_joule")
    report = cost_per_mtok(prices, output_throughput=result.output_throughput,
                           tokens_per_joule=tpj if isinstance(tpj, (int, float)) else None,
                           cards=result.config.cards, servers=servers)
    result.cost = report.model_dump() if report is not None else None


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
    price: Annotated[list[str] | None, typer.Option(
        metavar="PRICE", help="A price with its unit, for the cost per million output tokens: "
        "'12.5 USD/card-hour', '30 USD/server-hour', '0.8 CNY/kWh' (one currency). "
        "Repeatable; wins over the inventory's.")] = None,
    prices_inventory: Annotated[Path | None, typer.Option(
        metavar="INVENTORY", help=f"Read the prices from this inventory's {INVENTORY_VARIABLE} "
        "(a list of prices, e.g. in group_vars/all.yml).")] = None,
    prices_host: Annotated[str | None, typer.Option(
        metavar="HOST", help="The inventory host whose prices count (default: the same on "
        "every host).")] = None,
    servers: Annotated[int, typer.Option(
        min=1, help="Servers serving (multiplies a server-hour price; --cards multiplies a "
        "card-hour price).")] = 1,
) -> None:
    """Benchmark a running OpenAI-compatible vLLM server with streaming requests.

    TTFT, TPOT, ITL, E2E latency and throughput under vllm bench serve's names; goodput and a
    PASS/FAIL verdict against an SLO; energy and tokens per joule (npu-smi, else the host's
    RAPL, hwmon or IPMI); with prices, the cost per million output tokens. Compare two results
    with: ascend-serve bench compare A.json B.json.

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
        prices = read_prices(price or [], prices_inventory, prices_host)
    except (ValueError, SloError, BenchConfigError) as exc:  # PriceError is a ValueError
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

    if prices:
        for r in results:
            add_cost(r, prices, servers)
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
            if r.cost is not None:
                console.print(escape(f"{cost_line(r.cost)} ({run_label(r)})"), highlight=False)
                for note in r.cost.get("notes", []):
                    console.print(escape(f"  {note}"), highlight=False)
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


def compare(
    a: Annotated[Path, typer.Argument(metavar="A.json", help="The first bench result.")],
    b: Annotated[Path, typer.Argument(metavar="B.json", help="The second bench result.")],
    as_json: Annotated[bool, json_option("Print the comparison as JSON.")] = False,
    plot: Annotated[Path | None, typer.Option(
        "--plot", metavar="FILE.png", help="Also draw both runs and the ratios.")] = None,
) -> None:
    """Two bench runs side by side with ratios B/A: TTFT and TPOT p50/p99, E2E latency p99,
    throughput, goodput, tokens per joule, cost per million output tokens.

    The inputs are bench result files (bench.json, bench-c<N>.json, or bench --json's output of
    one run). Exit 0: compared; 2: a file is unreadable or not a bench result.
    """
    try:
        result = comparing.report(a, b)
    except comparing.CompareError as exc:
        raise fail(str(exc)) from exc
    if plot is not None:
        if plot.suffix.lower() != ".png":
            raise fail(f"--plot {plot}: write a .png file")
        if not plot.parent.is_dir():
            raise fail(f"--plot {plot}: {plot.parent} is not a directory")
        result["plot"] = str(comparing.plot(result, plot))
    if as_json:
        typer.echo(json.dumps(result, indent=1))
        raise typer.Exit(EXIT_OK)
    table = Table(title=escape(f"A = {result['a']['run']}\nB = {result['b']['run']}"),
                  title_justify="left")
    for col, justify in (("Metric", "left"), ("A", "right"), ("B", "right"),
                         ("B/A", "right"), ("better", "center")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for row in result["rows"]:
        unit = f" ({row['unit']})" if row["unit"] else ""

        def cell(value: float | None) -> str:
            return "not measured" if value is None else f"{value:.4g}"

        table.add_row(f"{row['label']}{unit}", cell(row["a"]), cell(row["b"]),
                      "-" if row["ratio"] is None else f"{row['ratio']:.3f}",
                      row["better"] or "-")
    console.print(table)
    for note in result["notes"]:
        console.print(escape(f"note: {note}"), highlight=False)
    if plot is not None:
        console.print(f"wrote {escape(str(plot))}", highlight=False)
    raise typer.Exit(EXIT_OK)


class _BenchGroup(TyperGroup):
    """``bench URL ...`` runs a benchmark (the ``run`` command) and ``bench compare A B``
    compares two results: an argument that is not a subcommand's name goes to ``run``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands:
            args = ["run", *args]
        return super().parse_args(ctx, args)


bench_app = typer.Typer(
    cls=_BenchGroup, rich_markup_mode=None,
    help="Benchmark a running vLLM server (bench URL ...), or compare two results "
    "(bench compare A.json B.json).")
bench_app.command("run")(bench)
bench_app.command("compare")(compare)
