"""One convention for every ``ascend-serve`` command: --json where it prints data, exit 2 for bad
input (an override out of range included), and help that wraps cleanly in an 80-column terminal."""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from ascend_serve.cli.main import app, unwrap_help
from ascend_serve.exitcodes import EXIT_BAD_INPUT

runner = CliRunner()
COLUMNS = 80


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


ROOT = typer.main.get_command(app)
COMMANDS = dict(_commands(ROOT))
LEAVES = sorted(p for p, c in COMMANDS.items() if not hasattr(c, "commands"))


def _has_json(command: Any) -> bool:
    return any("--json" in getattr(p, "opts", ()) for p in command.params)


def test_the_tree_is_read() -> None:
    assert ("serve",) in LEAVES and ("profiles", "show") in LEAVES and ("matrix", "lock") in LEAVES
    assert len(LEAVES) >= 20


@pytest.mark.parametrize("path", LEAVES, ids=" ".join)
def test_every_command_accepts_json(path: tuple[str, ...]) -> None:
    """Every command prints data (a report, a table, a plan), so every one takes --json."""
    assert _has_json(COMMANDS[path]), f"ascend-serve {' '.join(path)} has no --json"


def test_matrix_takes_json_on_the_group() -> None:
    """``matrix`` prints the sets itself (its callback), so the group has --json too."""
    assert _has_json(COMMANDS[("matrix",)])


def test_profiles_show_json() -> None:
    result = runner.invoke(app, ["profiles", "show", "tiny-deepseek-v3", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["profile"]["name"] == "tiny-deepseek-v3"
    assert data == json.loads(runner.invoke(app, ["profiles", "show", "tiny-deepseek-v3"]).stdout)


@pytest.mark.parametrize("args", [
    ["profiles", "show", "tiny-deepseek-v3", "--set", "vllm.max-model-len=-5"],
    ["profiles", "show", "tiny-deepseek-v3", "--set", "vllm.max-model-len=0"],
    ["profiles", "show", "tiny-deepseek-v3", "--set", "vllm.max-model-len=8k"],
    ["profiles", "show", "tiny-deepseek-v3", "--set", "vllm.max-num-seqs=-1"],
    ["profiles", "show", "tiny-deepseek-v3", "--set", "vllm.max-num-batched-tokens=true"],
    ["serve", "tiny-deepseek-v3", "--dry-run", "--set", "vllm.max-model-len=-5"],
    ["k8s", "render", "tiny-deepseek-v3", "--set", "vllm.max-model-len=-5"],
], ids=lambda a: " ".join(a[:2] + a[-1:]))
def test_an_override_out_of_range_is_refused(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    flag = args[-1].split("=")[0].removeprefix("vllm.")
    assert f"vllm flag '{flag}' must be a whole number of at least 1" in result.stderr
    assert not result.stdout


def test_an_override_in_range_is_kept() -> None:
    result = runner.invoke(app, ["profiles", "show", "tiny-deepseek-v3", "--set",
                                 "vllm.max-model-len=1024", "--set", "vllm.max-num-seqs=4"])
    assert result.exit_code == 0, result.output
    vllm = json.loads(result.stdout)["profile"]["vllm"]
    assert vllm["max-model-len"] == 1024 and vllm["max-num-seqs"] == 4


@pytest.mark.parametrize("args", [
    ["matrix", "--set", "nope"],
    ["profiles", "show", "nope"],
    ["profiles", "show", "tiny-deepseek-v3", "--set", "nope"],
    ["profiles", "show", "tiny-deepseek-v3", "--no-such-option"],
    ["serve", "nope", "--dry-run"],
    ["serve", "tiny-deepseek-v3", "--dry-run", "--port", "0"],
    ["k8s", "render", "nope"],
    ["npu", "parse", "/nonexistent/npu-smi.txt"],
    ["preflight", "report", "/nonexistent/preflight.json"],
    ["ranktable", "validate", "/nonexistent/hccl.json"],
    ["deploy", "no-such-playbook"],
    ["validate", "not-a-url"],
], ids=" ".join)
def test_bad_input_exits_2(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == EXIT_BAD_INPUT, (result.exit_code, result.output)


# --- help ----------------------------------------------------------------------------------------


def test_unwrap_help_joins_lines_within_paragraphs_only() -> None:
    text = """First line
    goes on.

    Second paragraph
    also.

    \b
    kept
    as is
    \f
    hidden
    text"""
    assert unwrap_help(text) == ("First line goes on.\n\nSecond paragraph also.\n\n"
                                 "\b\nkept\nas is\n\f\nhidden\ntext")
    assert unwrap_help(None) is None


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: " ".join(p) or "ascend-serve")
def test_help_has_no_hard_line_breaks(path: tuple[str, ...]) -> None:
    """A docstring's source line breaks are not the terminal's: inside a paragraph there are none
    left for --help to print (click's ``\\b`` paragraphs excepted)."""
    command = COMMANDS[path]
    texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
    for text in texts:
        for paragraph in inspect.cleandoc(text).partition("\f")[0].split("\n\n"):
            assert paragraph.startswith("\b") or "\n" not in paragraph, paragraph


def _description(lines: list[str]) -> list[list[str]]:
    """The paragraphs of the command's own text: after the usage, before the first section."""
    paragraphs: list[list[str]] = []
    current: list[str] = []
    for line in lines[1:]:
        if line and not line.startswith(" "):  # "Arguments:", "Options:", "Commands:"
            break
        if line.strip():
            current.append(line)
        elif current:
            paragraphs.append(current)
            current = []
    return [*paragraphs, current] if current else paragraphs


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: " ".join(p) or "ascend-serve")
def test_help_fits_80_columns(path: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(COLUMNS)})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Usage: ascend-serve")
    too_wide = [line for line in lines if len(line) > COLUMNS]
    assert not too_wide
    assert not [line for line in lines if "…" in line]  # nothing cut short
    # No paragraph line ends early: the next line's first word would have fitted on it.
    for paragraph in _description(lines):
        for line, following in itertools.pairwise(paragraph):
            assert len(line) + 1 + len(following.split()[0]) > COLUMNS - 10, (line, following)
