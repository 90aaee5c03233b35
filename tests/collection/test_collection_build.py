"""The collection as a user gets it: ``ansible-galaxy collection build``, installed from the
tarball (offline) into a collections path of its own, and used from there only: ansible-doc, a
role and the playbooks by their FQCN, the data the roles and the package read, and a README that
lists exactly what is in it.

The collection's dependencies (ansible.posix, community.general) come from the ``ansible``
package in this environment, as in production; ascend_serve.fleet itself only from the install.
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible_run import BIN
from paths import ROOT

FQCN = "ascend_serve.fleet"


class Installed:
    """The built tarball and the collection installed from it."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.collections = base / "collections"
        self.tree = self.collections / "ansible_collections" / "ascend_serve" / "fleet"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("ANSIBLE_") and k != "PYTHONPATH"}
        # The checkout's venv also has the repository on sys.path as the collection (Ansible
        # scans sys.path after its collections path): the install's copy comes first.
        self.env.update({"ANSIBLE_COLLECTIONS_PATH": str(self.collections), "ANSIBLE_NOCOLOR": "1",
                         "ANSIBLE_FORCE_COLOR": "0", "PY_COLORS": "0"})

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        """An ansible tool in ``base`` (not the repository: its ansible.cfg names its own
        collections path), with only the installed collection on the collections path."""
        return subprocess.run([str(BIN / tool), *args], cwd=self.base, env=self.env,
                              capture_output=True, text=True, check=False, timeout=120)

    def listed(self, plugin_type: str) -> set[str]:
        """The plugins of that type ansible-doc finds in the installed collection."""
        proc = self.run("ansible-doc", "-t", plugin_type, "--list", "--json", FQCN)
        assert proc.returncode == 0, proc.stderr
        return {name.removeprefix(f"{FQCN}.") for name in json.loads(proc.stdout)}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    inst = Installed(tmp_path_factory.mktemp("galaxy"))
    build = inst.run("ansible-galaxy", "collection", "build", str(ROOT),
                     "--output-path", str(inst.base / "dist"))
    assert build.returncode == 0, build.stdout + build.stderr
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    tarball = inst.base / "dist" / f"ascend_serve-fleet-{version}.tar.gz"
    assert tarball.is_file(), build.stdout
    install = inst.run("ansible-galaxy", "collection", "install", "--offline", "--force",
                       str(tarball),
                       "-p", str(inst.collections))
    assert install.returncode == 0, install.stdout + install.stderr
    return inst


def test_the_tarball_carries_no_caches_or_build_leftovers(installed: Installed) -> None:
    files = json.loads((installed.tree / "FILES.json").read_text())["files"]
    names = [f["name"] for f in files]
    leftovers = [n for n in names if re.search(
        r"(^|/)(__pycache__|\.pytest_cache|\.mypy_cache|\.ruff_cache|\.ansible|\.cache)(/|$)"
        r"|\.pyc$|\.tar\.gz$", n)]
    assert leftovers == []
    assert "galaxy.yml" not in names  # MANIFEST.json replaces it


def test_ansible_doc_renders_a_module_from_the_install(installed: Installed) -> None:
    proc = installed.run("ansible-doc", "-t", "module", f"{FQCN}.npu_pci_facts")
    assert proc.returncode == 0, proc.stderr
    assert f"> MODULE {FQCN}.npu_pci_facts ({installed.tree}/plugins/modules/" in proc.stdout
    assert "ATTRIBUTES" in proc.stdout  # the doc fragments resolved


def test_a_play_finds_a_role_by_its_fqcn(installed: Installed) -> None:
    play = installed.base / "play.yml"
    play.write_text(yaml.safe_dump([{"name": "The driver role by FQCN", "hosts": "all",
                                     "gather_facts": False,
                                     "roles": [f"{FQCN}.npu_driver"]}]))
    proc = installed.run("ansible-playbook", "--syntax-check", "-i", "localhost,", str(play))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_site_playbook_runs_by_its_fqcn(installed: Installed) -> None:
    proc = installed.run("ansible-playbook", f"{FQCN}.site", "--syntax-check", "-i", "localhost,")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", [
    "data/stack-matrix.yml",
    "data/serving-profiles.yml",
    "data/locks",
    "data/ranktable.schema.json",
    "templates/vllm-launch.sh.j2",
    "plugins/module_utils/validate.py",
    "plugins/module_utils/npu_metrics.py",
    "meta/runtime.yml",
    "CHANGELOG.md",
])
def test_the_install_holds_what_the_roles_and_the_package_read(
    installed: Installed, path: str
) -> None:
    target = installed.tree / path
    assert target.exists() and not target.is_symlink()
    if target.is_dir():
        assert any(p.is_file() for p in target.rglob("*"))


def test_the_tarball_holds_the_checkout_files_themselves(installed: Installed) -> None:
    """Real files, each the checkout's file byte for byte, and no link anywhere: the repository
    root is the collection, so nothing is shared through links."""
    links = [p for p in installed.tree.rglob("*") if p.is_symlink()]
    assert links == []
    files = json.loads((installed.tree / "FILES.json").read_text())["files"]
    names = [f["name"] for f in files if f["ftype"] == "file"]
    assert len(names) > 100
    differ = [n for n in names
              if not filecmp.cmp(installed.tree / n, ROOT / n, shallow=False)]
    assert differ == []
    assert {n.split("/")[0] for n in names} == {
        "README.md", "CHANGELOG.md", "meta", "roles", "playbooks", "plugins", "data",
        "templates"}


def readme_sections(text: str) -> dict[str, set[str]]:
    """``## Section`` -> the names of its ``- `name`: ...`` lines."""
    sections: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), set())
        elif current is not None and (m := re.match(r"- `([a-z0-9_]+)`: \S", line)):
            current.add(m.group(1))
    return sections


@pytest.mark.parametrize("section", ["Modules", "Filters", "Roles", "Playbooks"])
def test_the_readme_lists_exactly_what_the_collection_holds(
    installed: Installed, section: str
) -> None:
    listed = readme_sections((ROOT / "docs" / "collection.md").read_text())[section]
    present = {
        "Modules": lambda: installed.listed("module"),
        "Filters": lambda: installed.listed("filter"),
        "Roles": lambda: {p.name for p in (installed.tree / "roles").iterdir() if p.is_dir()},
        "Playbooks": lambda: {p.stem for p in (installed.tree / "playbooks").glob("*.yml")},
    }[section]()
    assert present, section
    assert listed == present, (f"in the README only: {sorted(listed - present)}; "
                               f"not in the README: {sorted(present - listed)}")


def test_the_readme_says_the_filters_need_the_package() -> None:
    text = (ROOT / "docs" / "collection.md").read_text()
    assert "filters need the `ascend_serve` Python package on the controller" in text
