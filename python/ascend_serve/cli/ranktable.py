"""``ascend-serve ranktable``: validate a rank table (hccl.json, or vllm-ascend's prefill/decode
table), or generate one from a plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.markup import escape
from rich.table import Table

from ascend_serve.cli.console import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    console,
    err_console,
    fail,
    read_input,
    read_parsed,
)
from ascend_serve.cli.options import JsonFlag
from ascend_serve.network.netplan import NetPlanError, plan
from ascend_serve.network.ranktable import (
    Problem,
    RankTableError,
    build,
    build_pd,
    rank_count,
    read,
    validate,
)

ranktable_app = typer.Typer(
    help="HCCL rank tables (hccl.json) and vllm-ascend prefill/decode tables: validate one, or "
         "generate one from a device IP plan.",
    no_args_is_help=True,
)


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
    as_json: JsonFlag = False,
) -> None:
    """Check a rank table against the schema and the cross-field rules; exit 1 when invalid."""
    _, table = read_parsed(file, json.loads, json.JSONDecodeError, "{file} is not JSON: {error}")
    problems = validate(table)
    reading = read(table)
    version = reading["version"]
    kind = reading["kind"]
    if as_json:
        report: dict[str, Any] = {"file": file, "ok": not problems, "kind": kind,
                                  "version": version, "ranks": rank_count(table)}
        if kind == "pd":
            report["prefill"] = len(reading["prefill_devices"])
            report["decode"] = len(reading["decode_devices"])
        report["problems"] = [p.model_dump() for p in problems]
        typer.echo(json.dumps(report, indent=2))
    elif problems:
        console.print(_problem_table(f"{file}: {len(problems)} problem(s)", problems))
    elif kind == "pd":
        console.print(f"[green]ok[/green] {escape(file)}: prefill/decode table, version "
                      f"{escape(str(version))}, {len(reading['prefill_devices'])} prefill and "
                      f"{len(reading['decode_devices'])} decode device(s)", highlight=False)
    else:
        servers = len(reading["servers"])
        mode = (" (SuperPoD mode)" if reading["super_pods"] is not None
                else " (AI Server mode)" if version == "1.2" else "")
        console.print(f"[green]ok[/green] {escape(file)}: version {escape(str(version))}{mode}, "
                      f"{servers} server(s), {rank_count(table)} rank(s)", highlight=False)
    raise typer.Exit(EXIT_CHECK_FAILED if problems else EXIT_OK)


@ranktable_app.command("generate")
def generate_command(
    plan_file: Annotated[Path, typer.Option("--plan", help=(
        "YAML: the device IP plan (subnets, hosts, offset, tls, layout) plus 'servers', host "
        "name -> host IP or {server_ip, container_ip, super_pod_id, super_device_ids}; 910C "
        "(A3) hosts need super_device_ids (the SDIDs of npu-smi info -t spod-info)."))],
    output: Annotated[
        Path | None, typer.Option(help="Write the table here (default: standard output).")
    ] = None,
    prefill: Annotated[int | None, typer.Option(help=(
        "With --decode: vllm-ascend's prefill/decode table instead of hccl.json; the first N "
        "devices of the plan (hosts in order, devices by id) prefill."))] = None,
    decode: Annotated[int | None, typer.Option(help=(
        "With --prefill: the next N devices decode."))] = None,
    as_json: JsonFlag = False,
) -> None:
    """Build the rank table of a plan; exit 1 when the plan is inconsistent."""
    if (prefill is None) != (decode is None):
        raise fail("--prefill and --decode go together (a prefill/decode table needs both)")
    try:
        data = yaml.safe_load(read_input(str(plan_file)))
    except yaml.YAMLError as exc:
        raise fail(f"{plan_file} is not YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("servers"), dict):
        raise fail(f"{plan_file} must be a mapping with a 'servers' mapping")
    servers = data.pop("servers")
    try:
        net = plan(data)
        table = (build(net, servers) if prefill is None or decode is None
                 else build_pd(net, servers, prefill, decode))
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
    summary: dict[str, Any] = {"output": str(output), "version": table["version"],
                               "server_count": int(table["server_count"]),
                               "ranks": rank_count(table)}
    if prefill is not None:
        summary.update(kind="pd", prefill=prefill, decode=decode)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        what = (f"{prefill} prefill and {decode} decode device(s)" if prefill is not None
                else f"{summary['ranks']} rank(s)")
        console.print(f"[green]wrote[/green] {escape(str(output))}: version {table['version']}, "
                      f"{summary['server_count']} server(s), {what}", highlight=False)
