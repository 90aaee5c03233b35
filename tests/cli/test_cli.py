"""The ascend-serve CLI: --version and the preflight report reader (exit codes, --json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from terminal import uncolored
from typer.testing import CliRunner

from ascend_serve import __version__
from ascend_serve.cli.main import app

runner = CliRunner()


def _report(passed: bool = True) -> dict[str, Any]:
    return {
        "host": "node-01",
        "passed": passed,
        "checks": [
            {"name": "architecture", "ok": True, "summary": "architecture aarch64"},
            {"name": "npu_count", "ok": passed, "summary": "npus 8 x 910B"},
        ],
        "facts": {
            "architecture": "aarch64",
            "distribution": "openEuler",
            "distribution_version": "22.03",
            "os_family": "RedHat",
            "kernel": "5.10.0-182.0.0.95.oe2203sp3.aarch64",
            "memory_mb": 1048576,
            "npus": [{"address": "0000:c1:00.0", "device": "0xd802", "chip_family": "910B",
                      "numa_node": 1}],
            "expected_npu_count": 8,
            "expected_npu_chip": "910B",
            "clock_synchronized": True,
        },
    }


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"ascend-serve {__version__}"
    assert __version__ != "0.0.0+unknown"


def test_help_lists_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "preflight" in result.stdout


def test_report_passed_table(tmp_path: Path) -> None:
    path = tmp_path / "preflight.json"
    path.write_text(json.dumps(_report()))
    result = runner.invoke(app, ["preflight", "report", str(path)])
    assert result.exit_code == 0, result.output
    assert "PASSED" in result.stdout
    assert "npus 8 x 910B" in result.stdout
    assert "0000:c1:00.0" in result.stdout


def test_report_failed_exit_code_and_json_from_stdin() -> None:
    result = runner.invoke(app, ["preflight", "report", "-", "--json"],
                           input=json.dumps(_report(passed=False)))
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["passed"] is False
    assert [c["name"] for c in data["checks"] if not c["ok"]] == ["npu_count"]


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read"), ('{"host": "x"}', "is not a preflight report")],
)
def test_report_bad_input_exit_2(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    result = runner.invoke(app, ["preflight", "report", str(path)])
    assert result.exit_code == 2
    assert message in result.stderr


def test_shell_completion() -> None:
    """Typer's completion is on: the options in --help, and profile names complete in bash."""
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    out = uncolored(result.stdout)
    assert "--install-completion" in out and "--show-completion" in out
    env = {**os.environ, "_ASCEND_SERVE_COMPLETE": "complete_bash",
           "COMP_WORDS": "ascend-serve profiles show tiny-deep", "COMP_CWORD": "3"}
    done = subprocess.run([str(Path(sys.executable).parent / "ascend-serve")], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "tiny-deepseek-v3" in done.stdout.split()


def test_the_cli_does_not_import_ansible() -> None:
    """Importing Ansible patches the interpreter (sys.intern), which torch's compiler refuses:
    commands that import torch (model make-tiny) broke when the CLI imported it eagerly. (The
    collection's node-side readers, ``ansible_collections...module_utils``, are plain Python.)"""
    code = ("import sys, ascend_serve.cli.main; "
            "print(sorted(m for m in sys.modules if m == 'ansible' or m.startswith('ansible.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout
