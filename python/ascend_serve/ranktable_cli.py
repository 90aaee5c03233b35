"""``ascend-serve ranktable``: validate a rank table (hccl.json), or generate one from a plan."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.markup import escape
from rich.table import Table

from .console import EXIT_CHECK_FAILED, EXIT_OK, console, err_console, fail
from .netplan import NetPlanError, plan
from .ranktable import Problem, RankTableError, build, validate

ranktable_app = typer.Typer(
    help="HCCL rank tables (hccl.json): validate one, or generate one from a device IP plan.",
    no_args_is_help=True,
)




def _read(file: str) -> str:
    try:
        return sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {file}: {exc}") from exc


def _ranks(table: Any) -> int:
    """How many devices (ranks) a table lists, however malformed it is."""
    servers = table.get("server_list") if isinstance(table, dict) else None
    if not isinstance(servers, list):
        return 0
    return sum(len(s["device"]) for s in servers
               if isinstance(s, dict) and isinstance(s.get("device"), list))


def _problem_table(title: str, problems: list[Problem]) -> Table:
    table = Table(title=escape(title))
    table.add_column("path", overflow="fold")
    table.add_column("problem", overflow="fold")
    for p in problems:
        table.add_row(escape(p.path), escape(p.message))
    return table


@ranktable_app.command("validate")
def validate_command(
    file: Annotated[str, typer.Argument(help="Rank table JSON file, or - for standard input.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for machines.")] = False,
) -> None:
    """Check a rank table against the schema and the cross-field rules; exit 1 when invalid."""
    text = _read(file)
    try:
        table = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"{file} is not JSON: {exc}") from exc
    problems = validate(table)
    version = table.get("version") if isinstance(table, dict) else None
    if as_json:
        typer.echo(json.dumps({"file": file, "ok": not problems, "version": version,
                               "ranks": _ranks(table),
                               "problems": [p.model_dump() for p in problems]}, indent=2))
    elif problems:
        console.print(_problem_table(f"{file}: {len(problems)} problem(s)", problems))
    else:
        servers = len(table["server_list"])
        console.print(f"[green]ok[/green] {escape(file)}: version {escape(str(version))}, "
                      f"{servers} server(s), {_ranks(table)} rank(s)", highlight=False)
    raise typer.Exit(EXIT_CHECK_FAILED if problems else EXIT_OK)


@ranktable_app.command("generate")
def generate_command(
    plan_file: Annotated[Path, typer.Option("--plan", help=(
        "YAML: the device IP plan (subnets, hosts, offset, tls) plus 'servers', host name -> "
        "host IP or {server_ip, container_ip, super_pod_id, super_device_ids}."))],
    output: Annotated[
        Path | None, typer.Option(help="Write the table here (default: standard output).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for machines.")] = False,
) -> None:
    """Build the rank table of a plan; exit 1 when the plan is inconsistent."""
    try:
        data = yaml.safe_load(_read(str(plan_file)))
    except yaml.YAMLError as exc:
        raise fail(f"{plan_file} is not YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("servers"), dict):
        raise fail(f"{plan_file} must be a mapping with a 'servers' mapping")
    servers = data.pop("servers")
    try:
        table = build(plan(data), servers)
    except (NetPlanError, RankTableError) as exc:
        problems = (exc.problems if isinstance(exc, RankTableError)
                    else [Problem(path="plan", message=m) for m in exc.problems])
        if as_json:
            typer.echo(json.dumps({"ok": False, "problems": [p.model_dump() for p in problems]},
                                  indent=2))
        else:
            err_console.print(_problem_table(f"{plan_file}: cannot build a rank table", problems))
        raise typer.Exit(EXIT_CHECK_FAILED) from exc
    text = json.dumps(table, indent=2) + "\n"
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise fail(f"cannot write {output}: {exc}") from exc
    summary = {"output": str(output), "version": table["version"],
               "server_count": len(table["server_list"]), "ranks": _ranks(table)}
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        console.print(f"[green]wrote[/green] {escape(str(output))}: version {table['version']}, "
                      f"{summary['server_count']} server(s), {summary['ranks']} rank(s)",
                      highlight=False)
