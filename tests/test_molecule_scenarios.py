"""Every molecule scenario, run for real in podman containers (create ... verify ... destroy)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))


def _tail(path: Path, lines: int = 80) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def test_scenarios_found() -> None:
    assert {"default", "preflight_fail"} <= set(SCENARIOS)


@pytest.mark.molecule
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario: str, tmp_path: Path) -> None:
    log = tmp_path / f"molecule-{scenario}.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "molecule"), PY_COLORS="0",
               ANSIBLE_FORCE_COLOR="0")
    with log.open("w") as out:
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "molecule"), "test", "-s", scenario],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, check=False,
        )
    assert proc.returncode == 0, f"molecule scenario {scenario} failed:\n{_tail(log)}"
