"""The wheel works away from the checkout: it ships the ascend_serve.fleet collection (data,
roles, playbooks, plugins), and the CLI installed from it reads that data and runs the
collection's playbooks through Ansible from a directory that is no checkout.

The wheel is built from a clean copy of the sources (no stale ``build/`` of the checkout can slip
into it) and installed into a fresh venv, whose dependencies are this environment's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from paths import ROOT
from terminal import COLOUR_ENV

PACKAGE = "ascend_serve"
COLLECTION = "ansible_collections/ascend_serve/fleet"
# What the wheel is built from: the package's build files, the package, and the collection (the
# repository root is the collection: setup.py copies its content into the wheel).
BUILD_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "galaxy.yml",
               "CHANGELOG.md")
SOURCE_DIRS = ("python", "meta", "roles", "playbooks", "plugins", "data", "templates")


@dataclass(frozen=True)
class Installed:
    source: Path  # the copy of the working tree the wheel was built from
    wheel: Path
    venv: Path  # a fresh venv with the wheel installed
    site: Path  # its site-packages
    cwd: Path  # a directory that is no checkout

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ASCEND_SERVE_", "ANSIBLE_", "VIRTUAL_ENV"))
               and k not in ("PYTHONPATH", *COLOUR_ENV)}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return subprocess.run(
            [str(self.venv / "bin" / "ascend-serve"), *args], cwd=self.cwd, env=env,
            capture_output=True, text=True, timeout=timeout, check=False)

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.venv / "bin" / "python"), "-c", code], cwd=self.cwd,
                              capture_output=True, text=True, check=True, timeout=60)


def _source_copy(dest: Path) -> None:
    """What the wheel is built from, as it is in the working tree."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", ".*_cache")
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, dest / name)
    for name in SOURCE_DIRS:
        shutil.copytree(ROOT / name, dest / name, symlinks=True, ignore=ignore)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """The wheel built from a clean copy, installed in a fresh venv (no checkout on its path).

    The venv gets its dependencies from this environment's site-packages, as a plain path entry
    (a ``.pth`` line): the editable install of the checkout and its collection link are ``.pth``
    files there, which Python does not read from a path added that way."""
    base = tmp_path_factory.mktemp("wheel")
    source, dist, venv, cwd = (base / d for d in ("src", "dist", "venv", "elsewhere"))
    source.mkdir()
    cwd.mkdir()
    _source_copy(source)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w",
                    str(dist), str(source)], check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("ascend_serve-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = Path(subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # pip from the dependencies, run by the fresh venv's Python: it installs there, with the
    # venv's interpreter in the ascend-serve script. --ignore-installed: pip sees this
    # environment's editable install through the path entry and would uninstall it.
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check",
                    "-q", "install", "--no-deps", "--no-index", "--ignore-installed", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    yield Installed(source, wheel, venv, site, cwd)


def _tree_files(root: Path) -> set[str]:
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        found |= {str((Path(dirpath) / f).relative_to(root)) for f in filenames
                  if not f.endswith(".pyc")}
    return found


def test_the_wheel_ships_the_package_and_the_whole_collection(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    packaged = {n.removeprefix(f"{COLLECTION}/") for n in names
                if n.startswith(f"{COLLECTION}/")}
    for wanted in ("data/stack-matrix.yml", "data/serving-profiles.yml",
                   "data/ranktable.schema.json", "templates/vllm-launch.sh.j2",
                   "plugins/module_utils/validate.py", "roles/preflight/tasks/main.yml",
                   "playbooks/site.yml", "galaxy.yml", "meta/runtime.yml"):
        assert wanted in packaged, wanted
    assert any(n.startswith("data/locks/") for n in packaged)
    assert any(n.startswith("plugins/modules/") for n in packaged)
    expected = {str(Path(d) / n)
                for d in SOURCE_DIRS[1:] for n in _tree_files(installed.source / d)}
    expected |= {"galaxy.yml", "README.md", "CHANGELOG.md"}
    assert packaged == expected, (f"left out: {sorted(expected - packaged)}; "
                                  f"extra: {sorted(packaged - expected)}")
    # The modules are the source tree's, no more (nothing stale) and no fewer.
    modules = {n for n in names if n.endswith(".py") and n.startswith(f"{PACKAGE}/")}
    source = {f"{PACKAGE}/{n}" for n in _tree_files(installed.source / "python" / PACKAGE)
              if n.endswith(".py")}
    assert modules == source


def test_the_installed_copy_is_what_runs(installed: Installed) -> None:
    done = installed.run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ascend-serve ")
    where = installed.python(
        "import ascend_serve; from ascend_serve import resources; "
        "from ansible_collections.ascend_serve.fleet.plugins.module_utils import npu_smi; "
        "print(ascend_serve.__file__); print(resources.collection_dir()); print(npu_smi.__file__)")
    module, collection, reader = where.stdout.splitlines()
    for path in (module, collection, reader):
        assert Path(path).is_relative_to(installed.site), path
    assert not any(p.is_symlink() for p in Path(collection).rglob("*"))  # copies, not links


def test_a_command_reads_a_role_and_a_data_file_from_the_wheel(installed: Installed) -> None:
    """``mirror list`` reads the os_base role's package list (roles/os_base/vars/Debian.yml)
    and the set's lock (data/locks/), both from the wheel's copy of the collection."""
    (installed.cwd / "mirror-hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "ascend_nodes": {"hosts": {"n1": {}},
                         "vars": {"ascend_stack_set": "vllm-ascend-0.13.0"}}}}}))
    done = installed.run("mirror", "list", "-i", "mirror-hosts.yml", "--os-family", "Debian",
                         "--arch", "aarch64", "--kind", "os", "--kind", "wheel", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    artifacts = json.loads(done.stdout)["artifacts"]
    debian = yaml.safe_load((installed.source / "roles/os_base/vars/Debian.yml").read_text())
    os_names = {a["name"] for a in artifacts if a["kind"] == "os"}
    assert os_names and os_names <= {str(p) for v in debian.values() if isinstance(v, list)
                                     for p in v} | os_names
    assert "gcc" in os_names
    assert any(a["kind"] == "wheel" and a["name"].startswith("vllm") for a in artifacts)


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
    assert Path(first).is_relative_to(installed.site)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["project"] is None and summary["playbook"] == "ascend_serve.fleet.fleet_status"
