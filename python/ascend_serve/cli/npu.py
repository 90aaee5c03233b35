"""``ascend-serve npu``: read ``npu-smi info`` tables, from a file or from this node.

Exit codes (see :mod:`ascend_serve.exitcodes`): 0 every chip is OK, 1 some chip is not OK (or the
table lists no chip), 2 the input cannot be read or parsed (or npu-smi is not found), 3 npu-smi
itself failed (non-zero exit, timeout).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Annotated

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ascend_serve.cli.console import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_FAILED,
    EXIT_OK,
    console,
    fail,
    read_parsed,
)
from ascend_serve.cli.options import NpuSmi, json_option
from ascend_serve.stack.npusmi import (
    DEFAULT_NPU_SMI,
    NPU_SMI_TIMEOUT_S,
    Chip,
    NpuSmiParseError,
    NpuSmiRunError,
    locate,
    parse_info,
    parse_version,
    query_info,
    unhealthy,
)

npu_app = typer.Typer(
    help="NPU chips as npu-smi shows them: parse a saved 'npu-smi info', or query this node.",
    no_args_is_help=True,
)

_HEALTH_STYLE = {"OK": "green", "Warning": "yellow"}
_WORD_COLUMNS = {"Name", "Health", "Bus-Id"}


class _SampleError(Exception):
    """One ``npu-smi info`` run that gave no chip table; ``code`` is the exit code it means."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _number(value: float | int | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _usage(used: int | None, total: int | None) -> str:
    if used is None and total is None:
        return "-"
    return f"{_number(used)} / {_number(total)}"


def _health(chip: Chip) -> str:
    style = _HEALTH_STYLE.get(chip.health, "red")
    return f"[{style}]{escape(chip.health)}[/{style}]"


def chip_table(chips: list[Chip], title: str) -> Table:
    """The chips as a rich table; Phy-ID / Device / HBM columns only where the layout has them."""
    has_hbm = any(c.hbm_total_mb is not None for c in chips)
    # (header, shown, cell of a chip); numbers are right-aligned, words left-aligned
    columns: list[tuple[str, bool, Callable[[Chip], str]]] = [
        ("NPU", True, lambda c: str(c.npu)),
        ("Chip", True, lambda c: str(c.chip)),
        ("Phy-ID", any(c.phy_id is not None for c in chips), lambda c: _number(c.phy_id)),
        ("Device", any(c.device_id is not None for c in chips), lambda c: _number(c.device_id)),
        ("Name", True, lambda c: escape(c.name)),
        ("Health", True, _health),
        ("Power(W)", True, lambda c: "-" if c.power_w is None else f"{c.power_w:.1f}"),
        ("Temp(C)", True, lambda c: _number(c.temp_c)),
        ("AICore(%)", True, lambda c: _number(c.aicore_pct)),
        ("HBM(MB)", has_hbm, lambda c: _usage(c.hbm_used_mb, c.hbm_total_mb)),
        ("Memory(MB)", any(c.memory_total_mb for c in chips) or not has_hbm,
         lambda c: _usage(c.memory_used_mb, c.memory_total_mb)),
        ("Bus-Id", True, lambda c: escape(c.bus_id)),
    ]
    shown = [(header, cell) for header, show, cell in columns if show]
    table = Table(title=escape(title))
    for header, _ in shown:
        table.add_column(header, justify="left" if header in _WORD_COLUMNS else "right")
    for chip in chips:
        table.add_row(*(cell(chip) for _, cell in shown))
    return table


def _title(source: str, version: str | None, chips: list[Chip]) -> str:
    bad = len(unhealthy(chips))
    verdict = f"{bad} not OK" if bad else ("no chips" if not chips else "all OK")
    tool = f"npu-smi {version}" if version else "npu-smi"
    return f"{source} ({tool}): {len(chips)} chip(s), {verdict}"


def _exit_code(chips: list[Chip]) -> int:
    return EXIT_CHECK_FAILED if not chips or unhealthy(chips) else EXIT_OK


def _json(chips: list[Chip]) -> str:
    return json.dumps([c.model_dump() for c in chips], indent=2)


@npu_app.command("parse")
def parse_command(
    file: Annotated[str, typer.Argument(help="Saved 'npu-smi info' output, or - for stdin.")],
    as_json: Annotated[bool, json_option("Print a JSON list of chips.")] = False,
) -> None:
    """Show the chips of a saved 'npu-smi info' table; exit 1 when a chip is not OK."""
    text, chips = read_parsed(file, parse_info, NpuSmiParseError, "{file}: {error}")
    if as_json:
        typer.echo(_json(chips))
    else:
        console.print(chip_table(chips, _title(file, parse_version(text), chips)))
    raise typer.Exit(_exit_code(chips))


def find_npu_smi(path: str | None) -> str:
    """``path`` if given, else ``npu-smi`` on PATH, else :data:`DEFAULT_NPU_SMI`."""
    found = locate(path, fallback=DEFAULT_NPU_SMI)
    if found is not None:
        return found
    if path is not None:
        raise fail(f"{path}: no such executable")
    raise fail(f"npu-smi is not on PATH nor at {DEFAULT_NPU_SMI} (is the NPU driver installed?); "
               "give its path with --npu-smi")


def _sample(npu_smi: str) -> tuple[list[Chip], str | None]:
    """Run ``npu-smi info`` once: the chips and the tool's version."""
    try:
        text = query_info(npu_smi, NPU_SMI_TIMEOUT_S)
    except NpuSmiRunError as exc:
        raise _SampleError(str(exc), EXIT_FAILED) from exc
    try:
        return parse_info(text), parse_version(text)
    except NpuSmiParseError as exc:
        raise _SampleError(f"cannot read the output of {npu_smi} info: {exc}",
                           EXIT_BAD_INPUT) from exc


def _pause(seconds: float) -> None:
    """The wait between two samples of ``--watch`` (a seam for the tests)."""
    time.sleep(seconds)


def _watch(npu_smi: str, seconds: float) -> int:
    """Sample every ``seconds`` in a live table until Ctrl-C; the code of the last sample."""
    code = EXIT_OK
    with Live(console=console, auto_refresh=False) as live:
        try:
            while True:
                stamp = datetime.now().strftime("%H:%M:%S")
                caption = f"{stamp}, every {_number(seconds)} s; Ctrl-C to stop"
                view: RenderableType
                try:
                    chips, version = _sample(npu_smi)
                except _SampleError as exc:
                    code = exc.code
                    view = Group(Text(str(exc), style="red"), Text(caption, style="dim"))
                else:
                    code = _exit_code(chips)
                    table = chip_table(chips, _title(npu_smi, version, chips))
                    table.caption = caption
                    view = table
                live.update(view, refresh=True)
                _pause(seconds)
        except KeyboardInterrupt:
            pass
    return code


@npu_app.command("status")
def status_command(
    npu_smi: NpuSmi = None,
    watch: Annotated[float | None, typer.Option(
        "--watch", min=0.1, metavar="SECONDS",
        help="Refresh the table every SECONDS until Ctrl-C.",
    )] = None,
    as_json: Annotated[bool, json_option("Print one sample as JSON.")] = False,
) -> None:
    """Run 'npu-smi info' on this node and show its chips; exit 1 when a chip is not OK."""
    if watch is not None and as_json:
        raise fail("--json prints one sample; it does not go with --watch")
    path = find_npu_smi(npu_smi)
    if watch is not None:
        raise typer.Exit(_watch(path, watch))
    try:
        chips, version = _sample(path)
    except _SampleError as exc:
        raise fail(str(exc), exc.code) from exc
    if as_json:
        typer.echo(_json(chips))
    else:
        console.print(chip_table(chips, _title(path, version, chips)))
    raise typer.Exit(_exit_code(chips))
