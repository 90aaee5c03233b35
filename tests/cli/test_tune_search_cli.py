"""``ascend-serve tune --search``: bad input is refused (exit 2) before any server starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from terminal import uncolored
from typer.testing import CliRunner

from ascend_serve.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(("args", "message"), [
    (["--space", "max-num-sequences=4,8"], "unknown knob 'max-num-sequences'"),
    (["--space", "swap-space=4"], "the knobs are max-num-seqs, max-num-batched-tokens"),
    (["--space", "max-num-seqs"], "KNOB=V1,V2"),
    (["--space", "gpu-memory-utilization=0.9,2"], "fraction"),
    (["--space", "enable-chunked-prefill=sometimes"], "true or false"),
    (["--trials", "0"], "--trials must be at least 1"),
    (["--sampler", "annealing"], "--sampler must be tpe or random"),
])
def test_bad_search_input_exits_2_naming_the_cause(tmp_path: Path, args: list[str],
                                                   message: str) -> None:
    result = runner.invoke(app, ["tune", "tiny-deepseek-v3", "--search", *args,
                                 "--venv", str(tmp_path / "no-venv"),
                                 "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert message in " ".join(uncolored(result.output).split())
    assert not (tmp_path / "out").exists()  # nothing started, nothing written


def test_space_without_search_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["tune", "tiny-deepseek-v3", "--space", "max-num-seqs=4",
                                 "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "--space is for --search" in " ".join(uncolored(result.output).split())
