"""The wheel's build step: the repository root is the ``ascend_serve.fleet`` Ansible collection,
and the wheel carries a copy of it as ``ansible_collections/ascend_serve/fleet/`` beside the
``ascend_serve`` package, where both Python (``import ansible_collections.ascend_serve.fleet...``)
and Ansible (it scans ``sys.path`` for collections) find it. Everything else is in
pyproject.toml.

What is copied is what ``ansible-galaxy collection build`` puts in the collection's tarball
(galaxy.yml's ``build_ignore`` leaves out the rest of the repository);
tests/cli/test_wheel.py holds the two to the same file list.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
TARGET = Path("ansible_collections", "ascend_serve", "fleet")
# The collection's content at the repository root (and in the sdist, MANIFEST.in).
COLLECTION_CONTENT = ("galaxy.yml", "README.md", "CHANGELOG.md", "meta", "roles", "playbooks",
                      "plugins", "data", "templates")
LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.pyc", "*.retry", "*.orig", "*.rej", "*.swp",
                                  "*~")


class BuildWithCollection(build_py):
    """build_py, then the collection copied into the build tree (real files, no links).

    An editable install skips the copy: a checkout's collection is the repository itself, linked
    by scripts/bootstrap.sh."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / TARGET
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for name in COLLECTION_CONTENT:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, dest / name, ignore=LEFT_OUT, symlinks=False)
            else:
                shutil.copy2(source, dest / name)


setup(cmdclass={"build_py": BuildWithCollection})
