"""``ascend-serve validate``: check a running OpenAI-compatible vLLM server end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ansible_collections.ascend_serve.fleet.plugins.module_utils.validate import (
    resolve_api_key,
    run_checks,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.validate_wire import (
    DEFAULT_API_KEY_ENV,
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_TOKENS,
    DEFAULT_TIMEOUT,
    MAX_CONCURRENCY,
    Report,
    url_error,
)
from ascend_serve.cli.console import EXIT_CHECK_FAILED, EXIT_OK, console, fail
from ascend_serve.cli.options import JsonFlag, ServerUrl


def _table(report: Report) -> Table:
    served = f" ({report.served_name})" if report.served_name else ""
    table = Table(title=escape(f"vLLM server {report.url}{served}"), title_justify="left")
    table.add_column("Check")
    table.add_column("Result")
    table.add_column("Seconds", justify="right")
    table.add_column("Detail", overflow="fold")
    for check in report.checks:
        result = "[green]PASS[/green]" if check.ok else "[red]FAIL[/red]"
        table.add_row(escape(check.name), result, f"{check.seconds:.3f}", escape(check.detail))
    return table


def validate(
    url: ServerUrl,
    served_name: Annotated[str | None, typer.Option(
        help="The --served-model-name to expect (default: the first model listed).")] = None,
    reasoning: Annotated[bool, typer.Option(
        help="Check that chat answers carry the reasoning parser's output (servers started "
        "with --reasoning-parser, e.g. deepseek_r1).")] = False,
    tools: Annotated[bool, typer.Option(
        help="Check tool calling (servers started with --enable-auto-tool-choice "
        "--tool-call-parser, e.g. deepseek_v3): tool_choice auto, none and a named function, "
        "plain and streamed.")] = False,
    concurrency: Annotated[int, typer.Option(
        min=1, max=MAX_CONCURRENCY,
        help="Concurrent completion requests of the concurrency check.")] = DEFAULT_CONCURRENCY,
    max_tokens: Annotated[int, typer.Option(
        min=1, help="Tokens per generation request (sent with ignore_eos, so every answer must "
        "have exactly this many).")] = DEFAULT_MAX_TOKENS,
    timeout: Annotated[float, typer.Option(
        min=0.1, help="Seconds per request.")] = DEFAULT_TIMEOUT,
    api_key_env: Annotated[str | None, typer.Option(
        metavar="NAME",
        help=f"Environment variable holding the API key (default: {DEFAULT_API_KEY_ENV}, when "
        "set; a variable named here must be set).")] = None,
    api_key_file: Annotated[Path | None, typer.Option(
        metavar="PATH", help="File holding the API key (instead of the environment).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Validate a running OpenAI-compatible vLLM server end to end.

    Health, models, API key, completions and chat (plain, streamed), reasoning and tool
    calling (when asked), metrics, concurrency.

    Exit 0 when every check passes, 1 when one fails, 2 for bad arguments.

    The API key comes from the environment or a file, never the command line; never printed.
    """
    problem = url_error(url)
    if problem:
        raise fail(problem)
    try:
        api_key = resolve_api_key(api_key_env, api_key_file)
        report = run_checks(url, api_key=api_key, served_name=served_name, reasoning=reasoning,
                            tools=tools, concurrency=concurrency, max_tokens=max_tokens,
                            timeout=timeout)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    code = EXIT_OK if report.ok else EXIT_CHECK_FAILED
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
        raise typer.Exit(code)
    console.print(_table(report))
    passed = sum(check.ok for check in report.checks)
    verdict = "[green]OK[/green]" if report.ok else "[red]FAILED[/red]"
    console.print(f"{passed}/{len(report.checks)} checks passed: {verdict}", highlight=False)
    raise typer.Exit(code)
