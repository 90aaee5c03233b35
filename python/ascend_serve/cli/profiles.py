"""``ascend-serve profiles``: the named serving profiles (serving-profiles.yml)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ascend_serve.cli.console import EXIT_CHECK_FAILED, EXIT_OK, console, fail
from ascend_serve.cli.options import JsonFlag, ProfileFiles, ProfileName, ProfileSet
from ascend_serve.serving.fit import FitError, FitReport, NotEstimableError
from ascend_serve.serving.nodecheck import fit_report
from ascend_serve.serving.pd import SIDES
from ascend_serve.serving.pd_launch import side_profile
from ascend_serve.serving.profiles import (
    Profile,
    ProfileError,
    load_profiles,
    resolve_options,
    with_extra_files,
)

profiles_app = typer.Typer(help="Named serving profiles (serving-profiles.yml).",
                           no_args_is_help=True)


@profiles_app.command("list")
def list_profiles(profile_files: ProfileFiles = None, as_json: JsonFlag = False) -> None:
    """List the serving profiles."""
    try:
        profiles = load_profiles(with_extra_files(profile_files))
    except ProfileError as exc:
        raise fail(str(exc)) from exc
    if as_json:
        typer.echo(json.dumps([p.as_dict() for p in profiles.values()], indent=2))
        raise typer.Exit(EXIT_OK)
    table = Table(title="serving profiles")
    for col in ("name", "model", "chips", "layout", "vllm-ascend", "tutorial"):
        table.add_column(col, overflow="fold")
    for p in profiles.values():
        par = p.parallel
        layout = f"TP{par.tensor}" + (f" DP{par.data}" if par.data > 1 else "") + (
            " EP" if par.expert else "")
        if p.pd is not None:
            pre, dec = p.pd.prefill, p.pd.decode
            layout = (f"{pre.engines}P{dec.engines}D: P DP{pre.data} x TP{pre.tensor}, "
                      f"D DP{dec.data} x TP{dec.tensor}")
        chips = (f"{p.nodes} x {p.chips_per_node} {p.chip}" if p.device == "npu"
                 else f"{p.nodes} x cpu" if p.nodes > 1 else "cpu")
        tutorial = (f"{p.tutorial.path.rsplit('/', 1)[-1]} @{p.tutorial.tag}" if p.tutorial
                    else "")
        table.add_row(p.name, p.model.served_name, chips, layout,
                      f">= {p.min_vllm_ascend}" if p.min_vllm_ascend else "", tutorial)
    console.print(table)


@profiles_app.command("show")
def show_profile(
    name: ProfileName,
    assignments: ProfileSet = None,
    profile_files: ProfileFiles = None,
    model_dir: Annotated[Path | None, typer.Option(
        help="Model directory whose config.json the fit estimate reads.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Print a resolved profile (its tutorial and differences from it included) and its memory
    fit estimate as JSON; exit 1 when it does not fit.

    ``fit`` is null when nothing can be estimated, with ``fit_note`` saying why (no config.json
    known, or an architecture the estimate does not model)."""
    try:
        profile = resolve_options(name, assignments or [], profile_files)
    except ProfileError as exc:
        raise fail(str(exc)) from exc
    if profile.pd is not None:
        _show_pd(profile, model_dir)
    note = None
    try:
        report = fit_report(profile, model_dir)
    except NotEstimableError as exc:
        report, note = None, str(exc)
    except FitError as exc:
        raise fail(str(exc)) from exc
    if report is None and note is None:
        note = "no config.json known for this model: not estimated"
    typer.echo(json.dumps({"profile": profile.as_dict(),
                           "tutorial_url": profile.tutorial.url if profile.tutorial else None,
                           "fit": report.model_dump() if report else None, "fit_note": note},
                          indent=2))
    raise typer.Exit(EXIT_OK if report is None or report.fits else EXIT_CHECK_FAILED)


def _side_fit(profile: Profile, model_dir: Path | None) -> tuple[FitReport | None, str | None]:
    try:
        report = fit_report(profile, model_dir)
    except NotEstimableError as exc:
        return None, str(exc)
    except FitError as exc:
        raise fail(str(exc)) from exc
    return report, None if report else "no config.json known for this model: not estimated"


def _show_pd(profile: Profile, model_dir: Path | None) -> None:
    """A PD profile: one memory fit per side (each side's layout and flags)."""
    fits: dict[str, object] = {}
    fits_all = True
    for side in SIDES:
        report, note = _side_fit(side_profile(profile, side), model_dir)
        fits[side] = {"fit": report.model_dump() if report else None, "fit_note": note}
        fits_all = fits_all and (report is None or report.fits)
    typer.echo(json.dumps({"profile": profile.as_dict(),
                           "tutorial_url": profile.tutorial.url if profile.tutorial else None,
                           "fit": None, "fit_note": "a PD profile: one estimate per side (pd_fit)",
                           "pd_fit": fits}, indent=2))
    raise typer.Exit(EXIT_OK if fits_all else EXIT_CHECK_FAILED)
