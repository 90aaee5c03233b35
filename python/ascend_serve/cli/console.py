"""Terminal output and exit codes shared by every ``ascend-serve`` subcommand."""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape

# Exit codes of every subcommand: 0 success, 1 a check failed (the thing checked is not right),
# 2 bad usage or unreadable input (nothing was checked), 3 the operation itself failed
# (a server that died while starting, a timeout).
EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_FAILED = 0, 1, 2, 3

# Wide output when piped (reports, CI logs); the terminal's width otherwise.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print ``message`` in red on stderr and return the ``typer.Exit`` to raise."""
    err_console.print(f"[red]{escape(message)}[/red]", highlight=False)
    return typer.Exit(code)
