"""The ``ascend-serve`` command line: the commands of this package's modules, assembled."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from ascend_serve import __version__
from ascend_serve.cli.bench import bench_app
from ascend_serve.cli.console import EXIT_OK
from ascend_serve.cli.deploy import deploy
from ascend_serve.cli.doctor import doctor_app
from ascend_serve.cli.fleet import fleet_app
from ascend_serve.cli.k8s import k8s_app
from ascend_serve.cli.matrix import matrix_app
from ascend_serve.cli.mirror import mirror_app
from ascend_serve.cli.model import model_app
from ascend_serve.cli.npu import npu_app
from ascend_serve.cli.preflight import preflight_app
from ascend_serve.cli.profiles import profiles_app
from ascend_serve.cli.ranktable import ranktable_app
from ascend_serve.cli.serve import serve
from ascend_serve.cli.tune import tune
from ascend_serve.cli.validate import validate


def unwrap_help(text: str | None) -> str | None:
    """A help text with the hard line breaks inside its paragraphs joined, so that the terminal
    wraps it (at any width) instead of breaking the source's lines a second time.

    Paragraphs are separated by a blank line; one that starts with ``\\b`` keeps its lines (click's
    convention), and what follows ``\\f`` (not shown by --help) is left as it is.
    """
    if not text:
        return text
    shown, cut, hidden = inspect.cleandoc(text).partition("\f")
    paragraphs = [p if p.startswith("\b") else " ".join(p.split())
                  for p in shown.split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p) + cut + hidden


def _plain_help(command: Any) -> None:
    """``command`` and every command below it: help texts unwrapped (:func:`unwrap_help`) and
    formatted by click's own help formatter, which wraps every paragraph and option description
    to the terminal's width (rich's option tables cut long words short at 80 columns)."""
    command.help = unwrap_help(command.help)
    command.rich_markup_mode = None
    for param in command.params:
        if getattr(param, "help", None):
            param.help = unwrap_help(param.help)
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)


class _RootGroup(TyperGroup):
    """The ``ascend-serve`` group, built with every command below it: one help convention for the
    whole tree (:func:`_plain_help`), whatever each module's ``typer.Typer`` says."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _plain_help(self)


app = typer.Typer(
    name="ascend-serve",
    cls=_RootGroup,
    rich_markup_mode=None,
    help="Provision Kunpeng + Ascend NPU fleets and serve DeepSeek models with vLLM.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, pwsh)
)
app.add_typer(preflight_app, name="preflight")
app.add_typer(model_app, name="model")
app.add_typer(ranktable_app, name="ranktable")
app.add_typer(profiles_app, name="profiles")
app.add_typer(npu_app, name="npu")
app.add_typer(fleet_app, name="fleet")
app.add_typer(matrix_app, name="matrix")
app.add_typer(mirror_app, name="mirror")
app.add_typer(k8s_app, name="k8s")
app.command("serve")(serve)
app.command("validate")(validate)
app.add_typer(bench_app, name="bench")
app.command("tune")(tune)
app.command("deploy")(deploy)
app.add_typer(doctor_app, name="doctor")


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
