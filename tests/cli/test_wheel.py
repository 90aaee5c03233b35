"""The wheel works away from the checkout: it ships the ascend_serve.fleet collection (data,
roles, playbooks, plugins), and the CLI installed from it reads that data and runs the
collection's playbooks through Ansible from a directory that is no checkout.

The wheel is built from a clean copy of the sources (no stale ``build/`` of the checkout can slip
into it), installed with ``pip install --target`` and run with that copy first on ``sys.path``;
its dependencies are this environment's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from paths import ROOT
from terminal import COLOUR_ENV

PACKAGE = "ascend_serve"
PACKAGED = f"{PACKAGE}/_collections/"
COLLECTION = "ansible_collections/ascend_serve/fleet"
# Run the installed copy, never the checkout's (the editable install is on this sys.path too).
DRIVER = """\
import sys
sys.path.insert(0, sys.argv.pop(1))
import ascend_serve
if not ascend_serve.__file__.startswith(sys.path[0]):
    sys.exit(f"ascend_serve comes from {ascend_serve.__file__}, not the wheel")
from ascend_serve.cli.main import app
app(prog_name="ascend-serve")
"""


@dataclass(frozen=True)
class Installed:
    source: Path  # the copy of the working tree the wheel was built from
    wheel: Path
    target: Path  # the installed package's sys.path entry
    cwd: Path  # a directory that is no checkout

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ASCEND_SERVE_", "ANSIBLE_"))
               and k not in ("PYTHONPATH", *COLOUR_ENV)}
        return subprocess.run(
            [sys.executable, "-c", DRIVER, str(self.target), *args], cwd=self.cwd, env=env,
            capture_output=True, text=True, timeout=timeout, check=False)


def _source_copy(dest: Path) -> None:
    """What the wheel is built from, as it is in the working tree (links kept)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", ".*_cache")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    for name in ("python", "collections"):
        shutil.copytree(ROOT / name, dest / name, symlinks=True, ignore=ignore)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("wheel")
    source, dist, target, cwd = (base / d for d in ("src", "dist", "target", "elsewhere"))
    source.mkdir()
    cwd.mkdir()
    _source_copy(source)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w",
                    str(dist), str(source)], check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("ascend_serve-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    yield Installed(source, wheel, target, cwd)


def _tree_files(root: Path) -> set[str]:
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        found |= {str((Path(dirpath) / f).relative_to(root)) for f in filenames
                  if not f.endswith(".pyc")}
    return found


def test_the_wheel_ships_the_package_and_the_whole_collection(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    packaged = {n.removeprefix(PACKAGED) for n in names if n.startswith(PACKAGED)}
    for wanted in ("data/stack-matrix.yml", "data/serving-profiles.yml",
                   "data/ranktable.schema.json", "roles/vllm_service/templates/vllm-launch.sh.j2",
                   "roles/vllm_service/files/validate.py", "roles/preflight/tasks/main.yml",
                   "playbooks/site.yml", "galaxy.yml", "meta/runtime.yml"):
        assert f"{COLLECTION}/{wanted}" in packaged, wanted
    assert any(n.startswith(f"{COLLECTION}/data/locks/") for n in packaged)
    assert any(n.startswith(f"{COLLECTION}/plugins/modules/") for n in packaged)
    missing = _tree_files(installed.source / "collections") - packaged
    assert not missing, f"collection files the wheel leaves out: {sorted(missing)}"
    # The modules are the source tree's, no more (nothing stale) and no fewer.
    modules = {n for n in names if n.endswith(".py") and not n.startswith(PACKAGED)}
    python = installed.source / "python"
    source = {f"{PACKAGE}/{n}" for n in _tree_files(python / PACKAGE)
              if n.endswith(".py") and not n.startswith("_collections/")}
    assert modules == source


def test_the_installed_copy_is_what_runs(installed: Installed) -> None:
    done = installed.run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ascend-serve ")
    where = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
         "from ascend_serve import resources; print(resources.__file__); "
         "print(resources.collections_path())", str(installed.target)],
        cwd=installed.cwd, capture_output=True, text=True, check=True, timeout=60)
    module, collections = where.stdout.splitlines()
    assert Path(module).is_relative_to(installed.target)
    assert Path(collections).resolve().is_relative_to(installed.target.resolve())
    assert not Path(collections).is_symlink()  # a copy, not a link back to the checkout


@pytest.mark.parametrize(("args", "expected"), [
    (["matrix"], "Locked version sets"),
    (["matrix", "--json"], '"name": "vllm-ascend-'),
    (["profiles", "list"], "tiny-deepseek-v3"),
    (["profiles", "show", "tiny-deepseek-v3"], '"name": "tiny-deepseek-v3"'),
    (["deploy", "--help"], "Usage: ascend-serve deploy"),
    (["--help"], "--install-completion"),
])
def test_commands_read_the_packaged_data(installed: Installed, args: list[str],
                                         expected: str) -> None:
    done = installed.run(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert expected in done.stdout
    if "--json" in args or args[:2] == ["profiles", "show"]:
        json.loads(done.stdout)


@pytest.mark.parametrize(("args", "message"), [
    (["deploy", "ascend_serve.fleet.site", "--check", "-i", "missing.yml"],
     "inventory missing.yml does not exist"),
    (["deploy", "--check"], "no inventory given (-i), and no project here"),
    (["deploy", "no-such-playbook", "-i", "h1,"], "the collection's playbooks: fleet_status, "),
    (["fleet", "status", "-i", "missing.yml"], "inventory missing.yml does not exist"),
])
def test_deploy_bad_input_without_a_checkout(installed: Installed, args: list[str],
                                             message: str) -> None:
    done = installed.run(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in " ".join(done.stderr.split())
    assert not (installed.cwd / ".ascend-serve").exists()  # nothing ran


def test_a_collection_playbook_runs_from_the_wheel(installed: Installed) -> None:
    """``fleet status`` runs the packaged ascend_serve.fleet.fleet_status by name over this
    machine: Ansible finds it on ANSIBLE_COLLECTIONS_PATH, the run is in the run directory."""
    hosts = {"all": {"children": {"ascend_nodes": {"hosts": {"h1": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}
    (installed.cwd / "hosts.yml").write_text(yaml.safe_dump(hosts), encoding="utf-8")
    run_dir = installed.cwd / "run"
    done = installed.run("fleet", "status", "-i", "hosts.yml", "--run-dir", str(run_dir),
                         "--json", timeout=180)
    assert done.returncode == 1, done.stdout + done.stderr  # never provisioned: a problem
    (host,) = json.loads(done.stdout)["hosts"]
    assert host["host"] == "h1" and host["reachable"] is True
    command = json.loads((run_dir / "command").read_text())
    assert command["command"][-1] == "ascend_serve.fleet.fleet_status"
    assert command["cwd"] == str(run_dir)  # no project: no ansible.cfg of a checkout
    first = command["env"]["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep)[0]
    assert Path(first).is_relative_to(installed.target)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["project"] is None and summary["playbook"] == "ascend_serve.fleet.fleet_status"
