"""The README's main command, end to end on the simulated local node, run twice."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NODE = "ascend-local-a2"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / "local-deploy.sh"), *args],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )


def _unit() -> dict[str, str]:
    out = subprocess.run(
        ["podman", "exec", NODE, "systemctl", "show", "ascend-vllm",
         "--property=ActiveState,NRestarts,User,ExecMainPID"],
        capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.split())


@pytest.mark.molecule
def test_local_deploy_fresh_then_no_change() -> None:
    first = _run("--fresh")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert "preflight ascend-local-a2: PASSED" in first.stdout
    # The demo ends with the wrapper's validate, from this machine, passing against the node.
    assert re.search(r"validating tiny-deepseek-v3 at http://[0-9.]+:8000", first.stdout)
    assert re.search(r"(\d+)/\1 checks passed: OK", first.stdout), first.stdout[-4000:]
    assert "serving tiny-deepseek-v3 at http://" in first.stdout
    pid_before = _unit()["ExecMainPID"]
    second = _run()
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    recap = re.search(rf"{NODE}\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0",
                      second.stdout)
    assert recap is not None, second.stdout[-4000:]
    assert recap.group(1) == "0", "a second run of the main job must change nothing"
    report = json.loads(
        subprocess.run(["podman", "exec", NODE, "cat", "/var/lib/ascend-serve/preflight.json"],
                       capture_output=True, text=True, check=True).stdout
    )
    assert report["passed"] is True
    assert len(report["facts"]["npus"]) == 8
    # The serving environment: the CPU set imports in the node's venv, the tiny model is staged.
    imported = subprocess.run(
        ["podman", "exec", NODE, "/opt/ascend-serve/env/bin/python", "-c",
         "import importlib.metadata as m, torch, vllm; "
         "print(m.version('vllm'), torch.__version__)"],
        capture_output=True, text=True, check=False)
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert imported.stdout.split() == ["0.32.0+cpu", "2.13.0+cpu"]
    manifest = json.loads(subprocess.run(
        ["podman", "exec", NODE, "cat",
         "/var/lib/ascend-serve/models/tiny-deepseek-v3/ascend-serve-manifest.json"],
        capture_output=True, text=True, check=True).stdout)
    assert {f["path"] for f in manifest["files"]} >= {"config.json", "model.safetensors"}
    # The second run restarted nothing: the same server process, never restarted, unprivileged.
    unit = _unit()
    assert unit["ExecMainPID"] == pid_before != "0"
    assert (unit["ActiveState"], unit["NRestarts"], unit["User"]) == (
        "active", "0", "ascend-vllm")
    subprocess.run(["podman", "rm", "-f", NODE], capture_output=True, check=False)
