"""``ascend-serve matrix``: the supported version sets, and ``matrix lock``: their locks."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ascend_serve.cli.console import EXIT_CHECK_FAILED, console, err_console, fail
from ascend_serve.cli.options import JsonFlag
from ascend_serve.stack.lock import (
    PYPI_SIMPLE,
    LockError,
    check_locks,
    default_cache,
    default_lock_root,
    lock_dir,
    resolve_lock,
    select,
    targets,
)
from ascend_serve.stack.matrix import COMPONENTS, MatrixError, load_matrix, resolve

matrix_app = typer.Typer(
    help="The locked version sets (stack-matrix.yml) and their hash-pinned locks.",
    invoke_without_command=True,
)

MatrixFile = Annotated[
    Path | None, typer.Option("--file", help="Matrix file (default: stack-matrix.yml).")
]


def _parse_pairs(values: list[str], option: str, what: str) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key or not rest:
            raise fail(f"{option} takes {what}, not {value!r}")
        parsed[key] = rest
    return parsed


@matrix_app.callback()
def matrix_command(
    ctx: typer.Context,
    set_name: Annotated[
        str | None, typer.Option("--set", help="Check that this set exists (and fits the pins).")
    ] = None,
    pin: Annotated[
        list[str] | None,
        typer.Option(help=f"COMPONENT=VERSION to check ({', '.join(COMPONENTS)}); repeatable."),
    ] = None,
    chip: Annotated[
        str | None, typer.Option(help="Chip family the set must support (910B, 910C).")
    ] = None,
    matrix_file: MatrixFile = None,
    as_json: JsonFlag = False,
) -> None:
    """Print the supported version sets with their HDK range and sources; with --set/--pin,
    resolve one or say why not (exit 1)."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        matrix = load_matrix(matrix_file)
    except MatrixError as exc:
        raise fail(str(exc)) from exc
    sets = matrix.sets
    pins = _parse_pairs(pin or [], "--pin", "COMPONENT=VERSION")
    if set_name or pins or chip:
        try:
            sets = [resolve(matrix, set_name, pins, chip)]
        except MatrixError as exc:
            if as_json:
                typer.echo(json.dumps({"ok": False, "error": str(exc)}, indent=2))
                raise typer.Exit(EXIT_CHECK_FAILED) from exc
            raise fail(str(exc), EXIT_CHECK_FAILED) from exc
    if as_json:
        typer.echo(json.dumps([s.as_facts() for s in sets], indent=2))
        return
    table = Table(title="Locked version sets (stack-matrix.yml)")
    for column in ("set", "vllm-ascend", "vllm", "CANN", "torch", "torch-npu", "Python",
                   "HDK (supported)", "glibc", "chips / arch"):
        table.add_column(column)
    for s in sets:
        vllm = s.vllm if s.vllm_dist == "vllm" else f"{s.vllm} ({s.vllm_dist})"
        hdk = f"{s.hdk} ({', '.join(s.hdk_supported)})" if s.hdk else "-"
        table.add_row(s.name, s.vllm_ascend or "-", vllm, s.cann or "-", s.torch,
                      s.torch_npu or "-", ", ".join(s.python), hdk, f">= {s.glibc}",
                      ", ".join(s.chips or s.architectures))
    console.print(table)
    for s in sets:
        console.print(f"[bold]{s.name}[/bold] sources:", highlight=False)
        for key, source in s.sources.items():
            for line in [source] if isinstance(source, str) else source:
                console.print(f"  {key}: {line}", highlight=False, soft_wrap=True)
        if s.unlocked:
            console.print(f"  [yellow]not locked here: {s.unlocked}[/yellow]", highlight=False)


@matrix_app.command("lock")
def matrix_lock(
    set_names: Annotated[list[str] | None, typer.Option(
        "--set", help="Lock this set (repeatable; default all).")] = None,
    target_names: Annotated[list[str] | None, typer.Option(
        "--target", help="Only this target, e.g. py3.11-aarch64 (repeatable).")] = None,
    index: Annotated[list[str] | None, typer.Option(
        help="NAME=URL|DIR: read the set's named index from your mirror (e.g. "
        "pytorch-cpu=/opt/wheels); repeatable.")] = None,
    index_url: Annotated[str, typer.Option(
        "--index-url", help="The PyPI (mirror) simple index.")] = PYPI_SIMPLE,
    exclude_newer: Annotated[str | None, typer.Option(
        help="Resolve as the index was at this date (default: now); a lock re-resolved with its "
        "recorded date must come out the same.")] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Resolve nothing: report stale or missing locks.")] = False,
    lock_root: Annotated[Path | None, typer.Option(
        "--locks", help="Lock directory (default: locks/).")] = None,
    cache: Annotated[Path | None, typer.Option(
        help="Cache of sdists and uv's downloads (~/.cache/ascend-serve/lock).")] = None,
    matrix_file: MatrixFile = None,
    as_json: JsonFlag = False,
) -> None:
    """Resolve each set's install plan for its real targets (aarch64, the set's glibc, every
    Python it lists) with uv and write hash-pinned locks. Exit 1: a resolution failed or
    (--check) a lock is stale; 2: bad input."""
    root = lock_root or default_lock_root()
    try:
        matrix = load_matrix(matrix_file)
        chosen = select(matrix, set_names)
    except MatrixError as exc:
        raise fail(str(exc)) from exc
    if check:
        problems = check_locks(matrix, root)
        if as_json:
            typer.echo(json.dumps({"ok": not problems, "problems": problems}, indent=2))
        for problem in [] if as_json else problems:
            err_console.print(f"[red]{problem}[/red]", highlight=False)
        if not problems and not as_json:
            console.print(f"every lock in {root} matches {matrix_file or 'stack-matrix.yml'}")
        raise typer.Exit(EXIT_CHECK_FAILED if problems else 0)
    overrides = _parse_pairs(index or [], "--index", "NAME=URL")
    date = exclude_newer or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    results: list[dict[str, object]] = []
    failed = False
    jobs = [(s, t) for s in chosen for t in targets(s)
            if not target_names or t.name in target_names]
    if not jobs:
        raise fail(f"no target of {', '.join(s.name for s in chosen)} is named "
                   f"{', '.join(target_names or [])}")
    for stack, target in jobs:
        out = lock_dir(root, stack.name, target)
        with console.status(f"resolving {stack.name} for {target.name} ({target.platform})"):
            try:
                plan = resolve_lock(stack, target, out, index_url=index_url,
                                    index_overrides=overrides, exclude_newer=date,
                                    cache=cache or default_cache())
            except LockError as exc:
                failed = True
                results.append({"set": stack.name, "target": target.name, "ok": False,
                                "error": str(exc)})
                if not as_json:
                    err_console.print(f"[red]{exc}[/red]", highlight=False)
                continue
        count = len(plan["pins"])
        results.append({"set": stack.name, "target": target.name, "ok": True,
                        "lock": str(out), "distributions": count})
        if not as_json:
            console.print(f"[green]locked[/green] {stack.name} {target.name}: "
                          f"{count} distributions -> {out}", highlight=False)
    if as_json:
        typer.echo(json.dumps(results, indent=2))
    raise typer.Exit(EXIT_CHECK_FAILED if failed else 0)

