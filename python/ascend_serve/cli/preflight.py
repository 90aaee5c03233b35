"""``ascend-serve preflight report``: read the reports the preflight role writes."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.table import Table

from ascend_serve.cli.console import EXIT_CHECK_FAILED, EXIT_OK, console, read_parsed
from ascend_serve.cli.options import JsonFlag
from ascend_serve.stack.preflight import PreflightReport, load_report

preflight_app = typer.Typer(help="Read preflight reports written by the preflight role.",
                            no_args_is_help=True)


def _render_report(report: PreflightReport) -> None:
    verdict = "[green]PASSED[/green]" if report.passed else "[red]FAILED[/red]"
    table = Table(title=f"preflight {report.host}: {verdict}")
    table.add_column("check")
    table.add_column("result")
    table.add_column("found")
    for check in report.checks:
        table.add_row(check.name, "[green]ok[/green]" if check.ok else "[red]FAIL[/red]",
                      check.summary)
    console.print(table)
    npus = report.facts.npus
    console.print(
        f"{len(npus)} NPU(s) on the PCI bus"
        + (f": {', '.join(n.address for n in npus)}" if npus else "")
    )


@preflight_app.command("report")
def preflight_report(
    file: Annotated[str, typer.Argument(help="Report JSON file, or - for standard input.")],
    as_json: JsonFlag = False,
) -> None:
    """Show a host's preflight report; exit 1 when it did not pass."""
    _, report = read_parsed(file, load_report, ValidationError,
                            "{file} is not a preflight report:\n{error}")
    if as_json:
        typer.echo(json.dumps(report.model_dump(), indent=2))
    else:
        _render_report(report)
    raise typer.Exit(EXIT_OK if report.passed and not report.failed_checks else EXIT_CHECK_FAILED)
