"""Where the tests find the project's parts (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The repository root is the ascend_serve.fleet collection (galaxy.yml); Ansible and Python find
# it through the collections path scripts/bootstrap.sh links (ansible.cfg names the same).
COLLECTION = ROOT
COLLECTIONS = ROOT / ".cache" / "collections"
ROLES = ROOT / "roles"
PLAYBOOKS = ROOT / "playbooks"
PLUGINS = ROOT / "plugins"
DATA = ROOT / "data"
TEMPLATES = ROOT / "templates"
CORPUS = ROOT / "tests" / "data" / "corpus"
