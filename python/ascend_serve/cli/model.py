"""``ascend-serve model``: tiny test models and model manifests."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from ascend_serve.cli.console import EXIT_CHECK_FAILED, EXIT_OK, console, err_console, fail
from ascend_serve.cli.options import JsonFlag
from ascend_serve.serving.manifest import (
    Manifest,
    ManifestError,
    ProgressCallback,
    build_manifest,
    load,
    manifest_path,
    total_bytes,
    verify,
    write,
)
from ascend_serve.serving.p2p import TorrentError, make_torrent
from ascend_serve.serving.tiny_model import (
    ARCHS,
    MissingDependencyError,
    build_tiny_model_in_place,
)

model_app = typer.Typer(
    help="Tiny test models and model manifests (SHA-256 of every file of a model directory).",
    no_args_is_help=True,
)


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover - the loop always returns


@contextmanager
def _hash_progress(description: str, total: int) -> Iterator[ProgressCallback]:
    """A byte progress bar on stderr (only on a terminal); yields the advance callback."""
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
        TransferSpeedColumn(), TimeRemainingColumn(),
        console=err_console, transient=True, disable=not err_console.is_terminal,
    )
    with progress:
        task = progress.add_task(escape(description), total=total)
        yield lambda n: progress.advance(task, n)


def _size(manifest: Manifest) -> str:
    """``"12 files, 1.5 GiB"``."""
    return f"{len(manifest.files)} files, {_human(manifest.total_size)}"


def _summary(manifest: Manifest, directory: Path) -> dict[str, Any]:
    return {
        "name": manifest.name,
        "directory": str(directory),
        "manifest": str(manifest_path(directory)),
        "files": len(manifest.files),
        "total_size": manifest.total_size,
    }


def _is_nonempty_dir(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


@model_app.command("make-tiny")
def make_tiny(
    out: Annotated[Path, typer.Argument(help="Directory to create the model in.")],
    arch: Annotated[
        str, typer.Option("--arch", help=f"Architecture: {', '.join(ARCHS)}.")
    ],
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same bytes).")] = 0,
    name: Annotated[
        str | None, typer.Option(help="Model name in the manifest (default: tiny-ARCH).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a non-empty OUT.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Build a tiny random model (real architecture, DeepSeek tokens and R1 chat template).

    Needs the 'models' extra (torch, transformers, tokenizers, safetensors); imported only here.
    """
    if arch not in ARCHS:
        raise fail(f"unknown --arch {arch!r}; choose one of {', '.join(ARCHS)}")
    if out.exists() and not out.is_dir():
        raise fail(f"{out} exists and is not a directory")
    if _is_nonempty_dir(out) and not force:
        raise fail(f"{out} is not empty; pass --force to replace it")
    started = time.monotonic()
    try:
        with err_console.status(f"building tiny {arch} model", spinner="dots"):
            info = build_tiny_model_in_place(arch, out, seed=seed, name=name)
    except MissingDependencyError as exc:
        raise fail(str(exc)) from exc
    except OSError as exc:
        raise fail(f"cannot write the tiny {arch} model to {out}: {exc}") from exc
    except (ManifestError, ValueError) as exc:
        raise fail(f"building the tiny {arch} model failed: {exc}", EXIT_CHECK_FAILED) from exc
    seconds = time.monotonic() - started
    result = {
        **_summary(info.manifest, out),
        "arch": arch,
        "architectures": info.architectures,
        "parameters": info.parameters,
        "vocab_size": info.vocab_size,
        "seed": seed,
        "seconds": round(seconds, 2),
    }
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    console.print(
        f"[green]built[/green] {escape(info.name)} ({', '.join(info.architectures)}, "
        f"{info.parameters:,} parameters, vocab {info.vocab_size}) in {escape(str(out))}: "
        f"{_size(info.manifest)}, {seconds:.1f} s", highlight=False)


@model_app.command("manifest")
def manifest_command(
    directory: Annotated[Path, typer.Argument(help="Model directory.")],
    name: Annotated[
        str | None,
        typer.Option(help="Model name (default: the current manifest's, else the folder's)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Hash every file of a model directory into its ascend-serve-manifest.json."""
    if not directory.is_dir():
        raise fail(f"{directory} is not a directory")
    if name is None:
        try:
            name = load(directory).name
        except ManifestError:
            name = directory.resolve().name
    try:
        with _hash_progress(f"hashing {directory}", total_bytes(directory)) as advance:
            manifest = build_manifest(directory, name, advance)
        write(directory, manifest)
    except ManifestError as exc:
        raise fail(str(exc)) from exc
    if as_json:
        typer.echo(json.dumps({**_summary(manifest, directory),
                               "entries": [f.model_dump() for f in manifest.files]}, indent=2))
        return
    console.print(f"[green]wrote[/green] {escape(str(manifest_path(directory)))}: "
                  f"{escape(manifest.name)}, {_size(manifest)}", highlight=False)


@model_app.command("verify")
def verify_command(
    directory: Annotated[Path, typer.Argument(help="Model directory with a manifest.")],
    as_json: JsonFlag = False,
) -> None:
    """Check every file of a model directory against its manifest; exit 1 on a difference."""
    if not directory.is_dir():
        raise fail(f"{directory} is not a directory")
    try:
        manifest = load(directory)
    except ManifestError as exc:
        raise fail(str(exc)) from exc
    with _hash_progress(f"verifying {manifest.name}", manifest.total_size) as advance:
        problems = verify(directory, manifest, advance)
    if as_json:
        typer.echo(json.dumps({**_summary(manifest, directory), "ok": not problems,
                               "problems": [p.model_dump() for p in problems]}, indent=2))
    elif problems:
        table = Table(title=escape(f"{manifest.name}: {len(problems)} problem(s) in {directory}"))
        for column in ("file", "problem", "expected", "found"):
            table.add_column(column, overflow="fold")
        for p in problems:
            table.add_row(*(escape(v) for v in (p.path, p.kind, p.expected, p.found)))
        console.print(table)
    else:
        console.print(f"[green]ok[/green] {escape(manifest.name)}: {_size(manifest)} match "
                      f"{escape(str(manifest_path(directory)))}", highlight=False)
    raise typer.Exit(EXIT_CHECK_FAILED if problems else EXIT_OK)


@model_app.command("torrent")
def torrent_command(
    directory: Annotated[
        Path, typer.Argument(help="Model directory with a manifest (the mirror's).")
    ],
    piece_size_kib: Annotated[
        int, typer.Option("--piece-size-kib", help="Piece size in KiB (0: libtorrent's choice).")
    ] = 0,
    force: Annotated[
        bool, typer.Option("--force", help="Make it again when it exists.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Make the model's torrent (its piece map) for peer-to-peer staging, once per manifest digest.

    Writes ascend-serve-<digest>.torrent next to the manifest; nodes staging with
    model_store_p2p_enabled fetch it from the mirror. Needs libtorrent.
    """
    if not directory.is_dir():
        raise fail(f"{directory} is not a directory")
    try:
        manifest = load(directory)
        info = make_torrent(directory, manifest, piece_size_kib * 1024, force)
    except (ManifestError, TorrentError) as exc:
        raise fail(str(exc)) from exc
    result = {**_summary(manifest, directory), "torrent": str(info.path), "digest": info.digest,
              "pieces": info.pieces, "piece_size": info.piece_size, "made": info.made}
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    verb = "[green]wrote[/green]" if info.made else "kept"
    console.print(f"{verb} {escape(str(info.path))}: {info.pieces} pieces of "
                  f"{_human(info.piece_size)} for {escape(manifest.name)}, {_size(manifest)}",
                  highlight=False)
