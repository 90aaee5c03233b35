"""Every molecule scenario, run for real in podman containers (create ... verify ... destroy)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))


def wheelhouse() -> str:
    """The host's pip wheelhouse (find-links), mounted on nodes that install the CPU set."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"],
                          capture_output=True, text=True, check=False)
    found = (proc.stdout.strip() if proc.returncode == 0 else "") or os.environ.get(
        "PIP_FIND_LINKS", "")
    first = found.split()[0] if found.split() else ""
    return first if first and Path(first).is_dir() else ""


def ca_bundle() -> str:
    """The CA bundle the host's pip trusts (a site CA or a TLS-inspecting proxy)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.cert"],
                          capture_output=True, text=True, check=False)
    found = proc.stdout.strip() if proc.returncode == 0 else ""
    return found or os.environ.get("PIP_CERT", "") or "/etc/ssl/certs/ca-certificates.crt"


def _tail(path: Path, lines: int = 80) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def test_scenarios_found() -> None:
    assert {"serving", "os_base_dnf"} <= set(SCENARIOS)


@pytest.mark.molecule
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario: str, tmp_path: Path) -> None:
    log = tmp_path / f"molecule-{scenario}.log"
    env = dict(os.environ, PY_COLORS="0",
               ANSIBLE_FORCE_COLOR="0")
    empty = tmp_path / "no-wheelhouse"
    empty.mkdir()
    env["ASCEND_WHEELHOUSE"] = wheelhouse() or str(empty)
    env["ASCEND_CA_BUNDLE"] = ca_bundle()
    # Scenarios run two at a time under pytest-xdist: each worker keeps its own apt archive
    # cache, since two containers running apt on one cache directory contend for its lock.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    env["ASCEND_APT_CACHE_ID"] = worker or "shared"
    # The scenarios that use the local inventory's group_vars get its checked-in main.yml alone:
    # the main job writes mirror.yml (and artifacts.yml) next to it while it runs.
    group_vars = tmp_path / "group_vars" / "ascend_nodes"
    group_vars.mkdir(parents=True)
    shutil.copy2(ROOT / "inventories/local/group_vars/ascend_nodes/main.yml", group_vars)
    env["ASCEND_MOLECULE_GROUP_VARS"] = str(group_vars.parent)
    with log.open("w") as out:
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "molecule"), "test", "-s", scenario],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, check=False,
        )
    assert proc.returncode == 0, f"molecule scenario {scenario} failed:\n{_tail(log)}"
