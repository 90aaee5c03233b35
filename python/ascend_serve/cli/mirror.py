"""``ascend-serve mirror list|fetch|verify``: the air-gapped bundle of an inventory."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ascend_serve.cli.console import (
    EXIT_CHECK_FAILED,
    EXIT_FAILED,
    console,
    err_console,
    fail,
)
from ascend_serve.cli.options import JsonFlag
from ascend_serve.mirror import images
from ascend_serve.mirror.bundle import (
    BundleError,
    ChecksumMismatchError,
    fetch,
    read_manifest,
    verify,
)
from ascend_serve.mirror.plan import (
    AT_FETCH,
    KINDS,
    Artifact,
    Plan,
    PlanError,
    build_plan,
    read_pins,
)
from ascend_serve.mirror.pointing import (
    FETCH_MARK,
    PUSH_MARK,
    VarsLayoutError,
    check_vars_path,
    write_image_var,
    write_vars,
)

mirror_app = typer.Typer(
    help="The air-gapped bundle: every artifact an inventory needs (vendor installers, locked "
         "wheels, OS packages, model files), fetched into a directory, verified, pointed at.",
    no_args_is_help=True,
)

Inventory = Annotated[Path, typer.Option("-i", "--inventory", help="The inventory (file or "
                                         "directory), read with its group_vars and host_vars.")]
Limit = Annotated[str | None, typer.Option("--limit", help="Only hosts matching this pattern.")]
Arch = Annotated[list[str] | None, typer.Option(
    "--arch", help="CPU architecture of the hosts (aarch64, x86_64); default: "
    "ansible_architecture, else the allowed ones whose driver installer is pinned.")]
OsFamily = Annotated[str | None, typer.Option(
    "--os-family", help="OS family of the hosts (Debian, RedHat, Kylin_Linux_Advanced_Server); "
    "default: ansible_os_family, else the kind of os_base repositories configured.")]
KindOpt = Annotated[list[str] | None, typer.Option(
    "--kind", help=f"Only these kinds ({', '.join(KINDS)}); repeatable.")]
Bundle = Annotated[Path, typer.Option("--bundle", help="The bundle directory.")]

FETCH_DEFAULT_KINDS = ("vendor", "wheel", "model", "image")
Insecure = Annotated[list[str] | None, typer.Option(
    "--insecure-registry", metavar="HOST[:PORT]",
    help="A registry reached over plain HTTP or with unchecked TLS (as registries.conf's "
         "insecure = true); repeatable.")]


def _kinds(values: list[str] | None, default: tuple[str, ...] = KINDS) -> list[str]:
    kinds = values or list(default)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise fail(f"--kind takes {', '.join(KINDS)}, not {', '.join(unknown)}")
    return kinds


def _plan(inventory: Path, limit: str | None, arch: list[str] | None,
          os_family: str | None) -> Plan:
    try:
        return build_plan(inventory, limit=limit, arch=arch, os_family=os_family)
    except PlanError as exc:
        raise fail(str(exc)) from exc


def _check_vars_path(path: Path | None, mark: str) -> None:
    """Refuse, before anything is fetched or pushed, a --write-vars file whose variables
    Ansible would not read or that would hide or replace the inventory's own (exit 2)."""
    if path is None:
        return
    try:
        check_vars_path(path, mark)
    except VarsLayoutError as exc:
        raise fail(str(exc)) from exc


def _sha_column(item: Artifact) -> str:
    if item.sha256:
        return item.sha256
    if item.accepted:
        return item.accepted[0] + (f" (+{len(item.accepted) - 1})" if len(item.accepted) > 1
                                   else "")
    return f"[yellow]{escape(item.note or 'not pinned')}[/yellow]"


@mirror_app.command("list")
def list_command(inventory: Inventory, limit: Limit = None, arch: Arch = None,
                 os_family: OsFamily = None, kind: KindOpt = None,
                 as_json: JsonFlag = False) -> None:
    """Every artifact the inventory needs, with its sha256 (exit 1 when a vendor installer is
    not pinned or the hosts' pins disagree)."""
    kinds = _kinds(kind)
    plan = _plan(inventory, limit, arch, os_family)
    items = plan.of_kind(*kinds)
    problems = plan.problems(kinds)
    if as_json:
        payload = plan.model_dump(exclude={"issues"})
        payload["artifacts"] = [a.model_dump() for a in items]
        payload["problems"] = problems
        typer.echo(json.dumps(payload, indent=2))
    else:
        table = Table(title=f"{inventory}: {len(items)} artifacts for {', '.join(plan.hosts)}")
        for column in ("kind", "name", "version", "sha256", "pinned by"):
            table.add_column(column, overflow="fold")
        for item in items:
            table.add_row(item.kind, item.name, item.version, _sha_column(item),
                          escape(item.pin) if item.note != AT_FETCH else
                          f"{escape(item.pin)}: {AT_FETCH}")
        console.print(table)
        for problem in problems:
            err_console.print(f"[red]{escape(problem)}[/red]", highlight=False)
    if problems:
        raise typer.Exit(EXIT_CHECK_FAILED)


def _apply_pins(plan: Plan, files: list[Path]) -> None:
    try:
        for file in files:
            plan.apply_pins(read_pins(file), str(file))
    except PlanError as exc:
        raise fail(f"nothing fetched: {exc}") from exc


@contextmanager
def _progress(quiet: bool) -> Iterator[Progress]:
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, transient=True,
                  disable=quiet or not err_console.is_terminal) as bar:
        yield bar


@mirror_app.command("fetch")
def fetch_command(
    bundle: Bundle,
    inventory: Inventory,
    sources: Annotated[list[str] | None, typer.Argument(
        help="Where artifacts come from, in order: directories (a vendor download directory, "
             "a wheelhouse, another bundle), http(s)/file URLs (a mirror; for wheels a "
             "PEP 503 simple index) and, for images, docker://HOST[:PORT] registries holding "
             "the same repository path. The inventory's own sources (an image's own "
             "registry) are tried after them.")] = None,
    limit: Limit = None, arch: Arch = None, os_family: OsFamily = None,
    kind: KindOpt = None,
    pins: Annotated[list[Path] | None, typer.Option(
        "--pins", help="sha256 of installers the inventory does not pin yet (a vars file "
        "or a sha256sum listing); a pin that differs from the inventory's is an error.")] = None,
    write_vars_to: Annotated[Path | None, typer.Option(
        "--write-vars", help="Write a group_vars file pointing the roles at the bundle "
        "(a file of its own, e.g. group_vars/ascend_nodes/zz-bundle.yml; refused, before "
        "anything is fetched, where Ansible would ignore it or the group's own file).")
    ] = None,
    host_path: Annotated[str | None, typer.Option(
        "--host-path", help="Where the hosts see the bundle (a mount), for --write-vars.")] = None,
    base_url: Annotated[str | None, typer.Option(
        "--base-url", help="Where the hosts reach the bundle over HTTP, for --write-vars.")] = None,
    insecure: Insecure = None,
    as_json: JsonFlag = False,
) -> None:
    """Fetch every artifact into the bundle, checking each sha256 while it is copied (an
    image: its manifest against the pinned digest, every blob against its own digest, copied
    with skopeo); all or nothing (exit 1: a checksum mismatch, 2: an artifact not pinned,
    3: one not found)."""
    kinds = _kinds(kind, FETCH_DEFAULT_KINDS)
    _check_vars_path(write_vars_to, FETCH_MARK)
    plan = _plan(inventory, limit, arch, os_family)
    _apply_pins(plan, pins or [])
    if plan.problems(kinds):
        raise fail("nothing fetched: " + "; ".join(plan.problems(kinds)))
    items = plan.of_kind(*kinds)
    try:
        with _progress(as_json) as bar:
            task = bar.add_task("fetching", total=len(items))

            def advance(label: str) -> None:
                bar.update(task, description=label[:60], advance=1)

            result = fetch(plan, items, list(sources or []), bundle,
                           extra_sources=plan.sources, insecure_registries=insecure or [],
                           progress=advance)
    except ChecksumMismatchError as exc:
        raise fail(f"nothing fetched: {exc}", EXIT_CHECK_FAILED) from exc
    except BundleError as exc:
        code = 2 if str(exc).startswith("nothing fetched") else EXIT_FAILED
        raise fail(str(exc) if code == 2 else f"nothing fetched: {exc}", code) from exc
    pointed = None
    if write_vars_to is not None:
        try:
            pointed = write_vars(write_vars_to, bundle, read_manifest(bundle),
                                 host_path=host_path, base_url=base_url)
        except VarsLayoutError as exc:  # the layout changed while fetching
            raise fail(str(exc)) from exc
    if as_json:
        typer.echo(json.dumps({"bundle": str(bundle), "copied": result.copied,
                               "reused": result.reused,
                               "files": [f.model_dump() for f in result.files],
                               "vars_file": str(write_vars_to) if write_vars_to else None,
                               "vars": pointed}, indent=2))
        return
    console.print(f"{bundle}: {len(result.files)} files verified ({result.copied} copied, "
                  f"{result.reused} already there)")
    if write_vars_to is not None:
        console.print(f"{write_vars_to}: points the roles at {bundle}")


@mirror_app.command("verify")
def verify_command(
    bundle: Bundle,
    inventory: Annotated[Path | None, typer.Option(
        "-i", "--inventory", help="Also check the bundle against this inventory's pins.")] = None,
    limit: Limit = None, arch: Arch = None, os_family: OsFamily = None,
    kind: KindOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Re-hash every file against bundle.json and, with -i, check that every artifact the
    inventory pins is there with its pin (of the kinds the bundle holds, or --kind); exit 1
    naming each difference."""
    plan = _plan(inventory, limit, arch, os_family) if inventory is not None else None
    try:
        held = read_manifest(bundle).files
        kinds = _kinds(kind, tuple(sorted({f.kind for f in held} - {"os"})))
        total = len(held)
        with _progress(as_json) as bar:
            task = bar.add_task("verifying", total=total)
            verdict = verify(bundle, plan, kinds=kinds,
                             progress=lambda label: bar.update(task, description=label[:60],
                                                               advance=1))
    except BundleError as exc:
        raise fail(str(exc)) from exc
    if as_json:
        typer.echo(json.dumps({"bundle": str(bundle), "checked": verdict.checked,
                               "ok": not verdict.problems, "problems": verdict.problems},
                              indent=2))
    else:
        for problem in verdict.problems:
            err_console.print(f"[red]{escape(problem)}[/red]", highlight=False)
        if not verdict.problems:
            console.print(f"{bundle}: {verdict.checked} files verified"
                          + (f" against {inventory}" if inventory else ""))
    if verdict.problems:
        raise typer.Exit(EXIT_CHECK_FAILED)


@mirror_app.command("push")
def push_command(
    bundle: Bundle,
    registry: Annotated[str, typer.Option(
        "--registry", metavar="HOST[:PORT]", help="The site registry the hosts pull from.")],
    insecure: Insecure = None,
    write_vars_to: Annotated[Path | None, typer.Option(
        "--write-vars", help="Write vllm_service_image (the pushed image, pinned by digest) "
                             "to this group_vars file; needs exactly one image in the bundle.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Copy the bundle's images into the site registry with their digests unchanged (skopeo),
    so the hosts' pins stay valid there; exit 1 when an image is not intact, 3 when the
    registry refuses."""
    _check_vars_path(write_vars_to, PUSH_MARK)
    try:
        held = [f for f in read_manifest(bundle).files
                if f.kind == "image" and f.path.endswith("/" + images.MANIFEST_FILE)]
    except BundleError as exc:
        raise fail(str(exc)) from exc
    if not held:
        raise fail(f"{bundle} holds no image")
    if write_vars_to is not None and len({f.name for f in held}) != 1:
        raise fail(f"--write-vars needs one image; {bundle} holds "
                   f"{', '.join(sorted({f.name for f in held}))}")
    pushed: list[str] = []
    for entry in held:
        directory = (bundle / entry.path).parent
        problems = images.check_copy(directory, entry.sha256)
        if problems:
            raise fail("; ".join(problems), EXIT_CHECK_FAILED)
        try:
            pushed.append(images.push(directory, entry.name, entry.version, registry,
                                      insecure=insecure or []))
        except images.ImageError as exc:
            raise fail(str(exc), EXIT_FAILED) from exc
    if write_vars_to is not None:
        try:
            write_image_var(write_vars_to, pushed[0])
        except VarsLayoutError as exc:  # the layout changed while pushing
            raise fail(str(exc)) from exc
    if as_json:
        typer.echo(json.dumps({"registry": registry, "images": pushed,
                               "vars_file": str(write_vars_to) if write_vars_to else None},
                              indent=2))
        return
    for reference in pushed:
        console.print(f"pushed {reference}")
    if write_vars_to is not None:
        console.print(f"{write_vars_to}: vllm_service_image points at {pushed[0]}")

