"""Terminal output shared by every ``ascend-serve`` subcommand, and the exit codes
(:mod:`ascend_serve.exitcodes`) they raise."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from ascend_serve.exitcodes import (
    EXIT_BAD_INPUT,
    EXIT_CANCELED,
    EXIT_CHECK_FAILED,
    EXIT_FAILED,
    EXIT_OK,
)

__all__ = ["EXIT_BAD_INPUT", "EXIT_CANCELED", "EXIT_CHECK_FAILED", "EXIT_FAILED", "EXIT_OK",
           "console", "err_console", "fail", "read_input", "read_parsed"]

# Wide output when piped (reports, CI logs); the terminal's width otherwise.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, soft_wrap=True)

_Parsed = TypeVar("_Parsed")


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print ``message`` in red on stderr and return the ``typer.Exit`` to raise."""
    err_console.print(f"[red]{escape(message)}[/red]", highlight=False)
    return typer.Exit(code)


def read_input(file: str) -> str:
    """The text of ``file``, or of standard input for ``-``; unreadable: :func:`fail` (exit 2)."""
    try:
        return sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except OSError as exc:
        raise fail(f"cannot read {file}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise fail(f"cannot read {file}: {exc}") from exc


def read_parsed(file: str, parse: Callable[[str], _Parsed],
                errors: type[Exception] | tuple[type[Exception], ...],
                message: str) -> tuple[str, _Parsed]:
    """:func:`read_input`, then ``parse`` of its text: the text and what it parses to. A parse
    error (``errors``) is :func:`fail` (exit 2) with ``message`` formatted with ``file`` and
    ``error``, e.g. ``"{file} is not JSON: {error}"``."""
    text = read_input(file)
    try:
        return text, parse(text)
    except errors as exc:
        raise fail(message.format(file=file, error=exc)) from exc
