"""``ascend-serve matrix``: the supported version sets, and ``matrix lock``: their locks."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.table import Table

from ascend_serve.cli.console import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_FAILED,
    console,
    err_console,
    fail,
)
from ascend_serve.cli.options import JsonFlag
from ascend_serve.stack.lock import (
    PLAN,
    PYPI_SIMPLE,
    LockCheck,
    LockError,
    Target,
    check_locks,
    check_online,
    default_cache,
    default_lock_root,
    drift_summary,
    lock_dir,
    resolve_lock,
    resolve_router_lock,
    router_files,
    router_lock_path,
    select,
    targets,
)
from ascend_serve.stack.matrix import COMPONENTS, MatrixError, StackSet, load_matrix, resolve

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
    """Print the supported version sets with their HDK range, firmware and sources; with
    --set/--pin, resolve one or say why not (exit 1; an unknown set is bad input, exit 2)."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        matrix = load_matrix(matrix_file)
    except MatrixError as exc:
        raise fail(str(exc)) from exc
    sets = matrix.sets
    pins = _parse_pairs(pin or [], "--pin", "COMPONENT=VERSION")
    unknown = sorted(set(pins) - set(COMPONENTS))
    if unknown:
        raise fail(f"unknown components pinned: {', '.join(unknown)}; "
                   f"known: {', '.join(COMPONENTS)}")
    if set_name and set_name not in matrix.names():
        # A name the matrix does not hold is bad input (exit 2); a set that does not fit the
        # pins or the chip is a failed check (exit 1).
        message = (f"unknown version set {set_name!r}; known sets: "
                   f"{', '.join(matrix.names())}")
        if as_json:
            typer.echo(json.dumps({"ok": False, "error": message}, indent=2))
            raise typer.Exit(EXIT_BAD_INPUT)
        raise fail(message, EXIT_BAD_INPUT)
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
        if s.hdk:  # the firmware of the set's HDK release (npu_driver's default)
            console.print(f"[bold]{s.name}[/bold] firmware: "
                          + (s.firmware or "unresolved (set npu_driver_firmware_version)"),
                          highlight=False)
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
        help="Resolve as the index was at this date (default: now; with --check: each lock's "
        "recorded date).")] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Write nothing: report stale or missing locks (exit 1); then, online, "
        "every pinned file's sha256 on the index (a file gone or changed: exit 1), conflicts "
        "among the pins (pins that do not install together: exit 1) and drift (what a "
        "re-resolution picks now; information, exit 0).")
    ] = False,
    offline: Annotated[bool, typer.Option(
        "--offline", help="With --check: only the stale, missing or orphaned locks.")] = False,
    strict: Annotated[bool, typer.Option(
        "--strict", help="With --check: drift exits 1 too.")
    ] = False,
    router: Annotated[bool, typer.Option(
        "--router", help="Resolve the vllm-router locks (<set>/router/<target>.txt, from "
        "router.in, wheels only) instead of the sets' locks. --check checks both kinds.")
    ] = False,
    lock_root: Annotated[Path | None, typer.Option(
        "--locks", help="Lock directory (default: locks/).")] = None,
    cache: Annotated[Path | None, typer.Option(
        help="Cache of sdists and uv's downloads (~/.cache/ascend-serve/lock).")] = None,
    matrix_file: MatrixFile = None,
    as_json: JsonFlag = False,
) -> None:
    """Resolve each set's install plan for its real targets (aarch64, the set's glibc, every
    Python it lists) with uv and write hash-pinned locks (--router: the vllm-router locks, uv's
    own output with its header). Exit 1: a resolution failed or
    (--check) a lock is stale, a pinned file is gone from the index or the pins conflict; 2:
    bad input; 3 (--check): the index could not be read."""
    root = lock_root or default_lock_root()
    try:
        matrix = load_matrix(matrix_file)
        chosen = select(matrix, set_names)
    except MatrixError as exc:
        raise fail(str(exc)) from exc
    overrides = _parse_pairs(index or [], "--index", "NAME=URL")
    if (offline or strict) and not check:
        raise fail("--offline and --strict go with --check")
    if router and check:
        raise fail("--check checks the sets' and the router locks; --router is for resolving")
    if check:
        problems = check_locks(matrix, root)
        online: LockCheck | None = None
        if not offline:
            locks = [(s, t, lock_dir(root, s.name, t)) for s in chosen for t in targets(s)
                     if (not target_names or t.name in target_names)
                     and (lock_dir(root, s.name, t) / PLAN).is_file()]
            routers = [(s, t, router_lock_path(root, s.name, t)) for s in chosen
                       for t in targets(s) if (not target_names or t.name in target_names)
                       and router_lock_path(root, s.name, t).is_file()]
            with console.status("checking the locks against the index"):
                online = check_online(locks, index_url=index_url, index_overrides=overrides,
                                      exclude_newer=exclude_newer,
                                      cache=cache or default_cache(), router=routers)
        code = _check_verdict(problems, online, strict)
        if as_json:
            typer.echo(json.dumps(_check_json(problems, online, strict, code), indent=2))
        else:
            _print_check(problems, online, strict, root, matrix_file)
        raise typer.Exit(code)
    date = exclude_newer or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    jobs = [(s, t) for s in chosen for t in targets(s)
            if not target_names or t.name in target_names]
    if not jobs:
        raise fail(f"no target of {', '.join(s.name for s in chosen)} is named "
                   f"{', '.join(target_names or [])}")
    cache_dir = cache or default_cache()
    if router:
        def lock_router(stack: StackSet, target: Target) -> tuple[Path, int]:
            path = resolve_router_lock(stack, target, root, exclude_newer=date,
                                       index_url=index_url, cache=cache_dir)
            return path, len(router_files(path))

        _lock_jobs(jobs, lock_router, "vllm-router ", as_json)

    def lock_set(stack: StackSet, target: Target) -> tuple[Path, int]:
        out = lock_dir(root, stack.name, target)
        plan = resolve_lock(stack, target, out, index_url=index_url, index_overrides=overrides,
                            exclude_newer=date, cache=cache_dir)
        return out, len(plan["pins"])

    _lock_jobs(jobs, lock_set, "", as_json)


def _lock_jobs(jobs: list[tuple[StackSet, Target]],
               lock_one: Callable[[StackSet, Target], tuple[Path, int]], what: str,
               as_json: bool) -> NoReturn:
    """Each job's lock by ``lock_one`` (the lock's path and its distributions), each result
    reported (``what``: what is locked, in the messages); exits (1: a resolution failed)."""
    results: list[dict[str, object]] = []
    for stack, target in jobs:
        with console.status(f"resolving {what}{stack.name} for {target.name} "
                            f"({target.platform})"):
            try:
                path, count = lock_one(stack, target)
            except LockError as exc:
                results.append({"set": stack.name, "target": target.name, "ok": False,
                                "error": str(exc)})
                if not as_json:
                    err_console.print(f"[red]{exc}[/red]", highlight=False)
                continue
        results.append({"set": stack.name, "target": target.name, "ok": True,
                        "lock": str(path), "distributions": count})
        if not as_json:
            console.print(f"[green]locked[/green] {what}{stack.name} {target.name}: "
                          f"{count} distributions -> {path}", highlight=False)
    if as_json:
        typer.echo(json.dumps(results, indent=2))
    raise typer.Exit(EXIT_CHECK_FAILED if any(not r["ok"] for r in results) else 0)



def _check_verdict(problems: list[str], online: LockCheck | None, strict: bool) -> int:
    """1: a stale lock, a pinned file gone or pins that conflict (with --strict: drift too);
    3: the index could not be read or a re-resolution failed; drift alone: 0."""
    if problems or (online and (online.index.alarms or online.conflicts)):
        return EXIT_CHECK_FAILED
    if online and (online.errors or online.index_unreachable):
        return EXIT_FAILED
    if strict and online and online.drift:
        return EXIT_CHECK_FAILED
    return 0


def _check_json(problems: list[str], online: LockCheck | None, strict: bool,
                code: int) -> dict[str, object]:
    report: dict[str, object] = {"ok": code == 0, "problems": problems, "online": bool(online)}
    if online:
        report |= {
            "index_url": online.index_url,
            "verified": online.index.verified,
            "alarms": online.index.alarms,
            "unchecked": online.index.unchecked,
            "unreachable": online.index.unreachable,
            "conflicts": online.conflicts,
            "drift": [{"set": d.set, "target": d.target, "package": d.package,
                       "old": d.old, "new": d.new} for d in online.drift],
            "errors": online.errors,
            "strict": strict,
        }
    return report


def _print_check(problems: list[str], online: LockCheck | None, strict: bool, root: Path,
                 matrix_file: Path | None) -> None:
    for problem in problems:
        err_console.print(f"[red]{problem}[/red]", highlight=False)
    if not problems:
        console.print(f"every lock in {root} matches {matrix_file or 'stack-matrix.yml'}",
                      highlight=False)
    if online is None:
        return
    index = online.index
    for location, why in index.unreachable.items():
        err_console.print(f"[red]{location} could not be read: {why}[/red]", highlight=False)
    for alarm in index.alarms:
        err_console.print(f"[red]{alarm}[/red]", highlight=False)
    for line in index.unchecked:
        console.print(f"[yellow]{line}[/yellow]", highlight=False)
    console.print(f"{index.verified} pins have every recorded sha256 on {online.index_url} or "
                  f"their set's named indexes ({index.requests} index requests); "
                  f"{len(index.alarms)} gone or changed, {len(index.unchecked)} not checkable "
                  f"online", highlight=False)
    for error in online.errors:
        err_console.print(f"[red]{error}[/red]", highlight=False)
    for conflict in online.conflicts:
        err_console.print(f"[red]conflict: {conflict}[/red]", highlight=False)
    kind = "" if strict else " (information)"
    for drift in online.drift:
        console.print(f"[yellow]drift{kind}: {drift}[/yellow]", highlight=False)
    console.print(drift_summary(online.drift), highlight=False)
