"""Where the tests find the project's parts (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / "collections"
COLLECTION = COLLECTIONS / "ansible_collections" / "ascend_serve" / "fleet"
ROLES = COLLECTION / "roles"
PLAYBOOKS = COLLECTION / "playbooks"
DATA = COLLECTION / "data"
CORPUS = ROOT / "tests" / "data" / "corpus"
