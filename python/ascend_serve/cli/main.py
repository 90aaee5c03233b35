"""The ``ascend-serve`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.table import Table

from ascend_serve import __version__
from ascend_serve.cli.bench import bench
from ascend_serve.cli.console import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_OK,
    console,
    err_console,
)
from ascend_serve.cli.deploy import deploy
from ascend_serve.cli.doctor import doctor
from ascend_serve.cli.fleet import fleet_app
from ascend_serve.cli.matrix import matrix_app
from ascend_serve.cli.model import model_app
from ascend_serve.cli.npu import npu_app
from ascend_serve.cli.ranktable import ranktable_app
from ascend_serve.cli.serve import profiles_app, serve
from ascend_serve.cli.tune import tune
from ascend_serve.cli.validate import validate
from ascend_serve.stack.preflight import PreflightReport, load_report

app = typer.Typer(
    name="ascend-serve",
    help="Provision Kunpeng + Ascend NPU fleets and serve DeepSeek models with vLLM.",
    no_args_is_help=True,
    add_completion=False,
)
preflight_app = typer.Typer(help="Read preflight reports written by the preflight role.",
                            no_args_is_help=True)
app.add_typer(preflight_app, name="preflight")
app.add_typer(model_app, name="model")
app.add_typer(ranktable_app, name="ranktable")
app.add_typer(profiles_app, name="profiles")
app.add_typer(npu_app, name="npu")
app.add_typer(fleet_app, name="fleet")
app.add_typer(matrix_app, name="matrix")
app.command("serve")(serve)
app.command("validate")(validate)
app.command("bench")(bench)
app.command("tune")(tune)
app.command("deploy")(deploy)
app.command("doctor")(doctor)



def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ascend-serve {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version_callback, is_eager=True,
                     help="Print the version and exit."),
    ] = False,
) -> None:
    """Provision Kunpeng + Ascend NPU fleets and serve DeepSeek models with vLLM."""


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
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for machines.")] = False,
) -> None:
    """Show a host's preflight report; exit 1 when it did not pass."""
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
        report = load_report(text)
    except OSError as exc:
        err_console.print(f"[red]cannot read {file}: {exc.strerror}[/red]")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    except ValidationError as exc:
        err_console.print(f"[red]{file} is not a preflight report:[/red]\n{exc}")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    if as_json:
        typer.echo(json.dumps(report.model_dump(), indent=2))
    else:
        _render_report(report)
    raise typer.Exit(EXIT_OK if report.passed and not report.failed_checks else EXIT_CHECK_FAILED)
